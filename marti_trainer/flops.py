"""Arithmetic of a training update, for profiles: how many floating-point operations a
decoder-only transformer's forward and backward pass cost, and what the model's sizes are.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

__all__ = ["ModelSize", "model_size", "train_flops"]


@dataclass(frozen=True)
class ModelSize:
    """What the FLOP count needs of a causal LM.

    Attributes:
        body_params: Parameters applied to every token (all but the token embedding and a
            separate output head).
        hidden: Width of the last hidden state (``d``).
        vocab: Vocabulary size (``V``).
    """

    body_params: int
    hidden: int
    vocab: int


def model_size(model: torch.nn.Module) -> ModelSize:
    """:class:`ModelSize` of a Hugging Face causal LM (a PEFT model included; under ZeRO-3
    a partitioned parameter counts its full size, ``ds_numel``)."""
    config = model.config
    embed = model.get_input_embeddings().weight
    head = model.get_output_embeddings().weight
    seen = {id(embed), id(head)}
    body = sum(getattr(p, "ds_numel", p.numel()) for p in model.parameters() if id(p) not in seen)
    return ModelSize(int(body), int(config.hidden_size), int(config.vocab_size))


def train_flops(size: ModelSize, tokens: int, logit_tokens: int) -> float:
    """Floating-point operations of one forward and backward pass.

    ``6 * (P_body * tokens + d * V * logit_tokens)``: a matrix-vector product costs 2 FLOPs
    per weight (a multiply and an add), the backward pass twice the forward (gradients of
    the activations and of the weights), so 6 per weight per token (Kaplan et al. 2020,
    "Scaling Laws for Neural Language Models", arXiv 2001.08361, section 2.1). The body's
    weights act on every token the model computes (``tokens``, padding included); the
    ``d x V`` output projection only on the positions whose logits are kept
    (``logit_tokens``). Attention's ``O(context)`` term and the embedding lookup are left
    out (a few percent at a few hundred tokens of context).

    >>> train_flops(ModelSize(body_params=10, hidden=2, vocab=3), tokens=4, logit_tokens=1)
    276.0
    """
    return 6.0 * (size.body_params * tokens + size.hidden * size.vocab * logit_tokens)
