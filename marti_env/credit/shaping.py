"""MARTI's influence-aware reward shaping: ``margin``, ``quality`` and their ``*_with_outcome``.

The shaped reward of turn ``t`` (notation of :mod:`marti_env.credit.methods`)::

    R~_t = R_t + alpha * Delta(R_t, Q_t)        (+ beta * R_out for *_with_outcome)

    margin:   Delta(R, Q) = R - Q                  (paid for beating the baseline)
    quality:  Delta(R, Q) = Q * R - (1 - Q) * (1 - R)
              (a right answer is paid Q more when the history was good; a wrong one
               costs 1 - Q more when the history was bad)

where ``R_t = s_t`` is the turn's verifier score, ``R_out`` the episode outcome and
``Q_t`` a historical average reward. Worked examples (alpha = 0.5, Q = 0.25)::

    margin,  R = 1:  1 + 0.5 * (1 - 0.25)                 = 1.375
    quality, R = 0:  0 + 0.5 * (0.25 * 0 - 0.75 * 1)      = -0.375

The scope of ``Q_t`` is an option (``scope``):

* ``"team"`` (default; what MARTI's code does, ``np.mean(raw_rewards[:, :t])``): the mean
  score of *every* turn, by any agent, in rounds before ``k_t`` of this episode. In
  ``moa-v0`` the aggregator's Q is the proposers' mean score; in ``chain-v0`` the
  verifier's Q is the generator's score and the refiner's the mean of both.
* ``"agent"``: the mean score of the agent's own turns in earlier rounds of this episode
  (MARTI's code for workflows given ``turn_ids``).
* ``"agent_window"`` (the paper's wording): the agent's running average over its last
  ``window`` episodes: the mean, over those episodes, of the agent's mean turn score in
  each. Earlier turns of the current episode do not enter; the history is updated after
  the episode is credited and is carried across episodes (``state_dict``).

First-turn convention: where ``Q_t`` has no history (round 0 under ``"team"``, an
agent's first turn under ``"agent"``, an agent's first episode under ``"agent_window"``)
the turn is not shaped: ``R~_t = R_t``. This is MARTI's ``start = 1``; a 0.5 prior would
shift every first turn by a constant that depends on the method, not the agent.

``*_with_outcome`` adds ``beta * R_out`` to every turn, shaped or not. MARTI's code adds
each agent's own last-turn reward instead (``raw_rewards[m][-1]``); the team outcome is
used here, as the issue asks, so that agents who give no final answer (MoA proposers)
also share in it.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal

from marti_env.credit._checks import check_choice, check_int, check_real
from marti_env.credit.base import CreditMethod, FinalAnswerRule, register_credit
from marti_env.record import EpisodeRecord, Turn

Scope = Literal["team", "agent", "agent_window"]
SCOPES: tuple[str, ...] = ("team", "agent", "agent_window")


def margin_delta(r: float, q: float) -> float:
    """Delta = R - Q.  ``margin_delta(1, 0.25) == 0.75``."""
    return r - q


def quality_delta(r: float, q: float) -> float:
    """Delta = Q * R - (1 - Q) * (1 - R).  ``quality_delta(0, 0.25) == -0.75``."""
    return q * r - (1.0 - q) * (1.0 - r)


def shaped_reward(r: float, q: float | None, alpha: float, delta: str) -> float:
    """R~ = R + alpha * Delta(R, Q); ``R`` unchanged when ``q`` is None (no history).

    ``delta`` is ``"margin"`` or ``"quality"``.

    >>> shaped_reward(1.0, 0.25, 0.5, "margin")
    1.375
    >>> shaped_reward(0.0, 0.25, 0.5, "quality")
    -0.375
    """
    if q is None:
        return r
    return r + alpha * _DELTAS[delta](r, q)


_DELTAS = {"margin": margin_delta, "quality": quality_delta}


def history_baselines(
    turns: Sequence[Turn], scope: str, window_means: Mapping[str, float] | None = None
) -> list[float | None]:
    """Q_t for every turn under ``scope`` (None where there is no history).

    ``window_means`` (agent -> running average from earlier episodes) is read for
    ``scope="agent_window"`` only; agents missing from it have no history.
    """
    if scope == "agent_window":
        means = window_means or {}
        return [means.get(t.agent) for t in turns]
    out: list[float | None] = []
    for t in turns:
        if scope == "team":
            earlier = [u.score for u in turns if u.round < t.round]
        else:
            earlier = [u.score for u in turns if u.round < t.round and u.agent == t.agent]
        out.append(sum(earlier) / len(earlier) if earlier else None)
    return out


@dataclass
class _Shaping(CreditMethod):
    """Shared machinery of the four shaping methods; ``delta`` picks the formula."""

    delta: ClassVar[str]
    with_outcome: ClassVar[bool] = False

    alpha: float = 0.5
    scope: Scope = "team"
    window: int = 16
    _history: dict[str, deque[float]] = field(default_factory=dict, init=False, repr=False)

    def __post_init__(self) -> None:
        self.alpha = check_real(self.name, "alpha", self.alpha, low=0.0)
        self.scope = check_choice(self.name, "scope", self.scope, SCOPES)  # type: ignore[assignment]
        self.window = check_int(self.name, "window", self.window, low=1, high=1_000_000)

    def _outcome_bonus(self, episode: EpisodeRecord) -> float:
        return 0.0

    def assign(self, episode: EpisodeRecord, rule: FinalAnswerRule) -> Sequence[float]:
        means = {a: sum(h) / len(h) for a, h in self._history.items() if h}
        qs = history_baselines(episode.turns, self.scope, means)
        bonus = self._outcome_bonus(episode)
        rewards = [
            shaped_reward(t.score, q, self.alpha, self.delta) + bonus
            for t, q in zip(episode.turns, qs, strict=True)
        ]
        if self.scope == "agent_window":
            for agent in dict.fromkeys(t.agent for t in episode.turns):
                scores = [t.score for t in episode.turns if t.agent == agent]
                hist = self._history.setdefault(agent, deque(maxlen=self.window))
                hist.append(sum(scores) / len(scores))
        return rewards

    def state_dict(self) -> dict[str, Any]:
        """``{"history": {agent: [episode mean score, ...]}}`` (oldest first) for
        ``scope="agent_window"``; empty otherwise."""
        if self.scope != "agent_window":
            return {}
        return {"history": {a: list(h) for a, h in self._history.items()}}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        if self.scope != "agent_window":
            super().load_state_dict(state)
            return
        unknown = set(state) - {"history"}
        if unknown:
            raise ValueError(f"credit method '{self.name}': unknown state keys {sorted(unknown)}")
        history = state.get("history", {})
        if not isinstance(history, Mapping):
            raise ValueError(f"credit method '{self.name}': state['history'] must be a mapping")
        loaded: dict[str, deque[float]] = {}
        for agent, values in history.items():
            values = [check_real(self.name, f"history[{agent!r}]", v) for v in values]
            loaded[str(agent)] = deque(values, maxlen=self.window)
        self._history = loaded


@dataclass
class _ShapingWithOutcome(_Shaping):
    with_outcome: ClassVar[bool] = True
    beta: float = 0.5

    def __post_init__(self) -> None:
        super().__post_init__()
        self.beta = check_real(self.name, "beta", self.beta, low=0.0)

    def _outcome_bonus(self, episode: EpisodeRecord) -> float:
        return self.beta * episode.outcome


@register_credit("margin")
@dataclass
class Margin(_Shaping):
    """MARTI margin shaping: R~_t = s_t + alpha * (s_t - Q_t) (see :mod:`.shaping`).

    Args:
        alpha: Shaping weight, >= 0 (MARTI: 0.5).
        scope: Where Q_t comes from: ``"team"`` | ``"agent"`` | ``"agent_window"``.
        window: H, the number of past episodes averaged under ``"agent_window"``.
    """

    delta: ClassVar[str] = "margin"


@register_credit("quality")
@dataclass
class Quality(_Shaping):
    """MARTI quality shaping: R~_t = s_t + alpha * (Q_t s_t - (1 - Q_t)(1 - s_t)).

    Args: as :class:`Margin`.
    """

    delta: ClassVar[str] = "quality"


@register_credit("margin_with_outcome")
@dataclass
class MarginWithOutcome(_ShapingWithOutcome):
    """``margin`` plus the team outcome: R~_t = s_t + alpha * (s_t - Q_t) + beta * R.

    Args: as :class:`Margin`, and ``beta`` (outcome weight, >= 0; MARTI: 0.5).
    """

    delta: ClassVar[str] = "margin"


@register_credit("quality_with_outcome")
@dataclass
class QualityWithOutcome(_ShapingWithOutcome):
    """``quality`` plus the team outcome:
    R~_t = s_t + alpha * (Q_t s_t - (1 - Q_t)(1 - s_t)) + beta * R.

    Args: as :class:`MarginWithOutcome`.
    """

    delta: ClassVar[str] = "quality"
