"""The update's FLOP count: the formula by hand, and the tokens a batch computes."""

from __future__ import annotations

from types import SimpleNamespace

from marti_trainer.flops import ModelSize, model_size, train_flops
from marti_trainer.learner import collate


def test_train_flops_by_hand():
    # 6 x (body 100 weights x 7 tokens + d 4 x V 10 x 3 logit positions) = 6 x 820
    assert train_flops(ModelSize(body_params=100, hidden=4, vocab=10), 7, 3) == 4920.0
    assert train_flops(ModelSize(1, 1, 1), 0, 0) == 0.0


def _sample(prompt, response):
    return SimpleNamespace(
        prompt_token_ids=prompt, response_token_ids=response, logprobs=[0.0] * len(response)
    )


def test_computed_tokens_count_padding_and_shared_prompts():
    # three rows: prompts [1 2 3], [1 2 3], [4 5] (P = 3), responses of 2, 1, 3 tokens (R = 3)
    batch = collate([_sample([1, 2, 3], [7, 8]), _sample([1, 2, 3], [9]),
                     _sample([4, 5], [7, 8, 9])], pad_id=0)  # fmt: skip
    assert batch.computed_tokens() == (3 * (3 + 3), 3 * (3 + 1))  # plain: B(P+R), B(R+1)
    batch.share_prompts = True  # 2 distinct prompts: U*P + B*R and U + B*R
    assert batch.computed_tokens() == (2 * 3 + 3 * 3, 2 + 3 * 3)


def test_model_size_leaves_out_the_embedding_and_head():
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        vocab_size=50, hidden_size=8, intermediate_size=16, num_hidden_layers=1,
        num_attention_heads=2, num_key_value_heads=1, tie_word_embeddings=True,
    )  # fmt: skip
    model = LlamaForCausalLM(config)
    size = model_size(model)
    total = sum(p.numel() for p in model.parameters())  # tied: the head is the embedding
    assert size == ModelSize(total - 50 * 8, 8, 50)
    untied = LlamaForCausalLM(LlamaConfig(**{**config.to_dict(), "tie_word_embeddings": False}))
    assert model_size(untied).body_params == sum(p.numel() for p in untied.parameters()) - 2 * 400
