"""The fast (no-LLM) credit benchmark: methods x envs x seeds on simulated teams.

For every (env, seed) pair:

1. **Attribution accuracy** (``attr``, ``attr_within``). ``attr_configs`` random teams
   (skills and persuadabilities drawn from ``skill_range``/``persuade_range``) each play
   ``attr_episodes`` episodes of the real env. Every method credits the *same* episodes
   (a probe credit object runs them all), and each agent's mean return under a method is
   compared with its true marginal contribution, ``acc(team) - acc(team without the
   agent)`` (the agent replaced by one that never answers, same random draws), by
   Spearman's rank correlation, averaged over the teams. ``attr`` ranks all agents (in
   ``moa-v0``/``chain-v0`` it is dominated by the last agent, whose absence always costs
   the whole accuracy); ``attr_within`` ranks agents of one role against each other
   (debaters; proposers), n/a where every role has one agent. Teams whose true
   contributions are all equal are skipped; a method crediting every agent alike scores 0.
2. **Learning** (``acc_final``, ``acc_auc``). One random team, the same for every method,
   is trained for ``updates`` REINFORCE updates of ``batch`` episodes each on the
   method's per-turn rewards read from the env's episode records
   (:func:`~marti_env.credit.bench.sim.policy_gradient`). ``acc_final`` is the trained
   team's accuracy on ``eval_episodes`` held-out episodes (the same for every method);
   ``acc_auc`` is the mean team accuracy over training (area under the learning curve:
   sample efficiency); ``acc_start`` the untrained team's held-out accuracy.

Everything is seeded: the same arguments give the same numbers (``seconds`` aside).
"""

from __future__ import annotations

import math
import time
import zlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from marti_env.credit.base import CreditMethod, FinalAnswerRule, checked_rewards, make_credit
from marti_env.credit.bench.sim import (
    THETA_CLIP,
    SimTeam,
    marginal_contributions,
    play,
    policy_gradient,
    rank_correlation,
    team_accuracy,
)
from marti_env.record import EpisodeRecord

METRICS: tuple[str, ...] = ("attr", "attr_within", "acc_final", "acc_auc")
"""The summary metrics, in table order."""


@dataclass
class BenchConfig:
    """Budget and simulation knobs of the fast tier.

    Attributes:
        updates: REINFORCE updates per training run.
        batch: Episodes per update.
        lr: Step size on the logits.
        normalize: Divide advantages by the (agent, round) slot's std over the batch.
        eval_episodes: Held-out episodes for ``acc_start``/``acc_final``.
        attr_configs: Random teams per (env, seed) for ``attr``.
        attr_episodes: Episodes per team (and per counterfactual) for ``attr``.
        skill_range: Range of initial P(right) of an agent that solves.
        persuade_range: Range of initial P(defer to what it is shown).
        num_distractors: Distinct wrong answers (1..8); fewer means wrong agents agree more.
    """

    updates: int = 40
    batch: int = 16
    lr: float = 0.1
    normalize: bool = True
    eval_episodes: int = 300
    attr_configs: int = 4
    attr_episodes: int = 200
    skill_range: tuple[float, float] = (0.1, 0.6)
    persuade_range: tuple[float, float] = (0.1, 0.7)
    num_distractors: int = 3

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def __post_init__(self) -> None:
        for name in ("updates", "batch", "eval_episodes", "attr_configs", "attr_episodes"):
            value = getattr(self, name)
            low = 0 if name == "attr_configs" else 1
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise ValueError(f"BenchConfig.{name} must be an integer >= {low}, got {value!r}")
        if not (isinstance(self.lr, (int, float)) and math.isfinite(self.lr) and self.lr > 0):
            raise ValueError(f"BenchConfig.lr must be a finite number > 0, got {self.lr!r}")
        for name in ("skill_range", "persuade_range"):
            lo, hi = getattr(self, name)
            if not 0.0 < lo <= hi < 1.0:
                raise ValueError(
                    f"BenchConfig.{name} must satisfy 0 < low <= high < 1, got {(lo, hi)}"
                )
        if not 1 <= self.num_distractors <= 8:
            raise ValueError(
                f"BenchConfig.num_distractors must be in [1, 8], got {self.num_distractors}"
            )


@dataclass(frozen=True)
class MethodSpec:
    """A method under test: a label, and a factory making a fresh credit object per run."""

    label: str
    factory: Callable[[], CreditMethod]


@dataclass(frozen=True)
class EnvChoice:
    """An env under test: its id and ``make`` overrides (label = the spec string)."""

    label: str
    env_id: str
    kwargs: Mapping[str, Any] = field(default_factory=dict)


def parse_value(text: str) -> Any:
    """``"3"`` -> 3, ``"0.5"`` -> 0.5, ``"true"`` -> True, anything else -> the string."""
    low = text.lower()
    if low in ("true", "false"):
        return low == "true"
    for cast in (int, float):
        try:
            return cast(text)
        except ValueError:
            pass
    return text


def split_spec(spec: str) -> tuple[str, dict[str, Any]]:
    name, *pairs = spec.strip().split(":")
    options: dict[str, Any] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise ValueError(
                f"bad option {pair!r} in {spec!r}: expected key=value (e.g. quality:alpha=0.3)"
            )
        options[key.strip()] = parse_value(value.strip())
    return name.strip(), options


def method_spec(spec: str | MethodSpec | CreditMethod) -> MethodSpec:
    """``"quality"``, ``"quality:alpha=0.3:scope=agent"`` (validated now), a ``MethodSpec``,
    or a credit object (used as a template: each run gets a deep copy)."""
    if isinstance(spec, MethodSpec):
        return spec
    if isinstance(spec, CreditMethod):
        import copy

        template = spec
        return MethodSpec(template.name, lambda: copy.deepcopy(template))
    name, options = split_spec(spec)
    make_credit(name, **options)  # fail now, naming the method and option
    return MethodSpec(spec.strip(), lambda: make_credit(name, **options))


def env_choice(spec: str | EnvChoice) -> EnvChoice:
    """``"mad-v0"`` or ``"mad-v0:num_agents=4:rounds=3"`` (validated now)."""
    if isinstance(spec, EnvChoice):
        return spec
    import marti_env

    env_id, kwargs = split_spec(spec)
    marti_env.make(env_id, **kwargs)
    return EnvChoice(spec.strip(), env_id, kwargs)


class _Probe(CreditMethod):
    """Runs several methods on every episode and keeps each agent's returns under each.

    Not registered: a bench-internal credit object (the env records ``credit="probe"``).
    """

    name = "probe"

    def __init__(self, methods: Mapping[str, CreditMethod]) -> None:
        self.methods = dict(methods)
        self.returns: dict[str, list[dict[str, float]]] = {label: [] for label in self.methods}

    def assign(self, episode: EpisodeRecord, rule: FinalAnswerRule) -> list[float]:
        for label, method in self.methods.items():
            totals: dict[str, float] = {}
            for turn, r in zip(episode.turns, checked_rewards(method, episode, rule), strict=True):
                totals[turn.agent] = totals.get(turn.agent, 0.0) + r
            self.returns[label].append(totals)
        return [episode.outcome] * len(episode.turns)


def _seed(*parts: object) -> list[int]:
    return [zlib.crc32(str(p).encode()) for p in parts]


def attribution(
    env_spec: EnvChoice, methods: Sequence[MethodSpec], seed: int, config: BenchConfig
) -> dict[str, tuple[float, float]]:
    """Per method label: ``(attr, attr_within)``, Spearman correlations between each
    agent's mean return under the method and its true marginal contribution, averaged
    over ``config.attr_configs`` random teams. ``attr`` ranks all agents; ``attr_within``
    ranks agents of the same role only (roles with at least two agents: debaters,
    proposers), averaged over such roles; NaN where there are none (``chain-v0``)."""
    import marti_env

    scores: dict[str, list[float]] = {m.label: [] for m in methods}
    within: dict[str, list[float]] = {m.label: [] for m in methods}
    for c in range(config.attr_configs):
        rng = np.random.default_rng(_seed("attr", env_spec.label, seed, c))
        probe = _Probe({m.label: m.factory() for m in methods})
        env = marti_env.make(env_spec.env_id, credit=probe, **env_spec.kwargs)
        team = SimTeam.random(
            env.possible_agents,
            rng,
            config.skill_range,
            config.persuade_range,
            num_distractors=config.num_distractors,
        )
        run_seed = int(rng.integers(2**31))
        episodes = [int(s) for s in rng.integers(2**31, size=config.attr_episodes)]
        for s in episodes:  # the probe credits these with every method
            play(env, team, s, run_seed)
        plain = marti_env.make(env_spec.env_id, **env_spec.kwargs)
        _, truth = marginal_contributions(plain, team, episodes, run_seed)
        groups: dict[str, list[str]] = {}
        for a in team.agents:
            groups.setdefault(env.workflow.role(a), []).append(a)
        groups = {"*": list(team.agents)} | {r: g for r, g in groups.items() if len(g) > 1}
        for label, returns in probe.returns.items():
            credit = {a: float(np.mean([r.get(a, 0.0) for r in returns])) for a in team.agents}
            rhos = {}
            for role, members in groups.items():
                true = [truth[a] for a in members]
                if np.ptp(true) == 0:
                    continue  # nothing to rank
                rho = rank_correlation([credit[a] for a in members], true)
                rhos[role] = 0.0 if math.isnan(rho) else rho  # equal credit: no attribution
            if "*" in rhos:
                scores[label].append(rhos.pop("*"))
            if rhos:
                within[label].append(float(np.mean(list(rhos.values()))))
    return {label: (_nanmean(scores[label]), _nanmean(within[label])) for label in scores}


def _nanmean(values: Sequence[float]) -> float:
    return float(np.mean(values)) if len(values) else float("nan")


def train(
    env_spec: EnvChoice, method: MethodSpec, team: SimTeam, seed: int, config: BenchConfig,
    eval_seeds: Sequence[int],
) -> dict[str, Any]:  # fmt: skip
    """REINFORCE the team on ``method``'s rewards; its learning curve and final accuracy."""
    import marti_env

    env = marti_env.make(env_spec.env_id, credit=method.factory(), **env_spec.kwargs)
    team = team.copy()
    rng = np.random.default_rng(_seed("train", env_spec.label, seed))
    run_seed = int(rng.integers(2**31))
    curve = []
    for _ in range(config.updates):
        batch = [play(env, team, int(s), run_seed) for s in rng.integers(2**31, size=config.batch)]
        curve.append(float(np.mean([p.record.outcome for p in batch])))
        grad = policy_gradient(team, batch, normalize=config.normalize)
        team.theta = np.clip(team.theta + config.lr * grad, -THETA_CLIP, THETA_CLIP)
    plain = marti_env.make(env_spec.env_id, **env_spec.kwargs)
    return {
        "curve": curve,
        "acc_final": team_accuracy(plain, team, eval_seeds, run_seed=seed),
        "acc_auc": float(np.mean(curve)),
        "probs": team.probs().round(4).tolist(),
    }


@dataclass
class BenchResult:
    """Raw rows (one per env x method x seed), learning curves and the config.

    ``curves`` hold one team accuracy per update of ``episodes_per_update`` episodes;
    ``tier`` is ``"fast"`` (simulated agents) or ``"llm"`` (the real trainer), and
    ``config`` the tier's config (:class:`BenchConfig` or the trainer's base config: anything
    with a ``to_dict()`` of plain values).
    """

    config: Any
    envs: list[str]
    methods: list[str]
    seeds: list[int]
    rows: list[dict[str, Any]] = field(default_factory=list)
    curves: dict[tuple[str, str, int], list[float]] = field(default_factory=dict)
    tier: str = "fast"
    episodes_per_update: int = 1

    def summary(self) -> list[dict[str, Any]]:
        """Per (env, method): mean and sample std (ddof 1; 0 for one seed) of each metric."""
        out = []
        for env in self.envs:
            for method in self.methods:
                rows = [r for r in self.rows if r["env"] == env and r["method"] == method]
                entry: dict[str, Any] = {"env": env, "method": method, "seeds": len(rows)}
                for metric in (*METRICS, "acc_start"):
                    values = np.array([r[metric] for r in rows], dtype=float)
                    values = values[~np.isnan(values)]
                    entry[f"{metric}_mean"] = float(values.mean()) if len(values) else float("nan")
                    entry[f"{metric}_std"] = float(values.std(ddof=1)) if len(values) > 1 else 0.0
                out.append(entry)
        return out

    def table(self) -> str:
        """The summary as a fixed-width text table (mean ± std over seeds)."""
        header = ["env", "method", *METRICS]
        lines = []
        for e in self.summary():
            cells = [e["env"], e["method"]]
            cells += [_cell(e[f"{m}_mean"], e[f"{m}_std"]) for m in METRICS]
            lines.append(cells)
        widths = [max(len(str(x)) for x in col) for col in zip(header, *lines, strict=True)]
        fmt = "  ".join(f"{{:<{w}}}" for w in widths)
        rule = "  ".join("-" * w for w in widths)
        return "\n".join([fmt.format(*header), rule, *(fmt.format(*c) for c in lines)])

    def to_json(self) -> dict[str, Any]:
        return {
            "tier": self.tier,
            "config": self.config.to_dict(),
            "envs": self.envs,
            "methods": self.methods,
            "seeds": self.seeds,
            "rows": self.rows,
            "summary": self.summary(),
            "curves": [
                {"env": e, "method": m, "seed": s, "curve": c}
                for (e, m, s), c in self.curves.items()
            ],
        }


def _cell(mean: float, std: float) -> str:
    return "n/a" if math.isnan(mean) else f"{mean:+.3f} ± {std:.3f}"


def run_benchmark(
    methods: Sequence[str | MethodSpec | CreditMethod],
    envs: Sequence[str | EnvChoice] = ("mad-v0", "moa-v0", "chain-v0"),
    seeds: Sequence[int] = (0, 1, 2),
    config: BenchConfig | None = None,
    log: Callable[[str], None] | None = None,
) -> BenchResult:
    """Run the fast tier; see the module docstring for what each metric means."""
    config = config or BenchConfig()
    method_specs = [method_spec(m) for m in methods]
    env_specs = [env_choice(e) for e in envs]
    labels = [m.label for m in method_specs]
    if len(set(labels)) != len(labels):
        raise ValueError(f"method labels must be unique, got {labels}")
    result = BenchResult(
        config, [e.label for e in env_specs], labels, [int(s) for s in seeds],
        tier="fast", episodes_per_update=config.batch,
    )  # fmt: skip
    import marti_env

    for env_spec in env_specs:
        agents = marti_env.make(env_spec.env_id, **env_spec.kwargs).possible_agents
        for seed in result.seeds:
            start = time.perf_counter()
            attr = attribution(env_spec, method_specs, seed, config)
            rng = np.random.default_rng(_seed("team", env_spec.label, seed))
            team = SimTeam.random(
                agents, rng, config.skill_range, config.persuade_range,
                num_distractors=config.num_distractors,
            )  # fmt: skip
            eval_seeds = [int(s) for s in rng.integers(2**31, size=config.eval_episodes)]
            plain = marti_env.make(env_spec.env_id, **env_spec.kwargs)
            acc_start = team_accuracy(plain, team, eval_seeds, run_seed=seed)
            if log:
                spent = time.perf_counter() - start
                log(f"{env_spec.label} seed {seed}: attribution done ({spent:.1f}s)")
            for m in method_specs:
                t0 = time.perf_counter()
                out = train(env_spec, m, team, seed, config, eval_seeds)
                result.curves[(env_spec.label, m.label, seed)] = out["curve"]
                result.rows.append({
                    "env": env_spec.label, "method": m.label, "seed": seed,
                    "attr": attr[m.label][0],
                        "attr_within": attr[m.label][1],
                        "acc_start": acc_start,
                    "acc_final": out["acc_final"], "acc_auc": out["acc_auc"],
                    "episodes": config.updates * config.batch,
                    "seconds": round(time.perf_counter() - t0, 3),
                })  # fmt: skip
                if log:
                    r = result.rows[-1]
                    log(
                        f"  {m.label:<24} attr {r['attr']:+.3f}  acc {acc_start:.3f} -> "
                        f"{r['acc_final']:.3f}  auc {r['acc_auc']:.3f}  ({r['seconds']:.1f}s)"
                    )
    return result
