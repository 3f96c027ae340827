"""kv_cache: the cache name this transformers uses, round-tripped through a real forward."""

from __future__ import annotations

import inspect

import pytest

torch = pytest.importorskip("torch")


def test_cache_round_trips_through_the_model_under_this_transformers_name(tmp_path):
    from transformers import AutoModelForCausalLM

    from marti_trainer.kv_cache import cache_argument, cache_kwargs, cache_layers, output_cache
    from marti_trainer.models import tiny_random_model

    model = AutoModelForCausalLM.from_pretrained(tiny_random_model(tmp_path, seed=0)).eval()
    assert cache_argument() in inspect.signature(type(model).forward).parameters
    ids = torch.tensor([[5, 6, 7, 8]])
    with torch.no_grad():
        whole = model(input_ids=ids).logits[:, -1]
        head = model(input_ids=ids[:, :3], use_cache=True)
        cache = output_cache(head)
        layers = cache_layers(cache)
        assert len(layers) == model.config.num_hidden_layers
        assert layers[0].keys.shape[2] == 3  # [B, heads, T, head_dim]
        tail = model(input_ids=ids[:, 3:], use_cache=True, **cache_kwargs(cache))
    # The continuation attended to the cache: the same logits as one forward of all 4 tokens.
    torch.testing.assert_close(tail.logits[:, -1], whole, rtol=1e-4, atol=1e-5)
    assert cache_layers(output_cache(tail))[0].keys.shape[2] == 4


def test_cache_layers_rejects_what_is_not_a_layered_cache():
    from marti_trainer.kv_cache import cache_layers

    with pytest.raises(RuntimeError, match="DynamicCache"):
        cache_layers(None)
