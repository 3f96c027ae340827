"""The LLM tier of ``marti bench credit``: every (env, method, seed) cell is a real training run.

The fast tier (simulated agents, no torch) is :mod:`marti_env.credit.bench`; this module is
its trainer-side counterpart, so it lives in ``marti_trainer`` and imports the trainer.
:mod:`marti_trainer.cli.bench` parses the command line and calls :func:`run_llm_benchmark`.

Each cell trains with :func:`marti_trainer.train.train` from one base config (by default
``baselines/quickstart.yaml``: SmolLM2-135M-Instruct, arithmetic tasks), changing only the
env, the credit method and the seed, so every method gets the same fixed budget
(``total_steps`` x ``tasks_per_step`` x ``n_samples`` episodes; a re-execution method
fewer at an equal generation budget, see Budget below) and the same held-out tasks. Per
cell it reports:

* ``acc_start`` / ``acc_final``: held-out greedy team accuracy before and after training
  (the base config's ``env.eval_tasks``). ``acc_start`` is measured once per (env, seed),
  by the first method's run, and shared: greedy decoding of the same model is the same
  for every method. With ``eval.seed`` set in the base config it is the same for every
  seed too, and computed once: cells share step-0 evaluations through
  ``log.eval_cache`` (default ``out_dir/eval_cache``, ``off`` turns it off;
  :mod:`marti_trainer.eval_cache`).
* ``acc_auc``: mean team outcome of the training rollouts over the run (sample efficiency;
  what ``marti report`` pairs as the training outcome, ``RunRecord.training_outcome``).
  Under the tokens budget cells train different numbers of steps; the mean over each
  cell's own steps is then, with tokens per step about constant within a cell, the mean
  over its token budget, the same span for every cell.
* ``zero_adv``: the share of advantage groups whose credited rewards are all equal,
  averaged over the run's updates (the trainer's ``rollout/zero_spread_groups``, the fast
  tier's definition): groups that give no credit signal. The overlong penalty, added after
  credit, can still spread such a group's rewards by length.
* ``=none`` (the degeneracy flag, :func:`trained_like_none`): whether the method's credited
  rewards gave exactly ``none``'s advantages on every training batch of the cell, under the
  config's estimator, groups and overlong penalty. Both runs draw each step's rollouts
  from the same seeds, so YES on a cell means it trained exactly as ``none`` would have;
  the table says YES for a method only when every seed's cell says so, and n/a when a cell
  cannot be checked (no transcripts, sibling groups, a per-token estimator).
* ``attr`` / ``attr_within``: n/a. An LLM agent's true contribution is unknown; the fast
  tier (:mod:`marti_env.credit.bench`) scores attribution.
* ``episodes`` / ``generations`` / ``tokens``: what the cell's training spent: its
  episodes, the policy generations of their turns plus the replays of a re-execution
  method (``rollout/replay_generations``), and the response tokens of both
  (``rollout/tokens`` plus ``rollout/replay_tokens``; NaN for a cell trained before the
  trainer logged ``rollout/tokens``). Under the generations and episodes budgets the
  ``tokens`` column shows how far apart the methods' token spending ended; the tokens
  budget equalises it.

Controls, opt-in (each is a training run per seed): ``random`` (the credit method of that
name, i.i.d. standard normal rewards: the floor) and ``none@reseed`` (``none`` with the
training seed moved by :data:`~marti_env.credit.bench.harness.RESEED`, as in the fast
tier: the noise floor of a paired difference against ``none``), named in ``methods``.

Budget. A re-execution method (``leave_one_out_replay``, ``shapley_replay``, ``sibling``)
pays for replays in generations. With ``budget="generations"`` (the default, as the fast
tier's) its cell trains on fewer tasks per step, so that a step spends about the
generations the base config's steps spend without replays
(:func:`equal_generation_tasks`); ``budget="episodes"`` keeps the base config's tasks per
step and puts the replays on top (and reproduces, so reuses, re-execution cells trained
before the budget existed). Every other method keeps the base config's. With
``budget="tokens"`` every cell keeps the base config's tasks per step and trains until the
response tokens of its rollouts and replays reach the base config's ``total_tokens`` (the
trainer stops at the end of that step; ``total_steps`` is the cap): equal token budgets,
so a method whose agents write longer, or that replays, trains on fewer episodes (the
rows' ``episodes``). A ``total_tokens`` in the base config under another budget is refused.

The base config's ``env.kwargs`` apply only to the env it names (the quick start's are
``mad-v0``'s, including its prompts); any other env gets its registered defaults plus the
overrides in its ``--envs`` spec (``moa-v0:num_proposers=2``).

Runs live in ``out_dir/runs/<env>__<method>__<seed>`` and are run by the sweep runner
(:func:`marti_trainer.sweep.run_cell_inline`, in this process: a base config may hold
Python objects such as a reward function). As with ``marti sweep``, calling again with
the same arguments reuses finished cells and resumes unfinished ones from their last
checkpoint, so a killed benchmark loses at most one step per cell (set
``log.save_every`` to checkpoint every step); a cell whose saved config differs is an
error naming the keys, not a silent reuse. ``marti report OUT/runs`` reads the cells.
"""

from __future__ import annotations

import math
import re
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from marti_env.credit import is_replay_method, make_credit
from marti_env.credit.bench.harness import (
    RESEED,
    BenchResult,
    env_choice,
    method_spec,
    split_spec,
)
from marti_env.credit.replay import trains_on_siblings
from marti_env.record import EpisodeRecord
from marti_trainer.config import TrainConfig
from marti_trainer.metrics import training_tokens
from marti_trainer.transcripts import read_training_steps

if TYPE_CHECKING:
    from marti_trainer.sweep import KeepCheckpoints

__all__ = [
    "cell_config",
    "equal_generation_tasks",
    "generation_cost",
    "run_llm_benchmark",
    "trained_like_none",
]


NONE_RESEED = "none@reseed"
"""The noise-floor control's label: ``none`` trained with the seed moved by ``RESEED``."""


def _label(method: str) -> str:
    """A method's label, validated (name and options; a control's label names the control,
    :func:`~marti_env.credit.bench.harness.method_spec`).

    Raises:
        ValueError: an unknown method or option, or the ``oracle`` control (naming it).
    """
    if method.strip() == "oracle":
        raise ValueError(
            "the oracle control credits each agent with its true contribution, which an LLM "
            "team does not have: the fast tier (marti bench credit without --tier llm) runs it"
        )
    return method_spec(method).label


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.=-]+", "_", text)


Budget = Literal["generations", "episodes", "tokens"]


def equal_generation_tasks(tasks_per_step: int, turns: int, replays: int) -> int:
    """Tasks per step for a method whose episodes cost ``turns`` generations plus
    ``replays`` generations of re-execution, so that a step spends at most the
    generations of ``tasks_per_step`` tasks without replays (the number of episodes per
    task, ``n_samples``, cancels), except at the floor of one task, which may cost more:
    ``max(1, tasks_per_step * turns // (turns + replays))``, the fast tier's rule
    (:func:`marti_env.credit.bench.harness.budget_episodes`) with the group size kept. By
    hand: 8 tasks of 2-turn episodes with 2 replays each afford
    ``16 // 4 = 4``; with 30 replays, ``max(1, 16 // 32) = 1``."""
    if tasks_per_step < 1 or turns < 1 or replays < 0:
        raise ValueError(
            f"equal_generation_tasks: tasks_per_step {tasks_per_step} and turns {turns} must "
            f"be >= 1, replays {replays} >= 0"
        )
    return max(1, tasks_per_step * turns // (turns + replays))


def spent_tokens(history: Sequence[Mapping[str, Any]], steps: int) -> float:
    """Response tokens a cell's training generated in its ``steps`` steps
    (:func:`marti_trainer.metrics.training_tokens`: rollouts plus a re-execution method's
    replays), or NaN where a step logged no count (a cell trained, or partly trained,
    before the trainer counted tokens)."""
    try:
        return training_tokens(history, steps)
    except ValueError:
        return math.nan


def generation_cost(cfg: TrainConfig) -> tuple[int, int]:
    """``(turns, replays)``: the policy generations of one episode of ``cfg``'s env, and
    the replay generations its credit method adds per episode (0 unless it re-executes),
    from :func:`marti_trainer.dry_run.plan_run` (exact for fixed-actor workflows, all the
    built-ins)."""
    from marti_trainer.dry_run import plan_run

    plan = plan_run(cfg)
    episodes = cfg.rollout.tasks_per_step * cfg.rollout.n_samples
    return plan.turns_per_episode, plan.replay_generations_per_step // episodes


def cell_config(
    base: TrainConfig,
    env_spec: str,
    method: str,
    seed: int,
    runs_dir: Path,
    at_start: bool,
    budget: Budget = "generations",
) -> TrainConfig:
    """``base`` with the cell's env, credit method and seed; outputs under ``runs_dir``. A
    method that trains on siblings (``sibling:train=true``) gets ``algorithm.group_by:
    node``, the grouping it needs; with ``budget="generations"`` a re-execution method gets
    fewer ``rollout.tasks_per_step`` (:func:`equal_generation_tasks`); every other method
    keeps the base config's. ``none@reseed`` trains ``none`` with ``seed + RESEED`` (its
    run is still named after ``seed``, the seed it is paired on, and without ``eval.seed``
    it evaluates on that seed's held-out episodes).

    With ``budget="tokens"`` every cell keeps the base config's tasks per step and stops
    at the base config's ``total_tokens`` (replays included), ``total_steps`` the cap.

    Raises:
        ValueError: ``budget`` is not one of :data:`Budget`'s, or is ``"tokens"`` while the
            base config sets no ``total_tokens``, or is another while it sets one.
    """
    if budget not in ("generations", "episodes", "tokens"):
        raise ValueError(f"budget must be 'generations', 'episodes' or 'tokens', got {budget!r}")
    if budget == "tokens" and base.total_tokens is None:
        raise ValueError(
            "budget 'tokens' stops every cell at the base config's total_tokens, which is "
            "not set: give it (--set total_tokens=N), with total_steps as the cap"
        )
    if budget != "tokens" and base.total_tokens is not None:
        raise ValueError(
            f"total_tokens {base.total_tokens} is set in the base config, but budget "
            f"{budget!r} equalises {budget}, not tokens: a token stop on top would mix the "
            "two budgets; use budget 'tokens' (--budget tokens) or unset total_tokens"
        )
    env = env_choice(env_spec)
    reseed = method.strip() == NONE_RESEED
    name, options = ("none", {}) if reseed else split_spec(method)
    kwargs = dict(base.env.kwargs) if env.env_id == base.env.id else {}
    kwargs.update(env.kwargs)
    credit = make_credit(name, **options)
    group_by = "node" if trains_on_siblings(credit) else None
    cfg = replace(
        base,
        seed=seed + RESEED if reseed else seed,
        algorithm=replace(base.algorithm, group_by=group_by or base.algorithm.group_by),
        exp_name=_slug(method),
        run_name=f"{_slug(env.label)}__{_slug(method)}__{seed}",
        env=replace(base.env, id=env.env_id, kwargs=kwargs, credit=name, credit_kwargs=options),
        # the floor's held-out episodes are those of the seed it pairs on
        eval=replace(
            base.eval,
            at_start=at_start,
            at_end=True,
            seed=seed if reseed and base.eval.seed is None else base.eval.seed,
        ),
        log=replace(
            base.log,
            output_dir=str(runs_dir),
            plots=False,
            progress=False,
            eval_cache=base.log.eval_cache or str(runs_dir.parent / "eval_cache"),
        ),
    )
    if budget == "generations" and is_replay_method(credit):
        turns, replays = generation_cost(cfg)
        tasks = equal_generation_tasks(cfg.rollout.tasks_per_step, turns, replays)
        cfg = replace(cfg, rollout=replace(cfg.rollout, tasks_per_step=tasks))
    return cfg


NORMALIZATION = {"grpo": "std", "dr_grpo": "mean", "rloo": "mean", "agent_scale": "agent_scale"}
"""The degeneracy check's form (:data:`marti_env.credit.degeneracy.NORMALIZATIONS`) of each
per-group advantage estimator: RLOO's ``r_i - mean_{j != i} r_j = n/(n-1) (r_i - mean)``
is centring times a factor that is the same for every method."""
PER_TOKEN = ("reinforce_pp", "reinforce_pp_baseline")
"""Estimators with batch-wide whitening and per-token returns: no per-group check."""


def training_batches(run_dir: Path, size: int) -> list[list[EpisodeRecord]]:
    """The episodes of a run's ``transcripts.jsonl``, step by step, as records
    (:func:`marti_trainer.transcripts.read_training_steps`, whose checks apply).

    Raises:
        ValueError: a line that is not an episode record (naming ``path:line``), or the
            reader's errors.
    """
    steps = read_training_steps(run_dir, size)
    batches = []
    for s, step in enumerate(steps):
        batch = []
        for j, record in enumerate(step):
            try:
                batch.append(EpisodeRecord.from_dict(record))
            except (KeyError, TypeError, ValueError) as e:
                where = f"{Path(run_dir) / 'transcripts.jsonl'}:{s * size + j + 1}"
                raise ValueError(f"{where}: not an episode record ({e!r})") from None
        batches.append(batch)
    return batches


def batch_like_none(batch: list[EpisodeRecord], cfg: TrainConfig) -> bool:
    """Whether one training batch's credited rewards give exactly ``none``'s advantages.

    ``none`` would pay each turn its episode's outcome ``R``; the trainer adds the same
    overlong penalty ``p`` to either reward (:func:`marti_trainer.learner.penalised_rewards`),
    so :func:`marti_env.credit.degeneracy.gradient_identical_to_none` compares ``r + p``
    with ``R + p`` in the groups of :func:`marti_trainer.rollout.group_key_of`, under the
    estimator's form (:data:`NORMALIZATION`).
    """
    import torch

    from marti_env.credit.degeneracy import gradient_identical_to_none
    from marti_trainer.learner import penalised_rewards
    from marti_trainer.rollout import group_key_of

    rows = [(row, turn, ep.outcome) for ep in batch
            for row, turn in zip(ep.samples(), ep.turns, strict=True)]  # fmt: skip
    lengths = torch.tensor([int(turn.meta["response_tokens"]) for _, turn, _ in rows])

    def penalised(values: list[float]) -> list[float]:  # float64: the check's tolerance
        return penalised_rewards(torch.tensor(values, dtype=torch.float64), lengths,
                                 cfg.algorithm, cfg.rollout.max_tokens).tolist()  # fmt: skip

    return gradient_identical_to_none(
        penalised([row.reward for row, _, _ in rows]),
        penalised([outcome for _, _, outcome in rows]),
        [group_key_of(row, cfg.algorithm.group_by) for row, _, _ in rows],
        NORMALIZATION[cfg.algorithm.advantage],  # type: ignore[arg-type]
        scale_keys=[row.agent for row, _, _ in rows],
    )


def trained_like_none(run_dir: Path, cfg: TrainConfig) -> bool | None:
    """The degeneracy flag of a finished cell: True when every training batch in its
    ``transcripts.jsonl`` passes :func:`batch_like_none`.

    Returns None where the check does not apply: ``log.transcripts`` off,
    ``algorithm.group_by: node`` (sibling groups are not in the transcripts), or a
    per-token estimator (:data:`PER_TOKEN`).

    Raises:
        ValueError: the transcripts are missing or malformed, or their steps disagree with
            the run's ``metrics.jsonl`` (missing, or ending at another step), naming the
            file (:func:`marti_trainer.transcripts.read_training_steps`); or an estimator
            this check does not know (naming it).
    """
    alg = cfg.algorithm
    if not cfg.log.transcripts or alg.group_by == "node" or alg.advantage in PER_TOKEN:
        return None
    if alg.advantage not in NORMALIZATION:
        raise ValueError(
            f"the degeneracy check has no form for algorithm.advantage={alg.advantage!r} "
            f"(known: {sorted(NORMALIZATION)}, skipped: {list(PER_TOKEN)})"
        )
    path = run_dir / "transcripts.jsonl"
    if not path.is_file():
        raise ValueError(f"{path}: missing, although log.transcripts is on")
    size = cfg.rollout.tasks_per_step * cfg.rollout.n_samples
    return all(batch_like_none(batch, cfg) for batch in training_batches(run_dir, size))


def _run_cell(
    cfg: TrainConfig, keep_checkpoints: KeepCheckpoints = "all"
) -> tuple[list[dict[str, Any]], dict[str, Any], bool]:
    """Train (or reuse, or resume) one cell with the sweep runner
    (:func:`marti_trainer.sweep.run_cell_inline`); its metric history, summary and whether
    it was reused."""
    from marti_trainer.sweep import Cell, run_cell_inline

    outcome = run_cell_inline(Cell(cfg.run_name, cfg.seed, (), cfg), keep_checkpoints)
    return outcome.history, outcome.summary, outcome.status == "reused"


def run_llm_benchmark(
    methods: Sequence[str],
    envs: Sequence[str],
    seeds: Sequence[int],
    base: TrainConfig,
    out_dir: str | Path,
    log: Callable[[str], None] | None = None,
    keep_checkpoints: KeepCheckpoints = "all",
    budget: Budget = "generations",
) -> BenchResult:
    """Train every (env, method, seed) cell from ``base``; see the module docstring
    (``budget``: how a re-execution method's replays are paid for).

    ``methods`` are credit specs (``"quality:alpha=0.3"``), validated before any training;
    ``envs`` env specs (``"mad-v0:num_agents=3"``). A finished cell keeps the checkpoints
    ``keep_checkpoints`` names (:func:`marti_trainer.sweep.prune_checkpoints`): the table
    needs none of them.
    """
    labels = [_label(m) for m in methods]  # validates names and options
    if len(set(labels)) != len(labels):
        raise ValueError(f"method labels must be unique, got {labels}")
    env_labels = [env_choice(e).label for e in envs]
    result = BenchResult(
        base, env_labels, labels, [int(s) for s in seeds], tier="llm",
        episodes_per_update=base.rollout.tasks_per_step * base.rollout.n_samples,
        budget=budget,
    )  # fmt: skip
    runs_dir = Path(out_dir) / "runs"
    checks: dict[tuple[str, str], list[bool | None]] = {}  # per (env, method), every seed's
    for env in env_labels:
        # an episode's policy generations, whatever the method (the cell without credit)
        turns = generation_cost(cell_config(base, env, "none", 0, runs_dir, False, budget))[0]
        for seed in result.seeds:
            acc_start = math.nan
            for k, method in enumerate(labels):
                cfg = cell_config(base, env, method, seed, runs_dir, k == 0, budget)
                t0 = time.perf_counter()
                history, summary, reused = _run_cell(cfg, keep_checkpoints)
                if k == 0:
                    acc_start = summary["accuracy_before"]
                curve = [h["rollout/outcome"] for h in history if "rollout/outcome" in h]
                zero = [h["rollout/zero_spread_groups"] for h in history
                        if "rollout/zero_spread_groups" in h]  # fmt: skip
                replayed = [int(h["rollout/replay_generations"]) for h in history
                            if "rollout/replay_generations" in h]  # fmt: skip
                steps = summary["steps"]  # fewer than total_steps if total_tokens stopped it
                tokens = spent_tokens(history, steps)
                episodes = cfg.rollout.tasks_per_step * cfg.rollout.n_samples * steps
                checks.setdefault((env, method), []).append(
                    trained_like_none(runs_dir / cfg.run_name, cfg)
                )
                result.curves[(env, method, seed)] = curve
                result.rows.append({
                    "env": env, "method": method, "seed": seed,
                    "attr": math.nan, "attr_within": math.nan,
                    "acc_start": acc_start, "acc_final": summary["accuracy_after"],
                    "acc_auc": sum(curve) / len(curve),
                    "zero_adv": sum(zero) / len(zero) if zero else math.nan,
                    "episodes": episodes,
                    "generations": episodes * turns + sum(replayed),
                    "tokens": tokens,
                    "seconds": summary["wall_s"] if reused else round(time.perf_counter() - t0, 1),
                })  # fmt: skip
                if log:
                    r = result.rows[-1]
                    log(
                        f"{env} seed {seed} {method:<24} acc {acc_start:.3f} -> "
                        f"{r['acc_final']:.3f}  auc {r['acc_auc']:.3f}  ({r['seconds']:.0f}s"
                        + (", reused)" if reused else ")")
                    )
    # YES only when every seed's cell is checked and like none; n/a (absent) if any is not
    result.flags = {k: all(v) for k, v in checks.items() if None not in v}
    return result
