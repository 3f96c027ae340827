"""The benchmark data catalogue: which named sets exist, where their files are, their licences.

One setting decides where benchmark files live, :func:`data_dir`:

1. ``$MARTI_DATA_DIR`` if set and not empty;
2. else ``<repo root>/../shared/data`` if that directory exists (a checkout next to the
   project's shared data);
3. else the user cache, ``$MARTI_CACHE/data`` or ``~/.cache/marti/data`` (where
   ``marti data get`` puts what it fetches).

A few held-out sets whose licence allows it also ship inside the package
(``marti_env/data/``): the GSM8K test split and MATH-500 (both MIT). :func:`locate` finds a
set's file in the data directory first and falls back to the packaged copy, so a fresh clone
or a plain ``pip install`` evaluates on them with no download. Nothing is ever downloaded as
a side effect: ``marti data get NAME`` (:mod:`marti_trainer.cli.data`) is the only command
that copies or fetches a set.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "DATASETS",
    "DATA_DIR_ENV",
    "PACKAGED_DIR",
    "DataSet",
    "MissingDataError",
    "data_dir",
    "data_dir_origin",
    "locate",
]

DATA_DIR_ENV = "MARTI_DATA_DIR"
"""Environment variable that overrides :func:`data_dir`."""

PACKAGED_DIR = Path(__file__).resolve().parents[1] / "data"
"""Where the packaged copies live (``marti_env/data``), laid out like the data directory."""

_REPO_SHARED = Path(__file__).resolve().parents[2].parent / "shared" / "data"


class MissingDataError(FileNotFoundError):
    """A named benchmark set is not present; the message names the set, where it was looked
    for and the command that gets it (``marti data get NAME``)."""


@dataclass(frozen=True)
class DataSet:
    """One named benchmark set.

    Attributes:
        name: The short name used in configs and on the command line (``"gsm8k/test"``).
        path: The file, relative to :func:`data_dir` (and to :data:`PACKAGED_DIR`).
        rows: Rows in the published file.
        licence: SPDX-style licence of the data.
        origin: Where the file comes from (attribution).
        url: A direct download of this exact file, or None when the set is only copied from
            a path (``marti data get NAME --from PATH``).
        packaged: A copy ships inside the package (licence permitting).
    """

    name: str
    path: str
    rows: int
    licence: str
    origin: str
    url: str | None = None
    packaged: bool = False

    @property
    def get_command(self) -> str:
        """The command that puts this set into the data directory."""
        if self.url is not None:
            return f"marti data get {self.name}"
        return f"marti data get {self.name} --from PATH/{Path(self.path).name}"


_GSM8K = "openai/grade-school-math (https://github.com/openai/grade-school-math)"
_GSM8K_RAW = (
    "https://raw.githubusercontent.com/openai/grade-school-math/master/grade_school_math/data"
)
_MARTI = "the MARTI repository's data folder (https://github.com/TsinghuaC3I/MARTI)"

DATASETS: dict[str, DataSet] = {
    d.name: d
    for d in (
        DataSet("gsm8k/test", "gsm8k/test.jsonl", 1319, "MIT", _GSM8K,
                f"{_GSM8K_RAW}/test.jsonl", packaged=True),
        DataSet("gsm8k/train", "gsm8k/train.jsonl", 7473, "MIT", _GSM8K,
                f"{_GSM8K_RAW}/train.jsonl"),
        DataSet("math500", "math/math500.json", 500, "MIT",
                f"MATH-500 test split (Hendrycks et al. MATH, PRM800K) via {_MARTI}",
                packaged=True),
        DataSet("math_train", "math/math_train_level3to5.json", 8890, "MIT",
                f"MATH train, levels 3-5, via {_MARTI}"),
        DataSet("aime24", "math/aime24.json", 30, "MIT (MARTI); problems MAA",
                f"AIME 2024 via {_MARTI}"),
        DataSet("amc", "math/amc.json", 83, "MIT (MARTI); problems MAA",
                f"AMC 2022-23 via {_MARTI}"),
        DataSet("minerva", "math/minerva.json", 272, "MIT (MARTI)", f"Minerva math via {_MARTI}"),
        DataSet("olympiad_bench", "math/olympiad_bench.json", 675, "MIT (MARTI)",
                f"OlympiadBench via {_MARTI}"),
    )
}  # fmt: skip
"""Every named set. Short names are what ``make_task_source("gsm8k/test")`` and
``marti data get`` accept."""


def _user_cache() -> Path:
    base = os.environ.get("MARTI_CACHE")  # the cache marti_trainer.models uses for models
    return (Path(base).expanduser() if base else Path.home() / ".cache" / "marti") / "data"


def data_dir() -> Path:
    """The directory holding the benchmark files (see the module docstring for the order).

    The directory is not required to exist; loading a set that is absent reports it.
    """
    return _resolve()[0]


def data_dir_origin() -> str:
    """Why :func:`data_dir` is what it is: ``"$MARTI_DATA_DIR"``, ``"../shared/data"`` or
    ``"user cache"``."""
    return _resolve()[1]


def _resolve() -> tuple[Path, str]:
    override = os.environ.get(DATA_DIR_ENV)
    if override:
        return Path(override).expanduser(), f"${DATA_DIR_ENV}"
    if _REPO_SHARED.is_dir():
        return _REPO_SHARED, "../shared/data"
    return _user_cache(), "user cache"


def locate(name: str) -> Path:
    """The file of set ``name``: in :func:`data_dir` if there, else the packaged copy.

    Raises:
        KeyError: ``name`` is not in :data:`DATASETS` (the message lists the names).
        MissingDataError: the set is neither in the data directory nor packaged; the
            message names the set, the path looked at and the command that gets it.
    """
    if name not in DATASETS:
        raise KeyError(f"unknown benchmark set {name!r}; known: {', '.join(DATASETS)}")
    ds = DATASETS[name]
    root, origin = _resolve()
    path = root / ds.path
    if path.is_file():
        return path
    packaged = PACKAGED_DIR / ds.path
    if ds.packaged and packaged.is_file():
        return packaged
    raise MissingDataError(
        f"benchmark set {name!r} is not present: {path} not found (data directory {root}, "
        f"from {origin}). Get it with `{ds.get_command}`, or set {DATA_DIR_ENV} to a "
        "directory holding gsm8k/ and math/"
    )
