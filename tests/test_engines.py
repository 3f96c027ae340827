"""Engines and the learner on a tiny random-weight model: the update goes the right way,
micro-batching and padding change nothing, DeepSpeed agrees with plain torch."""

from __future__ import annotations

import copy
from dataclasses import replace
from types import SimpleNamespace

import pytest
import torch

from marti_trainer.config import AlgorithmConfig, OptimConfig
from marti_trainer.engines import lr_lambda, make_engine
from marti_trainer.learner import collate, forward_logprobs, make_loss_fn, set_norm
from marti_trainer.models import tiny_random_model

PAD = 2


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory):
    return tiny_random_model(tmp_path_factory.mktemp("tiny") / "model", seed=0)


def load(tiny_dir):
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(tiny_dir, dtype=torch.float32).eval()


def sample(prompt, response, reward=0.0, key=("t", "a", 0)):
    return SimpleNamespace(
        prompt_token_ids=list(prompt),
        response_token_ids=list(response),
        logprobs=[-1.0] * len(response),
        reward=reward,
        group_key=key,
    )


def batch_of(samples, advantages, aggregation="token-mean"):
    return set_norm(
        collate(samples, PAD, torch.tensor(advantages, dtype=torch.float32)), aggregation
    )


def seq_logprob(model, samples):
    with torch.no_grad():
        b = collate(samples, PAD).to(next(model.parameters()).device)
        logprobs, _ = forward_logprobs(model, b)
        return (logprobs * b.response_mask).sum(-1).cpu()


def test_grpo_step_raises_positive_and_lowers_negative_completion(tiny_dir):
    model = load(tiny_dir)
    prompt = [1, 520, 33, 71, 90]
    good, bad = sample(prompt, [300, 301, 302, 2], 1.0), sample(prompt, [400, 401, 2], 0.0)
    before = seq_logprob(model, [good, bad])
    # GRPO advantages of rewards [1, 0] in one group: +-1/sqrt(2) (unbiased std).
    cfg = OptimConfig(precision="fp32", lr=1e-3)
    engine = make_engine(model, cfg, make_loss_fn(AlgorithmConfig(), 64), total_steps=1)
    metrics = engine.step(batch_of([good, bad], [0.7071, -0.7071]))
    after = seq_logprob(model, [good, bad])
    assert after[0] > before[0]  # positive advantage: more likely
    assert after[1] < before[1]  # negative advantage: less likely
    assert metrics["losses/ratio_mean"] == pytest.approx(1.0)  # on-policy: ratio 1
    assert metrics["optim/grad_norm"] > 0
    assert "losses/entropy" in metrics and "losses/clip_frac_high" in metrics


def test_padding_does_not_change_logprobs(tiny_dir):
    model = load(tiny_dir)
    short, long = sample([5, 6, 7], [10, 11]), sample([5, 6, 7, 8, 9, 10, 11], [12, 13, 14, 15])
    alone = seq_logprob(model, [short])
    together = seq_logprob(model, [short, long])
    assert torch.allclose(alone[0], together[0], atol=1e-4)


@pytest.mark.parametrize(
    "aggregation", ["token-mean", "seq-mean-token-mean", "seq-mean-token-sum-norm"]
)
def test_micro_batches_give_the_full_batch_gradient(tiny_dir, aggregation):
    samples = [sample(range(5, 8 + i), range(100, 102 + 2 * i)) for i in range(6)]
    advantages = [1.0, -1.0, 0.5, -0.5, 2.0, -2.0]
    loss_fn = make_loss_fn(AlgorithmConfig(aggregation=aggregation), max_tokens=16)
    grads = []
    for budget in (10**6, 24):
        model = load(tiny_dir)
        batch = batch_of(samples, advantages, aggregation)
        micro = batch.split(budget)
        for mb in micro:
            loss, _, _ = loss_fn(model, mb)
            loss.backward()
        grads.append(
            torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None])
        )
        assert (len(micro) == 1) == (budget == 10**6)
    torch.testing.assert_close(grads[0], grads[1], rtol=1e-3, atol=1e-5)  # fp32 padding noise


def group_samples():
    """Three prompts (two of one length), each continued by several responses, as a step's
    groups are: the rows of a group share their prompt."""
    g = torch.Generator().manual_seed(0)
    prompts = [torch.randint(3, 500, (n,), generator=g).tolist() for n in (5, 9, 5)]
    return [
        sample(prompts[k % 3], torch.randint(3, 500, (2 + k,), generator=g).tolist())
        for k in range(8)
    ]


def flat_grad(model):
    return torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None])


@pytest.mark.parametrize("train_mode", [False, True])
def test_shared_prompts_give_the_plain_logprobs_and_gradient(tiny_dir, train_mode):
    model = load(tiny_dir).train(train_mode)
    batch = batch_of(group_samples(), [0.0] * 8)
    results = []
    for share in (False, True, True):
        model.zero_grad()
        logprobs, _ = forward_logprobs(model, replace(batch, share_prompts=share))
        (logprobs * batch.response_mask).sum().backward()
        results.append((logprobs.detach() * batch.response_mask, flat_grad(model)))
    (plain, plain_grad), (shared, shared_grad), (_, again_grad) = results
    torch.testing.assert_close(shared, plain, rtol=0, atol=1e-4)
    assert plain_grad.norm() > 1  # a real gradient, not zeros on both sides
    assert (shared_grad - plain_grad).norm() / plain_grad.norm() < 1e-5  # fp32 summation order
    assert torch.equal(again_grad, shared_grad)  # bit for bit: resumed runs repeat exactly


def debate_samples():
    """A debate's rows: per task, a round-0 prompt shared by 4 rows, and 4 round-1 prompts
    that repeat the task (a 20-token prefix) and go on differently (5 to 8 more tokens),
    one row each; two tasks."""
    g = torch.Generator().manual_seed(1)
    rows = []
    for _ in range(2):
        task = torch.randint(3, 500, (20,), generator=g).tolist()
        round0 = [*task[:18], 7, 7]
        rows += [
            sample(round0, torch.randint(3, 500, (3,), generator=g).tolist()) for _ in range(4)
        ]
        for k in range(4):
            suffix = torch.randint(3, 500, (5 + k,), generator=g).tolist()
            rows.append(
                sample(task + suffix, torch.randint(3, 500, (2 + k,), generator=g).tolist())
            )
    return rows


def test_prompt_tree_by_hand():
    from marti_trainer.prompt_tree import MIN_SHARED_PREFIX, prompt_tree

    base = tuple(range(100, 100 + MIN_SHARED_PREFIX))
    keys = [(*base, 1, 2), (*base, 1, 3, 4), (*base, 1, 2), (9, 9, 9), (*base, 5), (9, 9, 9)]
    tree = prompt_tree(keys)
    # distinct prompts in sorted order: (9,9,9), base+(1,2), base+(1,3,4), base+(5,)
    assert [keys[r] for r in tree.distinct] == [keys[3], keys[0], keys[1], keys[4]]
    assert tree.row_prompt == [1, 2, 1, 0, 3, 0]
    assert tree.prompt_cluster == [0, 1, 1, 1]
    assert tree.prefix_len == [0, MIN_SHARED_PREFIX]  # a single: 0; the cluster's common prefix
    # positions: 1 cluster x 16 + 4 prompts x longest rest (3: the 9,9,9) + 6 rows x R
    assert tree.tokens(response_width=2) == MIN_SHARED_PREFIX + 4 * 3 + 6 * 2
    no_prefix = prompt_tree(keys, share_prefixes=False)
    assert no_prefix.prefix_len == [0, 0, 0, 0] and not no_prefix.has_prefixes
    assert no_prefix.tokens(2) == 4 * (MIN_SHARED_PREFIX + 3) + 6 * 2
    # a prompt that is a prefix of another keeps one token of its own
    assert prompt_tree([(*base, 1), (*base, 1, 2)]).prefix_len == [MIN_SHARED_PREFIX]
    # A debate: three round-1 prompts share the 30-token task; the round-0 prompt only its
    # first 18. Together they would share 18 (3 x 18 = 54 saved); without the round-0 prompt
    # the others share 30 (2 x 30 = 60): the round-0 prompt is left on its own.
    task = tuple(range(100, 130))
    debate = [(*task[:18], 1), (*task, 5, 6), (*task, 7, 8), (*task, 9)]
    tree = prompt_tree(debate)
    assert tree.prompt_cluster == [0, 1, 1, 1] and tree.prefix_len == [0, 30]
    short = tuple(range(MIN_SHARED_PREFIX - 1))
    assert prompt_tree([(*short, 1), (*short, 2)]).prefix_len == [0, 0]  # too short to share


@pytest.mark.parametrize("train_mode", [False, True])
def test_shared_prefixes_give_the_plain_logprobs_and_gradient(tiny_dir, train_mode):
    model = load(tiny_dir).train(train_mode)
    batch = batch_of(debate_samples(), [0.0] * 16)
    results = []
    for share, prefixes in ((False, False), (True, True), (True, True), (True, False)):
        model.zero_grad()
        shared = replace(batch, share_prompts=share, share_prefixes=prefixes)
        logprobs, _ = forward_logprobs(model, shared)
        (logprobs * batch.response_mask).sum().backward()
        results.append((logprobs.detach() * batch.response_mask, flat_grad(model)))
    (plain, plain_grad), (shared, shared_grad), (_, again_grad), (two, two_grad) = results
    torch.testing.assert_close(shared, plain, rtol=0, atol=1e-4)
    torch.testing.assert_close(two, plain, rtol=0, atol=1e-4)
    assert plain_grad.norm() > 1
    assert (shared_grad - plain_grad).norm() / plain_grad.norm() < 1e-5
    assert torch.equal(again_grad, shared_grad)  # bit for bit
    tree = replace(batch, share_prompts=True, share_prefixes=True).prompt_tree()
    assert tree is not None and sum(n > 0 for n in tree.prefix_len) == 2  # one per task
    plain_tokens = batch.computed_tokens()[0]
    prompts_only = replace(batch, share_prompts=True).computed_tokens()[0]
    with_prefixes = replace(batch, share_prompts=True, share_prefixes=True).computed_tokens()[0]
    assert with_prefixes < prompts_only < plain_tokens


def test_split_with_shared_prompts_groups_equal_prompts_and_counts_them_once():
    batch = batch_of(group_samples(), [1.0] * 8)
    keys = batch.prompt_keys()
    assert len(set(keys)) == 3 and keys[0] == keys[3] == keys[6]
    # Costs: plain rows x (prompt + response) = 8 x (9 + 9); shared 3 x 9 + 8 x 9.
    shared = batch.split(99, share_prompts=True)
    assert len(shared) == 1 and shared[0].share_prompts
    assert len(batch.split(99)) > 1 and not batch.split(99)[0].share_prompts
    for micro in batch.split(30, share_prompts=True):  # small budget: equal prompts adjacent
        assert len(set(micro.prompt_keys())) == 1


@pytest.mark.parametrize(
    ("rows", "budget"), [("groups", 10**6), ("groups", 40), ("debate", 10**6), ("debate", 90)]
)
def test_engine_step_with_shared_prompts_equals_the_plain_step(tiny_dir, rows, budget):
    loss_fn = make_loss_fn(AlgorithmConfig(), max_tokens=16)
    samples = group_samples() if rows == "groups" else debate_samples()
    g = torch.Generator().manual_seed(2)
    batch = batch_of(samples, torch.randn(len(samples), generator=g).tolist())
    steps, metrics = [], []
    for share in (False, True):
        cfg = OptimConfig(precision="fp32", lr=1e-3, micro_batch_tokens=budget, share_prompts=share)
        engine = make_engine(load(tiny_dir), cfg, loss_fn, total_steps=1)
        before = {k: v.clone() for k, v in engine.weights().items()}
        metrics.append(engine.step(batch))
        steps.append(torch.cat([(v - before[k]).flatten() for k, v in engine.weights().items()]))
    assert metrics[0]["optim/grad_norm"] == pytest.approx(metrics[1]["optim/grad_norm"], rel=1e-4)
    assert metrics[0]["losses/policy_loss"] == pytest.approx(
        metrics[1]["losses/policy_loss"], rel=1e-4, abs=1e-6
    )
    # Adam's first step is ~lr * sign(g): a near-zero gradient element whose rounding differs
    # may move differently, so the steps are compared as whole vectors.
    assert (steps[1] - steps[0]).norm() / steps[0].norm() < 1e-3


def test_bf16_autocast_keeps_small_updates(tiny_dir):
    model = load(tiny_dir)
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    cfg = OptimConfig(precision="bf16", lr=1e-6)
    engine = make_engine(model, cfg, make_loss_fn(AlgorithmConfig(), 64), total_steps=1)
    engine.step(batch_of([sample([5, 6, 7], [10, 11]), sample([5, 6, 7], [12, 13])], [1.0, -1.0]))
    assert all(p.dtype == torch.float32 for p in model.parameters())
    changed = sum(not torch.equal(before[n], p) for n, p in model.named_parameters())
    assert changed > 0  # fp32 master weights take a 1e-6 step that bf16 weights would drop


def test_engine_state_round_trip(tiny_dir):
    cfg = OptimConfig(precision="fp32", lr=1e-3, scheduler="linear", warmup_steps=1)
    loss_fn = make_loss_fn(AlgorithmConfig(), 64)
    batch = batch_of([sample([5, 6], [10, 11]), sample([5, 6], [12])], [1.0, -1.0])
    a = make_engine(load(tiny_dir), cfg, loss_fn, total_steps=4)
    a.step(batch)
    b = make_engine(load(tiny_dir), cfg, loss_fn, total_steps=4)
    b.load_weights(a.weights())
    b.load_state_dict(copy.deepcopy(a.state_dict()))  # as from a file: no shared tensors
    ma, mb = a.step(batch), b.step(batch)
    timings = {k for k in ma if k.startswith("time/")}  # wall clock: never equal
    assert timings and {k: v for k, v in ma.items() if k not in timings} == {
        k: v for k, v in mb.items() if k not in timings
    }
    assert all(torch.equal(a.weights()[k], v) for k, v in b.weights().items())


def test_lr_schedules():
    warm = lr_lambda(OptimConfig(warmup_steps=3, scheduler="constant"), total_steps=10)
    assert [warm(s) for s in range(5)] == [0.25, 0.5, 0.75, 1.0, 1.0]
    linear = lr_lambda(OptimConfig(scheduler="linear"), total_steps=4)
    assert [linear(s) for s in range(5)] == [1.0, 0.75, 0.5, 0.25, 0.0]
    cosine = lr_lambda(OptimConfig(scheduler="cosine"), total_steps=2)
    assert cosine(0) == 1.0 and cosine(1) == pytest.approx(0.5) and cosine(2) == pytest.approx(0.0)


@pytest.mark.parametrize("stage", [0, 1, 2, 3])
def test_deepspeed_matches_plain_torch_on_one_fp32_step(tiny_dir, stage):
    pytest.importorskip("deepspeed")
    linear = torch.nn.functional.linear
    samples = [sample(range(5, 8 + i), range(100, 103 + i)) for i in range(4)]
    batch = batch_of(samples, [1.0, -1.0, 0.5, -0.5])
    loss_fn = make_loss_fn(AlgorithmConfig(), 64)
    results = {}
    for engine_name in ("torch", "deepspeed"):
        cfg = OptimConfig(
            engine=engine_name, zero_stage=stage if engine_name == "deepspeed" else 0,
            precision="fp32", lr=1e-3, micro_batch_tokens=30,
        )  # fmt: skip
        engine = make_engine(load(tiny_dir), cfg, loss_fn, total_steps=2)
        metrics = engine.step(batch)
        results[engine_name] = (metrics, engine.weights())
    (m_torch, w_torch), (m_ds, w_ds) = results["torch"], results["deepspeed"]
    assert m_ds["losses/policy_loss"] == pytest.approx(m_torch["losses/policy_loss"], rel=1e-5)
    assert m_ds["optim/grad_norm"] == pytest.approx(m_torch["optim/grad_norm"], rel=1e-4)
    assert m_ds["optim/micro_batches"] == m_torch["optim/micro_batches"] > 1
    for name, value in w_torch.items():
        # Adam's first step is ~lr * sign(g): where |g| is tiny, the summation order of ZeRO-3
        # can move an element by a fraction of lr (1e-3). 5% of lr is the tolerance.
        torch.testing.assert_close(w_ds[name], value, rtol=0, atol=5e-5, msg=name)
    # ZeRO-3 left the process's linear as it was (its memory-efficient linear is off)
    assert torch.nn.functional.linear is linear


def test_train_batch_moves_every_tensor_and_keeps_its_normaliser():
    b = batch_of([sample([1, 5, 6], [7, 8, 2], 1.0), sample([1, 9], [3, 2], 0.0)], [1.0, -1.0])
    b.ref_logprobs = torch.zeros_like(b.rollout_logprobs)
    assert b.to("cpu") is b  # already there: no copy
    moved = b.to("meta")  # a device every torch build has
    tensors = {k: v for k, v in vars(moved).items() if isinstance(v, torch.Tensor)}
    assert len(tensors) == 10 and all(t.device.type == "meta" for t in tensors.values())
    assert moved.old_logprobs is None and moved.norm == b.norm == 5.0
    assert b.input_ids.device.type == "cpu"  # the original is untouched


def test_resolve_device_names_the_setting():
    from marti_trainer.team import resolve_device

    assert resolve_device("auto").type == ("cuda" if torch.cuda.is_available() else "cpu")
    assert resolve_device("cpu") == torch.device("cpu")
    with pytest.raises(ValueError, match=r"model.device='cuda:99', but torch sees \d+ CUDA"):
        resolve_device("cuda:99")
    with pytest.raises(ValueError, match=r"--device must be auto, cpu, cuda or cuda:N, got .gpu."):
        resolve_device("gpu", "--device")


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (none on this machine)")
@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_torch_engine_trains_on_the_gpu_from_cpu_batches(tiny_dir, precision):
    """The learner's batches stay on the CPU; the engine moves each micro-batch."""
    model = load(tiny_dir).to("cuda")
    prompt = [1, 520, 33, 71, 90]
    good, bad = sample(prompt, [300, 301, 302, 2], 1.0), sample(prompt, [400, 401, 2], 0.0)
    before = seq_logprob(model, [good, bad])
    cfg = OptimConfig(precision=precision, lr=1e-3)
    engine = make_engine(model, cfg, make_loss_fn(AlgorithmConfig(), max_tokens=8), 10)
    metrics = engine.step(batch_of([good, bad], [0.7071, -0.7071]))
    assert all(p.device.type == "cuda" for p in model.parameters())
    after = seq_logprob(model, [good, bad])
    assert after[0] > before[0] and after[1] < before[1]
    assert metrics["optim/grad_norm"] > 0
