"""The learner: from rollout samples to an update of a trained unit.

One job per module: :mod:`~marti_trainer.learner.batch` collates samples into a padded
:class:`TrainBatch`; :mod:`~marti_trainer.learner.logprobs` computes the responses'
log-probs (the shared-prompt trick included); :mod:`~marti_trainer.learner.loss` assembles
advantages and the loss; :mod:`~marti_trainer.learner.update` runs one unit's update.
"""

from marti_trainer.learner.batch import TrainBatch, collate
from marti_trainer.learner.logprobs import forward_logprobs, score_batch, score_with
from marti_trainer.learner.loss import (
    LossFn,
    make_loss_fn,
    penalised_rewards,
    sample_advantages,
    set_norm,
)
from marti_trainer.learner.update import reference_kl, update_unit

__all__ = [
    "LossFn",
    "TrainBatch",
    "collate",
    "forward_logprobs",
    "make_loss_fn",
    "penalised_rewards",
    "reference_kl",
    "sample_advantages",
    "score_batch",
    "score_with",
    "set_norm",
    "update_unit",
]
