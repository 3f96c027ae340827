"""The policy interface and the HF backend.

Fast tests run a tiny random-weight Llama (2 layers, 6.6 M parameters, the default model's
tokenizer) in fp32, where left padding is exact, so batched and unbatched outputs can be
compared token for token. Slow tests load the real default model once per session.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import math
import time

import pytest
import torch

from marti_trainer.models import tiny_random_model
from marti_trainer.policies import (
    Generation,
    Policy,
    PolicyError,
    PromptTooLongError,
    SamplingParams,
    make_policy,
)
from marti_trainer.policies.base import tokenize_prompts
from marti_trainer.policies.hf import HFPolicy

SHORT = [{"role": "user", "content": "hi"}]
MEDIUM = [{"role": "user", "content": "What is 2 + 3?"}]
LONG = [
    {"role": "system", "content": "You are terse."},
    {
        "role": "user",
        "content": "Tom has 3 apples and buys 5 more. Then he gives 2 to Ann and eats one. "
        "How many apples does he have now, and how many did Ann get?",
    },
]
PROMPTS = [SHORT, LONG, MEDIUM]


def token_ids(gens: list[list[Generation]]) -> list[list[list[int]]]:
    return [[g.token_ids for g in per_prompt] for per_prompt in gens]


@pytest.fixture(scope="module", autouse=True)
def one_torch_thread():
    """One intra-op thread: these tiny models gain nothing from more, and on a shared CPU
    oversubscribed threads spin (measured ~10x slower decoding under load)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="session")
def tiny_dir(tmp_path_factory):
    return tiny_random_model(tmp_path_factory.mktemp("tiny-policy") / "m0", seed=0)


@pytest.fixture(scope="session")
def tiny_dir_other(tmp_path_factory):
    return tiny_random_model(tmp_path_factory.mktemp("tiny-policy") / "m1", seed=1)


@pytest.fixture(scope="module")
def policy(tiny_dir):
    with HFPolicy(tiny_dir, dtype="float32", seed=0) as pol:
        yield pol


# --- SamplingParams / Generation / factory ---------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"n": 0}, "n"),
        ({"n": 1.5}, "n"),
        ({"temperature": -0.1}, "temperature"),
        ({"temperature": float("nan")}, "temperature"),
        ({"top_p": 0.0}, "top_p"),
        ({"top_p": 1.5}, "top_p"),
        ({"max_tokens": 0}, "max_tokens"),
        ({"seed": 1.0}, "seed"),
        ({"stop": "###"}, "stop"),
        ({"stop": ("",)}, "stop"),
        ({"truncate_prompt": 1}, "truncate_prompt"),
    ],
)
def test_sampling_params_validation_names_the_field(kwargs, field):
    with pytest.raises(ValueError, match=rf"SamplingParams\.{field}\b"):
        SamplingParams(**kwargs)


def test_sampling_params_defaults_and_stop_tuple():
    params = SamplingParams(stop=["a", "b"])
    assert params.stop == ("a", "b")
    assert (params.n, params.temperature, params.top_p, params.max_tokens) == (1, 1.0, 1.0, 256)
    assert SamplingParams(temperature=0).greedy
    assert dataclasses.replace(params, n=3).n == 3


def test_generation_truncated():
    gen = Generation("x", [1], [-0.1], [5], "length")
    assert gen.truncated and gen.num_tokens == 1
    assert not dataclasses.replace(gen, finish_reason="stop").truncated


def test_make_policy_backends(tiny_dir):
    with pytest.raises(ValueError, match="unknown policy backend"):
        make_policy("tgi", "x")  # type: ignore[arg-type]
    for backend in ("vllm", "openai"):
        if importlib.util.find_spec(f"marti_trainer.policies.{backend}") is None:
            with pytest.raises(NotImplementedError, match=backend):
                make_policy(backend, "x")  # type: ignore[arg-type]
    pol = make_policy("hf", str(tiny_dir), dtype="float32", batch_size=4)
    assert isinstance(pol, Policy)
    assert pol.max_context_tokens == 2048
    pol.close()


# --- generate: shapes, padding, sampling -----------------------------------------------------


def test_shapes_and_prompt_tokens(policy):
    out = policy.generate(PROMPTS, SamplingParams(n=2, max_tokens=5, seed=0))
    assert len(out) == 3
    tokenizer = policy.tokenizer
    for prompt, gens in zip(PROMPTS, out, strict=True):
        assert len(gens) == 2
        text = tokenizer.apply_chat_template(prompt, tokenize=False, add_generation_prompt=True)
        expected = tokenizer(text, add_special_tokens=False)["input_ids"]
        for gen in gens:
            assert gen.prompt_token_ids == expected
            assert len(gen.token_ids) == len(gen.logprobs) <= 5
            assert gen.text == tokenizer.decode(gen.token_ids, skip_special_tokens=True)


def test_max_tokens_gives_length(policy):
    out = policy.generate(PROMPTS, SamplingParams(n=2, max_tokens=7, seed=3))
    for gen in (g for gens in out for g in gens):
        # The random model can in principle emit eos; then the reason is "stop".
        if gen.finish_reason == "length":
            assert len(gen.token_ids) == 7 and gen.truncated
        else:
            assert gen.token_ids[-1] == policy.tokenizer.eos_token_id
    assert any(g.truncated for gens in out for g in gens)


def test_empty_prompt_list(policy):
    assert policy.generate([], SamplingParams()) == []


def test_left_padding_matches_unbatched_greedy(tiny_dir):
    greedy = SamplingParams(temperature=0, max_tokens=12)
    with HFPolicy(tiny_dir, dtype="float32", batch_size=8) as pol:
        out = pol.generate(PROMPTS, greedy)
        batched = token_ids(out)
        alone = [token_ids(pol.generate([p], greedy))[0] for p in PROMPTS]
    assert batched == alone
    # The prompts differ in length (so padding happened) and so do the outputs.
    assert len({len(gens[0].prompt_token_ids) for gens in out}) == 3
    assert len({tuple(x[0]) for x in batched}) == 3
    # Chunked into batches of 2 rows: the same again.
    with HFPolicy(tiny_dir, dtype="float32", batch_size=2) as pol:
        assert token_ids(pol.generate(PROMPTS, greedy)) == batched


def test_prompts_with_a_shared_prefix_prefill_it_once_and_decode_as_alone(tiny_dir):
    """A debate's round-1 prompts: the same long question, then different answers. The
    prefill runs the common prefix once (three levels); logits and greedy tokens are those
    of each prompt prefilled alone."""
    from marti_trainer.policies.hf_decode import prefill as _prefill
    from marti_trainer.prompt_tree import prompt_tree

    question = "A farmer has 17 sheep and buys 25 more, then sells 9. How many now? " * 2
    tails = ("Answer A says 33.", "Answer B says 31, check it.", "C: 42")
    prompts = [[{"role": "user", "content": question + tail}] for tail in tails]
    greedy = SamplingParams(temperature=0, max_tokens=10)
    with HFPolicy(tiny_dir, dtype="float32", batch_size=8) as pol:
        ids = [tokenize_prompts(pol.tokenizer, [p], greedy, 2048)[0] for p in prompts]
        tree = prompt_tree([tuple(x) for x in ids])
        assert tree.has_prefixes and max(tree.prefix_len) > 30  # the question is shared
        with torch.inference_mode():
            _, _, _, together = _prefill(pol.model, ids, pol._pad_id)
            alone = [_prefill(pol.model, [x], pol._pad_id)[3][0] for x in ids]
        torch.testing.assert_close(together, torch.stack(alone), rtol=0, atol=1e-4)
        batched = token_ids(pol.generate(prompts, greedy))
        singly = [token_ids(pol.generate([p], greedy))[0] for p in prompts]
    assert batched == singly


def test_n_samples_differ_and_greedy_n_are_equal(policy):
    sampled = policy.generate([MEDIUM], SamplingParams(n=4, max_tokens=8, seed=0))[0]
    assert len({tuple(g.token_ids) for g in sampled}) == 4
    greedy = policy.generate([MEDIUM], SamplingParams(n=3, temperature=0, max_tokens=8))[0]
    assert len({tuple(g.token_ids) for g in greedy}) == 1


def test_seed_reproduces_regardless_of_batch(tiny_dir, policy):
    params = SamplingParams(n=2, temperature=0.8, top_p=0.9, max_tokens=10, seed=1234)
    first = token_ids(policy.generate(PROMPTS, params))
    assert token_ids(policy.generate(PROMPTS, params)) == first
    # Same request alone, in another order, and in batches of one row: same samples.
    assert token_ids(policy.generate([MEDIUM], params))[0] == first[2]
    assert token_ids(policy.generate(PROMPTS[::-1], params)) == first[::-1]
    with HFPolicy(tiny_dir, dtype="float32", batch_size=1) as pol:
        assert token_ids(pol.generate(PROMPTS, params)) == first
    # Another seed, other samples.
    other = token_ids(policy.generate(PROMPTS, dataclasses.replace(params, seed=99)))
    assert other != first


def test_policy_seed_reproduces_unseeded_calls(tiny_dir):
    params = SamplingParams(n=2, max_tokens=6)
    runs = []
    for _ in range(2):
        with HFPolicy(tiny_dir, dtype="float32", seed=7) as pol:
            runs.append([token_ids(pol.generate(PROMPTS, params)) for _ in range(2)])
    assert runs[0] == runs[1]
    assert runs[0][0] != runs[0][1]  # successive calls draw fresh randomness


def test_stop_string_cuts_text(policy):
    params = SamplingParams(temperature=0, max_tokens=16)
    full = policy.generate([MEDIUM], params)[0][0]
    # A stop string taken from the middle of the greedy completion.
    k = len(full.text) // 2
    stop = full.text[k : k + 2]
    cut = full.text.find(stop)
    assert stop and cut >= 0
    gen = policy.generate([MEDIUM], dataclasses.replace(params, stop=("@@never@@", stop)))[0][0]
    assert gen.finish_reason == "stop"
    assert gen.text == full.text[:cut]
    # Generation ended at the token completing the stop string: a prefix of the full run.
    assert gen.token_ids == full.token_ids[: len(gen.token_ids)]
    decoded = policy.tokenizer.decode(gen.token_ids, skip_special_tokens=True)
    assert stop in decoded and stop not in decoded[:-1]
    assert len(gen.logprobs) == len(gen.token_ids)


def test_eos_ends_with_stop(tiny_dir):
    from transformers import AutoModelForCausalLM

    params = SamplingParams(temperature=0, max_tokens=12)
    with HFPolicy(tiny_dir, dtype="float32") as pol:
        full = pol.generate([MEDIUM], params)[0][0]
    # Declare the 4th greedy token an end-of-sequence token (as generation configs with
    # several eos ids do) and pass a loaded model instance.
    eos = full.token_ids[3]
    model = AutoModelForCausalLM.from_pretrained(tiny_dir, dtype=torch.float32)
    model.generation_config.eos_token_id = [model.config.eos_token_id, eos]
    model.train()  # as a trainer would hold it
    with HFPolicy(model, tokenizer=tiny_dir) as pol:
        gen = pol.generate([MEDIUM], params)[0][0]
    assert model.training  # generate evaluates in eval mode and restores the mode
    first = full.token_ids.index(eos)
    assert gen.finish_reason == "stop"
    assert gen.token_ids == full.token_ids[: first + 1]  # the eos token is kept


# --- context limits and errors ---------------------------------------------------------------


def test_too_long_prompt_is_rejected_naming_request(tiny_dir):
    with HFPolicy(tiny_dir, dtype="float32", max_context_tokens=40) as pol:
        n_long = len(pol.generate([LONG], SamplingParams(max_tokens=1, truncate_prompt=True)))
        assert n_long == 1
        with pytest.raises(PromptTooLongError, match=r"request 1: \d+ tokens") as info:
            pol.generate([SHORT, LONG], SamplingParams(max_tokens=4))
        assert info.value.request_indices == (1,)
        assert "40" in str(info.value)


def test_truncate_prompt_keeps_the_tail(tiny_dir):
    with HFPolicy(tiny_dir, dtype="float32", max_context_tokens=40) as pol:
        full_ids = pol.tokenizer(
            pol.tokenizer.apply_chat_template(LONG, tokenize=False, add_generation_prompt=True),
            add_special_tokens=False,
        )["input_ids"]
        assert len(full_ids) > 40
        params = SamplingParams(max_tokens=6, truncate_prompt=True, seed=0)
        gen = pol.generate([LONG], params)[0][0]
        assert gen.prompt_token_ids == full_ids[-34:]
        assert len(gen.token_ids) <= 6


def test_generation_stops_at_context_limit(tiny_dir):
    with HFPolicy(tiny_dir, dtype="float32", max_context_tokens=40) as pol:
        prompt_len = len(pol.generate([SHORT], SamplingParams(max_tokens=1))[0][0].prompt_token_ids)
        gen = pol.generate([SHORT], SamplingParams(max_tokens=100, seed=0))[0][0]
    assert gen.finish_reason == "length"  # no eos from this seed
    assert len(gen.token_ids) == 40 - prompt_len


@pytest.mark.parametrize(
    ("prompts", "match"),
    [
        (["hello"], "request 0: a prompt must be a list of messages"),
        ([SHORT, []], "request 1: the prompt has no messages"),
        ([[{"role": "user"}]], "request 0, message 0: 'content' must be a str"),
        ("hello", "prompts must be a list"),
    ],
)
def test_bad_prompts_are_rejected(policy, prompts, match):
    with pytest.raises(ValueError, match=match):
        policy.generate(prompts, SamplingParams(max_tokens=2))


def test_unknown_adapter_is_rejected(policy):
    with pytest.raises(ValueError, match="unknown adapter 'nope'"):
        policy.generate([SHORT], SamplingParams(max_tokens=2), adapter="nope")


def test_backend_errors_become_policy_errors(tiny_dir, monkeypatch):
    with HFPolicy(tiny_dir, dtype="float32", batch_size=2) as pol:

        def boom(*args, **kwargs):
            raise RuntimeError("kernel exploded")

        monkeypatch.setattr(pol.model, "forward", boom)
        with pytest.raises(PolicyError, match="kernel exploded") as info:
            pol.generate(PROMPTS, SamplingParams(max_tokens=2))
    assert info.value.request_indices  # names the requests of the failing batch
    assert set(info.value.request_indices) <= {0, 1, 2}


def test_closed_policy_refuses(tiny_dir):
    pol = HFPolicy(tiny_dir, dtype="float32")
    pol.close()
    pol.close()  # idempotent
    with pytest.raises(PolicyError, match="closed"):
        pol.generate([SHORT], SamplingParams(max_tokens=2))


def test_constructor_validation(tiny_dir):
    with pytest.raises(ValueError, match="batch_size"):
        HFPolicy(tiny_dir, batch_size=0)
    with pytest.raises(ValueError, match="dtype"):
        HFPolicy(tiny_dir, dtype="float16")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="max_context_tokens"):
        HFPolicy(tiny_dir, max_context_tokens=10**6)


# --- log-probs -------------------------------------------------------------------------------


def recompute_logprobs(model, gen: Generation, temperature: float) -> torch.Tensor:
    """log_softmax(logits / T) of each generated token, from one unpadded forward pass."""
    ids = torch.tensor([gen.prompt_token_ids + gen.token_ids])
    with torch.no_grad():
        logits = model(input_ids=ids).logits[0].float()
    start = len(gen.prompt_token_ids)
    steps = logits[start - 1 : start - 1 + len(gen.token_ids)]
    logp = torch.log_softmax(steps / temperature, dim=-1)
    return logp.gather(1, torch.tensor(gen.token_ids)[:, None]).squeeze(1)


@pytest.mark.parametrize("temperature", [0.7, 1.0, 0.0])
def test_logprobs_match_forward_pass(policy, temperature):
    params = SamplingParams(n=2, temperature=temperature, max_tokens=10, seed=5)
    out = policy.generate(PROMPTS, params)
    for gen in (g for gens in out for g in gens):
        assert all(math.isfinite(x) and x <= 0 for x in gen.logprobs)
        expected = recompute_logprobs(policy.model, gen, temperature or 1.0)
        torch.testing.assert_close(torch.tensor(gen.logprobs), expected, atol=1e-4, rtol=0)


def test_top_p_logprobs_are_renormalised(policy):
    params = SamplingParams(n=2, temperature=1.0, top_p=0.5, max_tokens=10, seed=5)
    for gen in (g for gens in policy.generate(PROMPTS, params) for g in gens):
        full = recompute_logprobs(policy.model, gen, 1.0)
        got = torch.tensor(gen.logprobs)
        assert (got <= 0).all()
        # Renormalising over a nucleus of mass >= 0.5 raises log-probs by at most log 2.
        assert (got >= full - 1e-4).all()
        assert (got <= full + math.log(2) + 1e-4).all()


# --- weights ---------------------------------------------------------------------------------


def test_load_weights_changes_generations(tiny_dir, tiny_dir_other):
    from safetensors.torch import load_file

    greedy = SamplingParams(temperature=0, max_tokens=10)
    with HFPolicy(tiny_dir_other, dtype="float32") as other:
        target = token_ids(other.generate(PROMPTS, greedy))
    with HFPolicy(tiny_dir, dtype="float32") as pol:
        before = token_ids(pol.generate(PROMPTS, greedy))
        assert before != target
        pol.load_weights(load_file(str(tiny_dir_other / "model.safetensors")))
        assert token_ids(pol.generate(PROMPTS, greedy)) == target
        pol.load_weights(tiny_dir)  # a checkpoint directory
        assert token_ids(pol.generate(PROMPTS, greedy)) == before


def test_load_weights_checks_names_and_shapes_first(tiny_dir):
    greedy = SamplingParams(temperature=0, max_tokens=6)
    with HFPolicy(tiny_dir, dtype="float32") as pol:
        before = token_ids(pol.generate(PROMPTS, greedy))
        good = {"model.norm.weight": torch.zeros(128)}
        with pytest.raises(ValueError, match="unknown parameter"):
            pol.load_weights({**good, "model.nrom.weight": torch.zeros(128)})
        with pytest.raises(ValueError, match="shape"):
            pol.load_weights({**good, "model.layers.0.mlp.up_proj.weight": torch.zeros(3, 3)})
        assert token_ids(pol.generate(PROMPTS, greedy)) == before  # nothing was copied


def test_load_weights_casts_to_bf16(tiny_dir, tiny_dir_other):
    from safetensors.torch import load_file

    with HFPolicy(tiny_dir, dtype="bfloat16") as pol:
        pol.load_weights(load_file(str(tiny_dir_other / "model.safetensors")))
        weight = pol.model.get_parameter("model.layers.0.self_attn.q_proj.weight")
        assert weight.dtype == torch.bfloat16
        gen = pol.generate([MEDIUM], SamplingParams(max_tokens=4, seed=0))[0][0]
        assert all(math.isfinite(x) and x <= 0 for x in gen.logprobs)


# --- LoRA adapters ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def adapters(tiny_dir, tmp_path_factory):
    """Two random LoRA adapters on the tiny model, and the merged models' directories."""
    peft = pytest.importorskip("peft")
    from transformers import AutoModelForCausalLM

    root = tmp_path_factory.mktemp("lora")
    out = {}
    for name, seed in (("a", 1), ("b", 2)):
        torch.manual_seed(seed)
        base = AutoModelForCausalLM.from_pretrained(tiny_dir, dtype=torch.float32)
        config = peft.LoraConfig(
            r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"], init_lora_weights=False
        )
        model = peft.get_peft_model(base, config)
        model.save_pretrained(root / name)
        model.merge_and_unload().save_pretrained(root / f"{name}-merged")
        out[name] = root / name
        out[f"{name}-merged"] = root / f"{name}-merged"
    return out


@pytest.mark.filterwarnings("ignore:.*is_gradient_checkpointing:FutureWarning")
def test_lora_adapters_per_agent(tiny_dir, adapters):
    greedy = SamplingParams(temperature=0, max_tokens=10)
    expected = {}
    for name in ("a", "b"):
        with HFPolicy(adapters[f"{name}-merged"], tokenizer=tiny_dir, dtype="float32") as m:
            expected[name] = token_ids(m.generate(PROMPTS, greedy))
    with HFPolicy(tiny_dir, dtype="float32") as pol:
        base = token_ids(pol.generate(PROMPTS, greedy))
        pol.add_adapter("a", adapters["a"])
        pol.add_adapter("b", adapters["b"])
        assert pol.adapters == ("a", "b")
        assert token_ids(pol.generate(PROMPTS, greedy, adapter="a")) == expected["a"]
        assert token_ids(pol.generate(PROMPTS, greedy, adapter="b")) == expected["b"]
        assert token_ids(pol.generate(PROMPTS, greedy)) == base
        assert expected["a"] != base and expected["a"] != expected["b"]
        # Re-adding a name replaces its weights in place (a trainer's adapter sync).
        pol.add_adapter("a", adapters["b"])
        assert token_ids(pol.generate(PROMPTS, greedy, adapter="a")) == expected["b"]
        # Base weights still load by their plain names with LoRA layers injected.
        pol.load_weights(tiny_dir)
        assert token_ids(pol.generate(PROMPTS, greedy)) == base


def test_add_adapter_rejects_non_adapter_dir(policy, tmp_path):
    with pytest.raises(ValueError, match=r"adapter_config\.json"):
        policy.add_adapter("x", tmp_path)


# --- the real default model ------------------------------------------------------------------

ONE_SHOT = [
    {"role": "user", "content": "What is 2 + 3? Give the final answer in \\boxed{}."},
    {"role": "assistant", "content": "2 + 3 = 5. \\boxed{5}"},
]


@pytest.fixture(scope="session")
def real_policy():
    """The default model in this machine's native dtype (bf16 where the CPU has it, else
    fp32: emulated bf16 is many times slower), loaded once per session."""
    with HFPolicy("smollm2-135m-instruct", seed=0) as pol:
        yield pol


@pytest.mark.slow
def test_real_model_answers_in_boxed(real_policy):
    questions = ["What is 2 + 3?", "What is 4 + 3?"]
    prompts = [
        [*ONE_SHOT, {"role": "user", "content": f"{q} Give the final answer in \\boxed{{}}."}]
        for q in questions
    ]
    start = time.perf_counter()
    out = real_policy.generate(prompts, SamplingParams(temperature=0, max_tokens=48))
    elapsed = time.perf_counter() - start
    texts = [gens[0].text for gens in out]
    print(f"greedy, 2 prompts, {sum(len(g[0].token_ids) for g in out)} tokens, {elapsed:.1f} s")
    print(texts)
    assert all(gens[0].finish_reason == "stop" for gens in out)
    assert "\\boxed{5}" in texts[0]
    assert "\\boxed{" in texts[1]


@pytest.mark.slow
def test_real_model_sampling_is_seeded_and_logprobs_are_sane(real_policy):
    prompt = [*ONE_SHOT, {"role": "user", "content": "What is 6 + 1? Give the final answer."}]
    params = SamplingParams(n=2, temperature=1.0, max_tokens=24, seed=11)
    first = real_policy.generate([prompt], params)[0]
    again = real_policy.generate([prompt], params)[0]
    assert [g.token_ids for g in first] == [g.token_ids for g in again]
    for gen in first:
        assert all(math.isfinite(x) and x <= 0 for x in gen.logprobs)
