"""The grouped-query attention kernel gives transformers' own attention's results (logits,
gradients, cached decoding) up to float rounding, with padded rows."""

from __future__ import annotations

import pytest
import torch

from marti_trainer.attention import GQA, resolve_attention
from marti_trainer.models import tiny_random_model


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory):
    # 4 query heads over 2 key/value heads: every key/value head serves a group of 2
    return tiny_random_model(
        tmp_path_factory.mktemp("gqa") / "model", seed=0, hidden_size=256, num_heads=4,
        num_kv_heads=2,
    )  # fmt: skip


def load(tiny_dir, attn):
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(
        tiny_dir, dtype=torch.float32, attn_implementation=resolve_attention(attn, "cpu")
    )


def padded_batch():
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(3, 500, (3, 12), generator=g)
    mask = torch.ones_like(ids)
    mask[0, :5] = 0  # left padding, as the rollout and the learner pad prompts
    mask[2, :2] = 0
    return ids, mask, (mask.cumsum(-1) - 1).clamp(min=0)


def test_resolve_attention():
    assert resolve_attention("auto", "cpu") == GQA
    assert resolve_attention("auto", "cuda:0") == "sdpa"
    assert resolve_attention("eager", "cpu") == "eager"
    with pytest.raises(ValueError, match="attn_implementation must be one of"):
        resolve_attention("flash", "cpu")


@pytest.mark.parametrize("reference", ["sdpa", "eager"])
def test_logits_and_gradients_match_transformers_attention(tiny_dir, reference):
    ids, mask, positions = padded_batch()
    results = {}
    for attn in (reference, GQA):
        model = load(tiny_dir, attn).train()
        logits = model(input_ids=ids, attention_mask=mask, position_ids=positions).logits
        (logits * mask[..., None]).square().mean().backward()
        grad = torch.cat([p.grad.flatten() for p in model.parameters()])
        results[attn] = (logits.detach() * mask[..., None], grad)
    (want, want_grad), (got, got_grad) = results[reference], results[GQA]
    torch.testing.assert_close(got, want, rtol=0, atol=2e-4)  # logits of size ~10: rounding
    assert want_grad.norm() > 0
    assert (got_grad - want_grad).norm() / want_grad.norm() < 1e-5


def test_cached_greedy_decoding_matches(tiny_dir):
    from marti_trainer.policies import SamplingParams
    from marti_trainer.policies.hf import HFPolicy

    prompts = [[{"role": "user", "content": text}] for text in ("2 + 2?", "What is 7 * 6?")]
    params = SamplingParams(temperature=0.0, max_tokens=12)
    outputs = {}
    for attn in ("sdpa", GQA):
        with HFPolicy(tiny_dir, dtype="float32", attn_implementation=attn) as policy:
            assert policy.model.config._attn_implementation == attn
            outputs[attn] = [g[0] for g in policy.generate(prompts, params)]
    for want, got in zip(outputs["sdpa"], outputs[GQA], strict=True):
        assert got.token_ids == want.token_ids
        assert got.logprobs == pytest.approx(want.logprobs, abs=1e-4)
