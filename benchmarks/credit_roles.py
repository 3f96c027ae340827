"""What each role of a credit-probe team does, from LLM-tier runs' held-out evaluations.

The team outcome says only whether the team was right; this says which role made it so.
For every evaluation a run saved (``eval/step_*.jsonl``), each agent is scored against its
own job with its env's rules:

* ``split-sum-v0`` (:func:`split_sum_counts`): solver ``i`` does its job by boxing its part
  ``a_i``, a distractor by boxing 0 or nothing
  (:func:`marti_env.workflows.split_sum.local_correct`); per role, the share that did, and
  the share that boxed a number at all.
* ``gate-v0`` (:func:`gate_counts`): the generator's proposal is right or wrong (its turn's
  score); each verifier ACCEPTs, REJECTs or decides nothing (which lets the proposal
  through); the decisions against the proposals' correctness give the balanced accuracy
  (:func:`marti_env.workflows.gate.balanced_accuracy`: always-ACCEPT scores 50). With a
  panel (``num_verifiers`` K > 1) every verifier's decision counts, so the decision
  columns are shares of the ``K x problems`` decisions.
* ``signal-v0`` (:func:`signal_counts`): a speaker does its job by naming the target (its
  message, the first token of its boxed answer, is the target: what the listener sees,
  :func:`marti_env.workflows.signal.message_of`); the listener by picking it, which the
  team outcome says. Split by
  whether a speaker named the target: a listener that reads the message is right when
  one did, and right 1 in K (the candidates) by guessing when none did; and the share
  of problems where the listener boxed a speaker's message, right or wrong.

Collect from run folders (all of one env), then render::

    python benchmarks/credit_roles.py collect runs/credit_llm_split_sum/runs/* \\
        --out docs/results/credit_llm_split_sum_roles.json
    python benchmarks/credit_roles.py render docs/results/credit_llm_split_sum_roles.json

``collect`` reads each run's ``config.yaml`` (its method label ``exp_name``, seed and the
env's kwargs) and keeps small counts only; ``render`` prints one markdown row per (method,
seed, step); ``paired`` compares each method's roles with ``none``'s at the final step,
seed by seed, with :func:`marti_env.stats.paired_difference` (what the team outcome hides:
a role that learned under one method while the team's answer did not change)::

    python benchmarks/credit_roles.py paired docs/results/credit_llm_gate_roles.json

``collect`` also reduces each run's training rollouts (``transcripts.jsonl``: every
episode of every step, each turn with the reward its credit method paid) to the same counts
per step, plus where the credit went (:func:`credit_counts`): how many episodes the team
lost, in how many of those some turn was still paid a non-zero reward, and the share of
the batch's absolute credit paid in them. ``none`` pays a lost episode nothing; a
counterfactual method can, rightly (a split-sum solver that boxed its part while a
distractor broke the sum) or by chance (:func:`split_sum_chance_credit`: on split-sum, the
share paid where a solver missed its part, so only a coincidental subset sum was right)::

    python benchmarks/credit_roles.py rollouts \\
        docs/results/credit_llm_split_sum_d4_roles.json --seed 0

``collect --merge`` adds the runs to an existing file, replacing those of the same name
and keeping the rest: the evaluation records stay on the machine that ran them
(``runs/`` is not committed), so ``benchmarks/run_llm_credit.sh`` merges each seed's counts
into the committed file as the seed finishes, and a fresh clone's seeds add to it.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from marti_env.stats import paired_difference
from marti_env.tasks.task import Task
from marti_env.workflows.base import Workflow
from marti_env.workflows.gate import GENERATOR, balanced_accuracy, decision
from marti_env.workflows.signal import LISTENER, message_of
from marti_env.workflows.split_sum import local_correct, parse_int
from marti_trainer.transcripts import read_training_steps


def _episodes(records: list[dict[str, Any]], workflow: Workflow, where: str):
    """``(task, {agent: score}, {agent: answer}, outcome)`` per record, checking that each
    record has one turn by each of the workflow's agents, with answer and score fields."""
    for line, rec in enumerate(records, 1):
        try:
            turns = {t["agent"]: float(t["score"]) for t in rec["turns"]}
            answers = {t["agent"]: t["answer"] for t in rec["turns"]}  # None: boxed nothing
            task = Task(**{k: rec["task"][k] for k in ("id", "prompt", "answer", "source")})
        except KeyError as e:
            raise ValueError(f"{where}:{line}: no {e} field in the episode record") from None
        if sorted(turns) != sorted(workflow.agents) or len(rec["turns"]) != len(turns):
            raise ValueError(
                f"{where}:{line}: turns by {[t['agent'] for t in rec['turns']]}, expected one "
                f"each by {list(workflow.agents)} (does the run's config match its records?)"
            )
        yield task, turns, answers, float(rec["outcome"])


def split_sum_counts(records: list[dict[str, Any]], workflow: Any, where: str) -> dict[str, Any]:
    """Per role (solver, distractor): (problem, agent) pairs, how many did their job and how
    many boxed a number; and the problems whose team outcome is 1. ``workflow`` is the
    run's :class:`~marti_env.workflows.split_sum.SplitSum`; ``where`` names the file.

    Raises:
        ValueError: a record without one turn by each agent, or a turn without an
            ``answer`` or ``score`` field (naming ``where:line``).
    """
    out: dict[str, Any] = {
        r: {"pairs": 0, "local": 0, "boxed": 0} for r in ("solver", "distractor")
    }
    out["problems"], out["team"] = len(records), 0
    for task, _, answers, outcome in _episodes(records, workflow, where):
        for agent, ok in local_correct(workflow.instance(task), answers).items():
            counts = out[workflow.role(agent)]
            counts["pairs"] += 1
            counts["local"] += int(ok)
            counts["boxed"] += int(parse_int(answers[agent]) is not None)
        out["team"] += int(outcome == 1.0)
    return out


def gate_counts(records: list[dict[str, Any]], workflow: Any, where: str) -> dict[str, Any]:
    """Every verifier's decisions against the generator's proposals: counts of
    ``{right, wrong}_{accept, reject, none}`` (a proposal is right when its turn scored 1;
    no decision lets it through) over ``decisions`` (verifiers x problems), and the
    problems whose team outcome is 1.

    Raises:
        ValueError: as :func:`split_sum_counts`.
    """
    out: dict[str, Any] = {f"{p}_{d}": 0 for p in ("right", "wrong")
                           for d in ("accept", "reject", "none")}  # fmt: skip
    out["problems"], out["team"] = len(records), 0
    out["decisions"] = len(records) * len(workflow.verifiers)
    for _, scores, answers, outcome in _episodes(records, workflow, where):
        right = scores[GENERATOR] == 1.0
        for verifier in workflow.verifiers:
            said = decision(answers[verifier])
            out[f"{'right' if right else 'wrong'}_{(said or 'none').lower()}"] += 1
        out["team"] += int(outcome == 1.0)
    return out


def signal_counts(records: list[dict[str, Any]], workflow: Any, where: str) -> dict[str, Any]:
    """Speakers whose message (:func:`~marti_env.workflows.signal.message_of` of the boxed
    answer: what the listener is shown) is the target, over ``pairs`` (speakers x
    problems); the problems where some speaker named it (``named_problems``) and how many
    of those and of the rest the team got right (``right_named``, ``right_other``); the
    problems where the listener boxed one of the speakers' messages (``copied``); and the
    problems whose team outcome is 1.

    Raises:
        ValueError: as :func:`split_sum_counts`.
    """
    out: dict[str, Any] = dict.fromkeys(
        ("named", "named_problems", "right_named", "right_other", "copied", "team"), 0
    )
    out["problems"], out["pairs"] = len(records), len(records) * len(workflow.speakers)
    for task, _, answers, outcome in _episodes(records, workflow, where):
        target = parse_int(task.answer)  # "+53" and "53" name the same candidate
        named = [
            target is not None
            and answers[s] is not None
            and parse_int(message_of(answers[s])) == target
            for s in workflow.speakers
        ]
        right = int(outcome == 1.0)
        out["named"] += sum(named)
        out["named_problems"] += int(any(named))
        out["right_named" if any(named) else "right_other"] += right
        sent = {message_of(answers[s]) for s in workflow.speakers if answers[s] is not None}
        out["copied"] += int(
            answers[LISTENER] is not None and message_of(answers[LISTENER]) in sent
        )
        out["team"] += right
    return out


def credit_counts(records: list[dict[str, Any]], where: str) -> dict[str, Any]:
    """Where one batch's credited rewards went: ``episodes``; ``lost``, those with team
    outcome below 1; ``lost_credited``, lost episodes in which some turn's ``reward`` is
    not 0; ``abs_credit``, the sum of ``|reward|`` over every turn, and ``abs_credit_lost``
    that sum over the lost episodes. By hand: rewards (1, 1) in a won episode and
    (0.25, -0.25) in a lost one give lost 1, lost_credited 1, abs_credit 2.5 and
    abs_credit_lost 0.5 (a fifth of the credit paid where the team was wrong).

    Raises:
        ValueError: a record without a numeric ``outcome`` or a turn without a numeric
            ``reward`` (naming ``where:line``, the record's position in ``records``).
    """
    out: dict[str, Any] = {"episodes": len(records), "lost": 0, "lost_credited": 0,
                           "abs_credit": 0.0, "abs_credit_lost": 0.0}  # fmt: skip
    for line, rec in enumerate(records, 1):
        try:
            rewards = [float(t["reward"]) for t in rec["turns"]]
            lost = float(rec["outcome"]) < 1
        except KeyError as e:
            raise ValueError(f"{where}:{line}: no {e} field in the episode record") from None
        except (TypeError, ValueError) as e:
            raise ValueError(f"{where}:{line}: a non-numeric outcome or reward ({e})") from None
        paid = sum(abs(r) for r in rewards)
        out["abs_credit"] += paid
        if lost:
            out["lost"] += 1
            out["lost_credited"] += int(any(r != 0 for r in rewards))
            out["abs_credit_lost"] += paid
    return out


def split_sum_chance_credit(records: list[dict[str, Any]], workflow: Any, where: str) -> float:
    """The absolute credit (``sum |reward|`` over turns, whatever the method) paid in
    split-sum episodes where some solver's boxed number is not its part (boxing nothing
    counts as 0, so a solver whose part is 0 may stay silent). There no coalition of agents
    doing their jobs sums to the total, so a coalition that does (the team included, when
    it won) hits it by chance: a solver's 25 and a distractor's 2 for 27. ``none`` pays the
    wins among these episodes (the coincidences that include everyone); a counterfactual
    method also pays the coincidences of smaller coalitions, in won and lost episodes.

    Raises:
        ValueError: as :func:`split_sum_counts`.
    """
    chance = 0.0
    for (task, _, answers, _), rec in zip(
        _episodes(records, workflow, where), records, strict=True
    ):
        parts = workflow.instance(task).parts
        if any((parse_int(answers[a]) or 0) != p for a, p in zip(workflow.solvers, parts,
                                                                   strict=True)):  # fmt: skip
            chance += sum(abs(float(t["reward"])) for t in rec["turns"])
    return chance


def _rollout_counts(run: Path, cfg: dict[str, Any], env_id: str, workflow: Any) -> dict[str, Any]:
    """Per training step (1, 2, ...), the env's counts (:data:`FAMILIES`) and
    :func:`credit_counts` of the step's episodes in ``transcripts.jsonl`` (the trainer
    appends each step's ``tasks_per_step x n_samples`` episodes in order, read by
    :func:`marti_trainer.transcripts.read_training_steps`); on split-sum also
    :func:`split_sum_chance_credit`. ``{}`` for a run without the file
    (``log.transcripts: false``).

    Raises:
        ValueError: the reader's errors (an empty file, a line that is not JSON, a count of
            episodes that is not a whole number of steps or whose steps disagree with the
            run's ``metrics.jsonl``, naming the file).
    """
    path = run / "transcripts.jsonl"
    if not path.is_file():
        return {}
    size = int(cfg["rollout"]["tasks_per_step"]) * int(cfg["rollout"]["n_samples"])
    steps = {}
    for step, batch in enumerate(read_training_steps(run, size), 1):
        first = (step - 1) * size + 1
        where = f"{path} step {step} (lines {first}-{first + size - 1}), episode"
        credit = credit_counts(batch, where)
        if env_id == "split-sum-v0":
            credit["abs_credit_chance"] = split_sum_chance_credit(batch, workflow, where)
        steps[str(step)] = {**FAMILIES[env_id](batch, workflow, where), "credit": credit}
    return steps


FAMILIES: dict[str, Callable[[list[dict[str, Any]], Any, str], dict[str, Any]]] = {
    "split-sum-v0": split_sum_counts,
    "gate-v0": gate_counts,
    "signal-v0": signal_counts,
}
"""The env ids this script scores, and how."""


def _heldout_size(run: Path) -> int:
    """The number of held-out tasks the run's last session loaded (its ``run.json``)."""
    path = run / "run.json"
    try:
        return int(json.loads(path.read_text(encoding="utf-8"))["sessions"][-1]["data"][
            "eval_tasks"]["tasks"])  # fmt: skip
    except (OSError, json.JSONDecodeError, KeyError, IndexError, TypeError) as e:
        raise ValueError(f"{path}: no held-out task count ({e!r})") from None


def collect(run_dirs: list[Path]) -> dict[str, Any]:
    """Every evaluation of every run, reduced to its env's counts (:data:`FAMILIES`); a run
    is labelled by its ``exp_name`` (the benchmark's method label, options included).

    Raises:
        ValueError: a folder without ``config.yaml`` or ``run.json``, an env this script
            does not score, runs of several envs (naming the folder), an evaluation with
            fewer or more records than the run's held-out tasks, or records that do not fit
            the run's workflow (naming the file).
    """
    import marti_env

    runs, env_ids = [], set()
    for run in sorted(run_dirs):
        config_path = run / "config.yaml"
        if not config_path.is_file():
            raise ValueError(f"{run}: no config.yaml (not a run folder)")
        cfg = yaml.safe_load(config_path.read_text(encoding="utf-8"))
        env_id = cfg["env"]["id"]
        if env_id not in FAMILIES:
            raise ValueError(f"{run}: env {env_id!r}, not one of {sorted(FAMILIES)}")
        env_ids.add(env_id)
        if len(env_ids) > 1:
            raise ValueError(f"{run}: env {env_id!r}, but earlier runs are {sorted(env_ids)}")
        workflow = marti_env.make(env_id, **cfg["env"]["kwargs"]).workflow
        size = _heldout_size(run)
        steps = {}
        for path in sorted((run / "eval").glob("step_*.jsonl")):
            with path.open(encoding="utf-8") as f:
                records = [json.loads(line) for line in f if line.strip()]
            if len(records) != size:
                raise ValueError(
                    f"{path}: {len(records)} episode records, but the run's held-out set has "
                    f"{size} tasks (an evaluation still being written?)"
                )
            steps[str(int(path.stem.split("_")[1]))] = FAMILIES[env_id](
                records, workflow, str(path)
            )
        rollouts = _rollout_counts(run, cfg, env_id, workflow)
        runs.append({"run": run.name, "method": cfg["exp_name"], "seed": cfg["seed"],
                     "env_kwargs": cfg["env"]["kwargs"], "steps": steps,
                     "rollouts": rollouts})  # fmt: skip
    return {"env_id": env_ids.pop() if env_ids else None, "runs": runs}


def merge(old: dict[str, Any], new: dict[str, Any], where: str) -> dict[str, Any]:
    """``old``'s runs with ``new``'s added; a run of the same name is replaced by ``new``'s.

    Raises:
        ValueError: the two hold runs of different envs (naming ``where``, the old file).
    """
    if old["env_id"] is not None and new["env_id"] not in (None, old["env_id"]):
        raise ValueError(
            f"{where}: holds runs of {old['env_id']!r}, the new runs are {new['env_id']!r}"
        )
    names = {run["run"] for run in new["runs"]}
    runs = [run for run in old["runs"] if run["run"] not in names] + new["runs"]
    return {"env_id": old["env_id"] or new["env_id"], "runs": sorted(runs, key=lambda r: r["run"])}


def _pct(num: float, den: float) -> str:
    return "n/a" if den == 0 else f"{100 * num / den:.1f}"


def _split_sum_cells(c: dict[str, Any]) -> list[str]:
    s, d = c["solver"], c["distractor"]
    return [
        f"{_pct(s['local'], s['pairs'])} ({_pct(s['boxed'], s['pairs'])})",
        f"{_pct(d['local'], d['pairs'])} ({_pct(d['boxed'], d['pairs'])})",
    ]


def _gate_decisions(c: dict[str, Any]) -> tuple[list[bool], list[bool], int, float]:
    """Per decision of a gate count: whether the proposal was right, whether it went
    through (no decision lets it through); the number of decisions; the balanced accuracy."""
    labels: list[bool] = []
    accepted: list[bool] = []
    for p in ("right", "wrong"):
        for d in ("accept", "reject", "none"):
            labels += [p == "right"] * c[f"{p}_{d}"]
            accepted += [d != "reject"] * c[f"{p}_{d}"]
    n = c.get("decisions", c["problems"])  # files from before panels: one verifier
    ba = balanced_accuracy(labels, accepted) if labels else float("nan")
    return labels, accepted, n, ba


def _gate_cells(c: dict[str, Any]) -> list[str]:
    labels, _, n, ba = _gate_decisions(c)
    return [
        _pct(sum(labels), n),
        *(_pct(c[f"right_{d}"] + c[f"wrong_{d}"], n) for d in ("accept", "reject", "none")),
        "n/a" if math.isnan(ba) else f"{100 * ba:.1f}",
    ]


def _signal_cells(c: dict[str, Any]) -> list[str]:
    other = c["problems"] - c["named_problems"]
    return [
        _pct(c["named"], c["pairs"]),
        _pct(c["right_named"], c["named_problems"]),
        _pct(c["right_other"], other),
        _pct(c["copied"], c["problems"]),
    ]


COLUMNS = {
    "split-sum-v0": (
        ["solvers: own part boxed (boxed a number)", "distractors: 0 or nothing (boxed a number)"],
        _split_sum_cells,
    ),
    "gate-v0": (
        ["generator right", "verifier ACCEPT", "REJECT", "no decision", "balanced accuracy"],
        _gate_cells,
    ),
    "signal-v0": (
        [
            "speaker named the target",
            "listener right where it was named",
            "elsewhere",
            "listener boxed the message",
        ],
        _signal_cells,
    ),
}


def _gate_metrics(c: dict[str, Any]) -> dict[str, float]:
    labels, _, n, ba = _gate_decisions(c)
    return {
        "generator right": sum(labels) / n,
        "verifier REJECT": (c["right_reject"] + c["wrong_reject"]) / n,
        "balanced accuracy": ba,
    }


METRICS: dict[str, Callable[[dict[str, Any]], dict[str, float]]] = {
    "split-sum-v0": lambda c: {
        "solvers: own part boxed": c["solver"]["local"] / c["solver"]["pairs"],
        "distractors: 0 or nothing": c["distractor"]["local"] / c["distractor"]["pairs"],
    },
    "gate-v0": _gate_metrics,
    "signal-v0": lambda c: {
        "speaker named the target": c["named"] / c["pairs"],
        "listener boxed the message": c["copied"] / c["problems"],
    },
}
"""Per env, the role shares (0-1) that ``paired`` compares across methods."""


def paired(data: dict[str, Any], baseline: str = "none", confidence: float = 0.95) -> str:
    """A markdown table: for each method other than ``baseline``, each role share of
    :data:`METRICS` and the team outcome at each run's last evaluated step, minus
    ``baseline``'s on the same seed (the seeds both have), in points, with its CI,
    wins/ties/losses and verdict (:func:`marti_env.stats.paired_difference`).

    Raises:
        ValueError: no run of ``baseline``, or a method with no seed in common with it.
    """
    last: dict[str, dict[int, dict[str, float]]] = {}
    for run in data["runs"]:
        step = max(run["steps"], key=int)
        c = run["steps"][step]
        values = {"team outcome 1": c["team"] / c["problems"], **METRICS[data["env_id"]](c)}
        last.setdefault(run["method"], {})[int(run["seed"])] = values
    if baseline not in last:
        raise ValueError(f"no run of the baseline {baseline!r}; methods: {sorted(last)}")
    level = f"{100 * confidence:g}%"
    lines = [
        f"| role share | method | baseline | pairs | difference [{level} CI] | W/T/L | verdict |",
        "|---|---|---|---|---|---|---|",
    ]
    for method in sorted(m for m in last if m != baseline):
        seeds = sorted(set(last[method]) & set(last[baseline]))
        if not seeds:
            raise ValueError(f"{method!r} and {baseline!r} share no seed")
        for metric in last[method][seeds[0]]:
            d = paired_difference(
                {s: last[method][s][metric] for s in seeds},
                {s: last[baseline][s][metric] for s in seeds},
                confidence, labels=(method, baseline),
            )  # fmt: skip
            lines.append(
                f"| {metric} | {method} | {baseline} | {len(seeds)} | "
                f"{d.difference.format(1, 100, signed=True)} | {d.wins}/{d.ties}/{d.losses} | "
                f"{d.verdict} |"
            )
    return "\n".join(lines)


def render(data: dict[str, Any]) -> str:
    """A markdown table: per run and evaluated step, the percent of problems with team
    outcome 1 (the held-out accuracy), then the env's per-role columns, in percent."""
    header, cells = COLUMNS[data["env_id"]]
    lines = [
        "| " + " | ".join(["method", "seed", "step", "team outcome 1", *header]) + " |",
        "|" + "---|" * (4 + len(header)),
    ]
    for run in sorted(data["runs"], key=lambda r: (r["method"], r["seed"])):
        for step, c in sorted(run["steps"].items(), key=lambda kv: int(kv[0])):
            row = [run["method"], str(run["seed"]), step, _pct(c["team"], c["problems"])]
            lines.append("| " + " | ".join([*row, *cells(c)]) + " |")
    return "\n".join(lines)


def rollouts(data: dict[str, Any], seed: int | None = None) -> str:
    """A markdown table: per run (of ``seed``, else every run) and training step, the
    percent of the step's episodes with team outcome 1, the env's per-role columns, the
    percent of lost episodes in which some turn was paid non-zero credit, the percent of
    the step's absolute credit paid in lost episodes (:func:`credit_counts`) and, on
    split-sum, paid where a solver missed its part (:func:`split_sum_chance_credit`).

    Raises:
        ValueError: no run of ``seed``, or a selected run without rollout counts (naming
            it: a table missing one method's rows would read as complete).
    """
    header, cells = COLUMNS[data["env_id"]]
    chance = data["env_id"] == "split-sum-v0"
    spent_header = ["lost episodes paid credit", "credit paid in lost episodes"]
    if chance:
        spent_header.append("credit paid where a solver missed its part (chance only)")
    lines = [
        "| " + " | ".join(["method", "seed", "step", "team outcome 1", *header, *spent_header])
        + " |",
        "|" + "---|" * (4 + len(header) + len(spent_header)),
    ]  # fmt: skip
    runs = [r for r in data["runs"] if seed in (None, int(r["seed"]))]
    missing = [r["run"] for r in runs if not r.get("rollouts")]
    if not runs or missing:
        raise ValueError(
            f"no rollout counts for {', '.join(missing) or f'any run of seed {seed}'} "
            "(collected without transcripts.jsonl, or before collect reduced it)"
        )
    for run in sorted(runs, key=lambda r: (r["method"], r["seed"])):
        for step, c in sorted(run["rollouts"].items(), key=lambda kv: int(kv[0])):
            k = c["credit"]
            row = [run["method"], str(run["seed"]), step, _pct(c["team"], c["problems"])]
            spent = [_pct(k["lost_credited"], k["lost"]),
                     _pct(k["abs_credit_lost"], k["abs_credit"])]  # fmt: skip
            if chance:
                spent.append(_pct(k["abs_credit_chance"], k["abs_credit"]))
            lines.append("| " + " | ".join([*row, *cells(c), *spent]) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("collect", help="reduce run folders to per-role counts")
    c.add_argument("runs", nargs="+", type=Path)
    c.add_argument("--out", type=Path, required=True)
    c.add_argument(
        "--merge",
        action="store_true",
        help="add to --out's runs (same name: replaced) instead of overwriting it",
    )
    r = sub.add_parser("render", help="print the markdown table of a collected file")
    r.add_argument("path", type=Path)
    p = sub.add_parser("paired", help="each method's final role shares minus the baseline's")
    p.add_argument("path", type=Path)
    p.add_argument("--baseline", default="none", help="the method compared against (none)")
    o = sub.add_parser("rollouts", help="per training step: roles and where the credit went")
    o.add_argument("path", type=Path)
    o.add_argument("--seed", type=int, default=None, help="only this seed's runs")
    args = parser.parse_args(argv)
    if args.cmd == "collect":
        data = collect(args.runs)
        if args.merge and args.out.is_file():
            data = merge(json.loads(args.out.read_text(encoding="utf-8")), data, str(args.out))
        args.out.write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")
    elif args.cmd == "rollouts":
        print(rollouts(json.loads(args.path.read_text(encoding="utf-8")), args.seed))
    elif args.cmd == "paired":
        print(paired(json.loads(args.path.read_text(encoding="utf-8")), args.baseline))
    else:
        print(render(json.loads(args.path.read_text(encoding="utf-8"))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
