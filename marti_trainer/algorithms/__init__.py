"""The RL math of the trainer as small pure functions on tensors.

* :mod:`~marti_trainer.algorithms.advantages`: GRPO, Dr. GRPO (and its per-agent-scaled
  variant ``agent_scale``), RLOO, REINFORCE++ and REINFORCE++-baseline advantages, and the
  ``compute_advantages`` registry.
* :mod:`~marti_trainer.algorithms.kl`: Schulman's k1/k2/k3 per-token KL estimators.
* :mod:`~marti_trainer.algorithms.losses`: the clipped policy loss (clip-higher), loss
  aggregation modes, KL as a loss term or as a reward penalty, entropy and log-probabilities
  from logits.
* :mod:`~marti_trainer.algorithms.overlong`: DAPO's soft overlong penalty, which the trainer
  adds to credited rewards.

Each function documents its shapes, its formula and the paper it follows.
"""

from marti_trainer.algorithms.advantages import (
    ADVANTAGE_ESTIMATORS,
    agent_scale_advantages,
    compute_advantages,
    dr_grpo_advantages,
    group_ids_from_keys,
    grpo_advantages,
    masked_whiten,
    reinforce_pp_advantages,
    reinforce_pp_baseline_advantages,
    reinforce_pp_returns,
    rloo_advantages,
)
from marti_trainer.algorithms.kl import KL_KINDS, KLKind, kl_estimate
from marti_trainer.algorithms.losses import (
    LOSS_AGGREGATIONS,
    LossAggregation,
    PolicyLossStats,
    aggregate_loss,
    entropy_from_logits,
    entropy_metric,
    kl_loss,
    kl_penalty_rewards,
    logprobs_from_logits,
    masked_mean,
    policy_loss,
)
from marti_trainer.algorithms.overlong import overlong_penalty

__all__ = [
    "ADVANTAGE_ESTIMATORS",
    "KL_KINDS",
    "LOSS_AGGREGATIONS",
    "KLKind",
    "LossAggregation",
    "PolicyLossStats",
    "agent_scale_advantages",
    "aggregate_loss",
    "compute_advantages",
    "dr_grpo_advantages",
    "entropy_from_logits",
    "entropy_metric",
    "group_ids_from_keys",
    "grpo_advantages",
    "kl_estimate",
    "kl_loss",
    "kl_penalty_rewards",
    "logprobs_from_logits",
    "masked_mean",
    "masked_whiten",
    "overlong_penalty",
    "policy_loss",
    "reinforce_pp_advantages",
    "reinforce_pp_baseline_advantages",
    "reinforce_pp_returns",
    "rloo_advantages",
]
