"""Counterfactual credit over the env's final-answer rule: ``leave_one_out`` and ``shapley``.

Both ask the episode's :class:`~marti_env.credit.FinalAnswerRule` what the outcome would
have been had some agents given no answer. The *players* are the agents whose answers the
rule reads (``rule.inputs``: the last debate round's debaters, MoA's aggregator,
chain's refiner); an absent player's answer is ``None`` (a non-answer, which never votes).
The value of a coalition ``S`` is

    v(S) = score(choose({a: z_a if a in S else None}))

so ``v(all) = R`` (the outcome) and ``v({}) = score(None) = 0``.

The counterfactual stops at the rule: it does not replay the transcript, so an agent's
influence on what others answered in later rounds is not measured (that would need the
policies). Agents the rule does not read (MoA's proposers, chain's generator and
verifier, earlier-round-only agents) get the ``unread`` fallback: the team outcome
(``"outcome"``, default), their own verifier score (``"score"``) or 0 (``"zero"``).

Every turn of a player gets that player's value (an agent-level credit, like ``none``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from itertools import combinations
from typing import Literal

from marti_env.credit._checks import check_choice, check_int
from marti_env.credit.base import CreditMethod, FinalAnswerRule, register_credit
from marti_env.record import EpisodeRecord

Unread = Literal["outcome", "score", "zero"]
UNREAD: tuple[str, ...] = ("outcome", "score", "zero")
MAX_SHAPLEY_AGENTS = 8


def _without(answers: Mapping[str, str | None], absent: set[str]) -> dict[str, str | None]:
    return {a: (None if a in absent else z) for a, z in answers.items()}


def difference_rewards(rule: FinalAnswerRule) -> dict[str, float]:
    """Leave-one-out / difference rewards: D_i = v(N) - v(N \\ {i}) for each player i.

    D_i = score(choose(z)) - score(choose(z with z_i := None)) (Wolpert & Tumer's
    difference reward with the "absent" default action). In a 3-debater vote with answers
    a: right, b: right, c: wrong, removing a right answer leaves a 1-1 tie that the tie
    order decides: D = (1, 1, 0) if c comes first in the tie order, (0, 0, 0) if last.
    """
    full = rule.outcome()
    return {a: full - rule.outcome(_without(rule.inputs, {a})) for a in rule.inputs}


def shapley_values(
    rule: FinalAnswerRule, max_players: int = MAX_SHAPLEY_AGENTS
) -> dict[str, float]:
    """Exact Shapley values of the players of the rule's coalition game.

    phi_i = sum over S subset of N \\ {i} of |S|! (n - |S| - 1)! / n! * (v(S + i) - v(S)),
    with ``v`` as in the module docstring; ``sum_i phi_i = v(N) - v({}) = R``. Costs 2^n
    rule evaluations (each coalition once).

    Raises:
        ValueError: more than ``max_players`` players.
    """
    players = list(rule.inputs)
    n = len(players)
    if n > max_players:
        raise ValueError(
            f"exact Shapley values are limited to {max_players} agents; the rule reads "
            f"{n} ({', '.join(players)})"
        )
    value: dict[frozenset[str], float] = {}
    for s in coalitions(players):
        value[s] = rule.outcome(_without(rule.inputs, set(players) - s))
    return shapley_from_values(players, value)


def coalitions(players: Sequence[str]) -> list[frozenset[str]]:
    """Every subset of ``players``, smallest first (2^n of them)."""
    return [frozenset(c) for size in range(len(players) + 1) for c in combinations(players, size)]


def shapley_from_values(
    players: Sequence[str], value: Mapping[frozenset[str], float]
) -> dict[str, float]:
    """Shapley values of a coalition game given every coalition's value.

    phi_i = sum over S subset of N \\ {i} of |S|! (n - |S| - 1)! / n! * (v(S + i) - v(S))
    (Shapley 1953). With v({}) = 0 the values sum to v(N). Example by hand: two players
    with v({}) = 0, v({a}) = 1, v({b}) = 0, v({a, b}) = 1 give phi_a = 1, phi_b = 0.

    Raises:
        KeyError: a coalition's value is missing.
    """
    n = len(players)
    fact = [math.factorial(k) for k in range(n + 1)]
    phi = dict.fromkeys(players, 0.0)
    for s in coalitions(players):
        if len(s) == n:
            continue
        weight = fact[len(s)] * fact[n - len(s) - 1] / fact[n]
        for a in players:
            if a not in s:
                phi[a] += weight * (value[s | {a}] - value[s])
    return phi


def _per_turn(episode: EpisodeRecord, values: Mapping[str, float], unread: str) -> list[float]:
    out = []
    for t in episode.turns:
        if t.agent in values:
            out.append(values[t.agent])
        elif unread == "outcome":
            out.append(episode.outcome)
        elif unread == "score":
            out.append(t.score)
        else:
            out.append(0.0)
    return out


@register_credit("leave_one_out")
@dataclass
class LeaveOneOut(CreditMethod):
    """Difference rewards: r_t = D_i = v(N) - v(N \\ {i}) for every turn of player i.

    An agent is paid for being pivotal: its answer changed the outcome under the env's
    final-answer rule. Non-players get the ``unread`` fallback (see module docstring).

    Args:
        unread: ``"outcome"`` | ``"score"`` | ``"zero"``.
    """

    unread: Unread = "outcome"

    def __post_init__(self) -> None:
        self.unread = check_choice(self.name, "unread", self.unread, UNREAD)  # type: ignore[assignment]

    def assign(self, episode: EpisodeRecord, rule: FinalAnswerRule) -> Sequence[float]:
        return _per_turn(episode, difference_rewards(rule), self.unread)


@register_credit("shapley")
@dataclass
class Shapley(CreditMethod):
    """Exact Shapley values of the final-answer rule: r_t = phi_i for every turn of player i.

    phi_i = sum_{S subset N\\{i}} |S|!(n-|S|-1)!/n! (v(S+i) - v(S)); the players' values sum
    to the outcome R (efficiency), symmetric players get equal shares. Non-players get the
    ``unread`` fallback (see module docstring).

    Args:
        unread: ``"outcome"`` | ``"score"`` | ``"zero"``.
        max_agents: Most players allowed (2^n rule evaluations per episode), 1..16.
    """

    unread: Unread = "outcome"
    max_agents: int = MAX_SHAPLEY_AGENTS

    def __post_init__(self) -> None:
        self.unread = check_choice(self.name, "unread", self.unread, UNREAD)  # type: ignore[assignment]
        self.max_agents = check_int(self.name, "max_agents", self.max_agents, low=1, high=16)

    def assign(self, episode: EpisodeRecord, rule: FinalAnswerRule) -> Sequence[float]:
        try:
            phi = shapley_values(rule, self.max_agents)
        except ValueError as e:
            raise ValueError(f"credit method '{self.name}' ({episode.env_id}): {e}") from e
        return _per_turn(episode, phi, self.unread)
