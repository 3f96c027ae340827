"""The PettingZoo adapter: any :class:`~marti_env.workflows.Workflow` as a ``ParallelEnv``.

Protocol (every env of the suite)
---------------------------------
* One ``step`` is one round of the workflow; an episode lasts exactly
  ``workflow.num_rounds`` steps. ``env.agents`` holds every agent until the episode ends,
  then is empty (all terminate together; nothing is ever truncated).
* **Active agents.** Only ``workflow.actors(round)`` act in a round. ``infos[a]["active"]``
  says whether agent ``a`` must answer now; ``env.active_agents`` lists them. An inactive
  agent's observation has no messages and its action (any string, e.g. ``""``) is ignored,
  so the usual ``{a: policy(obs[a]) for a in env.agents}`` loop works, and a loop that
  skips inactive agents saves their generations. A missing action for an active agent is
  an error naming it.
* **Observation** ``{"messages": (message, ...)}``: the chat messages the agent must answer
  now (system prompt, worked example turns, then the request with the task and what the
  agent may see of other agents' responses), ready for a chat template.
* **Action**: the agent's generation, any ``str`` (bytes are decoded as UTF-8 with
  replacement). Its answer is the last ``\\boxed{}``. Nothing an action contains can crash
  the env; what other agents are shown of a response is clipped to ``max_shared_chars``,
  and lines imitating the env's own markers (``Response 2:``, template headings,
  chat-template tokens) are defused (:func:`marti_env.workflows.base.defuse_markers`).
* **Rewards** are 0 on every step but the last. On the last step, the credit method (default
  ``none``: every turn earns the outcome) gives each turn a reward, and ``rewards[a]`` is
  the sum of agent ``a``'s turn rewards (its episode return). Per-turn rewards are in the
  episode record.
* **Episode record**: ``infos[a]["episode"]`` on the last step, the same
  :class:`~marti_env.record.EpisodeRecord` for every agent, with the full transcript,
  verifier scores, final answer, outcome and credited rewards.
* **Reset options**: ``{"task": Task}`` poses a given task. Other keys are ignored, as
  Gymnasium's envs ignore options they do not know (PettingZoo's conformance tests pass a
  made-up ``{"options": 1}``); a key that looks like a misspelt ``task`` (``tsak``,
  ``tasks``) warns, since the episode would otherwise silently draw a random task.
* **Seeding**: ``reset(seed=s)`` fixes the task drawn, the seeded shuffles of shown
  responses and the vote's tie order; ``reset(options={"task": task})`` poses a given task.
"""

from __future__ import annotations

import copy
import difflib
import functools
import warnings
from collections.abc import Mapping
from typing import Any

import numpy as np
from pettingzoo import ParallelEnv

from marti_env.credit import CreditMethod, FinalAnswerRule, checked_rewards
from marti_env.prompts import Prompts
from marti_env.record import EpisodeRecord, Message, Turn
from marti_env.rewards import AnswerRule, Reward, extract_boxed, majority_answer
from marti_env.rewards.base import MathReward
from marti_env.spaces import messages_space, response_space
from marti_env.tasks import Task, TaskSource
from marti_env.workflows import Workflow

_NO_MESSAGES: tuple[Message, ...] = ()


class WorkflowEnv(ParallelEnv):
    """A multi-agent LLM workflow as a PettingZoo ``ParallelEnv`` (see module docstring).

    Build it with :func:`marti_env.make`; the arguments are validated there.

    Args:
        env_id: The registered id, recorded in episode records.
        workflow: The rules (who acts when, who sees what, the final-answer rule).
        prompts: The templates the workflow's requests are rendered with.
        tasks: Where tasks are drawn from at ``reset``.
        reward: Scores one response against the task (the per-turn verifier score), or
            ``None`` for label-free (TTRL) scoring: each turn is scored against the
            majority answer of the episode's turns, computed when the episode ends.
        label_free_reward: With ``reward=None``, what scores a turn against that majority
            answer (default ``MathReward()``); ignored otherwise.
        credit: Turns the finished episode into per-turn rewards.
        max_response_chars: Upper bound of the action space. Longer actions are still
            accepted and recorded in full.
        render_mode: ``"ansi"`` (``render()`` returns the transcript) or ``"human"`` (prints it).
    """

    def __init__(
        self,
        env_id: str,
        workflow: Workflow,
        prompts: Prompts,
        tasks: TaskSource,
        reward: Reward | None,
        credit: CreditMethod,
        max_response_chars: int = 32_768,
        render_mode: str | None = None,
        label_free_reward: Reward | None = None,
    ) -> None:
        if render_mode not in (None, "ansi", "human"):
            raise ValueError(f"render_mode must be None, 'ansi' or 'human', got {render_mode!r}")
        self.metadata = {
            "name": env_id,
            "render_modes": ["ansi", "human"],
            "is_parallelizable": True,
        }
        self.env_id = env_id
        # Lines of shown responses that imitate the templates' headings are defused.
        self.workflow = workflow.with_headings(prompts.headings())
        self.prompts = prompts
        self.tasks = tasks
        self.reward = reward
        self.label_free_reward = (
            label_free_reward if label_free_reward is not None else MathReward()
        )
        self.credit = credit
        # A reward with its own answer rule (code: programs, votes by behaviour) reads answers.
        self._rule = reward if isinstance(reward, AnswerRule) else None
        self._extract = self._rule.extract_answer if self._rule else extract_boxed
        self.render_mode = render_mode
        self.possible_agents = list(workflow.agents)
        self.agents: list[str] = []
        self._obs_spaces = {a: messages_space() for a in self.possible_agents}
        self._act_spaces = {a: response_space(max_response_chars) for a in self.possible_agents}
        self._rng: np.random.Generator | None = None
        self._round = 0
        self._pending: dict[str, tuple[Message, ...]] = {}
        self._record: EpisodeRecord | None = None

    # -- spaces -------------------------------------------------------------------------------

    def observation_space(self, agent: str):
        return self._obs_spaces[agent]

    def action_space(self, agent: str):
        return self._act_spaces[agent]

    # -- episode --------------------------------------------------------------------------------

    @property
    def active_agents(self) -> list[str]:
        """The agents that must act on the next ``step`` (empty once the episode ended)."""
        return list(self._pending) if self.agents else []

    @property
    def round(self) -> int:
        """The current round (equals ``workflow.num_rounds`` once the episode ended)."""
        return self._round

    @property
    def record(self) -> EpisodeRecord | None:
        """The current (or last) episode's record."""
        return self._record

    def reset(
        self, seed: int | None = None, options: Mapping[str, Any] | None = None
    ) -> tuple[dict[str, dict], dict[str, dict]]:
        """Start an episode: pose a task and return round 0's observations.

        Args:
            seed: Seeds the env's generator (the task drawn, the shuffles of shown
                responses, the vote's tie order). ``None`` keeps the generator's state
                (a fresh, unseeded one on the first reset).
            options: ``{"task": Task}`` poses that task instead of drawing one from the
                env's task source (e.g. ``ArithmeticTasks(split="test")[k]``: run the
                same task ``n`` times for a GRPO group; :func:`marti_env.make_vec` does
                it for you). Other keys are ignored; a misspelt ``task`` warns.

        Returns:
            ``(observations, infos)`` for every agent of ``possible_agents``:
            ``observations[a] = {"messages": (...)}`` (no messages for an agent that does
            not act in round 0) and ``infos[a] = {"active": bool, "round": 0, "role":
            str}``. ``env.active_agents`` lists the agents that must answer.

        Raises:
            TypeError: ``options["task"]`` is not a :class:`Task`.
            ValueError: the task has no reference answer and the reward needs one.
        """
        if seed is not None or self._rng is None:
            self._rng = np.random.default_rng(seed)
        options = dict(options or {})
        task = options.pop("task", None)
        misspelt = [k for k in options if _looks_like(k, "task")]
        if misspelt:
            warnings.warn(
                f"{self.env_id}: ignoring unknown reset option(s) {sorted(misspelt)}; did you "
                "mean 'task'? The episode draws a random task",
                stacklevel=2,
            )
        if task is None:
            task = self.tasks.sample(self._rng)
        elif not isinstance(task, Task):
            raise TypeError(
                f"{self.env_id}: options['task'] must be a Task, got {type(task).__name__}"
            )
        return self._begin(task, seed)

    def restart(self, record: EpisodeRecord) -> tuple[dict[str, dict], dict[str, dict]]:
        """Start an episode in the state ``record``'s episode started in: the same task and
        the same generator state after the task was drawn, so the same shuffles of shown
        responses and the same vote tie order. Played with the same actions it gives the
        same transcript; :func:`marti_env.replay.replay` plays it with some actions changed
        (the counterfactual "what if this agent had said something else").

        The env's generator is set to the record's state, so a later unseeded ``reset``
        continues *that* episode's stream; replay on a copy of the env
        (:func:`marti_env.replay.replay` does) to keep this env's own stream.

        Raises:
            ValueError: the record comes from another env id or has no start state (it was
                written before start states were recorded).
        """
        if record.env_id != self.env_id:
            raise ValueError(f"{self.env_id}: cannot restart an episode of {record.env_id!r}")
        if record.start_state is None:
            raise ValueError(
                f"{self.env_id}: episode of task {record.task.id!r} has no start_state; "
                "only episodes recorded by this version of marti_env can be restarted"
            )
        self._rng = np.random.default_rng()
        self._rng.bit_generator.state = copy.deepcopy(record.start_state)
        return self._begin(record.task, record.seed)

    def _begin(self, task: Task, seed: int | None) -> tuple[dict[str, dict], dict[str, dict]]:
        assert self._rng is not None
        if self.reward is not None and task.answer is None:
            raise ValueError(
                f"{self.env_id}: task {task.id!r} has no reference answer; use reward='ttrl' "
                "for label-free training"
            )
        start_state = copy.deepcopy(self._rng.bit_generator.state)
        self._tie_order = tuple(
            self.possible_agents[i] for i in self._rng.permutation(len(self.possible_agents))
        )
        self.agents = list(self.possible_agents)
        self._round = 0
        self._record = EpisodeRecord(
            env_id=self.env_id,
            task=task,
            credit=self.credit.name,
            seed=seed,
            start_state=start_state,
        )
        self._prepare_round()
        return self._observations(), self._infos()

    def step(
        self, actions: Mapping[str, Any]
    ) -> tuple[
        dict[str, dict], dict[str, float], dict[str, bool], dict[str, bool], dict[str, dict]
    ]:
        """Play one round: every active agent's response, then the next round's prompts.

        Args:
            actions: ``{agent: response}`` with a ``str`` (or UTF-8 ``bytes``) for every
                agent in ``env.active_agents``; actions of inactive agents (any value,
                e.g. ``""``) are ignored, so ``{a: ... for a in env.agents}`` works.

        Returns:
            ``(observations, rewards, terminations, truncations, infos)``, dicts keyed by
            the agents that were live before the step. Before the last round: the next
            round's observations and infos (as :meth:`reset`'s), rewards 0, all flags
            False. On the last round: every agent terminated (nothing is ever truncated),
            ``rewards[a]`` is agent ``a``'s return (the sum of its turns' credited
            rewards), observations have no messages, ``infos[a]["episode"]`` is the
            :class:`~marti_env.record.EpisodeRecord`, and ``env.agents`` becomes empty.

        Raises:
            RuntimeError: the episode has ended (call :meth:`reset`).
            ValueError: an action for an unknown agent, or none for an active agent (named,
                with the round).
            TypeError: an active agent's action is not ``str``/``bytes``.
        """
        if not self.agents:
            raise RuntimeError(f"{self.env_id}: step() called on a finished episode; call reset()")
        record = self._record
        assert record is not None
        unknown = [a for a in actions if a not in self._obs_spaces]
        if unknown:
            raise ValueError(f"{self.env_id}: actions for unknown agent(s) {unknown}")
        for agent, messages in self._pending.items():
            if agent not in actions:
                raise ValueError(
                    f"{self.env_id}: no action for active agent '{agent}' in round {self._round}"
                )
            response = _as_text(actions[agent], agent)
            answer = self._extract(response)
            score = self.workflow.turn_score(record.task, agent, response)
            if score is None:
                score = 0.0 if self.reward is None else self.reward.score(record.task, response)
            record.turns.append(
                Turn(
                    index=len(record.turns),
                    round=self._round,
                    agent=agent,
                    role=self.workflow.role(agent),
                    messages=messages,
                    response=response,
                    answer=answer,
                    score=float(score),
                )
            )
        self._round += 1
        if self._round < self.workflow.num_rounds:
            self._prepare_round()
            rewards = dict.fromkeys(self.agents, 0.0)
            done = dict.fromkeys(self.agents, False)
            out = self._observations(), rewards, done, dict(done), self._infos()
        else:
            out = self._finish()
        if self.render_mode == "human":
            print(self.render())
        return out

    def _prepare_round(self) -> None:
        record = self._record
        assert record is not None and self._rng is not None
        self._pending = {}
        for agent in self.workflow.actors(self._round):
            req = self.workflow.request(agent, self._round, record.task, record.turns, self._rng)
            self._pending[agent] = self.prompts.render(req.template, req.values)

    def _observations(self) -> dict[str, dict]:
        return {a: {"messages": self._pending.get(a, _NO_MESSAGES)} for a in self.agents}

    def _infos(self) -> dict[str, dict]:
        return {
            a: {"active": a in self._pending, "round": self._round, "role": self.workflow.role(a)}
            for a in self.agents
        }

    def _finish(self):
        record = self._record
        assert record is not None
        task = record.task
        scorer: Reward
        if self.reward is None:  # label-free: the majority answer is the pseudo-label
            pseudo = majority_answer([t.answer for t in record.turns])
            task = Task(task.id, task.prompt, pseudo, task.source)
            scorer = self.label_free_reward
            for turn in record.turns:
                turn.score = scorer.score(task, turn.response) if pseudo is not None else 0.0
        else:
            scorer = self.reward

        answer_rule = self._rule
        workflow = self.workflow
        if answer_rule is not None:
            workflow = workflow.with_answer_key(functools.partial(answer_rule.answer_key, task))

        def score_answer(answer: str | None) -> float:
            if answer is None or task.answer is None:
                return 0.0
            if answer_rule is not None:
                return float(answer_rule.score_answer(task, answer))
            return float(scorer.score(task, "\\boxed{" + answer + "}"))

        record.final_answer = workflow.final_answer(record.turns, self._tie_order)
        record.outcome = score_answer(record.final_answer)
        rule = FinalAnswerRule(
            inputs=workflow.rule_inputs(record.turns),
            choose=functools.partial(workflow.final_rule, tie_order=self._tie_order),
            score=score_answer,
        )
        for turn, reward in zip(
            record.turns, checked_rewards(self.credit, record, rule), strict=True
        ):
            turn.reward = reward
        returns = dict.fromkeys(self.possible_agents, 0.0)
        for turn in record.turns:
            returns[turn.agent] += turn.reward
        record.agent_rewards = returns
        agents, self.agents, self._pending = self.agents, [], {}
        obs = {a: {"messages": _NO_MESSAGES} for a in agents}
        infos = {
            a: {
                "active": False,
                "round": self._round,
                "role": self.workflow.role(a),
                "episode": record,
            }
            for a in agents
        }
        done = dict.fromkeys(agents, True)
        return obs, {a: returns[a] for a in agents}, done, dict.fromkeys(agents, False), infos

    # -- rendering ------------------------------------------------------------------------------

    def render(self) -> str | None:
        if self.render_mode is None:
            return None
        record = self._record
        if record is None:
            return ""
        lines = [f"[{self.env_id}] task {record.task.id}: {record.task.prompt}"]
        for t in record.turns:
            lines.append(f"  round {t.round} {t.agent}: answer={t.answer!r} score={t.score:g}")
        if not self.agents:
            lines.append(f"  final={record.final_answer!r} outcome={record.outcome:g}")
        return "\n".join(lines)

    def close(self) -> None:
        pass


def _looks_like(key: Any, known: str) -> bool:
    """True if reset option ``key`` looks like a misspelling of ``known``: equal ignoring
    case and a trailing ``s``, or ``difflib``'s similarity ratio >= 0.6 (its default cutoff
    for close matches: ``tsak``, ``taks``)."""
    if not isinstance(key, str):
        return False
    folded = key.lower().rstrip("s")
    return folded == known or difflib.SequenceMatcher(None, key.lower(), known).ratio() >= 0.6


def _as_text(action: Any, agent: str) -> str:
    if isinstance(action, str):
        return action
    if isinstance(action, (bytes, bytearray)):
        return bytes(action).decode("utf-8", errors="replace")
    raise TypeError(f"action for agent '{agent}' must be a str, got {type(action).__name__}")
