"""Vector envs: ``num_envs`` copies of one env stepped in lockstep, for custom RL loops.

>>> import marti_env
>>> vec = marti_env.make_vec("mad-v0", num_envs=4, group_size=2, num_agents=2, rounds=2)
>>> requests, infos = vec.reset(seed=0)
>>> [(r.env, r.group, r.agent, r.round) for r in requests][:3]
[(0, 0, 'debater_0', 0), (0, 0, 'debater_1', 0), (1, 0, 'debater_0', 0)]
>>> while requests:  # one batch of episodes (NEXT_STEP autoreset waits for the next step)
...     requests, rewards, terminations, truncations, infos = vec.step(
...         ["\\\\boxed{4}"] * len(requests)
...     )
>>> rows = vec.pop_samples()  # one row per agent turn: 4 envs x 2 debaters x 2 rounds
>>> len(rows), rows[0].group_key == (rows[0].task_id, "debater_0", 0)
(16, True)

Shaped like Gymnasium's :func:`gymnasium.make_vec` / ``VectorEnv`` where text envs allow:

- ``reset(seed=, options=)`` returns ``(observations, infos)`` and ``step`` returns
  ``(observations, rewards, terminations, truncations, infos)``; ``terminations`` and
  ``truncations`` are ``bool[num_envs]`` arrays, true on the step an env's episode ended;
  ``infos`` is a dict of per-env lists or arrays, with a ``"_key"`` mask for partial keys.
- Autoreset modes are Gymnasium's :class:`~gymnasium.vector.AutoresetMode`, default
  ``NEXT_STEP``; ``metadata["autoreset_mode"]`` holds the mode; ``options["reset_mask"]``
  resets only some envs (Gymnasium 1.1+).

Where they differ, and why:

- **Observations are requests.** A batch of chat prompts is not an array, and only the
  *active* agents of a round need one, so the observation is the list of
  :class:`AgentRequest` ``(env, agent, messages)``: one per agent that must answer now,
  ordered by env index, then by the workflow's order of agents. ``step`` takes one
  response per request, in that order (or a mapping keyed by ``(env, agent)``).
- **Rewards are per agent**: ``rewards[i, k]`` is agent ``possible_agents[k]``'s reward
  in env ``i`` on this step (0 but on the episode's last step, then its return). Per-turn
  rewards are in the rows of :meth:`VecEnv.pop_samples`.
- **Groups.** Envs come in groups of ``group_size`` consecutive envs that pose the same
  task (a GRPO group). A reset draws one task per group from the env's task source,
  distinct within the draw while the source has enough tasks; autoresets and masked
  resets act on whole groups.
- **Seeds.** Gymnasium seeds sub-env ``i`` with ``seed + i`` once. Here ``reset(seed=s)``
  seeds the vector env's generator, which draws the tasks and one seed per episode, so
  *every* episode, autoreset ones included, records its task and seed
  (``EpisodeRecord.task``, ``.seed``) and replays alone with
  ``env.reset(seed=record.seed, options={"task": record.task})``.
- A finished env idles until it is reset (``NEXT_STEP``: on the next ``step``;
  ``DISABLED``: by ``reset(options={"reset_mask": ...})``); it has no request, so no
  generation is wasted on it, and a response addressed to it is an error.
- All sub-envs run in this process (text envs cost microseconds a step next to seconds
  of generation); there is no async or subprocess vectorization mode.

The sub-envs are shallow copies of one ``marti_env.make(env_id, **kwargs)`` env, as in
:func:`marti_trainer.rollout.rollout`: the workflow, prompts, reward and credit method
(with any state it keeps across episodes) are shared. Torch-free.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np
from gymnasium.vector import AutoresetMode

from marti_env.env import WorkflowEnv
from marti_env.record import EpisodeRecord, Message, TurnSample
from marti_env.tasks import Task

__all__ = ["AgentRequest", "AutoresetMode", "VecEnv", "VecStep", "make_vec"]

_RESET_OPTIONS = ("reset_mask", "seeds", "tasks")
_MAX_SEED = 2**63 - 1


@dataclass(frozen=True)
class AgentRequest:
    """One active agent's turn to answer: what the policy must generate for.

    Attributes:
        env: Index of the env in the vector env.
        group: Index of its group (``env // group_size``): the envs posing the same task.
        agent: The agent's name, e.g. ``"debater_0"``.
        round: The round the agent answers in, 0-based.
        messages: The chat messages to answer (its observation), ready for a chat template
            or ``Policy.generate``.
    """

    env: int
    group: int
    agent: str
    round: int
    messages: tuple[Message, ...]

    @property
    def key(self) -> tuple[int, str, int]:
        """``(env, agent, round)``; the row of this turn (:class:`TurnSample`) has the same."""
        return (self.env, self.agent, self.round)


class VecStep(NamedTuple):
    """What :meth:`VecEnv.step` returns; unpacks as Gymnasium's 5-tuple.

    Attributes:
        requests: The requests to answer next (:meth:`VecEnv.requests`).
        rewards: ``float[num_envs, num_agents]``, column ``k`` for ``possible_agents[k]``.
        terminations: ``bool[num_envs]``: the env's episode ended on this step.
        truncations: ``bool[num_envs]``: the env's episode was cut on this step (never, for
            the workflow envs: every episode lasts its workflow's rounds).
        infos: ``"episode"``: per env, the finished :class:`EpisodeRecord` or None, with the
            ``"_episode"`` mask; ``"_reset"``: the envs that started a new episode in
            this step (autoreset).
    """

    requests: list[AgentRequest]
    rewards: np.ndarray
    terminations: np.ndarray
    truncations: np.ndarray
    infos: dict[str, Any]


def make_vec(
    env_id: str,
    num_envs: int,
    group_size: int = 1,
    *,
    autoreset_mode: AutoresetMode | str = AutoresetMode.NEXT_STEP,
    **kwargs: Any,
) -> VecEnv:
    """``num_envs`` copies of a registered env, stepped together (see the module docstring).

    Args:
        env_id: A registered id such as ``"mad-v0"``.
        num_envs: How many envs, >= 1.
        group_size: Envs per group (consecutive envs that pose the same task), >= 1 and a
            divisor of ``num_envs``.
        autoreset_mode: A :class:`~gymnasium.vector.AutoresetMode` or its name
            (``"next_step"``, ``"same_step"``, ``"disabled"``). Gymnasium takes it in
            ``vector_kwargs``; here it is a keyword.
        **kwargs: The env's arguments, as for :func:`marti_env.make`.

    Raises:
        ValueError: a bad ``num_envs``, ``group_size`` or ``autoreset_mode``, or what
            :func:`marti_env.make` rejects.
    """
    from marti_env.registry import make

    if "api" in kwargs:
        raise ValueError("make_vec steps ParallelEnvs: 'api' is not an argument of make_vec")
    _check_sizes(num_envs, group_size)
    return VecEnv(make(env_id, **kwargs), num_envs, group_size, autoreset_mode=autoreset_mode)


def _check_sizes(num_envs: Any, group_size: Any) -> None:
    for name, value in (("num_envs", num_envs), ("group_size", group_size)):
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
            raise ValueError(f"{name} must be an integer >= 1, got {value!r}")
    if num_envs % group_size:
        raise ValueError(
            f"group_size={group_size} does not divide num_envs={num_envs}: every group of "
            f"group_size envs shares a task, so num_envs must be a multiple of it"
        )


def _autoreset_mode(mode: Any) -> AutoresetMode:
    if isinstance(mode, AutoresetMode):
        return mode
    if isinstance(mode, str):
        for member in AutoresetMode:
            if mode.lower() in (member.name.lower(), member.value.lower()):
                return member
    names = ", ".join(m.name.lower() for m in AutoresetMode)
    raise ValueError(f"autoreset_mode must be an AutoresetMode or one of {names}; got {mode!r}")


class VecEnv:
    """``num_envs`` copies of one :class:`~marti_env.env.WorkflowEnv` in groups that share a
    task; build it with :func:`make_vec` (see the module docstring for the protocol).

    Attributes:
        envs: The sub-envs (``WorkflowEnv``), ``envs[i]`` for env index ``i``.
        num_envs, group_size, num_groups: Sizes (``num_groups = num_envs // group_size``).
        possible_agents: The agents of every sub-env; the columns of ``rewards``.
        autoreset_mode: The :class:`~gymnasium.vector.AutoresetMode`.
        metadata: ``{"autoreset_mode": ..., "name": env_id}``.
    """

    def __init__(
        self,
        env: WorkflowEnv,
        num_envs: int,
        group_size: int = 1,
        *,
        autoreset_mode: AutoresetMode | str = AutoresetMode.NEXT_STEP,
    ) -> None:
        if not isinstance(env, WorkflowEnv):
            raise TypeError(
                f"VecEnv needs a marti WorkflowEnv (the parallel form), got {type(env).__name__}"
            )
        _check_sizes(num_envs, group_size)
        self.autoreset_mode = _autoreset_mode(autoreset_mode)
        self.num_envs = int(num_envs)
        self.group_size = int(group_size)
        self.num_groups = self.num_envs // self.group_size
        self.envs: list[WorkflowEnv] = [env] + [copy.copy(env) for _ in range(num_envs - 1)]
        self.possible_agents: list[str] = list(env.possible_agents)
        self.metadata = {"autoreset_mode": self.autoreset_mode, "name": env.env_id}
        self._agent_column = {a: k for k, a in enumerate(self.possible_agents)}
        self._rng = np.random.default_rng()
        self._obs: list[dict[str, dict] | None] = [None] * self.num_envs
        self._running = np.zeros(self.num_envs, dtype=bool)
        self._awaiting_reset = np.zeros(self.num_envs, dtype=bool)
        self._requests: list[AgentRequest] = []
        self._finished: list[tuple[int, EpisodeRecord]] = []
        self._started = False

    # -- spaces and state ---------------------------------------------------------------------

    def observation_space(self, agent: str) -> Any:
        """One env's observation space of ``agent`` (every sub-env has the same)."""
        return self.envs[0].observation_space(agent)

    def action_space(self, agent: str) -> Any:
        """One env's action space of ``agent``."""
        return self.envs[0].action_space(agent)

    @property
    def running(self) -> np.ndarray:
        """``bool[num_envs]``: the envs with an episode in progress (they have requests,
        or step without one in a round their agents sit out)."""
        return self._running.copy()

    def requests(self) -> list[AgentRequest]:
        """Every active agent of every running env, by env index, then in the workflow's
        order of agents: the prompts to generate for, in the order ``step`` takes the
        responses. Empty once every episode has ended (``NEXT_STEP`` and ``DISABLED``)."""
        return list(self._requests)

    def pop_samples(self) -> list[TurnSample]:
        """The rows of every episode that ended since the last call (or the last full
        reset): one :class:`~marti_env.record.TurnSample` per turn, ordered by the step the
        episode ended, then env index, then turn. The vector env then forgets them."""
        finished, self._finished = self._finished, []
        rows: list[TurnSample] = []
        for env, record in finished:
            rows.extend(record.samples(env=env, group=env // self.group_size))
        return rows

    # -- reset and step ---------------------------------------------------------------------

    def reset(
        self, seed: int | None = None, options: Mapping[str, Any] | None = None
    ) -> tuple[list[AgentRequest], dict[str, Any]]:
        """Start new episodes, in every env or (``options["reset_mask"]``) in some groups.

        Args:
            seed: Seeds the vector env's generator, which draws each group's task (distinct
                within one draw while the task source has enough) and each episode's
                reset seed. ``None`` continues its current state (OS entropy at first).
            options: ``"reset_mask"``: ``bool[num_envs]`` selecting whole groups (the other
                envs keep their episodes and rows). ``"tasks"``: one :class:`Task` per
                selected group, posed instead of drawn. ``"seeds"``: one ``int`` per
                selected env, its episode's reset seed instead of a drawn one.

        Returns:
            ``(requests, infos)``: :meth:`requests`, and ``infos = {"task": [...], "seed":
            int64[num_envs], "_reset": bool[num_envs]}`` (per env: its current task and
            episode seed; the mask of the envs reset now).

        Raises:
            ValueError: an unknown option, a mask that splits a group, or a count of tasks
                or seeds that does not match the selected groups or envs.
            TypeError: a task that is not a :class:`Task`.
        """
        options = dict(options or {})
        unknown = sorted(str(k) for k in options if k not in _RESET_OPTIONS)
        if unknown:
            raise ValueError(f"unknown reset option(s) {unknown}; known: {list(_RESET_OPTIONS)}")
        mask = self._reset_mask(options.get("reset_mask"))
        groups = sorted({i // self.group_size for i in np.flatnonzero(mask)})
        tasks = options.get("tasks")
        if tasks is not None:
            tasks = list(tasks)
            if len(tasks) != len(groups):
                raise ValueError(
                    f"options['tasks'] has {len(tasks)} tasks for {len(groups)} group(s) "
                    f"being reset: give one Task per group of {self.group_size} envs"
                )
            for k, task in enumerate(tasks):
                if not isinstance(task, Task):
                    raise TypeError(f"options['tasks'][{k}] is not a Task: {task!r}")
        seeds = options.get("seeds")
        if seeds is not None:
            seeds = list(seeds)
            if len(seeds) != int(mask.sum()):
                raise ValueError(
                    f"options['seeds'] has {len(seeds)} seeds for {int(mask.sum())} env(s) "
                    "being reset: give one per env"
                )
            for k, s in enumerate(seeds):
                if isinstance(s, bool) or not isinstance(s, (int, np.integer)) or s < 0:
                    raise ValueError(f"options['seeds'][{k}] must be an int >= 0, got {s!r}")
        if seed is not None:
            self._rng = np.random.default_rng(seed)
        if mask.all():
            self._finished = []
        self._started = False  # until every selected env is reset (a failure leaves it so)
        self._reset_groups(groups, tasks, seeds)
        self._started = True
        self._requests = self._build_requests()
        infos = {
            "task": [env.record.task if env.record else None for env in self.envs],
            "seed": np.array(
                [env.record.seed if env.record else -1 for env in self.envs], dtype=np.int64
            ),
            "_reset": mask,
        }
        return self.requests(), infos

    def step(self, responses: Sequence[str] | Mapping[tuple[int, str], str]) -> VecStep:
        """Answer every request and advance every running env by one round.

        Args:
            responses: One ``str`` per request of :meth:`requests`, in that order; or a
                mapping ``{(env, agent): str}`` with exactly the requests' keys.

        Returns:
            A :class:`VecStep` ``(requests, rewards, terminations, truncations, infos)``.
            Envs whose episode ended are reset on the next step (``NEXT_STEP``), in this
            step (``SAME_STEP``: their new requests are already in ``requests``) or by
            ``reset`` (``DISABLED``); their records are in ``infos["episode"]`` and their
            rows in :meth:`pop_samples`.

        Raises:
            RuntimeError: ``step`` before ``reset``, or (``DISABLED``) every episode ended.
            ValueError: a response count that does not match the requests, or a mapping
                with a key that is not a request (an env whose episode ended, an agent not
                asked this round) or without one; nothing is stepped then.
            TypeError: a response that is not a ``str``.
        """
        if not self._started:
            raise RuntimeError("step() before reset(): call reset() first")
        if not self._running.any() and not self._awaiting_reset.any():
            raise RuntimeError(
                "every episode has ended and autoreset_mode is DISABLED: call reset() "
                "(options={'reset_mask': ...} resets some groups)"
            )
        texts = self._match(responses)
        actions: dict[int, dict[str, str]] = {}
        for request, text in zip(self._requests, texts, strict=True):
            actions.setdefault(request.env, {})[request.agent] = text
        reset_now = np.zeros(self.num_envs, dtype=bool)
        if self._awaiting_reset.any():  # NEXT_STEP: the envs that ended last step
            reset_now |= self._awaiting_reset
            self._autoreset(self._awaiting_reset)
        rewards = np.zeros((self.num_envs, len(self.possible_agents)))
        terminations = np.zeros(self.num_envs, dtype=bool)
        truncations = np.zeros(self.num_envs, dtype=bool)
        episodes: list[EpisodeRecord | None] = [None] * self.num_envs
        for i in np.flatnonzero(self._running & ~reset_now):
            env = self.envs[i]
            obs, rew, terms, truncs, infos = env.step(actions.get(int(i), {}))
            self._obs[i] = obs
            for agent, value in rew.items():
                rewards[i, self._agent_column[agent]] = value
            if not env.agents:
                terminations[i] = any(terms.values())
                truncations[i] = any(truncs.values())
                record = infos[next(iter(infos))]["episode"]
                episodes[i] = record
                self._finished.append((int(i), record))
                self._running[i] = False
        ended = terminations | truncations
        if ended.any():
            if self.autoreset_mode is AutoresetMode.NEXT_STEP:
                self._awaiting_reset = ended.copy()
            elif self.autoreset_mode is AutoresetMode.SAME_STEP:
                reset_now |= ended
                self._autoreset(ended)
        self._requests = self._build_requests()
        infos_out: dict[str, Any] = {
            "episode": episodes,
            "_episode": ended,
            "_reset": reset_now,
        }
        return VecStep(self.requests(), rewards, terminations, truncations, infos_out)

    def close(self) -> None:
        for env in self.envs:
            env.close()

    def __repr__(self) -> str:
        return (
            f"VecEnv({self.metadata['name']}, num_envs={self.num_envs}, "
            f"group_size={self.group_size}, autoreset_mode={self.autoreset_mode.name})"
        )

    # -- internals ----------------------------------------------------------------------------

    def _reset_mask(self, mask: Any) -> np.ndarray:
        if mask is None:
            return np.ones(self.num_envs, dtype=bool)
        mask = np.asarray(mask)
        if mask.dtype != np.bool_ or mask.shape != (self.num_envs,):
            raise ValueError(
                f"options['reset_mask'] must be a bool array of shape ({self.num_envs},), got "
                f"dtype {mask.dtype} and shape {mask.shape}"
            )
        if not mask.any():
            raise ValueError("options['reset_mask'] selects no env")
        by_group = mask.reshape(self.num_groups, self.group_size)
        split = [g for g in range(self.num_groups) if 0 < by_group[g].sum() < self.group_size]
        if split:
            raise ValueError(
                f"options['reset_mask'] splits group(s) {split}: the {self.group_size} envs of "
                "a group share a task and are reset together"
            )
        return mask.copy()

    def _autoreset(self, mask: np.ndarray) -> None:
        groups = sorted({i // self.group_size for i in np.flatnonzero(mask)})
        self._reset_groups(groups, None, None)
        self._awaiting_reset &= ~mask

    def _reset_groups(
        self, groups: list[int], tasks: list[Task] | None, seeds: list[int] | None
    ) -> None:
        if tasks is None:
            tasks = self._draw_tasks(len(groups))
        n = len(groups) * self.group_size
        if seeds is None:
            seeds = [int(s) for s in self._rng.integers(0, _MAX_SEED, size=n)]
        envs = [g * self.group_size + k for g in groups for k in range(self.group_size)]
        for pos, i in enumerate(envs):
            task = tasks[pos // self.group_size]
            obs, _ = self.envs[i].reset(seed=int(seeds[pos]), options={"task": task})
            self._obs[i] = obs
            self._running[i] = True
            self._awaiting_reset[i] = False

    def _draw_tasks(self, n: int) -> list[Task]:
        """``n`` tasks of the env's source, distinct if it has at least ``n``."""
        source = self.envs[0].tasks
        size = len(source)
        picks = self._rng.choice(size, size=n, replace=size < n)
        return [source[int(k)] for k in picks]

    def _build_requests(self) -> list[AgentRequest]:
        out = []
        for i in np.flatnonzero(self._running):
            env = self.envs[i]
            obs = self._obs[i]
            assert obs is not None
            for agent in env.active_agents:
                out.append(
                    AgentRequest(
                        env=int(i),
                        group=int(i) // self.group_size,
                        agent=agent,
                        round=env.round,
                        messages=tuple(obs[agent]["messages"]),
                    )
                )
        return out

    def _match(self, responses: Any) -> list[str]:
        """The response text of each request, in order; every check before any env steps."""
        requests = self._requests
        if isinstance(responses, Mapping):
            wanted = {(r.env, r.agent): k for k, r in enumerate(requests)}
            for key in responses:
                if key not in wanted:
                    raise ValueError(self._not_a_request(key))
            missing = [key for key in wanted if key not in responses]
            if missing:
                more = f" and {len(missing) - 5} more" if len(missing) > 5 else ""
                raise ValueError(f"no response for request(s) {missing[:5]}{more}")
            texts = [responses[(r.env, r.agent)] for r in requests]
        elif isinstance(responses, (str, bytes)):
            raise TypeError(
                "responses must be a sequence of one str per request (or a mapping "
                "{(env, agent): str}), got a single string"
            )
        else:
            texts = list(responses)
            if len(texts) != len(requests):
                raise ValueError(
                    f"got {len(texts)} responses for {len(requests)} requests: step() takes "
                    "one response per request of requests(), in the same order"
                )
        for k, (request, text) in enumerate(zip(requests, texts, strict=True)):
            if not isinstance(text, str):
                raise TypeError(
                    f"response {k} (env {request.env}, agent {request.agent!r}) must be a "
                    f"str, got {type(text).__name__}"
                )
        return texts

    def _not_a_request(self, key: Any) -> str:
        if not (isinstance(key, tuple) and len(key) == 2):
            return f"response keys must be (env index, agent) pairs, got {key!r}"
        env, agent = key
        if not isinstance(env, (int, np.integer)) or not 0 <= env < self.num_envs:
            return f"a response for env {env!r}, which does not exist (num_envs={self.num_envs})"
        if not self._running[env]:
            return (
                f"a response for env {env}, whose episode has ended: it has no request until "
                "it is reset"
            )
        if agent not in self._agent_column:
            return f"a response for unknown agent {agent!r} of env {env}"
        return (
            f"a response for agent {agent!r} of env {env}, which does not act in round "
            f"{self.envs[env].round} (active: {self.envs[env].active_agents})"
        )
