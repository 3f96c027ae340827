"""Rewards for math workflows: answer extraction, verification, voting, judges.

>>> from marti_env.rewards import MathVerifier, extract_boxed
>>> extract_boxed(r"... so the answer is \\boxed{\\frac{1}{2}}.")
'\\\\frac{1}{2}'
>>> MathVerifier().score(r"\\boxed{0.5}", "\\\\frac{1}{2}")
1.0

Nothing here imports math-verify or sympy in the calling process: the slow verification
path runs in a helper subprocess (see :mod:`marti_env.rewards.math_verifier`).
"""

from __future__ import annotations

from marti_env.rewards.base import (
    FormatReward,
    MathReward,
    Reward,
    WeightedReward,
    make_reward,
    register_reward,
    reward_names,
    reward_params,
    verifiers_of,
)
from marti_env.rewards.boxed import extract_boxed
from marti_env.rewards.canonical import canonical_answer
from marti_env.rewards.code import AnswerRule, CodeReward, code_reward
from marti_env.rewards.expr import ExprReward, expr_reward
from marti_env.rewards.format import format_score
from marti_env.rewards.genrm import JudgeReward
from marti_env.rewards.math_verifier import (
    CacheInfo,
    MathVerifier,
    default_verifier,
    shared_verifier,
)
from marti_env.rewards.screen import screen_answer
from marti_env.rewards.ttrl import majority_answer, ttrl_scores

register_reward("code", code_reward)
register_reward("expr", expr_reward)

__all__ = [
    "AnswerRule",
    "CacheInfo",
    "CodeReward",
    "ExprReward",
    "FormatReward",
    "JudgeReward",
    "MathReward",
    "MathVerifier",
    "Reward",
    "WeightedReward",
    "canonical_answer",
    "default_verifier",
    "extract_boxed",
    "format_score",
    "majority_answer",
    "make_reward",
    "register_reward",
    "reward_names",
    "reward_params",
    "screen_answer",
    "shared_verifier",
    "ttrl_scores",
    "verifiers_of",
]
