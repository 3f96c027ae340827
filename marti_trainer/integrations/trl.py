"""A marti env as TRL's ``GRPOTrainer`` rollout function: one training row per agent turn.

>>> from trl import GRPOConfig, GRPOTrainer  # doctest: +SKIP
>>> rollout = MartiRollout("mad-v0", ArithmeticTasks(size=64), episodes_per_task=4,
...                        num_agents=2, rounds=2)  # doctest: +SKIP
>>> trainer = GRPOTrainer(
...     model=path, reward_funcs=rollout.reward, train_dataset=rollout.dataset(),
...     rollout_func=rollout, args=GRPOConfig(**rollout.config_kwargs(tasks_per_step=2), ...),
... )  # doctest: +SKIP

How a multi-agent episode becomes TRL rows
------------------------------------------
TRL 1.16's ``GRPOTrainer`` trains one model on rows of ``(prompt ids, completion ids)``,
one scalar reward per row, with advantages standardised over blocks of
``num_generations`` consecutive rows (``rewards.view(-1, num_generations)`` in
``GRPOTrainer._generate_and_score_completions``). Its ``rollout_func(prompts, trainer)``
receives the batch's prompts (each dataset prompt repeated ``num_generations`` times by
its ``RepeatSampler``) and returns one row per prompt.

A marti episode has several turns, and each agent's prompt is rendered afresh (a debater in
round 1 sees the other debaters' round-0 answers), so an episode is not one growing
conversation; a row per turn is the faithful mapping. :class:`MartiRollout` therefore
makes a dataset with one row per **turn slot** of every task, ``(task, k)`` for the
episode's ``k``-th turn (``(agent, round)``, fixed by the workflow), in task-major order.
TRL repeats each row ``G = episodes_per_task`` times; the rollout function runs ``G``
episodes of each task in the batch with :func:`marti_env.make_vec` and the trainer's own
model (through :class:`~marti_trainer.policies.hf.HFPolicy`), and answers the ``m``-th
copy of ``(task, k)`` with turn ``k`` of episode ``m``: its prompt's token ids (the real
chat prompt, not the dataset's placeholder text), its sampled tokens and log-probs, and
its credited reward (``marti_reward``, read by :meth:`MartiRollout.reward`). TRL's groups of
``G`` consecutive rows are then exactly MARTI's ``(task, agent, turn)`` advantage groups,
the built-in trainer's ``algorithm.group_by=agent``.

The dataset's prompts are keys, not what the model sees (TRL passes only prompts to a
rollout function, so a row's identity has to travel in its prompt):
``"[marti mad-v0] task arithmetic/train/17, turn 2 (debater_0, round 1): What is ...?"``.
They appear as such in TRL's completion logs.

Batches must hold whole episodes: ``config_kwargs`` sets ``shuffle_dataset=False`` (the
dataset is shuffled by task, with its turn slots kept together, when it is built) and a
batch of ``tasks_per_step`` tasks x ``turns`` slots x ``G`` rows. A batch that splits a
task's slots still trains correctly but runs that task's episodes for fewer rows (counted
in :attr:`MartiRollout.unused_turns`).

What TRL's single-policy trainer cannot express: a model (or LoRA adapter, or optimizer)
per agent; advantage groups of unequal size (``num_generations`` is one integer, so
``group_by=role`` on ``moa-v0``, where a round pools ``P x G`` proposer samples against
``G`` aggregator samples, cannot be written); per-token rewards or advantages, per-agent
KL or loss weights. Use ``marti train`` for those (``model.sharing``,
``algorithm.group_by``, ``algorithm.advantage``).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Any

import numpy as np

import marti_env
from marti_env.tasks import Task, TaskSource
from marti_trainer.policies.base import Generation, SamplingParams
from marti_trainer.rollout.seeds import derive_seed

__all__ = ["MartiRollout", "marti_reward"]


def marti_reward(prompts: list[Any], completions: list[Any], **kwargs: Any) -> list[float]:
    """TRL reward function: each row's credited turn reward, the ``marti_reward`` field a
    :class:`MartiRollout` rollout function returns (TRL forwards its extra fields to the
    reward functions). Logged by TRL as ``rewards/marti_reward``."""
    rewards = kwargs.get("marti_reward")
    if rewards is None:
        raise ValueError(
            "no 'marti_reward' in the rows: marti_reward scores rows made by a MartiRollout "
            "rollout_func; pass the same MartiRollout as rollout_func"
        )
    return [float(r) for r in rewards]


class MartiRollout:
    """A marti env as TRL ``GRPOTrainer``'s ``rollout_func`` (see the module docstring).

    Args:
        env_id: A registered env id, e.g. ``"mad-v0"``.
        tasks: The training tasks (unique ids): a sequence of :class:`Task` or a task source.
        episodes_per_task: ``G``, episodes per task in a batch (TRL's ``num_generations``),
            >= 2.
        sampling: Sampling parameters (``n`` must be 1, ``seed`` None: each episode draws
            its own samples from the policy's seeded generator). Default: temperature 1.0,
            256 new tokens.
        seed: Seeds the episodes (tasks' shuffles, vote ties) and the sampling.
        batch_size: Rows decoded together by the ``hf`` policy.
        **env_kwargs: The env's arguments, as for :func:`marti_env.make` (``tasks`` is the
            argument above).

    Attributes:
        slots: ``[(agent, round)]``, the turns of one episode in order.
        unused_turns: Turns generated but not asked for by TRL's batches (0 when batches
            hold whole tasks, as ``config_kwargs`` arranges).
    """

    def __init__(
        self,
        env_id: str,
        tasks: Sequence[Task] | TaskSource,
        *,
        episodes_per_task: int,
        sampling: SamplingParams | None = None,
        seed: int = 0,
        batch_size: int = 64,
        **env_kwargs: Any,
    ) -> None:
        if "tasks" in env_kwargs:
            raise ValueError("pass the tasks as the second argument, not in env_kwargs")
        if (
            isinstance(episodes_per_task, bool)
            or not isinstance(episodes_per_task, int)
            or episodes_per_task < 2
        ):
            raise ValueError(
                f"episodes_per_task must be an int >= 2 (TRL needs num_generations >= 2), got "
                f"{episodes_per_task!r}"
            )
        self.sampling = sampling if sampling is not None else SamplingParams()
        if self.sampling.n != 1 or self.sampling.seed is not None:
            raise ValueError(
                "sampling must have n=1 and seed=None: each episode is one sample, drawn from "
                "the policy's own seeded generator (identical round-0 prompts with one seed "
                "would give identical samples)"
            )
        self.env_id = env_id
        self.tasks = list(tasks)
        ids = [t.id for t in self.tasks]
        if len(set(ids)) != len(ids):
            raise ValueError("task ids must be unique: they identify the dataset's rows")
        self.episodes_per_task = episodes_per_task
        self.seed = seed
        self.batch_size = batch_size
        self.env_kwargs = dict(env_kwargs)
        probe = marti_env.make(env_id, tasks=self.tasks, **self.env_kwargs)
        workflow = probe.workflow
        self.slots: list[tuple[str, int]] = [
            (agent, r) for r in range(workflow.num_rounds) for agent in workflow.actors(r)
        ]
        self._keys = {
            self.prompt(j, k): (j, k) for j in range(len(self.tasks)) for k in range(self.turns)
        }
        self._calls = 0
        self._policy: Any = None
        self.unused_turns = 0

    @property
    def turns(self) -> int:
        """Turns per episode (dataset rows per task)."""
        return len(self.slots)

    def prompt(self, task_index: int, slot: int) -> str:
        """The dataset prompt (a readable key) of turn ``slot`` of task ``task_index``."""
        task = self.tasks[task_index]
        agent, r = self.slots[slot]
        return (
            f"[marti {self.env_id}] task {task.id}, turn {slot} ({agent}, round {r}): {task.prompt}"
        )

    def dataset(self) -> Any:
        """A ``datasets.Dataset`` of one row per (task, turn slot): the tasks in a seeded
        random order, each task's slots together and in order (``prompt``, ``task_id``,
        ``agent``, ``round`` columns)."""
        from datasets import Dataset

        order = np.random.default_rng(self.seed).permutation(len(self.tasks))
        rows = [(int(j), k) for j in order for k in range(self.turns)]
        return Dataset.from_dict(
            {
                "prompt": [self.prompt(j, k) for j, k in rows],
                "task_id": [self.tasks[j].id for j, _ in rows],
                "agent": [self.slots[k][0] for _, k in rows],
                "round": [self.slots[k][1] for _, k in rows],
            }
        )

    def config_kwargs(self, tasks_per_step: int) -> dict[str, Any]:
        """The ``GRPOConfig`` arguments that keep a batch's episodes whole and TRL's log-probs
        consistent with the sampling: ``tasks_per_step`` tasks x turns x ``G`` rows per
        step, one optimizer step per generation, no dataset shuffle, the sampling's
        temperature, top-p and token budget."""
        if isinstance(tasks_per_step, bool) or not isinstance(tasks_per_step, int):
            raise ValueError(f"tasks_per_step must be an int >= 1, got {tasks_per_step!r}")
        if not 1 <= tasks_per_step <= len(self.tasks):
            raise ValueError(
                f"tasks_per_step must be in [1, {len(self.tasks)}] (the number of tasks), "
                f"got {tasks_per_step}"
            )
        return {
            "num_generations": self.episodes_per_task,
            "per_device_train_batch_size": tasks_per_step * self.turns * self.episodes_per_task,
            "gradient_accumulation_steps": 1,
            "shuffle_dataset": False,
            "temperature": self.sampling.temperature,
            "top_p": self.sampling.top_p,
            "max_completion_length": self.sampling.max_tokens,
        }

    reward = staticmethod(marti_reward)
    """The reward function to pass to ``GRPOTrainer`` (:func:`marti_reward`)."""

    def __call__(self, prompts: list[Any], trainer: Any) -> dict[str, list[Any]]:
        """TRL's ``rollout_func``: one row per prompt (see the module docstring)."""
        plan = []  # (task index, slot, episode of that task) per row
        seen: Counter[tuple[int, int]] = Counter()
        for p in prompts:
            key = self._keys.get(p) if isinstance(p, str) else None
            if key is None:
                raise ValueError(
                    f"prompt {str(p)[:120]!r} is not a row of this MartiRollout's dataset(): "
                    "train on rollout.dataset()"
                )
            plan.append((*key, seen[key]))
            seen[key] += 1
        episodes = Counter()  # task index -> episodes needed
        for (j, _), count in seen.items():
            episodes[j] = max(episodes[j], count)
        task_order = sorted(episodes)
        first = {}  # task index -> env index of its episode 0
        tasks = []
        for j in task_order:
            first[j] = len(tasks)
            tasks.extend([self.tasks[j]] * episodes[j])
        generations, rows = self._run(tasks, self._sampling_policy(trainer))
        self.unused_turns += len(rows) - len(prompts)
        by_turn = {(r.env, r.turn_index): r for r in rows}
        out: dict[str, list[Any]] = {
            "prompt_ids": [],
            "completion_ids": [],
            "logprobs": [],
            "marti_reward": [],
            "marti_agent": [],
        }
        for j, k, m in plan:
            row = by_turn[(first[j] + m, k)]
            gen = generations[row.key]
            out["prompt_ids"].append(list(gen.prompt_token_ids))
            out["completion_ids"].append(list(gen.token_ids))
            out["logprobs"].append(list(gen.logprobs))
            out["marti_reward"].append(row.reward)
            out["marti_agent"].append(row.agent)
        return out

    def _run(self, tasks: list[Task], policy: Any) -> tuple[dict[Any, Generation], list[Any]]:
        """One episode per task (in order) with ``policy``: generations by request key and
        the rows."""
        vec = marti_env.make_vec(
            self.env_id, num_envs=len(tasks), tasks=self.tasks, **self.env_kwargs
        )
        self._calls += 1
        requests, _ = vec.reset(seed=derive_seed(self.seed, self._calls), options={"tasks": tasks})
        generations: dict[Any, Generation] = {}
        while requests:
            outputs = policy.generate([r.messages for r in requests], self.sampling)
            generations.update((r.key, o[0]) for r, o in zip(requests, outputs, strict=True))
            requests, *_ = vec.step([o[0].text for o in outputs])
        return generations, vec.pop_samples()

    def _sampling_policy(self, trainer: Any) -> Any:
        """An ``HFPolicy`` over the trainer's current model (the weights being trained)."""
        from transformers import PreTrainedModel

        from marti_trainer.policies.hf import HFPolicy

        model = trainer.accelerator.unwrap_model(trainer.model)
        if not isinstance(model, PreTrainedModel):
            raise ValueError(
                f"MartiRollout generates with a transformers PreTrainedModel; the trainer's "
                f"model is a {type(model).__name__} (PEFT/LoRA models are not supported here)"
            )
        if self._policy is None or self._policy.model is not model:
            self._policy = HFPolicy(
                model,
                tokenizer=trainer.processing_class,
                batch_size=self.batch_size,
                seed=derive_seed(self.seed, -1),
            )
        return self._policy
