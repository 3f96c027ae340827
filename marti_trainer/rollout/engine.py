"""The rollout engine: run batches of episodes of any env with LLM policies.

``rollout(env_id, tasks, n_samples, policies)`` runs ``n_samples`` episodes of every task
and returns a :class:`~marti_trainer.rollout.samples.RolloutBatch`: one
:class:`~marti_trainer.rollout.samples.Sample` per generation (prompt and response token
ids, sampling log-probs, credited reward, group key) and the episode records.

Model of concurrency
--------------------
One *scheduler* (the calling thread) owns every env: it resets them, turns each active agent
of each running episode into a request (the env's observation *is* the chat prompt), and
steps an episode when all of its round's generations have returned. Env work (including
answer verification) therefore always runs on the calling thread. Generation runs in
*drivers* (:mod:`marti_trainer.rollout.drivers`), one per distinct policy object, each in
its own thread(s) or behind the backend's own futures; results come back through one
queue. At most ``max_concurrency`` requests are in flight (handed to a driver and not yet
returned) at any time, over all drivers; the others wait in a queue served **lowest round
first** (then first come, first served). All episodes start at once in both modes.

``mode="sync"`` (MARTI's synchronous world): round ``r + 1`` of any episode starts only when
round ``r`` of *every* episode has returned (a barrier per round across the batch). With a
``batch`` driver and ``max_concurrency`` at least the round's request count, that is one
batched ``generate`` call per (policy, adapter) per round.

``mode="async"``: an episode steps as soon as its own round has returned, and its next
requests are queued at once; they are served as soon as a slot is free and no request of an
earlier round is waiting. So async is sync without the barrier: no slot idles while a
round's slowest response finishes, yet lower rounds keep the priority that balances load.
(Starting episodes only as slots free up, depth first, was up to 10% *slower* than sync in
replays of the default model's measured response lengths: a few episodes with long
responses in every round then run last, alone.) The gain needs a driver that returns each
request as soon as it is done (``concurrent``, ``continuous``).

Both modes give the same episodes for the same ``seed``: episode ``i`` of task ``j`` is
reset with ``env_seed(seed, j, i)`` and each request samples with its own
``request_seed(seed, j, i, round, agent)`` (:mod:`~marti_trainer.rollout.seeds`), so
scheduling order cannot change what is sampled. The one caveat is floating point: a
backend whose numerics depend on batch composition (the ``hf`` backend in bf16 flips a token
in most long samples when the batch changes; fp32 is stable in practice) gives the same
episodes only up to those flips. With a continuous driver the batch a request joins depends
on when it arrives: handed over as a slot frees, it would join whichever decode step is
running at that moment. So in sync mode, when every driver is ``continuous``, each round
(round 0 after all episodes are reset) goes to the drivers in one submission, whatever its
size, and each driver decodes at most ``max_concurrency`` rows at a time (the bound is then
per driver) and admits its waiting requests itself as rows finish, at decode steps fixed by
token counts alone: the batches, and so the bf16 numbers, repeat run to run. An async
rollout hands requests over as slots free, so in bf16 it repeats only up to those flips.

Each running episode holds one env instance: the first is built with
``marti_env.make(env_id, **env_kwargs)``, the others are shallow copies of it (``reset``
re-creates all per-episode state), reused for later episodes. So the workflow, prompts,
reward and **credit method object are shared by all episodes of a rollout**: a credit
method that keeps state across episodes (a running window) sees them in the order they
finish, which in async mode depends on timing (in sync mode it is the episode order). Pass
one ``CreditMethod`` object in ``env_kwargs["credit"]`` to carry its state across rollouts.
"""

from __future__ import annotations

import copy
import dataclasses
import heapq
import itertools
import queue
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import marti_env
from marti_env.credit.replay import (
    ReplayCreditMethod,
    ReplayOutcome,
    credit_by_replay,
    is_replay_method,
    resampled_turn,
    trains_on_siblings,
)
from marti_env.env import WorkflowEnv
from marti_env.record import EpisodeRecord
from marti_env.replay import ReplayPolicy, ReplayRequest
from marti_env.tasks import ListTasks, Task, TaskSource
from marti_trainer.policies.base import Generation, Message, Policy, SamplingParams
from marti_trainer.rollout.drivers import (
    DRIVER_KINDS,
    Driver,
    DriverKind,
    GenerationRequest,
    generate_each,
    make_driver,
)
from marti_trainer.rollout.samples import RolloutBatch, RolloutStats, Sample
from marti_trainer.rollout.seeds import derive_seed, env_seed, request_seed

__all__ = ["PolicySpec", "RolloutError", "rollout"]

PolicySpec = Policy | tuple[Policy, str | None]
"""A policy, or ``(policy, adapter_name)`` for one LoRA adapter of a shared base model."""

_REPLAY = 3  # domain tag of replay seeds (env and request seeds use 1 and 2)

SHARED = "policy"
"""The name samples carry when one policy serves every agent."""


class RolloutError(RuntimeError):
    """A generation request failed or timed out during a rollout.

    Attributes:
        env_id: The environment.
        episode: Episode index in the batch (``task_index * n_samples + sample_index``).
        task_id: The episode's task.
        agent: The agent whose request failed.
        round: The round of the request.
        request: A readable name of the request (``"episode 3 round 1 agent debater_0"``).
    """

    def __init__(
        self, message: str, *, env_id: str, episode: int, task_id: str, agent: str, round: int
    ) -> None:
        super().__init__(message)
        self.env_id = env_id
        self.episode = episode
        self.task_id = task_id
        self.agent = agent
        self.round = round
        self.request = f"episode {episode} round {round} agent {agent}"


@dataclass(frozen=True)
class _Route:
    """Where an agent's requests go."""

    name: str
    policy: Policy
    adapter: str | None
    params: SamplingParams


@dataclass(eq=False)
class _Episode:
    index: int
    task_index: int
    sample_index: int
    task: Task
    env: Any
    seed: int
    round: int = 0
    waiting: dict[str, GenerationRequest] = field(default_factory=dict)
    results: dict[str, Generation] = field(default_factory=dict)
    done: list[tuple[str, int, Generation, float]] = field(default_factory=list)
    """(agent, round, generation, latency in s) of every returned request, in order."""


@dataclass(frozen=True)
class _Tag:
    """What a request belongs to (carried through the drivers)."""

    episode: _Episode
    agent: str
    round: int
    route: _Route


def rollout(
    env_id: str,
    tasks: Sequence[Task] | TaskSource,
    n_samples: int,
    policies: PolicySpec | Mapping[str, PolicySpec],
    sampling: SamplingParams | Mapping[str, SamplingParams] | None = None,
    *,
    mode: Literal["sync", "async"] = "async",
    max_concurrency: int = 32,
    seed: int = 0,
    env_kwargs: Mapping[str, Any] | None = None,
    progress: bool = True,
    transcript_path: str | Path | None = None,
    request_timeout_s: float | None = None,
    driver: DriverKind = "auto",
    replay_credit: ReplayCreditMethod | None = None,
) -> RolloutBatch:
    """Run ``n_samples`` episodes of every task and collect the samples.

    Args:
        env_id: A registered env id (``"mad-v0"``, ``"chain-v0"``, ``"single-v0"``...).
        tasks: The tasks; task ids must be unique (they are part of the group key).
        n_samples: Episodes per task (the group size of group-relative advantages), >= 1.
        policies: One policy for every agent; or a mapping from agent name (or role name)
            to a policy or ``(policy, adapter)`` for LoRA-per-agent. Agent names take
            precedence over role names; every agent must be covered.
        sampling: Sampling parameters for every agent, or a mapping agent/role ->
            parameters (every agent covered). ``n`` must be 1 (an episode is one sample);
            ``seed`` is replaced by the derived per-request seed. Default:
            ``SamplingParams()`` (temperature 1, 256 new tokens).
        mode: ``"sync"`` (a barrier per round across the batch) or ``"async"`` (each
            episode advances on its own); see the module docstring.
        max_concurrency: Requests in flight at most, over all policies (>= 1). Also the
            size of thread pools and of the continuous HF batch. In sync mode with
            continuous drivers it bounds each driver's decode batch instead, and a driver
            holds the rest of a round itself (see "Both modes" above).
        seed: Root seed; see :mod:`marti_trainer.rollout.seeds`.
        env_kwargs: Overrides for ``marti_env.make`` (e.g. ``{"num_agents": 2}``);
            ``tasks`` defaults to the given tasks.
        progress: Show a tqdm progress bar of finished episodes.
        transcript_path: If set, append every episode record to this JSONL file at the end.
        request_timeout_s: Fail when a request has been in flight longer than this (seconds;
            queueing inside the backend included). None waits forever.
        driver: How requests reach each policy (``"auto"``, ``"concurrent"``,
            ``"continuous"``, ``"batch"``); see :mod:`marti_trainer.rollout.drivers`.
        replay_credit: A credit method that re-executes episodes
            (:mod:`marti_env.credit.replay`). The episodes run with ``credit="none"``,
            then the method's replays are generated by the same policies and sampling
            parameters (one batched call per policy and round, in lockstep;
            :func:`_replay_policy`), and its rewards replace the samples' rewards. The
            replays' cost is in ``stats.replay_generations`` and ``replay_tokens``.

    Returns:
        The samples (sorted by episode, then turn), the episode records (``episodes[e]`` is
        sample ``e % n_samples`` of task ``e // n_samples``) and stats. Every turn's
        ``meta`` has ``truncated`` (True iff the generation hit ``max_tokens``),
        ``finish_reason``, ``prompt_tokens``, ``response_tokens`` and ``policy``.

    Raises:
        ValueError: bad arguments (unknown env, agent without a policy, duplicate task ids,
            ``n != 1``...), raised before anything is generated.
        RolloutError: a request failed or timed out; names the env, episode, task, agent
            and round. The cause is chained. Nothing is returned for the other episodes.
    """
    task_list = _task_list(tasks)
    if isinstance(n_samples, bool) or not isinstance(n_samples, int) or n_samples < 1:
        raise ValueError(f"n_samples must be an int >= 1, got {n_samples!r}")
    if mode not in ("sync", "async"):
        raise ValueError(f"mode must be 'sync' or 'async', got {mode!r}")
    if (
        isinstance(max_concurrency, bool)
        or not isinstance(max_concurrency, int)
        or max_concurrency < 1
    ):
        raise ValueError(f"max_concurrency must be an int >= 1, got {max_concurrency!r}")
    if request_timeout_s is not None and not request_timeout_s > 0:
        raise ValueError(f"request_timeout_s must be > 0 or None, got {request_timeout_s!r}")
    if driver not in DRIVER_KINDS:
        raise ValueError(f"driver must be one of {DRIVER_KINDS}, got {driver!r}")
    kwargs = dict(env_kwargs or {})
    kwargs.setdefault("tasks", ListTasks(task_list, name="rollout"))
    if replay_credit is not None:
        if not is_replay_method(replay_credit):
            raise ValueError(
                f"replay_credit '{replay_credit.name}' does not re-execute episodes; pass it "
                "as env_kwargs['credit']"
            )
        if kwargs.get("credit", "none") != "none":
            raise ValueError(
                f"replay_credit '{replay_credit.name}' credits the episodes itself: leave "
                f"env_kwargs['credit'] unset or 'none', not {kwargs['credit']!r}"
            )
        kwargs["credit"] = "none"
    probe = marti_env.make(env_id, **kwargs)
    routes = _routes(probe, policies, sampling if sampling is not None else SamplingParams())
    runner = _Runner(
        env_id=env_id,
        env_kwargs=kwargs,
        tasks=task_list,
        n_samples=n_samples,
        routes=routes,
        agents=list(probe.possible_agents),
        mode=mode,
        max_concurrency=max_concurrency,
        seed=seed,
        progress=progress,
        timeout_s=request_timeout_s,
        driver=driver,
        first_env=probe,
    )
    batch = runner.run()
    if replay_credit is not None:
        _credit_by_replay(batch, probe, replay_credit, routes, seed)
    if transcript_path is not None:
        batch.write_transcripts(transcript_path, append=True)
    return batch


def _replay_policy(
    routes: Mapping[str, _Route],
    seed: int,
    stats: RolloutStats,
    keep: dict[tuple[int, str, int], Generation | None] | None = None,
) -> ReplayPolicy:
    """The rollout's policies as a replay policy. Each call (one round of every replay in
    flight) samples every request with its own seed,
    ``derive_seed(_REPLAY, seed, call, job, agent index, round)``, so the siblings of one turn
    and the replays of a GRPO group's identical prompts are independent draws; the requests
    of one (policy, adapter) go out in as few batched calls as the backend allows
    (:func:`~marti_trainer.rollout.drivers.generate_each`). Generated tokens are counted;
    ``keep``'s keys ``(job, agent, round)`` name the requests whose generations to keep
    (their values are filled in)."""
    calls = [0]
    agent_index = {a: i for i, a in enumerate(routes)}

    def policy(requests: Sequence[ReplayRequest]) -> list[str]:
        calls[0] += 1
        groups: dict[tuple[int, str | None], list[int]] = {}
        for i, q in enumerate(requests):
            route = routes[q.agent]
            groups.setdefault((id(route.policy), route.adapter), []).append(i)
        out: list[str] = [""] * len(requests)
        for rows in groups.values():
            route = routes[requests[rows[0]].agent]
            params = [
                _replay_params(routes, requests[i], seed, calls[0], agent_index) for i in rows
            ]
            generations = generate_each(
                route.policy, [list(requests[i].messages) for i in rows], params, route.adapter
            )
            for i, gen in zip(rows, generations, strict=True):
                out[i] = gen.text
                stats.replay_tokens += len(gen.token_ids)
                key = (requests[i].job, requests[i].agent, requests[i].round)
                if keep is not None and key in keep:
                    keep[key] = gen
        return out

    return policy


def _replay_params(
    routes: Mapping[str, _Route], q: ReplayRequest, seed: int, call: int, index: Mapping[str, int]
) -> SamplingParams:
    """The agent's sampling parameters with the request's own replay seed."""
    seed_q = derive_seed(_REPLAY, seed, call, q.job, index[q.agent], q.round)
    return dataclasses.replace(routes[q.agent].params, seed=seed_q)


def _credit_by_replay(
    batch: RolloutBatch,
    env: Any,
    method: ReplayCreditMethod,
    routes: Mapping[str, _Route],
    seed: int,
) -> None:
    """Credit ``batch``'s episodes with a replay method and copy its rewards to the samples;
    ``sibling`` with ``train=True`` also adds each sibling as a sample (:func:`_siblings`)."""
    start = time.perf_counter()
    keep: dict[tuple[int, str, int], Generation | None] | None = None
    replays: list[ReplayOutcome] | None = None
    if trains_on_siblings(method):  # keep each sibling's own turn, not what followed it
        plan = [c for record in batch.episodes for c in method.interventions(record)]
        keep = {(job, *turn): None for job, c in enumerate(plan) for turn in c.turns}
        replays = []
    batch.stats.replay_generations = credit_by_replay(
        env, batch.episodes, method, _replay_policy(routes, seed, batch.stats, keep),
        replays=replays,
    )  # fmt: skip
    reward = {
        (e, t.agent, t.round): t.reward for e, rec in enumerate(batch.episodes) for t in rec.turns
    }
    for sample in batch.samples:
        sample.reward = reward[(sample.episode, sample.agent, sample.round)]
    if keep is not None and replays is not None:
        batch.samples = _siblings(batch.samples, replays, keep, routes)
    spent = time.perf_counter() - start
    batch.stats.replay_s = spent
    batch.stats.wall_s += spent
    batch.stats.backend_s += spent  # the replays are generation time, not idle host time


def _siblings(
    samples: list[Sample],
    replays: Sequence[ReplayOutcome],
    generations: Mapping[tuple[int, str, int], Generation | None],
    routes: Mapping[str, _Route],
) -> list[Sample]:
    """``samples`` with one more sample per sibling replay: the resampled turn's generation
    (the replay's request for that agent and round), reward the replay's outcome, score its
    turn's score, ``branch`` k >= 1 among the turn's siblings; sorted by episode, turn and
    branch, so each sibling follows its turn."""
    own = {(s.episode, s.agent, s.round): s for s in samples}
    out = list(samples)
    branches: dict[tuple[int, str, int], int] = {}
    for job, r in enumerate(replays):
        agent, rnd = resampled_turn(r)
        turn = own[(r.record, agent, rnd)]
        gen = generations[(job, agent, rnd)]
        if gen is None:  # the replay resampled a turn the policy was never asked for
            raise RuntimeError(f"sibling replay {job} has no generation for {agent}, round {rnd}")
        k = branches[(r.record, agent, rnd)] = branches.get((r.record, agent, rnd), 0) + 1
        score = next(t.score for t in r.replay.turns if (t.agent, t.round) == (agent, rnd))
        out.append(
            dataclasses.replace(
                turn, prompt_token_ids=list(gen.prompt_token_ids),
                response_token_ids=list(gen.token_ids), logprobs=list(gen.logprobs),
                truncated=gen.finish_reason == "length", score=score,
                reward=float(r.replay.outcome), policy=routes[agent].name,
                adapter=routes[agent].adapter, latency_s=0.0, branch=k,
            )
        )  # fmt: skip
    return sorted(out, key=lambda s: (s.episode, s.turn_index, s.branch))


def _task_list(tasks: Sequence[Task] | TaskSource) -> list[Task]:
    if isinstance(tasks, (Task, str, bytes)):
        raise ValueError("tasks must be a sequence of Task (or a TaskSource), not a single value")
    task_list = list(tasks)
    if not task_list:
        raise ValueError("tasks is empty")
    bad = [i for i, t in enumerate(task_list) if not isinstance(t, Task)]
    if bad:
        raise ValueError(f"tasks[{bad[0]}] is not a Task: {task_list[bad[0]]!r}")
    seen: set[str] = set()
    for t in task_list:
        if t.id in seen:
            raise ValueError(f"duplicate task id {t.id!r}: task ids are part of the group key")
        seen.add(t.id)
    return task_list


def _lookup(
    what: str, table: Mapping[str, Any], agents: Sequence[str], roles: Mapping[str, str]
) -> dict[str, tuple[str, Any]]:
    """agent -> (key used, value) from a mapping keyed by agent or role names."""
    known = set(agents) | set(roles.values())
    unknown = sorted(k for k in table if k not in known)
    if unknown:
        raise ValueError(
            f"{what}: unknown agent/role name(s) {unknown}; agents: {list(agents)}, "
            f"roles: {sorted(set(roles.values()))}"
        )
    out = {}
    missing = []
    for agent in agents:
        if agent in table:
            out[agent] = (agent, table[agent])
        elif roles[agent] in table:
            out[agent] = (roles[agent], table[roles[agent]])
        else:
            missing.append(agent)
    if missing:
        raise ValueError(f"{what}: no entry for agent(s) {missing} (by agent or role name)")
    return out


def _routes(
    env: Any,
    policies: PolicySpec | Mapping[str, PolicySpec],
    sampling: SamplingParams | Mapping[str, SamplingParams],
) -> dict[str, _Route]:
    agents = list(env.possible_agents)
    roles = {a: env.workflow.role(a) for a in agents}
    if isinstance(policies, Mapping):
        chosen = _lookup("policies", policies, agents, roles)
    else:
        chosen = {a: (SHARED, policies) for a in agents}
    if isinstance(sampling, Mapping):
        params = {a: p for a, (_, p) in _lookup("sampling", sampling, agents, roles).items()}
    else:
        params = dict.fromkeys(agents, sampling)
    routes = {}
    for agent in agents:
        name, spec = chosen[agent]
        adapter = None
        if isinstance(spec, tuple):
            if len(spec) != 2:
                raise ValueError(f"policies[{name!r}] must be a Policy or (Policy, adapter name)")
            spec, adapter = spec
        if not isinstance(spec, Policy):
            raise ValueError(f"policies[{name!r}] is not a Policy: {type(spec).__name__}")
        p = params[agent]
        if not isinstance(p, SamplingParams):
            raise ValueError(f"sampling for agent {agent!r} is not SamplingParams: {p!r}")
        if p.n != 1:
            raise ValueError(
                f"sampling for agent {agent!r} has n={p.n}; an episode is one sample per "
                "request: use n=1 and n_samples episodes per task"
            )
        routes[agent] = _Route(name, spec, adapter, p)
    return routes


class _Runner:
    """One rollout: the scheduler state machine (see the module docstring)."""

    def __init__(
        self,
        *,
        env_id: str,
        env_kwargs: dict[str, Any],
        tasks: list[Task],
        n_samples: int,
        routes: dict[str, _Route],
        agents: list[str],
        mode: str,
        max_concurrency: int,
        seed: int,
        progress: bool,
        timeout_s: float | None,
        driver: DriverKind,
        first_env: Any,
    ) -> None:
        self.env_id = env_id
        self.env_kwargs = env_kwargs
        self.tasks = tasks
        self.n = n_samples
        self.routes = routes
        self.agent_index = {a: k for k, a in enumerate(agents)}
        self.mode = mode
        self.limit = max_concurrency
        self.seed = seed
        self.progress = progress
        self.timeout_s = timeout_s
        self.driver_kind = driver
        self.prototype = first_env
        self.free_envs: list[Any] = [first_env]
        self.num_episodes = len(tasks) * n_samples
        self.records: list[EpisodeRecord | None] = [None] * self.num_episodes
        self.samples: list[Sample] = []
        self.ready: list[tuple[int, int, GenerationRequest]] = []  # heap of (round, seq, request)
        self.seq = itertools.count()
        self.inflight: dict[int, GenerationRequest] = {}  # id(request) -> request
        self.results: queue.SimpleQueue[
            tuple[GenerationRequest, Generation | None, BaseException | None]
        ] = queue.SimpleQueue()
        self.drivers: dict[int, Driver] = {}
        self.next_episode = 0
        self.finished = 0
        self.barrier: list[_Episode] = []  # sync: episodes whose round returned
        self.stats = RolloutStats(mode=mode, max_concurrency=max_concurrency)
        self._busy_since: float | None = None

    # -- main loop --------------------------------------------------------------------------

    def run(self) -> RolloutBatch:
        start = time.perf_counter()
        waited = 0.0
        bar = _progress_bar(self.num_episodes, f"{self.env_id} {self.mode}", self.progress)
        try:
            for route in self.routes.values():
                key = id(route.policy)
                if key not in self.drivers:
                    self.drivers[key] = make_driver(
                        self.driver_kind, route.policy, self._on_done, self.limit
                    )
            while self.next_episode < self.num_episodes:
                self._start_episode()
            self._dispatch()  # round 0 in one submission (see "Both modes" above)
            while self.finished < self.num_episodes:
                self._dispatch()
                t0 = time.perf_counter()
                item = self._wait()
                waited += time.perf_counter() - t0
                self._handle(*item)
                while True:  # drain whatever else already returned
                    try:
                        item = self.results.get_nowait()
                    except queue.Empty:
                        break
                    self._handle(*item)
                if self.mode == "sync" and not self.inflight and not self.ready:
                    for episode in sorted(self.barrier, key=lambda e: e.index):
                        self._step(episode)
                    self.barrier.clear()
                if bar is not None:
                    bar.n = self.finished
                    bar.set_postfix(tok=self.stats.tokens_generated, refresh=False)
                    bar.update(0)
        finally:
            for d in self.drivers.values():
                d.close()
                for route in self.routes.values():  # under every name the policy serves
                    if route.policy is d.policy:
                        self.stats.drivers[route.name] = {"kind": d.kind, **getattr(d, "stats", {})}
            if bar is not None:
                bar.close()
        end = time.perf_counter()
        self.stats.wall_s = end - start
        self.stats.host_s = self.stats.wall_s - waited
        self.stats.num_episodes = self.num_episodes
        self.samples.sort(key=lambda s: (s.episode, s.turn_index))
        return RolloutBatch(
            env_id=self.env_id,
            n_samples=self.n,
            samples=self.samples,
            episodes=list(self.records),  # type: ignore[arg-type]
            stats=self.stats,
        )

    def _wait(self) -> tuple[GenerationRequest, Generation | None, BaseException | None]:
        """Block until a result arrives; enforce the request timeout."""
        while True:
            timeout = None
            if self.timeout_s is not None and self.inflight:
                oldest = min(r.submitted_at for r in self.inflight.values())
                timeout = max(0.0, oldest + self.timeout_s - time.perf_counter())
            try:
                return self.results.get(timeout=timeout)
            except queue.Empty:
                request = min(self.inflight.values(), key=lambda r: r.submitted_at)
                raise self._error(
                    request,
                    f"timed out after {self.timeout_s:g} s (request_timeout_s) in the "
                    f"{request.tag.route.name!r} backend",
                ) from None

    def _on_done(
        self, request: GenerationRequest, gen: Generation | None, exc: BaseException | None
    ) -> None:
        """Driver threads call this; the scheduler thread handles the result."""
        self.results.put((request, gen, exc))

    # -- episodes ---------------------------------------------------------------------------

    def _start_episode(self) -> None:
        e = self.next_episode
        self.next_episode += 1
        j, i = divmod(e, self.n)
        env = self.free_envs.pop() if self.free_envs else self._new_env()
        s = env_seed(self.seed, j, i)
        obs, _ = env.reset(seed=s, options={"task": self.tasks[j]})
        episode = _Episode(e, j, i, self.tasks[j], env, s)
        self._queue_round(episode, obs)

    def _new_env(self) -> Any:
        """A fresh env instance: a shallow copy of the first one (see the module docstring).

        ``WorkflowEnv.reset`` re-creates all per-episode state; the rules, prompts, reward,
        credit method and spaces are shared (building an env costs milliseconds, a copy
        microseconds).
        """
        prototype = self.prototype
        if isinstance(prototype, WorkflowEnv):
            return copy.copy(prototype)
        return marti_env.make(self.env_id, **self.env_kwargs)

    def _queue_round(self, episode: _Episode, obs: Mapping[str, Any]) -> None:
        r = episode.env.round
        episode.round = r
        for agent in episode.env.active_agents:
            route = self.routes[agent]
            params = dataclasses.replace(
                route.params,
                seed=request_seed(
                    self.seed, episode.task_index, episode.sample_index, r, self.agent_index[agent]
                ),
            )
            messages: tuple[Message, ...] = tuple(obs[agent]["messages"])
            request = GenerationRequest(
                messages, params, route.adapter, _Tag(episode, agent, r, route)
            )
            episode.waiting[agent] = request
            heapq.heappush(self.ready, (r, next(self.seq), request))
        if not episode.waiting:  # a round nobody acts in: nothing to generate
            self._step(episode)

    def _dispatch(self) -> None:
        """Hand queued requests to their drivers, up to the concurrency limit (in sync mode
        with continuous drivers, all of them: see "Both modes" in the module docstring)."""
        by_driver: dict[int, list[GenerationRequest]] = {}
        now = time.perf_counter()
        limit = self.limit
        if self.mode == "sync" and all(d.kind == "continuous" for d in self.drivers.values()):
            limit = len(self.inflight) + len(self.ready)
        while self.ready and len(self.inflight) < limit:
            _, _, request = heapq.heappop(self.ready)
            request.submitted_at = now
            self.inflight[id(request)] = request
            by_driver.setdefault(id(request.tag.route.policy), []).append(request)
        if by_driver and self._busy_since is None:
            self._busy_since = now
        for key, requests in by_driver.items():
            self.drivers[key].submit(requests)

    def _handle(
        self, request: GenerationRequest, gen: Generation | None, exc: BaseException | None
    ) -> None:
        if self.inflight.pop(id(request), None) is None:
            return  # a duplicate report (e.g. a second error of one failed batch)
        now = time.perf_counter()
        if not self.inflight and self._busy_since is not None:
            self.stats.backend_s += now - self._busy_since
            self._busy_since = None
        if exc is not None:
            raise self._error(request, f"{type(exc).__name__}: {exc}") from exc
        assert gen is not None
        tag: _Tag = request.tag
        episode = tag.episode
        episode.results[tag.agent] = gen
        episode.done.append((tag.agent, tag.round, gen, now - request.submitted_at))
        if len(episode.results) == len(episode.waiting):
            if self.mode == "async":
                self._step(episode)
            else:
                self.barrier.append(episode)

    def _step(self, episode: _Episode) -> None:
        env = episode.env
        actions = {agent: gen.text for agent, gen in episode.results.items()}
        before = len(env.record.turns)
        t0 = time.perf_counter()
        obs, _, _, _, infos = env.step(actions)
        self.stats.env_s += time.perf_counter() - t0
        for turn in env.record.turns[before:]:
            gen = episode.results[turn.agent]
            turn.meta.update(
                truncated=gen.finish_reason == "length",
                finish_reason=gen.finish_reason,
                prompt_tokens=len(gen.prompt_token_ids),
                response_tokens=len(gen.token_ids),
                policy=self.routes[turn.agent].name,
            )
        episode.waiting = {}
        episode.results = {}
        if env.agents:
            self._queue_round(episode, obs)
            return
        record: EpisodeRecord = next(iter(infos.values()))["episode"]
        self._finish(episode, record)

    def _finish(self, episode: _Episode, record: EpisodeRecord) -> None:
        self.records[episode.index] = record
        turn_of = {(t.agent, t.round): t for t in record.turns}
        for agent, r, gen, latency in episode.done:
            turn = turn_of[(agent, r)]
            route = self.routes[agent]
            self.samples.append(
                Sample(
                    episode=episode.index,
                    task_index=episode.task_index,
                    sample_index=episode.sample_index,
                    task_id=episode.task.id,
                    agent=agent,
                    role=turn.role,
                    round=r,
                    turn_index=turn.index,
                    prompt_token_ids=list(gen.prompt_token_ids),
                    response_token_ids=list(gen.token_ids),
                    logprobs=list(gen.logprobs),
                    truncated=gen.finish_reason == "length",
                    score=turn.score,
                    reward=turn.reward,
                    policy=route.name,
                    adapter=route.adapter,
                    latency_s=latency,
                )
            )
            self.stats.num_requests += 1
            self.stats.tokens_generated += len(gen.token_ids)
            self.stats.prompt_tokens += len(gen.prompt_token_ids)
            self.stats.truncated += gen.finish_reason == "length"
        self.free_envs.append(episode.env)
        episode.env = None
        episode.done = []
        self.finished += 1

    def _error(self, request: GenerationRequest, cause: str) -> RolloutError:
        tag: _Tag = request.tag
        ep = tag.episode
        adapter = f", adapter {tag.route.adapter!r}" if tag.route.adapter else ""
        return RolloutError(
            f"{self.env_id}: generation failed for episode {ep.index} (task {ep.task.id!r}, "
            f"sample {ep.sample_index}), agent {tag.agent!r}, round {tag.round} "
            f"(policy {tag.route.name!r}{adapter}): {cause}",
            env_id=self.env_id,
            episode=ep.index,
            task_id=ep.task.id,
            agent=tag.agent,
            round=tag.round,
        )


def _progress_bar(total: int, desc: str, enabled: bool) -> Any:
    if not enabled:
        return None
    try:
        # tqdm is optional here: no bar without it
        from tqdm.auto import tqdm
    except ImportError:  # tqdm is part of marti[train]; run without a bar otherwise
        return None
    return tqdm(total=total, desc=desc, unit="ep", mininterval=0.5)
