"""The credit leaderboard: a markdown page generated from benchmark result files.

One job: turn ``results.json`` files written by :func:`~marti_env.credit.bench.write_outputs`
into the page ``docs/credit_leaderboard.md``, so no figure in it is typed by hand. Per env:
each method's degeneracy flag, fidelity, zero-advantage fraction, message-ablation drop,
held-out accuracy with a bootstrap CI, the paired difference against ``none`` with its CI,
wins/ties/losses and verdict, and the probability of improvement over ``none``. Across
envs: the interquartile mean of ``acc_final`` with a stratified-bootstrap CI and the
probability of improvement over ``none`` (Agarwal et al. 2021), and the list of cells where
a method cannot be told apart from ``none``. A credit-irrelevant variant
(:data:`~marti_env.credit.bench.probes.CREDIT_IRRELEVANT`) is a control, not a task family:
its section says so, it is left out of the across-env statistics, and a method that does
*not* tie with ``none`` there is listed. All statistics are :mod:`marti_env.stats`'s.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from marti_env.credit.bench.harness import BenchConfig, split_spec
from marti_env.credit.bench.probes import is_credit_irrelevant
from marti_env.stats import (
    iqm_ci,
    mean_ci,
    paired_difference,
    probability_of_improvement,
    probability_of_improvement_ci,
)

DEFAULT_PAGE = "docs/credit_leaderboard.md"
"""Where ``benchmarks/bench_credit.py --leaderboard`` writes unless told otherwise."""

COLUMNS = (
    "method", "=none", "fidelity", "zero_adv", "abl_drop", "acc_final [95% CI]",
    "- none [95% CI]", "W/T/L", "P(> none)", "verdict",
)  # fmt: skip


def load_results(paths: Sequence[str | Path]) -> list[dict[str, Any]]:
    """The result files, parsed; each must be a fast-tier ``results.json``.

    Raises:
        ValueError: a file that is not one (naming it).
    """
    out = []
    for path in paths:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
        if not isinstance(data, dict) or "rows" not in data or "summary" not in data:
            raise ValueError(f"{path}: not a credit benchmark results.json (no rows/summary)")
        if data.get("tier", "fast") != "fast":
            raise ValueError(
                f"{path}: a {data['tier']}-tier results.json; the leaderboard reads the fast "
                "tier's (marti report reads the LLM tier's runs)"
            )
        out.append(data)
    return out


def _fmt(x: float | None, signed: bool = True) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "n/a"
    return f"{x:+.3f}" if signed else f"{x:.3f}"


def merge_results(results: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """One result from several runs of the same config and seeds, each adding envs (e.g.
    run in parallel processes), methods (a method benchmarked later), or both. A cell
    ``(env, method)`` that two runs hold must have the same rows (``seconds`` aside): a
    deterministic rerun such as ``none``'s. ``controls`` may differ between the runs (it
    adds the control methods; it changes no other cell).

    Raises:
        ValueError: the runs differ in config or seeds, or hold one cell with other rows.
    """
    first = results[0]

    def setup(data: Mapping[str, Any], i: int) -> dict[str, Any]:
        # through BenchConfig, so spellings that mean the same compare equal (files written
        # before a setting existed, or with normalize: true for "std"); JSON-normal, so a
        # default tuple equals a list read from a file
        try:
            config = BenchConfig(**data["config"]).to_dict()
        except (TypeError, ValueError) as e:
            raise ValueError(
                f"result {i}: its config is not a fast-tier BenchConfig ({e})"
            ) from None
        return {k: v for k, v in json.loads(json.dumps(config)).items() if k != "controls"}

    merged: dict[str, Any] = {k: first[k] for k in ("tier", "config", "seeds")}
    merged.update(methods=[], envs=[], rows=[], summary=[])
    cells: dict[tuple[str, str], list[dict[str, Any]]] = {}
    reference = setup(first, 0)
    for i, data in enumerate(results):
        for key, this, that in (
            ("config", setup(data, i), reference),
            ("seeds", data["seeds"], first["seeds"]),
        ):
            if this != that:
                raise ValueError(f"result {i} has another {key} than result 0; cannot merge")
        for name in ("methods", "envs"):
            merged[name] += [x for x in data[name] if x not in merged[name]]
        mine: dict[tuple[str, str], list[dict[str, Any]]] = {}
        for row in data["rows"]:
            mine.setdefault((row["env"], row["method"]), []).append(row)
        summary = {(e["env"], e["method"]): e for e in data["summary"]}
        for cell, rows in mine.items():
            if cell in cells and _without_time(cells[cell]) != _without_time(rows):
                raise ValueError(
                    f"result {i} holds env {cell[0]!r}, method {cell[1]!r} with other rows "
                    "than an earlier result; cannot merge"
                )
        new = {cell for cell in mine if cell not in cells}
        merged["rows"] += [r for r in data["rows"] if (r["env"], r["method"]) in new]
        merged["summary"] += [e for cell, e in summary.items() if cell in new]
        cells.update({cell: mine[cell] for cell in new})
    return merged


def _without_time(rows: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    return [{k: v for k, v in r.items() if k != "seconds"} for r in rows]


def _by_seed(rows: Sequence[Mapping[str, Any]], env: str, method: str) -> dict[int, float]:
    return {
        int(r["seed"]): float(r["acc_final"])
        for r in rows
        if r["env"] == env and r["method"] == method and r.get("acc_final") is not None
    }


def variant_of(env: str) -> str | None:
    """The probe env that ``env`` (a spec label) is the credit-irrelevant variant of, or
    None."""
    env_id, kwargs = split_spec(env)
    return env_id if is_credit_irrelevant(env_id, kwargs) else None


def _has_ba(data: Mapping[str, Any], env: str) -> bool:
    return any(e["env"] == env and e.get("verifier_ba_mean") is not None for e in data["summary"])


def env_table(data: Mapping[str, Any], env: str, min_effect: float) -> list[list[str]]:
    """One row of cells (:data:`COLUMNS`, then ``verifier_ba`` where the env has a gate
    verifier) per method of ``env`` in a result file."""
    rows = data["rows"]
    summary = {e["method"]: e for e in data["summary"] if e["env"] == env}
    base = _by_seed(rows, env, "none")
    table = []
    for method in data["methods"]:
        e = summary.get(method)
        if e is None:
            continue
        mine = _by_seed(rows, env, method)
        flag = e.get("same_as_none")
        cells = [
            f"`{method}`",
            "n/a" if flag is None else ("**YES**" if flag else "no"),
            _fmt(e.get("fidelity_mean")),
            _fmt(e.get("zero_adv_mean"), signed=False),
            _fmt(e.get("abl_drop_mean")),
            mean_ci(list(mine.values())).format(3),
        ]
        if method != "none" and base and set(mine) == set(base):
            pd = paired_difference(mine, base, min_effect=min_effect, labels=(method, "none"))
            poi = probability_of_improvement(list(mine.values()), list(base.values()))
            cells += [
                pd.difference.format(3, signed=True),
                f"{pd.wins}/{pd.ties}/{pd.losses}",
                f"{poi:.2f}",
                pd.verdict,
            ]
        else:
            cells += ["", "", "", ""]
        if _has_ba(data, env):
            cells.append(_fmt(e.get("verifier_ba_mean"), signed=False))
        if _has_cost(data, env):
            cells.append(_cost(rows, env, method, int(data["config"].get("updates", 1))))
        table.append(cells)
    return table


def _has_cost(data: Mapping[str, Any], env: str) -> bool:
    """True when some method of ``env`` re-executed episodes (it recorded generations and
    they differ between methods)."""
    costs = {r.get("generations") for r in data["rows"] if r["env"] == env and r.get("generations")}
    return len(costs) > 1


def _cost(rows: Sequence[Mapping[str, Any]], env: str, method: str, updates: int) -> str:
    """``"episodes, generations"`` per update, averaged over seeds."""
    mine = [r for r in rows if r["env"] == env and r["method"] == method and r.get("generations")]
    if not mine:
        return "n/a"
    episodes = sum(r["episodes"] for r in mine) / len(mine) / updates
    generations = sum(r["generations"] for r in mine) / len(mine) / updates
    return f"{episodes:.1f}, {generations:.0f}"


def _markdown_table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return lines


def leaderboard_markdown(
    results: Sequence[Mapping[str, Any]], sources: Sequence[str], out: str = DEFAULT_PAGE
) -> str:
    """The leaderboard page for ``results`` (parsed ``results.json`` files of one config,
    merged by :func:`merge_results`, read from ``sources``, named on the page) to be written
    to ``out`` (named in the page's command unless it is :data:`DEFAULT_PAGE`)."""
    command = "python benchmarks/bench_credit.py --leaderboard " + " ".join(sources)
    if Path(out) != Path(DEFAULT_PAGE):
        command += f" --leaderboard-out {out}"
    lines = [
        "# Credit-assignment leaderboard: simulated tier",
        "",
        "Generated from " + ", ".join(f"`{s}`" for s in sources) + f" by `{command}` "
        "(`marti_env/credit/bench/leaderboard.py`); do not edit by hand. What the columns "
        "mean: [credit.md](credit.md#controls-and-diagnostics).",
        "",
    ]
    per_env: dict[str, dict[str, list[float]]] = {}
    cannot_tell: list[str] = []
    not_tied: list[str] = []  # on a credit-irrelevant variant, where all should tie
    left_out: list[str] = []
    for data in [merge_results(results)]:
        cfg = data["config"]
        min_effect = float(cfg.get("min_effect", 0.0))
        lines += [
            f"Budget: {cfg['updates']} updates x {cfg['batch']} episodes (lr {cfg['lr']}), "
            f"{cfg['eval_episodes']} held-out episodes, {len(data['seeds'])} paired seeds "
            f"(team seed k, training seed k + {cfg.get('train_seed_offset', 0)}), "
            f"min_effect {min_effect:g}." + _budget_note(cfg),
            "",
        ]
        for env in data["envs"]:
            family = variant_of(env)
            lines += [f"## `{env}`", ""]
            if family:
                lines += [
                    f"The credit-irrelevant variant of `{family}` (a control): one agent alone "
                    "decides the outcome, so every method should tie with `none`. A method "
                    "that does not changes that agent's own reward (shaping), not its credit.",
                    "",
                ]
            table = env_table(data, env, min_effect)
            header = (*COLUMNS, "verifier_ba") if _has_ba(data, env) else COLUMNS
            if _has_cost(data, env):
                header = (*header, "episodes, generations / update")
            lines += _markdown_table(header, table)
            lines.append("")
            for cells in table:
                verdict = cells[COLUMNS.index("verdict")]
                # on a variant even a negligible difference is listed (a systematic one is
                # shaping); random credit is a floor meant to lose everywhere
                if family and verdict and not verdict.startswith("indistinguishable"):
                    if cells[0] != "`random`":
                        not_tied.append(f"`{env}`: {cells[0]} ({verdict.split(':')[0]})")
                elif not family and verdict.startswith(("indistinguishable", "negligible")):
                    cannot_tell.append(f"`{env}`: {cells[0]} ({verdict.split(':')[0]})")
            if family:
                left_out.append(env)
                continue
            for method in data["methods"]:
                per_env.setdefault(method, {})[env] = list(
                    _by_seed(data["rows"], env, method).values()
                )
    envs = sorted({e for scores in per_env.values() for e in scores})
    complete = {m: s for m, s in per_env.items() if set(s) == set(envs) and all(s.values())}
    if complete and len(envs) > 1:
        lines += [
            "## Across envs",
            "",
            f"Interquartile mean of `acc_final` over all runs of the {len(envs)} envs "
            "(stratified-bootstrap 95% CI), and the probability that a run of the method "
            "beats a run of `none` on the same env, averaged over envs (with its CI)."
            + (
                f" The credit-irrelevant variants ({', '.join(f'`{e}`' for e in left_out)}) "
                "are controls and are left out."
                if left_out
                else ""
            ),
            "",
        ]
        rows = []
        for method, scores in complete.items():
            poi = ""
            if method != "none" and "none" in complete:
                poi = probability_of_improvement_ci(scores, complete["none"]).format(2)
            rows.append([f"`{method}`", iqm_ci(scores).format(3), poi])
        lines += _markdown_table(("method", "IQM acc_final [95% CI]", "P(> none) [95% CI]"), rows)
        lines.append("")
    lines += ["## Where methods cannot be told apart from `none`", ""]
    lines += [f"- {c}" for c in cannot_tell] or ["- (none)"]
    lines.append("")
    if left_out:
        lines += ["## Where a method does not tie on a credit-irrelevant variant", ""]
        lines += [f"- {c}" for c in not_tied] or [
            "- (none: every method but `random` is indistinguishable from `none`)"
        ]
        lines.append("")
    return "\n".join(lines)


def _budget_note(cfg: Mapping[str, Any]) -> str:
    """How re-execution methods were budgeted, and the advantage, when not the defaults of
    older result files."""
    out = ""
    normalize = cfg.get("normalize", True)
    if normalize not in (True, "std"):
        out += f" Advantage: `{normalize}`."
    if "equal_budget" in cfg:
        out += (
            " Methods that re-execute episodes spend the same generations per update as the "
            "others (fewer episodes)."
            if cfg["equal_budget"]
            else " Methods that re-execute episodes get the same episodes per update as the "
            "others, plus their replays."
        )
    return out


def write_leaderboard(sources: Sequence[str | Path], out: str | Path = DEFAULT_PAGE) -> Path:
    """Read the result files and write the page to ``out``."""
    names = [str(s) for s in sources]
    text = leaderboard_markdown(load_results(sources), names, str(out))
    path = Path(out)
    path.write_text(text, encoding="utf-8")
    return path
