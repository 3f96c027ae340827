"""Credit assignment: per-agent, per-turn rewards from an episode's outcome and scores.

Registered methods (``marti_env.make(env_id, credit=name, **options)``):

====================  ====================================================  ==================
name                  per-turn reward r_t                                   options
====================  ====================================================  ==================
none                  R (episode outcome)                                   --
score                 s_t (the turn's own verifier score)                   --
margin                s_t + alpha (s_t - Q_t)                               alpha scope window
quality               s_t + alpha (Q_t s_t - (1 - Q_t)(1 - s_t))            alpha scope window
margin_with_outcome   margin + beta R                                       + beta
quality_with_outcome  quality + beta R                                      + beta
leave_one_out         v(N) - v(N \\ {i}) under the final-answer rule        unread
shapley               Shapley value of agent i in the final-answer rule     unread max_agents
discounted            gamma^(K - k_t) R                                     gamma
random                i.i.d. N(0, 1), a control with no credit signal       seed
====================  ====================================================  ==================

Methods that re-execute episodes with the policies (:mod:`.replay`; not env credit methods:
:func:`~marti_env.credit.replay.credit_by_replay` applies them to finished episodes):

====================  ====================================================  ==================
leave_one_out_replay  R - R(agent i's turns removed, later turns re-run)    samples
shapley_replay        Shapley value of i, v(S) = R(only S speaks, re-run)   samples max_agents
sibling               R - mean R(turn t resampled, later turns re-run)      samples
====================  ====================================================  ==================

See :mod:`.shaping` (Q_t and its scopes), :mod:`.counterfactual` (the coalition game),
:mod:`.methods` and :mod:`.controls`; :mod:`.degeneracy` flags a method that trains
exactly like ``none`` under group-normalised advantages. The fast benchmark lives in
:mod:`marti_env.credit.bench` (imported on use).
"""

from __future__ import annotations

from marti_env.credit import controls as _controls  # noqa: F401  (registers)
from marti_env.credit import counterfactual as _counterfactual  # noqa: F401  (registers)
from marti_env.credit import methods as _methods  # noqa: F401  (registers built-ins)
from marti_env.credit import replay as _replay  # noqa: F401  (registers)
from marti_env.credit import shaping as _shaping  # noqa: F401  (registers)
from marti_env.credit.base import (
    CreditMethod,
    FinalAnswerRule,
    checked_rewards,
    credit_methods,
    credit_params,
    credit_source,
    load_credit_file,
    make_credit,
    register_credit,
)
from marti_env.credit.counterfactual import (
    LeaveOneOut,
    Shapley,
    difference_rewards,
    shapley_values,
)
from marti_env.credit.degeneracy import gradient_identical_to_none
from marti_env.credit.methods import Discounted, NoCredit, ScoreCredit, discounted_rewards
from marti_env.credit.shaping import (
    Margin,
    MarginWithOutcome,
    Quality,
    QualityWithOutcome,
    history_baselines,
    margin_delta,
    quality_delta,
    shaped_reward,
)

BUILTIN_METHODS: tuple[str, ...] = (
    "none",
    "score",
    "margin",
    "quality",
    "margin_with_outcome",
    "quality_with_outcome",
    "leave_one_out",
    "shapley",
    "discounted",
)
"""The built-in methods an env credits with, in the order benchmarks list them."""
REPLAY_METHODS: tuple[str, ...] = ("leave_one_out_replay", "shapley_replay", "sibling")
"""The built-in methods that re-execute episodes (:mod:`.replay`)."""

from marti_env.credit.replay import (  # noqa: E402  (after the tuples it documents)
    LeaveOneOutReplay,
    ReplayCreditMethod,
    ShapleyReplay,
    Sibling,
    credit_by_replay,
    is_replay_method,
)

__all__ = [
    "BUILTIN_METHODS",
    "REPLAY_METHODS",
    "CreditMethod",
    "Discounted",
    "FinalAnswerRule",
    "LeaveOneOut",
    "LeaveOneOutReplay",
    "Margin",
    "MarginWithOutcome",
    "NoCredit",
    "Quality",
    "QualityWithOutcome",
    "ReplayCreditMethod",
    "ScoreCredit",
    "Shapley",
    "ShapleyReplay",
    "Sibling",
    "checked_rewards",
    "credit_by_replay",
    "credit_methods",
    "credit_params",
    "credit_source",
    "difference_rewards",
    "discounted_rewards",
    "gradient_identical_to_none",
    "history_baselines",
    "is_replay_method",
    "load_credit_file",
    "make_credit",
    "margin_delta",
    "quality_delta",
    "register_credit",
    "shaped_reward",
    "shapley_values",
]
