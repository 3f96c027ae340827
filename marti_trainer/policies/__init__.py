"""Generation backends behind one interface: :class:`Policy` and :func:`make_policy`.

``hf`` (transformers; :class:`marti_trainer.policies.hf.HFPolicy`) is always available;
``vllm`` and ``openai`` live in their own modules, imported only when used.
Importing this package does not import torch.
"""

from marti_trainer.policies.base import (
    BACKENDS,
    Generation,
    Message,
    Policy,
    PolicyError,
    PromptTooLongError,
    SamplingParams,
    make_policy,
    tokenize_prompts,
    validate_prompts,
)

__all__ = [
    "BACKENDS",
    "Generation",
    "Message",
    "Policy",
    "PolicyError",
    "PromptTooLongError",
    "SamplingParams",
    "make_policy",
    "tokenize_prompts",
    "validate_prompts",
]
