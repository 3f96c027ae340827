"""Run one training config over seeds and a grid of overrides: ``marti sweep``.

One job: turn ``CONFIG x seeds x grid`` into cells, and bring every cell to "finished"
exactly once, however often the sweep is started, stopped and started again.

    marti sweep baselines/quickstart.yaml --seeds 0-4 --grid algorithm.group_by=agent,role

* **Cells.** Every combination of the grid's values and the seeds is a cell: the config with
  those ``key=value`` overrides (plus the ``--set`` ones shared by all cells) and the seed.
  It runs in ``OUT/<name>``, named by its overrides and seed
  (``algorithm.group_by=role__seed=3``): that folder is the run directory
  (``log.output_dir=OUT``, ``run_name=<name>``), with what :func:`marti_trainer.train.train`
  writes there plus this module's manifest ``cell.json`` (the resolved config and its
  SHA-256) and, for the process backends, ``cell.yaml`` (the config it was started with)
  and ``train.log``.
* **Reuse and resume.** A cell with ``summary.json`` finished and is reused; one with a
  checkpoint resumes from it through ``marti train --resume`` (the trainer's own resume:
  same tasks, samples and losses as an uninterrupted run); anything else starts fresh.
* **Changed config refused.** Before any cell runs, each existing cell's saved config is
  compared with the one the sweep would run now; a difference (other than where the run
  lives and what it logs: ``run_name``, ``log.*``) is an error naming the cell and the keys.
* **Shared step-0 evaluation.** Cells whose step-0 held-out evaluation would be the same
  (same initial weights, held-out set and evaluation settings: e.g. seeds, with
  ``eval.seed`` set, or learning rates) evaluate once: ``log.eval_cache`` defaults to
  ``OUT/eval_cache`` (``off`` turns it off; :mod:`marti_trainer.eval_cache`).
* **Checkpoints of finished cells.** A checkpoint is what an unfinished cell resumes from;
  once ``summary.json`` exists it serves only later evaluation or export, and with a
  real model it is large (SmolLM2-135M with its Adam state: about 1.5 GiB each, two kept by
  ``log.keep_last``). ``keep_checkpoints`` (``--keep-checkpoints``) says what a finished
  cell keeps: ``all`` (the default), ``last`` (the newest only) or ``none``
  (:func:`prune_checkpoints`).
* **Backends.** ``local``: one cell after another, each in a fresh ``marti train`` process.
  ``ray``: each cell a Ray task running that same process (on a cluster, ``OUT`` must be on
  a file system every node sees). ``inline``: in this process (for callers holding a config
  with Python objects in it, such as :mod:`marti_trainer.credit_bench_llm`).

``OUT/sweep.json`` records the command's config, seeds, grid and each cell's status.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from itertools import product
from pathlib import Path
from typing import Any, Literal

import yaml

from marti_trainer.config import (
    ADDED_SETTINGS,
    ConfigError,
    TrainConfig,
    config_from_dict,
    load_config,
)
from marti_trainer.config_schema import flatten

__all__ = [
    "Cell",
    "CellChanged",
    "CellOutcome",
    "cell_name",
    "cell_status",
    "config_changes",
    "config_fingerprint",
    "parse_grid",
    "parse_seeds",
    "plan_sweep",
    "prune_checkpoints",
    "run_cell_inline",
    "run_sweep",
    "write_sweep_record",
]

Backend = Literal["local", "ray", "inline"]
KeepCheckpoints = Literal["all", "last", "none"]
KEEP_CHECKPOINTS = ("all", "last", "none")
LOCATION_KEYS = ("run_name", "log.output_dir")
"""Where a run lives: set by the sweep for each cell."""


def _ignored(key: str) -> bool:
    """Keys that do not change what a run computes: where it lives and what it logs
    (``log.*``: output folder, checkpoint interval, TensorBoard, plots)."""
    return key in LOCATION_KEYS or key.startswith("log.")


RESERVED = {
    "seed": "give seeds with --seeds",
    "run_name": "the sweep names each cell after its overrides and seed",
    "log.output_dir": "give the sweep's folder with --out",
}
STOPPED_CODES = (130, 143)  # `marti train` stopped by SIGINT / SIGTERM after a checkpoint


# ----------------------------------------------------------------------------- parsing


def parse_seeds(text: str) -> list[int]:
    """``"0-4"`` -> [0, 1, 2, 3, 4]; ``"0,2,5"``; ``"0-2,7"``. Duplicates are an error."""
    seeds: list[int] = []
    for part in (p.strip() for p in str(text).split(",")):
        m = re.fullmatch(r"(\d+)(?:-(\d+))?", part)
        if not m:
            raise ValueError(f"--seeds {text!r}: {part!r} is not a seed or a range like 0-9")
        lo, hi = int(m[1]), int(m[2] if m[2] is not None else m[1])
        if hi < lo:
            raise ValueError(f"--seeds {text!r}: range {part!r} runs backwards")
        seeds.extend(range(lo, hi + 1))
    repeated = sorted({s for s in seeds if seeds.count(s) > 1})
    if repeated:
        raise ValueError(f"--seeds {text!r} names seeds more than once: {repeated}")
    return seeds


def _split_values(text: str) -> list[str]:
    """Split on commas outside brackets/braces/quotes: ``"[1,2],[3]"`` -> ``["[1,2]", "[3]"]``."""
    out, depth, quote, start = [], 0, "", 0
    for i, ch in enumerate(text):
        if quote:
            quote = "" if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        elif ch in "[{(":
            depth += 1
        elif ch in "]})":
            depth -= 1
        elif ch == "," and depth == 0:
            out.append(text[start:i].strip())
            start = i + 1
    out.append(text[start:].strip())
    return out


def parse_grid(items: Sequence[str]) -> list[tuple[str, list[str]]]:
    """``["algorithm.group_by=agent,role", "optim.lr=1e-5,2e-5"]`` -> ordered (key, values).

    Each value is a YAML scalar or a bracketed list/mapping (``env.kwargs.rounds=1,2``,
    ``env.train_tasks.levels=[1],[1,2]``). An item without ``=``, a key given twice, a
    reserved key (``seed``, ``run_name``, ``log.output_dir``), no values or an empty value
    is an error naming the key.
    """
    grid: list[tuple[str, list[str]]] = []
    for item in items:
        key, sep, raw = item.partition("=")
        key = key.strip()
        if not sep or not key:
            raise ValueError(f"--grid {item!r}: expected key=v1,v2 (e.g. optim.lr=1e-5,2e-5)")
        if key in RESERVED:
            raise ValueError(f"--grid {key}: {RESERVED[key]}")
        if any(k == key for k, _ in grid):
            raise ValueError(f"--grid {key}: given twice; list all its values in one --grid")
        values = _split_values(raw)
        if not raw.strip() or any(v == "" for v in values):
            raise ValueError(f"--grid {key}: empty value in {raw!r} (give key=v1,v2,...)")
        if len(set(values)) != len(values):
            raise ValueError(f"--grid {key}: a value is repeated in {raw!r}")
        grid.append((key, values))
    return grid


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.=+-]+", "_", text).strip("_") or "_"


def cell_name(overrides: Sequence[str], seed: int) -> str:
    """The cell's folder name: its overrides and seed joined by ``__``, each made safe for a
    file name (``algorithm.group_by=role__seed=3``)."""
    return "__".join([*(_slug(o) for o in overrides), f"seed={seed}"])


# ----------------------------------------------------------------------------- cells


@dataclass(frozen=True)
class Cell:
    """One run of a sweep.

    Attributes:
        name: The folder name under the sweep's output (also the run's ``run_name``).
        seed: Its seed.
        overrides: The grid's ``key=value`` overrides for this cell, in grid order.
        config: The resolved config (``log.output_dir`` is the sweep folder).
    """

    name: str
    seed: int
    overrides: tuple[str, ...]
    config: TrainConfig

    @property
    def run_dir(self) -> Path:
        return Path(self.config.log.output_dir) / self.config.run_name


def plan_sweep(
    config: str | Path,
    seeds: Sequence[int],
    grid: Sequence[tuple[str, Sequence[str]]],
    out: str | Path,
    fixed: Sequence[str] = (),
) -> list[Cell]:
    """Every cell of ``config x grid x seeds`` (grid-major, seeds innermost), each config
    resolved and checked now, before anything runs.

    ``fixed`` are ``key=value`` overrides shared by every cell (``--set``). An unknown key
    (in the grid or ``fixed``) or a bad value is a ``ConfigError`` naming the key.
    """
    if not seeds:
        raise ValueError("--seeds: no seeds given")
    for item in fixed:
        key = item.partition("=")[0].strip()
        if key in RESERVED:
            raise ValueError(f"--set {key}: {RESERVED[key]}")
        if any(key == k for k, _ in grid):
            raise ValueError(f"--set {key}: also a --grid key; give it in one place")
    cells: list[Cell] = []
    for combo in product(*[[f"{k}={v}" for v in values] for k, values in grid]):
        try:
            load_config(config, [*fixed, *combo])  # validate once per combination
        except ConfigError as e:
            keys = ", ".join(k for k, _ in grid) or "(none)"
            raise ConfigError(
                f"sweep cell {' '.join(combo) or '(base)'}: {e} [grid keys: {keys}]"
            ) from None
        for seed in seeds:
            name = cell_name(combo, seed)
            where = [f"seed={seed}", f"run_name={name}", f"log.output_dir={Path(out)}"]
            cfg = load_config(config, [*fixed, *combo, *where], check_env=False)
            if not cfg.log.eval_cache:  # cells that differ after step 0 share one evaluation
                cache = str(Path(out) / "eval_cache")
                cfg = replace(cfg, log=replace(cfg.log, eval_cache=cache))
            cells.append(Cell(name, int(seed), tuple(combo), cfg))
    names = [c.name for c in cells]
    clash = sorted({n for n in names if names.count(n) > 1})
    if clash:
        raise ValueError(f"grid values give cells the same folder name: {clash}; rename a value")
    return cells


def _comparable(config: TrainConfig | dict[str, Any]) -> dict[str, Any]:
    data = config.to_dict() if isinstance(config, TrainConfig) else config
    # a YAML round trip makes tuples lists and keeps what a saved config.yaml would hold
    flat = flatten(yaml.safe_load(yaml.safe_dump(data, sort_keys=True)))
    # a setting added later, at the value that reproduces what configs without it did, is
    # left out: a config saved before it existed and one saved after compare (and
    # fingerprint) equal
    return {
        k: _no_address(v)
        for k, v in flat.items()
        if not _ignored(k) and not (k in ADDED_SETTINGS and v == ADDED_SETTINGS[k])
    }


def _no_address(value: Any) -> Any:
    """A Python object's saved ``repr`` without its memory address (``<function f at
    0x7f..>`` -> ``<function f>``), which differs from one process to the next."""
    return re.sub(r" at 0x[0-9a-fA-F]+", "", value) if isinstance(value, str) else value


def config_fingerprint(config: TrainConfig | dict[str, Any]) -> str:
    """SHA-256 of the resolved config as canonical JSON, without where the run lives and
    what it logs (``run_name``, ``log.*``) and without a later-added setting at its default
    (:data:`~marti_trainer.config.ADDED_SETTINGS`): equal fingerprints, equal runs."""
    text = json.dumps(_comparable(config), sort_keys=True, default=repr)
    return hashlib.sha256(text.encode()).hexdigest()


def config_changes(
    old: TrainConfig | dict[str, Any], new: TrainConfig | dict[str, Any]
) -> list[str]:
    """``["optim.lr: 1e-05 -> 2e-05", ...]``: the keys whose values differ, sorted (``run_name``
    and ``log.*`` ignored: a cell may be moved, or resumed with another checkpoint interval).

    A key of :data:`~marti_trainer.config.ADDED_SETTINGS` absent from one side (a config
    saved before the setting existed) counts as holding the value that reproduces what such
    runs did; any other absent key is a difference."""
    a, b = _comparable(old), _comparable(new)
    for side in (a, b):
        for key, value in ADDED_SETTINGS.items():
            side.setdefault(key, value)
    missing = object()
    return [
        f"{k}: {_show(a.get(k, missing), missing)} -> {_show(b.get(k, missing), missing)}"
        for k in sorted(set(a) | set(b))
        if a.get(k, missing) != b.get(k, missing)
    ]


def _show(value: Any, missing: object) -> str:
    return "(absent)" if value is missing else repr(value)


class CellChanged(ValueError):
    """A cell's folder holds a run of a different config than the sweep would run now."""


def _saved_config(run_dir: Path) -> dict[str, Any] | None:
    """The config a cell ran with: its manifest's, else the trainer's ``config.yaml``."""
    manifest, saved = run_dir / "cell.json", run_dir / "config.yaml"
    try:
        if manifest.is_file():
            data = json.loads(manifest.read_text(encoding="utf-8"))["config"]
        elif saved.is_file():
            data = yaml.safe_load(saved.read_text(encoding="utf-8"))
        else:
            return None
    except (json.JSONDecodeError, yaml.YAMLError, KeyError, TypeError) as e:
        raise ValueError(f"{run_dir}: unreadable cell manifest or config.yaml ({e}); delete "
                         "the folder to rerun the cell") from None  # fmt: skip
    if not isinstance(data, dict):
        raise ValueError(f"{run_dir}: its saved config is not a mapping; delete it to rerun")
    return data


def cell_status(cell: Cell) -> Literal["new", "resume", "done"]:
    """``done`` (``summary.json`` exists), ``resume`` (a checkpoint exists) or ``new``.

    Raises:
        CellChanged: the folder holds a run whose config differs from ``cell.config``; the
            message names the cell and each differing key with both values.
    """
    run_dir = cell.run_dir
    saved = _saved_config(run_dir)
    if saved is not None:
        changes = config_changes(saved, cell.config)
        if changes:
            raise CellChanged(
                f"cell {cell.name}: {run_dir} holds a run with a different config "
                f"({'; '.join(changes)}); use a new --out folder, or delete {run_dir} to "
                "rerun the cell"
            )
    if (run_dir / "summary.json").is_file():
        return "done"
    if any((run_dir / "checkpoints").glob("step_*")):
        return "resume"
    return "new"


def prune_checkpoints(run_dir: str | Path, keep: KeepCheckpoints) -> list[Path]:
    """Delete a finished run's checkpoints but what ``keep`` names; the folders removed.

    ``all``: none removed. ``last``: all but the newest ``checkpoints/step_*`` (by step).
    ``none``: every one, and ``checkpoints/`` itself when that leaves it empty.

    Raises:
        ValueError: ``keep`` is not one of ``all``, ``last``, ``none``; or the run has no
            ``summary.json`` (unfinished: its checkpoints are what it resumes from).
    """
    if keep not in KEEP_CHECKPOINTS:
        raise ValueError(f"keep_checkpoints must be one of {KEEP_CHECKPOINTS}, got {keep!r}")
    run_dir = Path(run_dir)
    if not (run_dir / "summary.json").is_file():
        raise ValueError(
            f"{run_dir}: no summary.json, so the run is unfinished and its checkpoints are "
            "what it resumes from; not pruned"
        )
    root = run_dir / "checkpoints"
    steps = sorted(
        (p for p in root.glob("step_*") if p.is_dir() and p.name[5:].isdigit()),
        key=lambda p: int(p.name[5:]),
    )
    doomed = {"all": [], "last": steps[:-1], "none": steps}[keep]
    for path in doomed:
        shutil.rmtree(path)
    if keep == "none" and root.is_dir() and not any(root.iterdir()):
        root.rmdir()
    return doomed


def _write_manifest(cell: Cell) -> None:
    cell.run_dir.mkdir(parents=True, exist_ok=True)
    manifest = {
        "name": cell.name,
        "seed": cell.seed,
        "overrides": list(cell.overrides),
        "config_sha256": config_fingerprint(cell.config),
        "config": cell.config.to_dict(),
    }
    (cell.run_dir / "cell.json").write_text(json.dumps(manifest, indent=1) + "\n")


# ----------------------------------------------------------------------------- running


@dataclass
class CellOutcome:
    """What running (or reusing) a cell gave.

    Attributes:
        cell: The cell.
        status: ``reused`` (finished before), ``trained`` (ran from scratch), ``resumed``
            (continued from a checkpoint and finished), ``stopped`` (a signal stopped it
            after a checkpoint: run the sweep again to continue) or ``failed``.
        returncode: The ``marti train`` process's exit code (None inline or reused).
        summary: The run's ``summary.json`` (empty unless finished).
        history: The run's ``metrics.jsonl`` lines (inline backend only; else empty).
        seconds: Wall time spent on the cell by this call.
    """

    cell: Cell
    status: str
    returncode: int | None = None
    summary: dict[str, Any] = field(default_factory=dict)
    history: list[dict[str, Any]] = field(default_factory=list)
    seconds: float = 0.0


def _summary(run_dir: Path) -> dict[str, Any]:
    path = run_dir / "summary.json"
    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}


def run_cell_inline(cell: Cell, keep_checkpoints: KeepCheckpoints = "all") -> CellOutcome:
    """Reuse, resume or train ``cell`` in this process (:func:`marti_trainer.train.train`);
    a changed config raises :class:`CellChanged`. A finished cell then keeps the
    checkpoints ``keep_checkpoints`` names (:func:`prune_checkpoints`)."""
    from marti_trainer.metrics import read_metrics
    from marti_trainer.train import train

    state = cell_status(cell)
    if state == "done":
        outcome = CellOutcome(
            cell, "reused", None, _summary(cell.run_dir), read_metrics(cell.run_dir)
        )
    else:
        _write_manifest(cell)
        t0 = time.perf_counter()
        result = train(cell.config, resume=cell.run_dir if state == "resume" else None)
        status = "stopped" if result.stopped_by else ("resumed" if state == "resume" else "trained")
        outcome = CellOutcome(
            cell, status, None, result.summary, result.history, time.perf_counter() - t0
        )
    _prune_finished(outcome, keep_checkpoints)
    return outcome


def _prune_finished(outcome: CellOutcome, keep: KeepCheckpoints) -> None:
    if keep != "all" and outcome.status in ("reused", "trained", "resumed"):
        prune_checkpoints(outcome.cell.run_dir, keep)


def cell_command(cell: Cell, resume: bool) -> list[str]:
    """``python -m marti_trainer.cli train RUN_DIR/cell.yaml [--resume RUN_DIR]``."""
    cmd = [sys.executable, "-m", "marti_trainer.cli", "train", str(cell.run_dir / "cell.yaml")]
    return [*cmd, "--resume", str(cell.run_dir)] if resume else cmd


def _write_cell_yaml(cell: Cell) -> None:
    """The resolved config as the YAML the process loads; refused if a value is a Python
    object (a reward function given in code) that YAML cannot carry."""
    data = cell.config.to_dict()
    if config_from_dict(data, check_env=False) != cell.config:
        raise ValueError(
            f"cell {cell.name}: its config holds Python objects (e.g. a reward function) that "
            "cannot be passed to a `marti train` process; use the inline backend"
        )
    (cell.run_dir / "cell.yaml").write_text(yaml.safe_dump(data, sort_keys=False))


def run_command(cmd: list[str], log_path: str, cwd: str | None = None) -> int:
    """Run ``cmd`` in ``cwd`` with its output appended to ``log_path``; its exit code.
    (Module level so a Ray task can run it; the sweep passes its own working directory, so
    relative paths in the config mean the same on every node of a shared file system.)

    The process gets its own session, and each SIGINT or SIGTERM this process receives
    while waiting is passed on to it once: ``marti train`` then finishes its step, saves a
    checkpoint and exits 130 / 143 (a second signal stops it at once). Without this, Ctrl-C
    would reach both and ``subprocess`` would kill the trainer mid-save.
    """
    with open(log_path, "a", encoding="utf-8") as log:
        log.write(f"\n$ {' '.join(cmd)}\n")
        log.flush()
        proc = subprocess.Popen(
            cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True, cwd=cwd
        )
        with _forward_signals(proc):
            while True:
                try:
                    return proc.wait()
                except KeyboardInterrupt:
                    proc.send_signal(signal.SIGINT)


@contextlib.contextmanager
def _forward_signals(proc: subprocess.Popen) -> Iterator[None]:
    """Pass SIGINT and SIGTERM on to ``proc`` while it runs. The handlers are set explicitly,
    so a sweep started in the background (where a shell starts it with SIGINT ignored, and
    Python then raises no KeyboardInterrupt) still stops its cell on ``kill -INT``. Only the
    main thread can set handlers; elsewhere (a Ray worker thread) nothing is set, and SIGINT
    arrives, if at all, as KeyboardInterrupt."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def forward(signum: int, frame: object) -> None:
        proc.send_signal(signum)

    previous = {sig: signal.signal(sig, forward) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _ray_run(jobs: list[tuple[list[str], str]], address: str | None, cpus: float) -> list[int]:
    import ray

    started = not ray.is_initialized()
    if started:
        ray.init(address=address, include_dashboard=False, log_to_driver=False)
    try:
        task = ray.remote(num_cpus=cpus)(run_command)
        here = os.getcwd()
        return list(ray.get([task.remote(cmd, log, here) for cmd, log in jobs]))
    finally:
        if started:
            ray.shutdown()


def run_sweep(
    cells: Sequence[Cell],
    backend: Backend = "local",
    log: Callable[[str], None] | None = None,
    ray_address: str | None = None,
    cpus_per_cell: float = 1.0,
    keep_checkpoints: KeepCheckpoints = "all",
) -> list[CellOutcome]:
    """Bring every cell to finished: reuse, resume or train (see the module docstring).

    Every cell's state is checked first, so a changed config stops the sweep before any
    cell runs (:class:`CellChanged`). ``local`` runs cells one after another and stops
    when one is stopped by a signal (the rest are left for the next start); a failed cell
    is recorded and the others still run. ``ray`` submits all unfinished cells as tasks
    (``cpus_per_cell`` CPUs each) to the cluster at ``ray_address`` (None: the one in
    ``RAY_ADDRESS``, else a new local one). Each finished cell (reused ones too) then
    keeps the checkpoints ``keep_checkpoints`` names (:func:`prune_checkpoints`).
    """
    if backend not in ("local", "ray", "inline"):
        raise ValueError(f"backend must be local, ray or inline, got {backend!r}")
    if keep_checkpoints not in KEEP_CHECKPOINTS:
        raise ValueError(
            f"keep_checkpoints must be one of {KEEP_CHECKPOINTS}, got {keep_checkpoints!r}"
        )
    states = {c.name: cell_status(c) for c in cells}
    say = log or (lambda line: None)
    outcomes: dict[str, CellOutcome] = {}
    todo = []
    for c in cells:
        if states[c.name] == "done":
            outcomes[c.name] = CellOutcome(c, "reused", None, _summary(c.run_dir))
            _prune_finished(outcomes[c.name], keep_checkpoints)
            say(f"{c.name}: finished before, reused")
        else:
            todo.append(c)
    if backend == "inline":
        for c in todo:
            outcomes[c.name] = run_cell_inline(c, keep_checkpoints)
            say(f"{c.name}: {outcomes[c.name].status}")
    else:
        for c in todo:
            _write_manifest(c)
            _write_cell_yaml(c)
        jobs = [
            (cell_command(c, states[c.name] == "resume"), str((c.run_dir / "train.log").resolve()))
            for c in todo
        ]
        if backend == "ray":
            t0 = time.perf_counter()
            codes = _ray_run(jobs, ray_address, cpus_per_cell) if jobs else []
            for c, code in zip(todo, codes, strict=True):
                outcomes[c.name] = _finished(c, states[c.name], code, time.perf_counter() - t0)
                _prune_finished(outcomes[c.name], keep_checkpoints)
                say(_line(outcomes[c.name]))
        else:
            for c, (cmd, log_path) in zip(todo, jobs, strict=True):
                say(f"{c.name}: {'resuming' if states[c.name] == 'resume' else 'training'} "
                    f"(log: {log_path})")  # fmt: skip
                t0 = time.perf_counter()
                code = run_command(cmd, log_path)
                outcomes[c.name] = _finished(c, states[c.name], code, time.perf_counter() - t0)
                _prune_finished(outcomes[c.name], keep_checkpoints)
                say(_line(outcomes[c.name]))
                if outcomes[c.name].status == "stopped":
                    break
    return [outcomes[c.name] for c in cells if c.name in outcomes]


def _finished(cell: Cell, state: str, code: int, seconds: float) -> CellOutcome:
    summary = _summary(cell.run_dir)
    if code == 0 and summary:
        status = "resumed" if state == "resume" else "trained"
    elif code in STOPPED_CODES:
        status = "stopped"
    else:
        status = "failed"
    return CellOutcome(cell, status, code, summary, [], seconds)


def _line(o: CellOutcome) -> str:
    acc = o.summary.get("accuracy_after")
    tail = f", held-out accuracy {acc:.3f}" if isinstance(acc, (int, float)) else ""
    if o.status == "failed":
        tail = f", exit code {o.returncode}: see {o.cell.run_dir / 'train.log'}"
    return f"{o.cell.name}: {o.status} in {o.seconds:.0f}s{tail}"


def write_sweep_record(
    out: str | Path,
    config: str | Path,
    seeds: Sequence[int],
    grid: Sequence[tuple[str, Sequence[str]]],
    fixed: Sequence[str],
    outcomes: Sequence[CellOutcome],
) -> Path:
    """``OUT/sweep.json``: the sweep's definition and each cell's last status."""
    path = Path(out) / "sweep.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    record = {
        "config": str(config),
        "seeds": list(seeds),
        "grid": [{"key": k, "values": list(v)} for k, v in grid],
        "set": list(fixed),
        "updated": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "cells": [
            {
                "name": o.cell.name,
                "seed": o.cell.seed,
                "overrides": list(o.cell.overrides),
                "status": o.status,
                "returncode": o.returncode,
                "config_sha256": config_fingerprint(o.cell.config),
            }
            for o in outcomes
        ],
    }
    path.write_text(json.dumps(record, indent=1) + "\n")
    return path
