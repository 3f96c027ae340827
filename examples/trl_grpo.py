"""GRPO on a 2x2 debate (mad-v0) with TRL's GRPOTrainer, marti's env as its rollout_func.

    pip install "trl>=1.16"
    python examples/trl_grpo.py [--model smollm2-135m-instruct] [--steps 10]

MartiRollout (marti_trainer.integrations.trl) turns each agent turn into one TRL row; TRL's
groups of num_generations rows are MARTI's (task, agent, turn) groups. One shared model:
TRL trains a single policy (a model per agent, per-agent losses or advantage estimators
need `marti train`; see docs/custom_loops.md).
"""

import argparse
import os

os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")  # rollout_func is experimental in TRL

from trl import GRPOConfig, GRPOTrainer

from marti_env.tasks import ArithmeticTasks
from marti_trainer.integrations.trl import MartiRollout
from marti_trainer.models import resolve_model
from marti_trainer.policies import SamplingParams

parser = argparse.ArgumentParser()
parser.add_argument("--model", default="smollm2-135m-instruct", help="alias or directory")
parser.add_argument("--steps", type=int, default=10)
parser.add_argument("--output-dir", default="runs/trl_grpo")
args = parser.parse_args()

rollout = MartiRollout(
    "mad-v0",
    ArithmeticTasks(levels=(1, 2), split="train", size=512),
    episodes_per_task=4,
    sampling=SamplingParams(temperature=0.7, max_tokens=32),
    credit="quality",
    num_agents=2,
    rounds=2,
)
config = GRPOConfig(
    output_dir=args.output_dir,
    max_steps=args.steps,
    learning_rate=1e-5,
    beta=0.0,  # no reference model
    logging_steps=1,
    save_strategy="no",
    report_to="none",
    use_cpu=True,
    seed=0,
    **rollout.config_kwargs(tasks_per_step=2),  # 2 tasks x 4 turns x 4 episodes = 32 rows
)
trainer = GRPOTrainer(
    model=str(resolve_model(args.model)),
    reward_funcs=rollout.reward,
    args=config,
    train_dataset=rollout.dataset(),
    rollout_func=rollout,
)
trainer.train()
