"""``marti data list | get``: which benchmark sets are present, and getting one on purpose.

Examples::

    marti data list                                   # every set: present?, where, size, licence
    marti data get gsm8k/train                        # download (sets with a known URL)
    marti data get amc --from ~/MARTI/data/Bench/amc.json   # copy a file you have
    marti data get amc --from ~/shared/data           # ... or the data directory holding it

Sets live in one place, ``marti_env.tasks.catalog.data_dir()``: ``$MARTI_DATA_DIR``, else
``../shared/data`` next to a checkout, else the user cache (``~/.cache/marti/data``). The
GSM8K test split and MATH-500 also ship inside the package. Getting a set is always this
explicit command; no run downloads anything.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import urllib.request
import warnings
from pathlib import Path
from typing import Any

__all__ = ["add_data_parser", "get_dataset", "list_datasets"]


def add_data_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Register ``marti data list`` and ``marti data get NAME [--from PATH] [--to DIR]``."""
    parser = subparsers.add_parser(
        "data",
        help="list the benchmark sets and where they are; get one (copy or download)",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = parser.add_subparsers(dest="data_command", required=True)
    lister = sub.add_parser("list", help="every known set: present or not, where, size, licence")
    lister.set_defaults(func=run_list)
    getter = sub.add_parser("get", help="copy (--from) or download a set into the data directory")
    getter.add_argument("name", help="set name, as in `marti data list` (e.g. gsm8k/train)")
    getter.add_argument(
        "--from",
        dest="source",
        default=None,
        metavar="PATH",
        help="copy from this file, or from a directory laid out like the data directory",
    )
    getter.add_argument(
        "--to", default=None, metavar="DIR", help="data directory to write (default: data_dir())"
    )
    getter.add_argument("--force", action="store_true", help="replace a file that is already there")
    getter.set_defaults(func=run_get)
    return parser


def list_datasets() -> list[dict[str, Any]]:
    """One row per known set: name, rows, licence, where its file is found ("-" if absent),
    bytes (0 if absent) and the command that gets it."""
    from marti_env.tasks.catalog import DATASETS, MissingDataError, locate

    out = []
    for name, ds in DATASETS.items():
        try:
            path: Path | None = locate(name)
        except MissingDataError:
            path = None
        out.append(
            {
                "name": name,
                "rows": ds.rows,
                "licence": ds.licence,
                "where": str(path) if path is not None else "-",
                "bytes": path.stat().st_size if path is not None else 0,
                "packaged": ds.packaged,
                "get": ds.get_command,
            }
        )
    return out


def _size(n: int) -> str:
    return "-" if n == 0 else f"{n / 1e6:.1f} MB" if n >= 100_000 else f"{n / 1e3:.0f} kB"


def run_list(args: argparse.Namespace) -> int:
    from marti_env.tasks.catalog import data_dir, data_dir_origin

    print(f"data directory: {data_dir()} (from {data_dir_origin()})")
    rows = list_datasets()
    header = ("set", "rows", "size", "licence", "where / how to get it")
    table = [
        (
            r["name"],
            str(r["rows"]),
            _size(r["bytes"]),
            r["licence"],
            r["where"] + (" (packaged)" if r["packaged"] and "marti_env" in r["where"] else "")
            if r["bytes"]
            else f"absent: {r['get']}",
        )
        for r in rows
    ]
    widths = [max(len(x) for x in col) for col in zip(header, *table, strict=True)]
    for line in (header, *table):
        print("  ".join(x.ljust(w) for x, w in zip(line, widths, strict=True)).rstrip())
    return 0


def get_dataset(
    name: str, source: str | Path | None = None, to: str | Path | None = None, force: bool = False
) -> Path:
    """Put set ``name`` into the data directory (``to``, default ``data_dir()``): copied from
    ``source`` (a file, or a directory laid out like the data directory), else downloaded
    from the set's URL. The file is checked (it must load, with the published row count)
    before it is moved into place. Returns the written path.

    Raises:
        ValueError: unknown name, no ``source`` for a set without a URL, a file that does
            not load or has the wrong row count (names the file and both counts).
        FileExistsError: the target exists and ``force`` is false.
        FileNotFoundError: ``source`` does not exist.
    """
    from marti_env.tasks import load_tasks
    from marti_env.tasks.catalog import DATASETS, data_dir

    if name not in DATASETS:
        raise ValueError(f"unknown set {name!r}; known: {', '.join(DATASETS)} (marti data list)")
    ds = DATASETS[name]
    target = Path(to).expanduser() if to is not None else data_dir()
    target = target / ds.path
    if target.exists() and not force:
        raise FileExistsError(f"{target} already exists (use --force to replace it)")
    if source is None and ds.url is None:
        raise ValueError(
            f"set {name!r} has no download URL ({ds.origin}): copy a file you have with "
            f"`marti data get {name} --from PATH`"
        )
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent, prefix=".marti-get-") as work:
        staged = Path(work) / Path(ds.path).name
        if source is not None:
            src = Path(source).expanduser()
            if src.is_dir():
                src = src / ds.path
            if not src.is_file():
                raise FileNotFoundError(f"--from: {src} is not a file (set {name!r})")
            shutil.copyfile(src, staged)
            where = str(src)
        else:
            print(f"downloading {ds.url}", file=sys.stderr)
            with urllib.request.urlopen(ds.url, timeout=60) as response, open(staged, "wb") as f:
                shutil.copyfileobj(response, f)
            where = str(ds.url)
        try:
            rows = _count_rows(staged)
            with warnings.catch_warnings():  # rows it would drop are the loader's business
                warnings.simplefilter("ignore")
                load_tasks(staged)
        except (ValueError, OSError) as e:
            raise ValueError(f"{where}: not a loadable task file for set {name!r}: {e}") from e
        if rows != ds.rows:
            raise ValueError(f"{where}: {rows} rows, but set {name!r} has {ds.rows}")
        staged.replace(target)
    return target


def _count_rows(path: Path) -> int:
    """Rows of a task file as published: JSON array elements, or non-blank JSONL lines."""
    text = path.read_text(encoding="utf-8")
    if path.suffix == ".json":
        data = json.loads(text)
        if not isinstance(data, list):
            raise ValueError(f"{path}: expected a JSON array of rows")
        return len(data)
    return sum(1 for line in text.splitlines() if line.strip())


def run_get(args: argparse.Namespace) -> int:
    path = get_dataset(args.name, args.source, args.to, args.force)
    print(f"wrote {path}")
    return 0
