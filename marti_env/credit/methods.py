"""Outcome-based credit: ``none``, ``score`` and ``discounted``; each a short pure rule.

Notation used in every credit docstring: turn ``t`` of agent ``i`` took place in round
``k_t``; ``s_t`` is its verifier score (``Turn.score``), ``R`` the episode outcome
(``EpisodeRecord.outcome``, the verifier score of the team's final answer) and ``K`` the
last round of the episode.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from marti_env.credit._checks import check_real
from marti_env.credit.base import CreditMethod, FinalAnswerRule, register_credit
from marti_env.record import EpisodeRecord


@register_credit("none")
@dataclass
class NoCredit(CreditMethod):
    """No credit assignment: every turn of every agent gets the episode outcome.

    r_t = R, where R is the outcome (verifier score of the team's final answer).
    """

    def assign(self, episode: EpisodeRecord, rule: FinalAnswerRule) -> Sequence[float]:
        return [episode.outcome] * len(episode.turns)


@register_credit("score")
@dataclass
class ScoreCredit(CreditMethod):
    """Each turn gets its own verifier score: r_t = s_t.

    The fully local signal: an agent is paid for its own answer whatever the team did.
    Roles that box no answer (``chain-v0``'s verifier) score 0 and so earn nothing.
    """

    def assign(self, episode: EpisodeRecord, rule: FinalAnswerRule) -> Sequence[float]:
        return [t.score for t in episode.turns]


def discounted_rewards(rounds: Sequence[int], outcome: float, gamma: float) -> list[float]:
    """r_t = gamma ** (K - k_t) * R, with K = max(rounds) (the last round).

    >>> discounted_rewards([0, 0, 1], 1.0, 0.5)
    [0.5, 0.5, 1.0]
    """
    last = max(rounds, default=0)
    return [gamma ** (last - k) * outcome for k in rounds]


@register_credit("discounted")
@dataclass
class Discounted(CreditMethod):
    """Turn discounting: the outcome, discounted by how many rounds before the end a turn was.

    r_t = gamma^(K - k_t) * R. Turns of the last round get R; a turn ``d`` rounds earlier gets
    ``gamma^d * R`` (all turns of one round are discounted alike, so debaters acting in
    parallel are treated the same). ``gamma = 1`` is ``none``.

    Args:
        gamma: Discount per round, in (0, 1].
    """

    gamma: float = 0.9

    def __post_init__(self) -> None:
        self.gamma = check_real(self.name, "gamma", self.gamma, low=0.0, high=1.0, low_open=True)

    def assign(self, episode: EpisodeRecord, rule: FinalAnswerRule) -> Sequence[float]:
        return discounted_rewards([t.round for t in episode.turns], episode.outcome, self.gamma)
