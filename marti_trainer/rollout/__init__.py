"""Rollout: run batches of env episodes with LLM policies and collect training samples.

>>> from marti_trainer.rollout import rollout
>>> batch = rollout("mad-v0", tasks, n_samples=4, policies=policy, mode="async")  # doctest: +SKIP

See :mod:`marti_trainer.rollout.engine` for the model of concurrency and
:mod:`marti_trainer.rollout.drivers` for how requests reach each backend. Importing this
package does not import torch.
"""

from marti_trainer.rollout.drivers import (
    DRIVER_KINDS,
    GenerationRequest,
    generate_each,
    make_driver,
)
from marti_trainer.rollout.engine import PolicySpec, RolloutError, rollout
from marti_trainer.rollout.samples import (
    GROUP_BY,
    GroupKey,
    RolloutBatch,
    RolloutStats,
    Sample,
    group_key_of,
)
from marti_trainer.rollout.seeds import derive_seed, env_seed, request_seed

__all__ = [
    "DRIVER_KINDS",
    "GROUP_BY",
    "GenerationRequest",
    "GroupKey",
    "PolicySpec",
    "RolloutBatch",
    "RolloutError",
    "RolloutStats",
    "Sample",
    "derive_seed",
    "env_seed",
    "generate_each",
    "group_key_of",
    "make_driver",
    "request_seed",
    "rollout",
]
