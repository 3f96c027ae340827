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

3. **Controls and diagnostics** (every table). A *probe batch* of ``probe_episodes``
   episodes of the untrained team, credited by every method (the same episodes), gives
   ``same_as_none`` (the degeneracy flag: the method's rewards are an increasing affine
   function of the outcome inside every ``(agent, round)`` advantage group, so its
   normalised advantages are exactly ``none``'s: :mod:`marti_env.credit.degeneracy`) and
   ``fidelity`` (Spearman, over the batch's (episode, agent) pairs, between an agent's
   credited return and its true contribution in that episode, ``R - R'`` with ``R'`` the
   episode replayed without the agent or, for each gate verifier, with its decision
   flipped: a rank measure within one step, so adding a constant to every reward does not
   change it). Every training run also reports ``zero_adv`` (the fraction of advantage
   groups with zero reward spread, averaged over updates) and ``abl_drop`` (the trained
   team's held-out accuracy minus its accuracy when every agent is shown blank text of
   the others' responses: 0 means the task is single-agent in disguise). With
   ``controls`` the runs include ``oracle`` (every turn rewarded with its agent's true
   contribution in that episode, replayed during training), ``random`` (i.i.d. standard
   normal rewards) and ``none@reseed`` (``none`` again with another training seed: the
   noise floor of the paired differences).
4. **Paired differences against** ``none``: per method, ``acc_final - acc_final(none)`` on
   the same team and training seeds, with a bootstrap CI and a verdict that also needs
   ``|difference| >= min_effect`` (:func:`marti_env.stats.paired_difference`).

The team draw and the training randomness take separate seeds: pair ``k`` uses team seed
``seeds[k]`` and training seed ``seeds[k] + train_seed_offset``. Held-out episodes use the
env's test split (``tasks={"type": "arithmetic", "split": "test"}``) unless the env spec
sets ``tasks``. The probe envs (``split-sum-v0``, ``gate-v0``, ``signal-v0``) are played by
:class:`~marti_env.credit.bench.probes.ProbeTeam`; the others by
:class:`~marti_env.credit.bench.sim.SimTeam`.

Everything is seeded: the same arguments give the same numbers (``seconds`` aside).
"""

from __future__ import annotations

import dataclasses
import math
import time
import zlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from marti_env.credit.base import CreditMethod, FinalAnswerRule, checked_rewards, make_credit
from marti_env.credit.bench.probes import PROBE_WORKFLOWS, ProbeTeam, counterfactuals
from marti_env.credit.bench.sim import (
    THETA_CLIP,
    Played,
    SiblingTurn,
    SimTeam,
    advantage_samples,
    marginal_contributions,
    play,
    policy_gradient,
    rank_correlation,
    team_accuracy,
)
from marti_env.credit.degeneracy import gradient_identical_to_none
from marti_env.credit.replay import (
    ReplayOutcome,
    credit_by_replay,
    is_replay_method,
    resampled_turn,
    trains_on_siblings,
)
from marti_env.record import EpisodeRecord
from marti_env.replay import ReplayPolicy, ReplayRequest

METRICS: tuple[str, ...] = (
    "attr", "attr_within", "fidelity", "zero_adv", "abl_drop", "acc_final", "acc_auc",
)  # fmt: skip
"""The summary metrics (mean and std over seeds), in table order."""
CONTROLS: tuple[str, ...] = ("oracle", "random", "none@reseed")
"""The control runs added with ``BenchConfig.controls``."""
RESEED = 100_003
"""Training-seed offset of the ``none@reseed`` control."""


@dataclass
class BenchConfig:
    """Budget and simulation knobs of the fast tier.

    Attributes:
        updates: REINFORCE updates per training run.
        batch: Episodes per update.
        lr: Step size on the logits.
        normalize: The advantage: ``"std"`` (GRPO: each (agent, round) slot standardised
            over the batch), ``"mean"`` (centred only) or ``"agent_scale"`` (centred, one
            scale per agent); see :func:`~marti_env.credit.bench.sim.policy_gradient`.
            ``True``/``False`` (older result files) mean ``"std"``/``"mean"``.
        eval_episodes: Held-out episodes for ``acc_start``/``acc_final``.
        attr_configs: Random teams per (env, seed) for ``attr``.
        attr_episodes: Episodes per team (and per counterfactual) for ``attr``.
        skill_range: Range of initial P(right) of an agent that solves.
        persuade_range: Range of initial P(defer to what it is shown).
        num_distractors: Distinct wrong answers (1..8); fewer means wrong agents agree more.
        probe_episodes: Episodes of the probe batch (``same_as_none``, ``fidelity``).
        controls: Add the ``oracle``, ``random`` and ``none@reseed`` runs.
        min_effect: Paired differences smaller than this are called negligible.
        train_seed_offset: Training seed = team seed + this.
        equal_budget: Every method spends the same generations per update: ``batch``
            episodes' worth. A method that re-executes episodes
            (:mod:`marti_env.credit.replay`) pays for its replays with fewer episodes per
            update (at least 2); ``episodes`` and ``generations`` per run are in the rows.
            False: ``batch`` episodes per update whatever the replays cost.
    """

    updates: int = 40
    batch: int = 16
    lr: float = 0.1
    normalize: str = "std"
    eval_episodes: int = 300
    attr_configs: int = 4
    attr_episodes: int = 200
    skill_range: tuple[float, float] = (0.1, 0.6)
    persuade_range: tuple[float, float] = (0.1, 0.7)
    num_distractors: int = 3
    probe_episodes: int = 64
    controls: bool = True
    min_effect: float = 0.02
    train_seed_offset: int = 0
    equal_budget: bool = True

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def __post_init__(self) -> None:
        for name in (
            "updates", "batch", "eval_episodes", "attr_configs", "attr_episodes", "probe_episodes",
        ):  # fmt: skip
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
        if not (isinstance(self.min_effect, (int, float)) and self.min_effect >= 0):
            raise ValueError(
                f"BenchConfig.min_effect must be a number >= 0, got {self.min_effect!r}"
            )
        if isinstance(self.train_seed_offset, bool) or not isinstance(self.train_seed_offset, int):
            raise ValueError(
                f"BenchConfig.train_seed_offset must be an integer, got {self.train_seed_offset!r}"
            )
        if self.normalize is True or self.normalize is False:
            self.normalize = "std" if self.normalize else "mean"
        if self.normalize not in ("std", "mean", "agent_scale"):
            raise ValueError(
                "BenchConfig.normalize must be 'std', 'mean' or 'agent_scale', got "
                f"{self.normalize!r}"
            )
        if not 1 <= self.num_distractors <= 8:
            raise ValueError(
                f"BenchConfig.num_distractors must be in [1, 8], got {self.num_distractors}"
            )


@dataclass(frozen=True)
class MethodSpec:
    """A method under test: a label, and a factory making a fresh credit object per run.

    ``control`` (``"oracle"``, ``"random"``) replaces the credited rewards in training by
    the true contributions or by noise; ``train_seed_shift`` moves the training seed (the
    ``none@reseed`` noise floor).
    """

    label: str
    factory: Callable[[], CreditMethod]
    control: str | None = None
    train_seed_shift: int = 0


def control_specs() -> list[MethodSpec]:
    """The control runs (:data:`CONTROLS`)."""
    return [
        MethodSpec("oracle", lambda: make_credit("none"), control="oracle"),
        MethodSpec("random", lambda: make_credit("none"), control="random"),
        MethodSpec("none@reseed", lambda: make_credit("none"), train_seed_shift=RESEED),
    ]


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
    """``"quality:alpha=0.3"`` -> ``("quality", {"alpha": 0.3})``. A second part without
    ``=`` belongs to the name: an entry point ``"my_credit.py:Mine:w=1"`` -> ``("my_credit.py:
    Mine", {"w": 1})`` (see ``marti_env.credit.base``)."""
    name, *pairs = spec.strip().split(":")
    if pairs and "=" not in pairs[0]:
        name = f"{name}:{pairs.pop(0)}"
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
    or a credit object (used as a template: each run gets a deep copy). A control's label
    (:data:`CONTROLS`) is that control, so ``--methods none,random --no-controls`` runs the
    ``random`` control; the ``random`` credit method with options (``random:seed=1``) is the
    method."""
    if isinstance(spec, MethodSpec):
        return spec
    if isinstance(spec, str) and spec.strip() in CONTROLS:
        return next(c for c in control_specs() if c.label == spec.strip())
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
    """Runs several methods on every episode and keeps what each gave.

    Not registered: a bench-internal credit object (the env records ``credit="probe"``).
    ``returns[label]``: per episode, each agent's return; ``turns[label]``: per episode,
    ``(agent, round, reward)`` per turn; ``outcomes``: per episode, ``R``. Methods that
    re-execute episodes are filled in afterwards, by :meth:`credit_replays` on the
    episodes played.
    """

    name = "probe"

    def __init__(self, methods: Mapping[str, CreditMethod]) -> None:
        self.methods = dict(methods)
        self.returns: dict[str, list[dict[str, float]]] = {label: [] for label in self.methods}
        self.turns: dict[str, list[list[tuple[str, int, float]]]] = {
            label: [] for label in self.methods
        }
        self.outcomes: list[float] = []

    def assign(self, episode: EpisodeRecord, rule: FinalAnswerRule) -> list[float]:
        self.outcomes.append(episode.outcome)
        for label, method in self.methods.items():
            if is_replay_method(method):
                continue  # credit_replays
            totals: dict[str, float] = {}
            turns = []
            for turn, r in zip(episode.turns, checked_rewards(method, episode, rule), strict=True):
                totals[turn.agent] = totals.get(turn.agent, 0.0) + r
                turns.append((turn.agent, turn.round, r))
            self.returns[label].append(totals)
            self.turns[label].append(turns)
        return [episode.outcome] * len(episode.turns)

    def credit_replays(
        self, env: Any, records: Sequence[EpisodeRecord], team: SimTeam, run_seed: int
    ) -> None:
        """Fill the re-execution methods' returns and turns from ``records`` (the episodes
        this probe credited, in order), replayed in ``env`` by the simulated team."""
        for label, method in self.methods.items():
            if is_replay_method(method):
                self.returns[label], self.turns[label], _ = _replay_credited(
                    env, records, method, team, run_seed
                )


def _seed(*parts: object) -> list[int]:
    return [zlib.crc32(str(p).encode()) for p in parts]


def _is_probe(env: Any) -> bool:
    return env.workflow.name in PROBE_WORKFLOWS


def random_team(env: Any, rng: np.random.Generator, config: BenchConfig) -> SimTeam:
    """The random team that plays ``env``: a :class:`ProbeTeam` (ranges by role) for the
    probe envs, else a :class:`SimTeam` (``config.skill_range``, ``persuade_range``)."""
    agents = env.possible_agents
    if _is_probe(env):
        return ProbeTeam.random_by_role(agents, [env.workflow.role(a) for a in agents], rng)
    return SimTeam.random(
        agents, rng, config.skill_range, config.persuade_range,
        num_distractors=config.num_distractors,
    )  # fmt: skip


def true_contributions(env: Any, team: SimTeam, episode_seed: int, run_seed: int,
                       outcome: float) -> dict[str, float]:  # fmt: skip
    """Each agent's true contribution to one episode: ``R - R'``, with ``R'`` the outcome of
    the episode replayed (same draws, later agents re-executed) under the agent's
    counterfactual (:func:`~marti_env.credit.bench.probes.counterfactuals`: absent, or a
    gate verifier's decision flipped). ``env`` must credit with a cheap method (``none``)."""
    out = {}
    for agent, replace in counterfactuals(env.workflow.name, team.agents).items():
        out[agent] = (
            outcome - play(env, team, episode_seed, run_seed, replace=replace).record.outcome
        )
    return out


def sim_policy(
    team: SimTeam, run_seed: int, keep: dict[tuple[int, str, int], list] | None = None
) -> ReplayPolicy:
    """The simulated team as a replay policy (:data:`marti_env.replay.ReplayPolicy`). Each
    regenerated turn draws fresh randomness, seeded by ``(run_seed, episode seed, agent,
    round, replay job)``: a replay resamples the others as an LLM team would, unlike the
    common random numbers of :func:`true_contributions`. With ``keep``, each request's
    sampled choices are kept under its ``(job, agent, round)``."""

    def policy(requests: Sequence[ReplayRequest]) -> list[str]:
        out = []
        for q in requests:
            rng = np.random.default_rng(
                [run_seed, q.episode_seed or 0, team.index(q.agent), q.round, q.job, 7]
            )
            text, choices = team.act(q.agent, q.role, q.messages, q.task, rng)
            out.append(text)
            if keep is not None:
                keep[(q.job, q.agent, q.round)] = choices
        return out

    return policy


def sibling_turns(
    origin: int, replays: Sequence[ReplayOutcome], keep: Mapping[tuple[int, str, int], list]
) -> list[SiblingTurn]:
    """The siblings of batch episode ``origin`` from its replays (:func:`credit_by_replay`'s
    ``replays``, jobs numbered from 0) and the choices :func:`sim_policy` kept."""
    out = []
    for job, r in enumerate(replays):
        agent, rnd = resampled_turn(r)
        out.append(SiblingTurn(origin, agent, rnd, r.replay.outcome, keep[(job, agent, rnd)]))
    return out


def _replay_credited(
    env: Any, records: Sequence[EpisodeRecord], method: CreditMethod, team: SimTeam,
    run_seed: int,
) -> tuple[list[dict[str, float]], list[list[tuple[str, int, float]]], int]:  # fmt: skip
    """A replay method's credit on copies of ``records``: per episode, each agent's return
    and ``(agent, round, reward)`` per turn, and the generations the replays took."""
    import copy

    if trains_on_siblings(method):  # its node groups centre R by the siblings' mean: the
        method = dataclasses.replace(method, train=False)  # train=False credit, x K/(K+1)
    copies = [copy.deepcopy(r) for r in records]
    spent = credit_by_replay(env, copies, method, sim_policy(team, run_seed))  # type: ignore[arg-type]
    turns = [[(t.agent, t.round, t.reward) for t in r.turns] for r in copies]
    return [dict(r.agent_rewards) for r in copies], turns, spent


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
        team = random_team(env, rng, config)
        run_seed = int(rng.integers(2**31))
        episodes = [int(s) for s in rng.integers(2**31, size=config.attr_episodes)]
        records = [play(env, team, s, run_seed).record for s in episodes]  # probe credits all
        plain = marti_env.make(env_spec.env_id, **env_spec.kwargs)
        probe.credit_replays(plain, records, team, run_seed)
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


def probe_batch(
    env_spec: EnvChoice,
    methods: Sequence[MethodSpec],
    team: SimTeam,
    seed: int,
    config: BenchConfig,
) -> dict[str, tuple[bool, float]]:
    """Per method label: ``(same_as_none, fidelity)`` on one batch of the untrained team
    (see the module docstring, item 3). Control runs are not probed (their rewards are
    not a credit method's)."""
    import marti_env

    probe = _Probe({m.label: m.factory() for m in methods})
    env = marti_env.make(env_spec.env_id, credit=probe, **env_spec.kwargs)
    plain = marti_env.make(env_spec.env_id, **env_spec.kwargs)
    rng = np.random.default_rng(_seed("probe", env_spec.label, seed))
    run_seed = int(rng.integers(2**31))
    truth, records = [], []
    for s in (int(x) for x in rng.integers(2**31, size=config.probe_episodes)):
        record = play(env, team, s, run_seed).record
        records.append(record)
        truth.append(true_contributions(plain, team, s, run_seed, record.outcome))
    probe.credit_replays(plain, records, team, run_seed)
    out = {}
    for label in probe.methods:
        rewards, outcomes, groups = [], [], []
        for turns, outcome in zip(probe.turns[label], probe.outcomes, strict=True):
            for agent, round_, r in turns:
                rewards.append(r)
                outcomes.append(outcome)
                groups.append((agent, round_))
        same = gradient_identical_to_none(
            rewards, outcomes, groups, config.normalize,  # type: ignore[arg-type]
            scale_keys=[agent for agent, _ in groups],
        )  # fmt: skip
        credit = [ret.get(a, 0.0) for ret in probe.returns[label] for a in team.agents]
        true = [t[a] for t in truth for a in team.agents]
        rho = rank_correlation(credit, true)
        out[label] = (same, 0.0 if math.isnan(rho) else rho)
    return out


def _nanmean(values: Sequence[float]) -> float:
    return float(np.mean(values)) if len(values) else float("nan")


def _zero_spread_fraction(
    played: Sequence[Played], siblings: Sequence[SiblingTurn] = (), by_node: bool = False
) -> float:
    """Fraction of advantage groups (:func:`~marti_env.credit.bench.sim.advantage_samples`)
    whose rewards are all equal."""
    groups: dict[tuple, list[float]] = {}
    for key, _, reward, _ in advantage_samples(played, siblings, by_node):
        groups.setdefault(key, []).append(reward)
    return float(np.mean([np.ptp(v) == 0 for v in groups.values()])) if groups else float("nan")


GENERATORS = ("arithmetic", "code_gen", "expr")
"""Procedural task sources with a test split (``{"type": ..., "split": "test"}``)."""


def _held_out(env_spec: EnvChoice) -> dict[str, Any]:
    """The ``make`` arguments of held-out episodes: the test split of the env's procedural
    task source (arithmetic unless the env or its spec names another: ``"expr"``,
    ``{"type": "code_gen", ...}``); other task sources as they are."""
    import marti_env

    tasks = env_spec.kwargs.get("tasks", marti_env.spec(env_spec.env_id).kwargs.get("tasks"))
    if tasks is None:
        tasks = "arithmetic"
    if isinstance(tasks, str) and tasks in GENERATORS:
        tasks = {"type": tasks}
    if isinstance(tasks, dict) and tasks.get("type") in GENERATORS:
        return {**env_spec.kwargs, "tasks": {**tasks, "split": "test"}}
    return dict(env_spec.kwargs)


def evaluate_team(
    env_spec: EnvChoice, team: SimTeam, eval_seeds: Sequence[int], run_seed: int
) -> dict[str, float]:
    """Held-out team accuracy, the message-ablation drop and, for ``gate``, the verifiers'
    balanced accuracy (each verifier's over the held-out episodes, averaged over the
    panel; NaN elsewhere)."""
    import marti_env
    from marti_env.workflows.gate import ACCEPT, GENERATOR, balanced_accuracy, decision

    kwargs = _held_out(env_spec)
    env = marti_env.make(env_spec.env_id, **kwargs)
    records = [play(env, team, s, run_seed).record for s in eval_seeds]
    blank = marti_env.make(env_spec.env_id, **kwargs)
    blank.workflow.shown = lambda turn: ""  # every agent is shown blank text of the others
    ablated = team_accuracy(blank, team, eval_seeds, run_seed)
    acc = float(np.mean([r.outcome for r in records]))
    ba = float("nan")
    if env.workflow.name == "gate":
        by_agent = [{t.agent: t for t in r.turns} for r in records]
        right = [turns[GENERATOR].score >= 1.0 for turns in by_agent]
        ba = float(np.mean([
            balanced_accuracy(right, [decision(t[v].answer) in (ACCEPT, None) for t in by_agent])
            for v in env.workflow.verifiers
        ]))  # fmt: skip
    return {"acc": acc, "abl_drop": acc - ablated, "verifier_ba": ba}


def budget_episodes(budget: int, cost: int) -> int:
    """Episodes an update of ``budget`` generations affords at ``cost`` generations each
    (the episode's turns plus its replays): ``max(2, budget // cost)``; at least two, so
    advantages have a baseline (the rows record what was spent). By hand: a budget of 48
    at 15 a piece affords 3."""
    return max(2, budget // max(1, cost))


def train(
    env_spec: EnvChoice, method: MethodSpec, team: SimTeam, seed: int, config: BenchConfig,
    eval_seeds: Sequence[int],
) -> dict[str, Any]:  # fmt: skip
    """REINFORCE the team on ``method``'s rewards (training seed ``seed``); its learning
    curve, final held-out accuracy and diagnostics."""
    import marti_env

    credit = method.factory()
    replayed = is_replay_method(credit)
    env = marti_env.make(env_spec.env_id, credit="none" if replayed else credit, **env_spec.kwargs)
    plain = marti_env.make(env_spec.env_id, **env_spec.kwargs)
    team = team.copy()
    train_seed = seed + method.train_seed_shift
    rng = np.random.default_rng(_seed("train", env_spec.label, train_seed))
    noise = np.random.default_rng(_seed("random-credit", env_spec.label, train_seed))
    run_seed = int(rng.integers(2**31))
    curve, zero = [], []
    generations = episodes = 0
    tree = trains_on_siblings(credit)
    for _ in range(config.updates):
        batch: list[Played] = []
        siblings: list[SiblingTurn] = []
        episodes_now, spent = config.batch, 0
        for s in (int(x) for x in rng.integers(2**31, size=config.batch)):
            if len(batch) >= episodes_now:
                break  # the replays used this update's budget (equal_budget)
            played = play(env, team, s, run_seed)
            spent += len(played.record.turns)
            if replayed:
                keep: dict[tuple[int, str, int], list] = {}
                replays: list[ReplayOutcome] = []
                cost = credit_by_replay(
                    plain,
                    [played.record],
                    credit,  # type: ignore[arg-type]
                    sim_policy(team, run_seed, keep if tree else None),
                    replays=replays,
                )
                if tree:
                    siblings += sibling_turns(len(batch), replays, keep)
                spent += cost
                if config.equal_budget and not batch:  # fixed actors: every episode costs so
                    turns = len(played.record.turns)
                    episodes_now = budget_episodes(config.batch * turns, turns + cost)
            if method.control == "oracle":
                truth = true_contributions(plain, team, s, run_seed, played.record.outcome)
                for t in played.record.turns:
                    t.reward = truth[t.agent]
            elif method.control == "random":
                for t in played.record.turns:
                    t.reward = float(noise.standard_normal())
            batch.append(played)
        generations += spent
        episodes += len(batch)
        curve.append(float(np.mean([p.record.outcome for p in batch])))
        zero.append(_zero_spread_fraction(batch, siblings, by_node=tree))
        grad = policy_gradient(team, batch, config.normalize, siblings, by_node=tree)
        team.theta = np.clip(team.theta + config.lr * grad, -THETA_CLIP, THETA_CLIP)
    final = evaluate_team(env_spec, team, eval_seeds, run_seed=seed)
    return {
        "curve": curve,
        "acc_final": final["acc"],
        "acc_auc": float(np.mean(curve)),
        "zero_adv": float(np.mean(zero)),
        "abl_drop": final["abl_drop"],
        "verifier_ba": final["verifier_ba"],
        "train_seed": train_seed,
        "probs": team.probs().round(4).tolist(),
        "episodes": episodes,
        "generations": generations,
    }


@dataclass
class BenchResult:
    """Raw rows (one per env x method x seed), learning curves and the config.

    ``curves`` hold one team accuracy per update of ``episodes_per_update`` episodes;
    ``tier`` is ``"fast"`` (simulated agents) or ``"llm"`` (the real trainer), and
    ``config`` the tier's config (:class:`BenchConfig` or the trainer's base config: anything
    with a ``to_dict()`` of plain values). ``flags[(env, method)]`` is the degeneracy flag
    (``same_as_none`` on every seed's probe batch). ``budget``: what the LLM tier held
    equal across methods (``"generations"``, ``"episodes"`` or ``"tokens"``; recorded in
    ``results.json``); None for the fast tier, whose config says it (``equal_budget``).
    """

    config: Any
    envs: list[str]
    methods: list[str]
    seeds: list[int]
    rows: list[dict[str, Any]] = field(default_factory=list)
    curves: dict[tuple[str, str, int], list[float]] = field(default_factory=dict)
    tier: str = "fast"
    episodes_per_update: int = 1
    flags: dict[tuple[str, str], bool] = field(default_factory=dict)
    budget: str | None = None

    def summary(self) -> list[dict[str, Any]]:
        """Per (env, method): mean and sample std (ddof 1; 0 for one seed) of each metric,
        the degeneracy flag, and ``acc_final``'s paired difference against ``none``
        (``d_acc_*``: mean, CI ends, wins/ties/losses, verdict; absent without ``none``)."""
        from marti_env.stats import paired_difference

        out = []
        min_effect = getattr(self.config, "min_effect", 0.0)
        for env in self.envs:
            base = {r["seed"]: r["acc_final"] for r in self.rows
                    if r["env"] == env and r["method"] == "none"}  # fmt: skip
            for method in self.methods:
                rows = [r for r in self.rows if r["env"] == env and r["method"] == method]
                entry: dict[str, Any] = {"env": env, "method": method, "seeds": len(rows)}
                if (env, method) in self.flags:
                    entry["same_as_none"] = self.flags[(env, method)]
                for metric in (*METRICS, "acc_start", "verifier_ba"):
                    values = np.array([r.get(metric, np.nan) for r in rows], dtype=float)
                    values = values[~np.isnan(values)]
                    entry[f"{metric}_mean"] = float(values.mean()) if len(values) else float("nan")
                    entry[f"{metric}_std"] = float(values.std(ddof=1)) if len(values) > 1 else 0.0
                if any("tokens" in r for r in rows):  # the LLM tier: a mean over every seed
                    spent = np.array([r.get("tokens", np.nan) for r in rows], dtype=float)
                    entry["tokens_mean"] = float(spent.mean())  # NaN if a cell has no count
                    entry["tokens_std"] = float(spent.std(ddof=1)) if len(spent) > 1 else 0.0
                if self.budget == "tokens":  # equal tokens: how many episodes each cell got
                    done = np.array([r["episodes"] for r in rows], dtype=float)
                    entry["episodes_mean"] = float(done.mean())
                    entry["episodes_std"] = float(done.std(ddof=1)) if len(done) > 1 else 0.0
                mine = {r["seed"]: r["acc_final"] for r in rows}
                if method != "none" and base and set(mine) == set(base):
                    pd = paired_difference(
                        mine, base, min_effect=min_effect, labels=(method, "none")
                    )
                    entry.update({
                        "d_acc_mean": pd.difference.mean, "d_acc_low": pd.difference.low,
                        "d_acc_high": pd.difference.high, "d_acc_wins": pd.wins,
                        "d_acc_ties": pd.ties, "d_acc_losses": pd.losses,
                        "d_acc_verdict": pd.verdict,
                    })  # fmt: skip
                out.append(entry)
        return out

    def table(self) -> str:
        """The summary as a fixed-width text table: ``=none`` (the degeneracy flag), mean ±
        std over seeds of each metric, ``tokens`` where the rows have it (the LLM tier's
        response tokens per cell), ``episodes`` under the tokens budget (what each cell's
        tokens bought), and ``acc_final - none`` with its 95% CI and verdict."""
        metrics = [m for m in METRICS if any(not math.isnan(r.get(m, math.nan)) for r in self.rows)]
        tokens = any("tokens" in r for r in self.rows)
        episodes = self.budget == "tokens"
        header = ["env", "method", "=none", *metrics, *(["tokens"] if tokens else []),
                  *(["episodes"] if episodes else []),
                  "acc_final - none [95% CI]", "verdict"]  # fmt: skip
        lines = []
        for e in self.summary():
            flag = e.get("same_as_none")
            cells = [e["env"], e["method"], "n/a" if flag is None else ("YES" if flag else "no")]
            cells += [_cell(e[f"{m}_mean"], e[f"{m}_std"]) for m in metrics]
            if tokens:  # n/a where some seed's cell has no count (trained before it existed)
                mean, std = e.get("tokens_mean", math.nan), e.get("tokens_std", 0.0)
                cells.append("n/a" if math.isnan(mean) else f"{mean:.0f} ± {std:.0f}")
            if episodes:
                cells.append(f"{e['episodes_mean']:.0f} ± {e['episodes_std']:.0f}")
            if "d_acc_mean" in e:
                ci = "n/a" if math.isnan(e["d_acc_low"]) else (
                    f"{e['d_acc_low']:+.3f}, {e['d_acc_high']:+.3f}")  # fmt: skip
                cells += [f"{e['d_acc_mean']:+.3f} [{ci}]", _short(e["d_acc_verdict"])]
            else:
                cells += ["", ""]
            lines.append(cells)
        widths = [max(len(str(x)) for x in col) for col in zip(header, *lines, strict=True)]
        fmt = "  ".join(f"{{:<{w}}}" for w in widths)
        rule = "  ".join("-" * w for w in widths)
        legend = (
            "=none YES: gradient-identical to `none` under this normalization "
            "(marti_env.credit.degeneracy.gradient_identical_to_none: with std scaling, rewards "
            "an increasing affine function of `none`'s in every advantage group)"
        )
        body = [fmt.format(*header), rule, *(fmt.format(*c) for c in lines)]
        return "\n".join([*body, legend] if self.flags else body)

    def to_json(self) -> dict[str, Any]:
        return {
            "tier": self.tier,
            **({"budget": self.budget} if self.budget is not None else {}),
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


def _short(verdict: str) -> str:
    """A verdict in a few words (``negligible: ...`` -> ``negligible``)."""
    return verdict.split(":")[0].replace(" at 95%", "")


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
    if config.controls:
        method_specs += [
            c for c in control_specs() if c.label not in {m.label for m in method_specs}
        ]
    credit_specs = [m for m in method_specs if m.control is None and not m.train_seed_shift]
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
        plain = marti_env.make(env_spec.env_id, **env_spec.kwargs)
        flags: dict[str, bool] = {}
        for seed in result.seeds:
            start = time.perf_counter()
            attr = attribution(env_spec, credit_specs, seed, config)
            rng = np.random.default_rng(_seed("team", env_spec.label, seed))
            team = random_team(plain, rng, config)
            eval_seeds = [int(s) for s in rng.integers(2**31, size=config.eval_episodes)]
            probed = probe_batch(env_spec, credit_specs, team, seed, config)
            for label, (same, _) in probed.items():
                flags[label] = flags.get(label, True) and same
            acc_start = evaluate_team(env_spec, team, eval_seeds, run_seed=seed)["acc"]
            if log:
                spent = time.perf_counter() - start
                log(f"{env_spec.label} seed {seed}: attribution and probe done ({spent:.1f}s)")
            for m in method_specs:
                t0 = time.perf_counter()
                out = train(env_spec, m, team, seed + config.train_seed_offset, config, eval_seeds)
                result.curves[(env_spec.label, m.label, seed)] = out["curve"]
                nan = float("nan")
                result.rows.append({
                    "env": env_spec.label, "method": m.label, "seed": seed,
                    "team_seed": seed, "train_seed": out["train_seed"],
                    "attr": attr[m.label][0] if m.label in attr else nan,
                    "attr_within": attr[m.label][1] if m.label in attr else nan,
                    "fidelity": probed[m.label][1] if m.label in probed else nan,
                    "zero_adv": out["zero_adv"], "abl_drop": out["abl_drop"],
                    "acc_start": acc_start,
                    "acc_final": out["acc_final"], "acc_auc": out["acc_auc"],
                    "verifier_ba": out["verifier_ba"],
                    "episodes": out["episodes"], "generations": out["generations"],
                    "seconds": round(time.perf_counter() - t0, 3),
                })  # fmt: skip
                if log:
                    r = result.rows[-1]
                    log(
                        f"  {m.label:<24} fid {r['fidelity']:+.3f}  acc {acc_start:.3f} -> "
                        f"{r['acc_final']:.3f}  auc {r['acc_auc']:.3f}  ({r['seconds']:.1f}s)"
                    )
        for label, same in flags.items():
            result.flags[(env_spec.label, label)] = same
    return result
