"""Reading runs for ``marti report``: run directories and run digests (``*.run.json``) into
:class:`RunRecord`, with every file read recorded with its SHA-256 (:class:`_Sources`)."""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from marti_trainer.config import ADDED_SETTINGS
from marti_trainer.config_schema import flatten

NOT_CONFIG = ("seed", "run_name", "exp_name", "eval.seed")
"""Flattened config keys that do not define a config (with every ``log.*`` key).
``eval.seed`` is the held-out episodes' seed: before it existed every run evaluated with its
own seed, so the seeds of one config never shared it, and a config that fixes it later is
still the same config."""
DIGEST_SUFFIX = ".run.json"
"""A run digest's file name ends with this."""
DIGEST_VERSION = 1


class _Sources:
    """Files read so far, with their SHA-256 (the report's Sources section)."""

    def __init__(self) -> None:
        self.files: dict[str, str] = {}

    def text(self, path: Path) -> str:
        data = path.read_bytes()
        self.files[_display(path)] = hashlib.sha256(data).hexdigest()
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError as e:
            raise ValueError(f"{path}: not UTF-8 text ({e})") from None


def _display(path: Path) -> str:
    """A path as the report shows it: relative to the working directory when inside it."""
    try:
        return path.resolve().relative_to(Path.cwd().resolve()).as_posix()
    except ValueError:
        return path.as_posix()


def find_runs(paths: Sequence[str | Path]) -> list[Path]:
    """Runs at or under each path, sorted: run directories (folders holding
    ``metrics.jsonl``) and run digests (``*.run.json`` files)."""
    runs: list[Path] = []
    for p in map(Path, paths):
        if not p.exists():
            raise FileNotFoundError(f"{p}: no such run or sweep folder")
        if (p.is_file() and p.name.endswith(DIGEST_SUFFIX)) or (p / "metrics.jsonl").is_file():
            found = [p]
        else:
            found = sorted(
                [m.parent for m in p.rglob("metrics.jsonl")] + list(p.rglob("*" + DIGEST_SUFFIX))
            )
        if not found:
            raise FileNotFoundError(
                f"{p}: holds no run (no metrics.jsonl or *{DIGEST_SUFFIX} at or under it)"
            )
        runs.extend(f for f in found if f not in runs)
    return runs


@dataclass
class RunRecord:
    """What the report uses of one run.

    Attributes:
        path: The run directory.
        seed: Its seed.
        config: Its flattened config (``optim.lr`` -> value).
        finished: Whether it wrote ``summary.json``.
        evals: ``(step, held-out accuracy)`` of each evaluation, in order.
        curve: ``(step, mean training outcome)`` per step.
        problems: Task id -> mean outcome at the final evaluation (from its transcript),
            or None without one.
        answers: Task id -> reference answer at the final evaluation (the problem set).
        start_problems: Task id -> mean outcome at the step-0 evaluation, or None.
        start_cached: Whether the step-0 evaluation was copied from ``log.eval_cache``
            (another run's, not an evaluation of its own).
        generations_per_step: Model calls sampled per training step, when known (with a
            re-execution credit method's replays).
        tokens: Step -> response tokens the training rollouts generated up to and including
            that step (0 at step 0), from ``transcripts.jsonl`` (plus the replays' tokens
            from ``metrics.jsonl``); empty without it.
        machines: The machine of each start of the run (``run.json``), without repeats; the
            first is the fresh start's (the step-0 evaluation's), None for a start that did
            not record it; empty where no start did.
        update_tokens: Tokens (prompts included) the policy updates ran on per training
            step, mean over the steps (:func:`training_compute`); None where no step logged
            it (runs and digests from before the field).
        zero_advantage_frac: Share of a step's samples (skipped by the update or not) whose
            advantage was zero on every token, mean over the steps (:func:`training_compute`);
            None as above.
    """

    path: Path
    seed: int
    config: dict[str, Any]
    finished: bool
    evals: list[tuple[int, float]] = field(default_factory=list)
    curve: list[tuple[int, float]] = field(default_factory=list)
    problems: dict[str, float] | None = None
    answers: dict[str, str] | None = None
    start_problems: dict[str, float] | None = None
    start_cached: bool = False
    generations_per_step: float | None = None
    tokens: dict[int, float] = field(default_factory=dict)
    machines: list[str | None] = field(default_factory=list)
    update_tokens: float | None = None
    zero_advantage_frac: float | None = None

    @property
    def final_accuracy(self) -> float | None:
        last = [a for s, a in self.evals if s > 0]
        return last[-1] if last else None

    @property
    def tokens_per_step(self) -> float | None:
        """Response tokens the training rollouts generated per step, mean over the steps
        :attr:`tokens` counts; None without them."""
        last = max(self.tokens, default=0)
        return self.tokens[last] / last if last > 0 else None

    @property
    def counted(self) -> bool:
        """Whether a page counts the run: finished, with a held-out evaluation after step 0."""
        return self.finished and self.final_accuracy is not None

    @property
    def training_outcome(self) -> float | None:
        """Mean team outcome of the training rollouts over the steps :attr:`curve` records
        (every step 1..T of a run logged as the trainer logs): the area under the training
        curve divided by its length, a sample-efficiency measure at the run's budget, the
        credit benchmark's ``acc_auc``. Sampled, on training problems: not a held-out
        accuracy. None without a curve."""
        return sum(a for _, a in self.curve) / len(self.curve) if self.curve else None

    def same_steps(self, other: RunRecord) -> bool:
        """Whether both runs record their training outcome at the same steps, at least one,
        so that their :attr:`training_outcome` averages over one horizon."""
        return bool(self.curve) and [s for s, _ in self.curve] == [s for s, _ in other.curve]

    @property
    def start_accuracy(self) -> float | None:
        first = [a for s, a in self.evals if s == 0]
        return first[0] if first else None

    @property
    def group_key(self) -> str:
        return json.dumps(_defining(self.config), sort_keys=True, default=repr)


def _ignored(key: str) -> bool:
    return key in NOT_CONFIG or key.startswith("log.")


def _defining(config: dict[str, Any]) -> dict[str, Any]:
    """The keys of a flattened config that define its group: without :data:`NOT_CONFIG` and
    ``log.*``, and without an :data:`~marti_trainer.config.ADDED_SETTINGS` key at the value
    that reproduces what configs saved before the setting existed did (they lack the key):
    the two group together, as ``marti sweep`` compares configs."""
    return {
        k: v
        for k, v in config.items()
        if not _ignored(k) and not (k in ADDED_SETTINGS and v == ADDED_SETTINGS[k])
    }


def read_run(run_dir: Path, sources: _Sources | None = None) -> RunRecord:
    """Read one run directory or run digest (see the module docstring); a missing or
    malformed file is a ``ValueError`` naming it (and the line, for ``metrics.jsonl``)."""
    sources = sources or _Sources()
    if run_dir.name.endswith(DIGEST_SUFFIX):
        return _read_digest(run_dir, sources)
    cfg_path = run_dir / "config.yaml"
    if not cfg_path.is_file():
        raise ValueError(f"{run_dir}: no config.yaml (is it a run directory of `marti train`?)")
    try:
        config = yaml.safe_load(sources.text(cfg_path))
    except yaml.YAMLError as e:
        raise ValueError(f"{cfg_path}: invalid YAML: {e}") from None
    if not isinstance(config, dict) or not isinstance(config.get("seed"), int):
        raise ValueError(f"{cfg_path}: not a run config (a mapping with an integer 'seed')")
    # a Python object given in code (a reward function) was saved as its repr, whose memory
    # address differs between processes: without it, the seeds of one config group together
    flat = {k: re.sub(r" at 0x[0-9a-fA-F]+", "", v) if isinstance(v, str) else v
            for k, v in flatten(config).items()}  # fmt: skip
    history = _read_jsonl(run_dir / "metrics.jsonl", sources)
    finished = (run_dir / "summary.json").is_file()
    if finished:
        sources.text(run_dir / "summary.json")
    run = RunRecord(run_dir, int(config["seed"]), flat, finished)
    run.evals = [
        (int(h["step"]), float(h["eval/accuracy"])) for h in history if "eval/accuracy" in h
    ]
    run.curve = [
        (int(h["step"]), float(h["rollout/outcome"])) for h in history if "rollout/outcome" in h
    ]
    run.start_cached = any(h["step"] == 0 and h.get("eval/cached") == 1 for h in history)
    if run.evals and run.evals[-1][0] > 0:
        final = run_dir / "eval" / f"step_{run.evals[-1][0]:06d}.jsonl"
        if final.is_file():
            _read_final_eval(run, final, sources)
        first = run_dir / "eval" / "step_000000.jsonl"
        if run.evals[0][0] == 0 and first.is_file():
            run.start_problems = _read_eval(first, sources)[0]
    if finished and (run_dir / "transcripts.jsonl").is_file():
        _read_tokens(run, run_dir / "transcripts.jsonl", sources)
    _add_replay_cost(run, history)
    run.update_tokens, run.zero_advantage_frac = training_compute(history)
    if (run_dir / "run.json").is_file():
        run.machines = _read_machines(run_dir / "run.json", sources)
    return run


def _read_machines(path: Path, sources: _Sources) -> list[str | None]:
    """The ``machine`` of each session in ``run.json`` (None where a session has none), in
    order, without repeats; empty when no session recorded one."""
    try:
        sessions = json.loads(sources.text(path))["sessions"]
        if not isinstance(sessions, list) or not all(isinstance(s, dict) for s in sessions):
            raise TypeError("'sessions' is not a list of objects")
    except (json.JSONDecodeError, KeyError, TypeError) as e:
        raise ValueError(f"{path}: not a run.json of `marti train` ({e!r})") from None
    machines = [s.get("machine") for s in sessions]
    if not all(m is None or isinstance(m, str) for m in machines):
        raise ValueError(f"{path}: a session's 'machine' is not a string")
    return list(dict.fromkeys(machines)) if any(machines) else []


def _digest(run: RunRecord) -> dict[str, Any]:
    return {
        "marti_run_digest": DIGEST_VERSION,
        "seed": run.seed,
        "config": run.config,
        "finished": run.finished,
        "evals": [list(e) for e in run.evals],
        "curve": [list(c) for c in run.curve],
        "problems": run.problems,
        "answers": run.answers,
        "start_problems": run.start_problems,
        "start_cached": run.start_cached,
        "generations_per_step": run.generations_per_step,
        "tokens": {str(k): v for k, v in run.tokens.items()},
        "machines": run.machines,
        "update_tokens": run.update_tokens,
        "zero_advantage_frac": run.zero_advantage_frac,
    }


def _read_digest(path: Path, sources: _Sources) -> RunRecord:
    try:
        data = json.loads(sources.text(path))
        if data.get("marti_run_digest") != DIGEST_VERSION:
            raise ValueError(f"not a version-{DIGEST_VERSION} run digest")
        run = RunRecord(path, int(data["seed"]), dict(data["config"]), bool(data["finished"]))
        run.evals = [(int(s), float(a)) for s, a in data["evals"]]
        run.curve = [(int(s), float(a)) for s, a in data["curve"]]
        run.problems = data["problems"]
        run.answers = data["answers"]
        run.start_problems = data.get("start_problems")
        run.start_cached = bool(data.get("start_cached", False))  # older digests: none were
        run.generations_per_step = data["generations_per_step"]
        run.tokens = {int(k): float(v) for k, v in data["tokens"].items()}
        run.machines = data.get("machines", [])  # older digests: not recorded
        if not isinstance(run.machines, list) or not all(
            m is None or isinstance(m, str) for m in run.machines
        ):
            raise ValueError("'machines' is not a list of strings (or nulls)")
        for key in ("update_tokens", "zero_advantage_frac"):  # older digests: not recorded
            value = data.get(key)
            setattr(run, key, None if value is None else float(value))
    except (json.JSONDecodeError, KeyError, TypeError, ValueError, AttributeError) as e:
        raise ValueError(f"{path}: not a run digest ({e})") from None
    return run


def write_digests(paths: Sequence[str | Path], out_dir: str | Path) -> list[Path]:
    """Write one digest per finished run under ``paths`` into ``out_dir``, named after the
    run's folder relative to the path it was found under (``seed=3`` ->
    ``seed=3.run.json``; ``a/b`` -> ``a__b.run.json``). Returns the files written.

    Raises:
        ValueError: no finished run, or two runs that would get the same name.
    """
    out_dir = Path(out_dir)
    written: dict[Path, Path] = {}
    for root in map(Path, paths):
        for run_path in find_runs([root]):
            if run_path.name.endswith(DIGEST_SUFFIX):
                continue  # already a digest
            run = read_run(run_path)
            if not run.finished:
                continue
            rel = run_path.relative_to(root) if run_path != root else Path(run_path.name)
            target = out_dir / ("__".join(rel.parts) + DIGEST_SUFFIX)
            if target in written:
                raise ValueError(
                    f"{run_path} and {written[target]} would both be digested as {target}"
                )
            written[target] = run_path
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(
                json.dumps(_digest(run), sort_keys=True, separators=(",", ":")) + "\n",
                encoding="utf-8",
            )
    if not written:
        raise ValueError(f"no finished run under {[str(p) for p in paths]} to digest")
    return sorted(written)


def _add_replay_cost(run: RunRecord, history: list[dict[str, Any]]) -> None:
    """A re-execution credit method's replays are inference too: their mean generations per
    step (``rollout/replay_generations``) join ``generations_per_step`` and their tokens
    (``rollout/replay_tokens``) the cumulative token counts."""
    replays = {int(h["step"]): h for h in history if "rollout/replay_generations" in h}
    if not replays:
        return
    if run.generations_per_step is not None:
        mean = float(np.mean([h["rollout/replay_generations"] for h in replays.values()]))
        run.generations_per_step += mean
    if run.tokens:
        extra = 0.0
        for step in sorted(run.tokens):
            extra += float(replays.get(step, {}).get("rollout/replay_tokens", 0.0))
            run.tokens[step] += extra


def training_compute(history: Sequence[dict[str, Any]]) -> tuple[float | None, float | None]:
    """``(update tokens, zero-advantage share)`` per training step: means over the steps of
    ``metrics.jsonl`` that trained (logged ``losses/<policy>/zero_advantage_frac``), the
    last row of a step that repeats; ``(None, None)`` when no step did.

    From :func:`marti_trainer.learner.update.update_unit`, per trained policy (unit):
    ``charts/<policy>/update_tokens``, the unpadded tokens (prompts included) of the
    mini-batches it stepped on, summed over the policies; absent where every mini-batch was
    skipped, which is 0 tokens (``algorithm.skip_zero_advantage`` with ``kl_coef`` and
    ``entropy_coef`` 0 leaves out the samples whose advantage is zero on every token).
    ``losses/<policy>/zero_advantage_frac``, the share of the policy's samples of the step,
    skipped or not, whose advantage is zero on every token; averaged over the policies
    unweighted.
    """
    steps: dict[int, tuple[float, float]] = {}
    for row in history:
        z = [v for k, v in row.items()
             if k.startswith("losses/") and k.endswith("/zero_advantage_frac")]  # fmt: skip
        if z:
            t = sum(v for k, v in row.items()
                    if k.startswith("charts/") and k.endswith("/update_tokens"))  # fmt: skip
            steps[int(row["step"])] = (float(t), float(np.mean(z)))
    if not steps:
        return None, None
    tokens, zero = np.mean(list(steps.values()), axis=0)
    return float(tokens), float(zero)


def _read_tokens(run: RunRecord, path: Path, sources: _Sources) -> None:
    """Cumulative generated tokens per step from the training transcripts: the trainer
    appends ``tasks_per_step x n_samples`` episodes per step, in step order. Left empty
    when the count of episodes does not match the steps (a run logged otherwise)."""
    per_step = run.config.get("rollout.tasks_per_step"), run.config.get("rollout.n_samples")
    steps = [s for s, _ in run.curve]
    if not all(isinstance(x, int) for x in per_step) or steps != list(range(1, len(steps) + 1)):
        return
    episodes = []
    for i, line in enumerate(sources.text(path).splitlines(), 1):
        if not line.strip():
            continue
        try:
            turns = json.loads(line)["turns"]
            episodes.append(sum(int(t["meta"]["response_tokens"]) for t in turns))
        except (json.JSONDecodeError, KeyError, TypeError, ValueError) as e:
            raise ValueError(
                f"{path}:{i}: not an episode record with response_tokens ({e!r})"
            ) from None
    size = per_step[0] * per_step[1]
    if len(episodes) != size * len(steps):
        return
    totals = np.cumsum(np.reshape(episodes, (len(steps), size)).sum(axis=1))
    run.tokens = {0: 0.0, **{s: float(t) for s, t in zip(steps, totals, strict=True)}}


def _read_jsonl(path: Path, sources: _Sources) -> list[dict[str, Any]]:
    if not path.is_file():
        raise ValueError(f"{path}: missing")
    rows = []
    for i, line in enumerate(sources.text(path).splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as e:
            raise ValueError(f"{path}:{i}: not JSON ({e.msg})") from None
        if not isinstance(row, dict) or not isinstance(row.get("step"), int):
            raise ValueError(f"{path}:{i}: expected an object with an integer 'step'")
        rows.append(row)
    return rows


def _read_eval(path: Path, sources: _Sources) -> tuple[dict[str, float], dict[str, str], list[int]]:
    """One evaluation's transcript: mean outcome and answer per problem, turns per episode."""
    outcomes: dict[str, list[float]] = {}
    answers: dict[str, str] = {}
    turns: list[int] = []
    for i, line in enumerate(sources.text(path).splitlines(), 1):
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
            task_id, answer = str(rec["task"]["id"]), str(rec["task"]["answer"])
            outcome = float(rec["outcome"])
            turns.append(len(rec["turns"]))
        except (json.JSONDecodeError, KeyError, TypeError, ValueError) as e:
            raise ValueError(f"{path}:{i}: not an episode record ({e!r})") from None
        outcomes.setdefault(task_id, []).append(outcome)
        answers[task_id] = answer
    return {t: float(np.mean(v)) for t, v in outcomes.items()}, answers, turns


def _read_final_eval(run: RunRecord, path: Path, sources: _Sources) -> None:
    """Per-problem outcomes and answers of the final evaluation; generations per step from
    its turns per episode."""
    run.problems, run.answers, turns = _read_eval(path, sources)
    per_step = run.config.get("rollout.tasks_per_step"), run.config.get("rollout.n_samples")
    if turns and all(isinstance(x, int) for x in per_step):
        run.generations_per_step = per_step[0] * per_step[1] * float(np.mean(turns))
