"""Counterfactual credit by re-execution: ``leave_one_out_replay``, ``shapley_replay``,
``sibling``.

The static methods (:mod:`marti_env.credit.counterfactual`) evaluate the final-answer rule
with an answer removed, so an agent the rule does not read (MoA's proposers, chain's
generator) has no counterfactual. These methods ask the policies instead: they re-run the
episode with an agent's turns removed or resampled and everything downstream regenerated
(:func:`marti_env.replay.replay`), so an agent is credited for what it changed in the
others' answers too.

They cost generations, which the env alone cannot make: a replay method is not an env
credit method (``marti_env.make(..., credit="leave_one_out_replay")`` is refused). Make the
env with ``credit="none"``, play the episodes, then::

    from marti_env.credit.replay import credit_by_replay
    spent = credit_by_replay(env, records, make_credit("leave_one_out_replay"), policy)

which overwrites each record's turn rewards and returns the generations the replays took
(compare methods at equal generation budgets). ``policy`` is a
:data:`marti_env.replay.ReplayPolicy`.

Per episode with n agents that took turns and T turns:

========================  ==========================================  ======================
method                    turn reward                                 replays per episode
========================  ==========================================  ======================
leave_one_out_replay      R - mean_m R(without agent i)_m             n x samples
shapley_replay            phi_i of v(S) = mean_m R(only S speaks)_m   (2^n - 1) x samples
sibling                   R - mean_k R(turn t resampled)_k            T x samples
sibling, train=True       R, and each sibling a sample with R_k       T x samples
========================  ==========================================  ======================

(``R`` the recorded outcome, or for ``leave_one_out_replay`` with ``reference="replayed"``
the mean of as many null replays, which doubles its replays; ``v(N) = R``; ``samples``
replays averaged.)
"""

from __future__ import annotations

import copy
from abc import abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from marti_env.credit._checks import check_int
from marti_env.credit.base import CreditMethod, FinalAnswerRule, make_credit, register_credit
from marti_env.credit.counterfactual import coalitions, shapley_from_values
from marti_env.record import EpisodeRecord
from marti_env.replay import Intervention, ReplayPolicy, replay

__all__ = [
    "LeaveOneOutReplay",
    "ReplayCreditMethod",
    "ReplayOutcome",
    "ShapleyReplay",
    "Sibling",
    "credit_by_replay",
    "is_replay_method",
    "resampled_turn",
    "trains_on_siblings",
]


class ReplayCreditMethod(CreditMethod):
    """A credit method that needs episodes re-executed by the policies.

    Subclasses say which replays an episode needs (:meth:`interventions`) and turn their
    outcomes into one reward per turn (:meth:`assign_replayed`).
    """

    @abstractmethod
    def interventions(self, episode: EpisodeRecord) -> list[Intervention]:
        """The replays ``episode`` needs, in the order :meth:`assign_replayed` reads them."""

    @abstractmethod
    def assign_replayed(
        self, episode: EpisodeRecord, replays: Sequence[EpisodeRecord]
    ) -> Sequence[float]:
        """Rewards for ``episode.turns`` given the replays of :meth:`interventions`."""

    @property
    def record_name(self) -> str:
        """What credited records say they were credited with (``EpisodeRecord.credit``)."""
        return self.name

    def assign(self, episode: EpisodeRecord, rule: FinalAnswerRule) -> Sequence[float]:
        raise ValueError(
            f"credit method '{self.name}' re-executes episodes with the policies, which the env "
            "cannot do alone: make the env with credit='none' and credit its episodes with "
            "marti_env.credit.replay.credit_by_replay(env, records, method, policy)"
        )


def is_replay_method(method: object) -> bool:
    """True for a credit object or class that needs re-execution."""
    cls = method if isinstance(method, type) else type(method)
    return issubclass(cls, ReplayCreditMethod)


def _agents(episode: EpisodeRecord) -> list[str]:
    return list(dict.fromkeys(t.agent for t in episode.turns))


def _samples(name: str, samples: int) -> int:
    return check_int(name, "samples", samples, low=1, high=64)


@register_credit("leave_one_out_replay")
@dataclass
class LeaveOneOutReplay(ReplayCreditMethod):
    """Difference rewards by re-execution: every turn of agent i earns
    ``D_i = R_ref - mean_m R'_{i,m}``, with ``R'_{i,m}`` the outcome of the episode re-run with
    all of agent i's turns removed (answering ``""``) and every later turn regenerated
    (Wolpert & Tumer's difference reward, the "absent" default action). By hand: a chain
    whose generator is removed and whose refiner then fails gives the generator
    ``1 - 0 = 1``; a static rule over the refiner's answer gives it nothing.

    ``R_ref`` is the recorded outcome (``reference="recorded"``, the default), or the mean
    outcome of ``samples`` *null* replays (``reference="replayed"``): agent i's first turn
    kept as recorded and everything after it regenerated, as in the removal replays. The
    recorded outcome carries the luck of the downstream agents' recorded draws, which the
    removal replays redraw; the null replays compare like with like (fixed-context
    replay, C3 arXiv 2603.06859) at twice the replays.

    Args:
        samples: Replays averaged per agent (1..64); the policies' randomness makes one
            replay a noisy estimate.
        reference: ``"recorded"`` or ``"replayed"``.
    """

    samples: int = 1
    reference: str = "recorded"

    def __post_init__(self) -> None:
        self.samples = _samples(self.name, self.samples)
        if self.reference not in ("recorded", "replayed"):
            raise ValueError(
                f"credit method '{self.name}': reference must be 'recorded' or 'replayed', "
                f"got {self.reference!r}"
            )

    def interventions(self, episode: EpisodeRecord) -> list[Intervention]:
        out = [
            Intervention.without(episode, [a])
            for a in _agents(episode)
            for _ in range(self.samples)
        ]
        if self.reference == "replayed":
            first = {a: next(t for t in episode.turns if t.agent == a) for a in _agents(episode)}
            out += [
                Intervention.on_turn(a, t.round, "replace", t.response)
                for a, t in first.items()
                for _ in range(self.samples)
            ]
        return out

    def assign_replayed(
        self, episode: EpisodeRecord, replays: Sequence[EpisodeRecord]
    ) -> Sequence[float]:
        agents = _agents(episode)
        outcomes = np.array([r.outcome for r in replays]).reshape(-1, self.samples)
        removed, null = outcomes[: len(agents)], outcomes[len(agents) :]
        reference = (
            {a: float(row.mean()) for a, row in zip(agents, null, strict=True)}
            if self.reference == "replayed"
            else dict.fromkeys(agents, episode.outcome)
        )
        value = {
            a: reference[a] - float(row.mean()) for a, row in zip(agents, removed, strict=True)
        }
        return [value[t.agent] for t in episode.turns]


@register_credit("shapley_replay")
@dataclass
class ShapleyReplay(ReplayCreditMethod):
    """Exact Shapley values by re-execution: every turn of agent i earns ``phi_i`` of the
    game ``v(S)`` = mean outcome of the episode re-run with the agents outside ``S``
    removed and every later turn regenerated; ``v(N) = R`` (recorded), so the values sum to
    ``R - v({})`` (Shapley 1953; :func:`~marti_env.credit.counterfactual.shapley_from_values`).

    Args:
        samples: Replays averaged per coalition (1..64).
        max_agents: Most agents allowed ((2^n - 1) x samples replays per episode), 1..8.
    """

    samples: int = 1
    max_agents: int = 6

    def __post_init__(self) -> None:
        self.samples = _samples(self.name, self.samples)
        self.max_agents = check_int(self.name, "max_agents", self.max_agents, low=1, high=8)

    def _coalitions(self, episode: EpisodeRecord) -> list[frozenset[str]]:
        agents = _agents(episode)
        if len(agents) > self.max_agents:
            raise ValueError(
                f"credit method '{self.name}' ({episode.env_id}): {len(agents)} agents took "
                f"turns, more than max_agents={self.max_agents} ({', '.join(agents)})"
            )
        return [s for s in coalitions(agents) if len(s) < len(agents)]

    def interventions(self, episode: EpisodeRecord) -> list[Intervention]:
        agents = _agents(episode)
        return [
            Intervention.without(episode, set(agents) - s)
            for s in self._coalitions(episode)
            for _ in range(self.samples)
        ]

    def assign_replayed(
        self, episode: EpisodeRecord, replays: Sequence[EpisodeRecord]
    ) -> Sequence[float]:
        agents = _agents(episode)
        outcomes = np.array([r.outcome for r in replays]).reshape(-1, self.samples)
        value = {
            s: float(row.mean()) for s, row in zip(self._coalitions(episode), outcomes, strict=True)
        }
        value[frozenset(agents)] = episode.outcome
        phi = shapley_from_values(agents, value)
        return [phi[t.agent] for t in episode.turns]


@register_credit("sibling")
@dataclass
class Sibling(ReplayCreditMethod):
    """A sampled counterfactual baseline per turn: turn t earns ``R - mean_k R_k``, with
    ``R_k`` the outcome when the turn is answered afresh by the policy from the same
    upstream context (a sibling) and everything downstream is regenerated. The recorded
    turn and its siblings form a group per (task, agent, round) and node of the episode
    tree (tree sampling, AT-GRPO arXiv 2510.11062; fixed-context replay, C3
    arXiv 2603.06859). By hand: a right answer whose two siblings give outcomes 1 and 0
    earns ``1 - 0.5 = 0.5``.

    With ``train=True`` the siblings are training samples too (AT-GRPO's tree sampling):
    the recorded turn keeps the outcome ``R`` as its reward, each sibling becomes a sample of
    its own with its replay's outcome ``R_k``, and the recorded turn and its siblings share
    one advantage group per node (``algorithm.group_by: node`` in ``marti train``), so the
    group baseline does the subtraction: leave-one-out (RLOO) gives the recorded turn
    exactly ``R - mean_k R_k``, the ``train=False`` reward; mean-centring (Dr. GRPO)
    ``K/(K+1)`` of it; GRPO also divides by the node's own standard deviation over its
    ``K + 1`` rewards. The replays cost the same; the update has ``K + 1`` samples per turn.

    Args:
        samples: Siblings per turn (1..64).
        train: Train on the siblings as well (see above).
    """

    samples: int = 2
    train: bool = False

    def __post_init__(self) -> None:
        self.samples = _samples(self.name, self.samples)
        if not isinstance(self.train, bool):
            raise ValueError(
                f"credit method '{self.name}': train must be true or false, got {self.train!r}"
            )

    def interventions(self, episode: EpisodeRecord) -> list[Intervention]:
        return [
            Intervention.on_turn(t.agent, t.round, "resample")
            for t in episode.turns
            for _ in range(self.samples)
        ]

    def assign_replayed(
        self, episode: EpisodeRecord, replays: Sequence[EpisodeRecord]
    ) -> Sequence[float]:
        outcomes = np.array([r.outcome for r in replays]).reshape(-1, self.samples)
        if self.train:  # the node group's baseline subtracts the siblings' mean
            return [episode.outcome] * len(outcomes)
        return [episode.outcome - float(row.mean()) for row in outcomes]

    @property
    def record_name(self) -> str:
        """``"sibling:train=true"`` when the records hold the outcome and the siblings are
        samples of their own, so a transcript is not read as sibling-baseline credit."""
        return f"{self.name}:train=true" if self.train else self.name


def trains_on_siblings(method: object) -> bool:
    """Whether ``method`` adds its siblings to the training samples (:class:`Sibling` with
    ``train=True``): they need ``algorithm.group_by: node``."""
    return isinstance(method, Sibling) and method.train


def resampled_turn(outcome: ReplayOutcome) -> tuple[str, int]:
    """The one ``(agent, round)`` turn a sibling replay resampled.

    Raises:
        ValueError: the replay changed several turns (a sibling is one turn's alternative).
    """
    turns = sorted(outcome.intervention.turns)
    if len(turns) != 1 or outcome.intervention.action != "resample":
        raise ValueError(
            f"a sibling replay resamples one turn; record {outcome.record} was replayed with "
            f"{outcome.intervention.action} of {turns}"
        )
    return turns[0]


@dataclass(frozen=True)
class ReplayOutcome:
    """One replay :func:`credit_by_replay` ran: which record it re-executed (index into
    its ``records``), the change it made, and the replayed episode."""

    record: int
    intervention: Intervention
    replay: EpisodeRecord


def credit_by_replay(
    env: object,
    records: Sequence[EpisodeRecord],
    method: ReplayCreditMethod,
    policy: ReplayPolicy,
    *,
    replays: list[ReplayOutcome] | None = None,
) -> int:
    """Credit finished episodes with a replay method: run every replay the method asks for
    (in ``env``, a ``marti_env.make`` env of the records' id, in lockstep), then overwrite
    each record's turn rewards, ``agent_rewards`` and ``credit``.

    ``replays``: if a list is given, every replay is appended to it as a
    :class:`ReplayOutcome`, in the order the policy's requests name them
    (``ReplayRequest.job`` indexes it), e.g. to train on ``sibling``'s resampled turns.

    Returns:
        The generations the replays asked of ``policy`` (their extra cost).

    Raises:
        TypeError: ``method`` does not re-execute (use the env's own credit).
        ValueError: a reward that is not a finite number (naming the method, agent and
            round), or a replay error (:func:`marti_env.replay.replay`).
    """
    if not is_replay_method(method):
        raise TypeError(
            f"credit method '{getattr(method, 'name', method)}' does not re-execute episodes; "
            "give it to the env (marti_env.make(..., credit=...)) instead"
        )
    plan = [method.interventions(r) for r in records]
    jobs = [(r, change) for r, changes in zip(records, plan, strict=True) for change in changes]
    quiet = copy.copy(getattr(env, "unwrapped", env))
    quiet.credit = make_credit("none")  # replays must not feed a stateful method's history
    result = replay(quiet, jobs, policy)
    if replays is not None:
        owner = [i for i, changes in enumerate(plan) for _ in changes]
        replays += [
            ReplayOutcome(i, change, rec)
            for i, (_, change), rec in zip(owner, jobs, result.records, strict=True)
        ]
    start = 0
    for record, changes in zip(records, plan, strict=True):
        mine = result.records[start : start + len(changes)]
        start += len(changes)
        rewards = [float(x) for x in method.assign_replayed(record, mine)]
        if len(rewards) != len(record.turns):
            raise ValueError(
                f"credit method '{method.name}' returned {len(rewards)} rewards for "
                f"{len(record.turns)} turns (env {record.env_id}, task {record.task.id})"
            )
        returns = dict.fromkeys(record.agent_rewards or _agents(record), 0.0)
        for turn, r in zip(record.turns, rewards, strict=True):
            if not np.isfinite(r):
                raise ValueError(
                    f"credit method '{method.name}' gave agent '{turn.agent}' (round "
                    f"{turn.round}) a non-finite reward {r!r} (task {record.task.id})"
                )
            turn.reward = r
            returns[turn.agent] = returns.get(turn.agent, 0.0) + r
        record.agent_rewards = returns
        record.credit = method.record_name
    return result.total_generations
