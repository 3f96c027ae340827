"""GRPO on a 2x2 debate (mad-v0) in plain PyTorch: marti's vector env and Policy.generate.

    python examples/custom_loop.py [--model smollm2-135m-instruct] [--steps 10]

Each step resets 16 envs in 4 groups of 4 (a group poses one task), answers every request
with one batched generate call per round, then takes one policy-gradient step on the
per-turn rows, with GRPO advantages over MARTI's (task, agent, turn) groups.
"""

import argparse

import torch

import marti_env
from marti_trainer.algorithms.advantages import group_ids_from_keys, grpo_advantages
from marti_trainer.algorithms.losses import logprobs_from_logits
from marti_trainer.models import resolve_model
from marti_trainer.policies import SamplingParams, make_policy

parser = argparse.ArgumentParser()
parser.add_argument("--model", default="smollm2-135m-instruct", help="alias or directory")
parser.add_argument("--steps", type=int, default=10)
args = parser.parse_args()

torch.manual_seed(0)
# resolve_model: the default model's checkpoint directory (dequantised from its GGUF once)
policy = make_policy("hf", resolve_model(args.model), dtype="float32", seed=0)
model = policy.model  # the policy samples with the weights being trained
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-5)
sampling = SamplingParams(temperature=0.7, max_tokens=32)
vec = marti_env.make_vec("mad-v0", num_envs=16, group_size=4, num_agents=2, rounds=2)

for step in range(args.steps):
    requests, _ = vec.reset(seed=step)
    generations = {}  # (env, agent, round) -> Generation
    while requests:  # one round of every env per iteration
        outputs = [out[0] for out in policy.generate([r.messages for r in requests], sampling)]
        generations.update((r.key, out) for r, out in zip(requests, outputs, strict=True))
        requests, _, _, _, infos = vec.step([out.text for out in outputs])
    rows = vec.pop_samples()  # one per agent turn: env, group, agent, round, reward, ...
    rewards = torch.tensor([row.reward for row in rows])
    advantages = grpo_advantages(rewards, group_ids_from_keys([row.group_key for row in rows]))
    model.train()
    optimizer.zero_grad()
    for row, advantage in zip(rows, advantages, strict=True):
        if advantage == 0:  # a group without reward spread: no gradient
            continue
        gen, n = generations[row.key], len(generations[row.key].token_ids)
        ids = torch.tensor([gen.prompt_token_ids + gen.token_ids])
        logits = model(ids, logits_to_keep=n + 1).logits[:, :-1]  # the n response positions
        logprobs = logprobs_from_logits(logits, ids[:, -n:])
        # On-policy, one update per batch: the clipped PPO ratio is 1, leaving -A * log p.
        (-advantage * logprobs.mean() / len(rows)).backward()
    optimizer.step()
    accuracy = sum(record.outcome for record in infos["episode"]) / vec.num_envs
    print(f"step {step}: team accuracy {accuracy:.2f}, mean turn reward {rewards.mean():.2f}")
