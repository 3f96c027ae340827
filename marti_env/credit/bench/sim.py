"""Simulated agents for the fast credit benchmark: parametric policies, no LLM.

Each agent ``i`` has two learnable logits, ``theta[i] = (skill, persuadability)``:

* ``p_i = sigmoid(theta[i, 0])``: probability of getting the answer right when it solves
  the task itself (a wrong answer is one of ``num_distractors`` near misses, so wrong
  agents can agree and outvote a right one);
* ``q_i = sigmoid(theta[i, 1])``: probability of deferring to what it is shown: a debater
  or aggregator copies the majority of the answers in its prompt; a refiner follows the
  critique (keeps the proposed solution if the critique says it is correct, else solves
  itself). A verifier's "skill" is the probability that its verdict is right.

The agents read only their observation (the last chat message the REAL env rendered: the
``\\boxed{}`` answers and ``VERDICT:`` lines it shows) and the task's reference answer (they
are oracles of known skill, like :class:`marti_env.scripted.NoisyOracle`), and answer with
strings the env parses (``"... \\boxed{7}"``). So the env's real turn structure, visibility
and final-answer rule decide what each agent sees and what the team answers.

Every call draws exactly four uniforms from the agent's own generator, seeded by
``(run seed, episode seed, agent index)``: re-running an episode with one agent made
*absent* (it answers ``""``) replays every other agent's draws (common random numbers), so
the marginal contribution ``acc(team) - acc(team without i)`` is estimated with little noise.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from marti_env.record import EpisodeRecord, Message
from marti_env.tasks.task import Task

SKILL, PERSUADE = 0, 1
"""Columns of ``SimTeam.theta``."""

_BOXED = re.compile(r"\\boxed\{([^{}]*)\}")
_VERDICT = re.compile(r"VERDICT: (correct|wrong)")
_OFFSETS = (1, -1, 2, -2, 10, -10, 3, -3)
THETA_CLIP = 6.0
"""Logits are kept in [-6, 6] (probabilities in about [0.0025, 0.9975])."""

Decision = tuple[int, bool]
"""``(SKILL or PERSUADE, whether the Bernoulli came up 1)``: one sampled choice."""


def sigmoid(x: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-x))


def logit(p: float) -> float:
    return float(np.log(p / (1.0 - p)))


def wrong_answer(answer: str | None, u: float, num_distractors: int) -> str:
    """One of ``num_distractors`` near misses of ``answer``, picked by ``u`` in [0, 1)."""
    offset = _OFFSETS[min(int(u * num_distractors), num_distractors - 1)]
    try:
        return str(int(answer) + offset)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return f"{answer}+{offset}"


@dataclass
class SimTeam:
    """The policies of a team of simulated agents.

    Attributes:
        agents: Agent names, in the env's ``possible_agents`` order.
        theta: ``(n_agents, 2)`` float array of logits: skill, persuadability.
        num_distractors: How many distinct wrong answers there are (1..8).
    """

    agents: tuple[str, ...]
    theta: np.ndarray
    num_distractors: int = 3
    _index: dict[str, int] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self.theta = np.array(self.theta, dtype=np.float64).reshape(len(self.agents), 2)
        if not 1 <= self.num_distractors <= len(_OFFSETS):
            raise ValueError(f"num_distractors must be in [1, {len(_OFFSETS)}]")
        self._index = {a: i for i, a in enumerate(self.agents)}

    @classmethod
    def from_probs(
        cls, agents: Sequence[str], skill: Sequence[float], persuade: Sequence[float], **kw
    ) -> SimTeam:
        theta = np.array([[logit(p), logit(q)] for p, q in zip(skill, persuade, strict=True)])
        return cls(tuple(agents), theta, **kw)

    @classmethod
    def random(
        cls,
        agents: Sequence[str],
        rng: np.random.Generator,
        skill: tuple[float, float] = (0.1, 0.6),
        persuade: tuple[float, float] = (0.1, 0.7),
        **kw,
    ) -> SimTeam:
        """Skills and persuadabilities drawn uniformly from the given probability ranges."""
        n = len(agents)
        return cls.from_probs(
            agents, rng.uniform(*skill, size=n), rng.uniform(*persuade, size=n), **kw
        )

    def copy(self) -> SimTeam:
        return SimTeam(self.agents, self.theta.copy(), self.num_distractors)

    def index(self, agent: str) -> int:
        return self._index[agent]

    def probs(self) -> np.ndarray:
        """``(n_agents, 2)``: ``p_i`` (skill) and ``q_i`` (persuadability)."""
        return sigmoid(self.theta)

    def act(
        self,
        agent: str,
        role: str,
        messages: Sequence[Message],
        task: Task,
        rng: np.random.Generator,
    ) -> tuple[str, list[Decision]]:
        """The agent's response to its observation, and the choices it sampled."""
        u_defer, u_skill, u_wrong, u_tie = rng.random(4)
        p, q = sigmoid(self.theta[self._index[agent]])
        content = messages[-1]["content"] if messages else ""
        shown = [a.strip() for a in _BOXED.findall(content) if a.strip()]
        decisions: list[Decision] = []

        def solve() -> str:
            right = bool(u_skill < p)
            decisions.append((SKILL, right))
            if right:
                return str(task.answer)
            return wrong_answer(task.answer, u_wrong, self.num_distractors)

        if role == "verifier":
            if not shown:
                return "There is no final answer to check.", decisions
            truth = shown[0] == task.answer
            right = bool(u_skill < p)
            decisions.append((SKILL, right))
            verdict = "correct" if truth == right else "wrong"
            return f"I checked each step. VERDICT: {verdict}", decisions
        if role == "refiner":
            verdict = _VERDICT.search(content)
            answer = None
            if verdict is not None:
                follow = bool(u_defer < q)
                decisions.append((PERSUADE, follow))
                if follow and verdict.group(1) == "correct" and shown:
                    answer = shown[0]
            if answer is None:
                answer = solve()
            return f"Taking the critique into account: \\boxed{{{answer}}}", decisions
        if shown:  # a debater in a later round, or the aggregator
            defer = bool(u_defer < q)
            decisions.append((PERSUADE, defer))
            if defer:
                counts = Counter(shown).most_common()
                tied = [a for a, c in counts if c == counts[0][1]]
                answer = tied[min(int(u_tie * len(tied)), len(tied) - 1)]
                return f"Most solutions agree: \\boxed{{{answer}}}", decisions
        return f"I worked it out: \\boxed{{{solve()}}}", decisions


@dataclass
class Played:
    """One simulated episode: the env's record and each turn's sampled choices."""

    record: EpisodeRecord
    decisions: list[list[Decision]]
    """``decisions[i]``: the choices behind ``record.turns[i]``."""


@dataclass
class SiblingTurn:
    """A sibling sample (``sibling`` credit with ``train=True``): an alternative of turn
    ``(agent, round)`` of the batch's episode ``origin``, drawn from the same context, with
    its replay's outcome as reward and the choices it sampled."""

    origin: int
    agent: str
    round: int
    reward: float
    decisions: list[Decision]


def play(
    env,
    team: SimTeam,
    episode_seed: int,
    run_seed: int,
    absent: str | None = None,
    replace: Mapping[str, Callable[[str], str]] | None = None,
) -> Played:
    """Run one episode of ``env`` (a ``marti_env.make`` env) with the simulated team.

    ``absent`` names an agent that answers ``""`` on every turn (the counterfactual
    "without agent i"); ``replace`` maps agents to a function applied to each of their
    responses (e.g. flipping a verifier's decision), after the agent drew its choices.
    The env is reset with ``seed=episode_seed``.
    """
    obs, infos = env.reset(seed=episode_seed)
    record = env.record
    rngs = {
        a: np.random.default_rng([run_seed, episode_seed, i]) for i, a in enumerate(team.agents)
    }
    by_turn: dict[tuple[str, int], list[Decision]] = {}
    while env.agents:
        actions: dict[str, str] = {}
        for a in env.agents:
            info = infos[a]
            if not info["active"]:
                actions[a] = ""
            elif a == absent:
                actions[a] = ""
                by_turn[(a, info["round"])] = []
            else:
                text, choices = team.act(a, info["role"], obs[a]["messages"], record.task, rngs[a])
                actions[a] = replace[a](text) if replace and a in replace else text
                by_turn[(a, info["round"])] = choices
        obs, rewards, terms, truncs, infos = env.step(actions)
    return Played(record, [by_turn[(t.agent, t.round)] for t in record.turns])


def team_accuracy(
    env, team: SimTeam, episode_seeds: Sequence[int], run_seed: int, absent: str | None = None
) -> float:
    """Mean outcome over the given episodes."""
    return float(
        np.mean([play(env, team, s, run_seed, absent).record.outcome for s in episode_seeds])
    )


def marginal_contributions(
    env, team: SimTeam, episode_seeds: Sequence[int], run_seed: int
) -> tuple[float, dict[str, float]]:
    """Team accuracy and each agent's true marginal contribution on these episodes.

    contribution_i = acc(team) - acc(team with agent i absent), both over the same
    episodes and random draws (common random numbers).
    """
    full = team_accuracy(env, team, episode_seeds, run_seed)
    return full, {
        a: full - team_accuracy(env, team, episode_seeds, run_seed, absent=a) for a in team.agents
    }


def policy_gradient(
    team: SimTeam,
    played: Sequence[Played],
    normalize: bool | str = "std",
    siblings: Sequence[SiblingTurn] = (),
    by_node: bool = False,
) -> np.ndarray:
    """REINFORCE gradient of the team's logits from credited episodes (ascent direction).

    Every turn's reward is its ``Turn.reward`` (what the credit method gave it). The
    baseline is the mean reward of the turn's group over the batch, ``c_t = r_t -
    mean_group r``; a group is the ``(agent, round)`` slot, or with ``by_node`` one turn of
    one episode with its ``siblings`` (``(episode, agent, round)``: AT-GRPO's tree groups,
    the trainer's ``group_by: node``). The advantage ``A_t`` by ``normalize`` (the
    trainer's ``algorithm.advantage`` of the same names):

    * ``"std"`` (or True; GRPO): ``A_t = c_t / std_group r`` (0 in a constant group);
    * ``"mean"`` (or False; Dr. GRPO): ``A_t = c_t``;
    * ``"agent_scale"``: ``A_t = c_t / sigma_i``, ``sigma_i = sqrt(mean c^2)`` over all
      turns of the agent in the batch (0 if its groups are all constant);

    then ``grad[i, c] = T/N sum_t A_t * sum_{choices (c, x) of turn t} (x - sigmoid(theta[i,
    c]))`` over the ``N`` samples (turns and siblings), ``T`` the mean turns per episode
    (``x - sigmoid(theta)``: the score function of a Bernoulli in logit form). Without
    siblings ``T/N = 1/B`` for ``B`` episodes.
    """
    mode = {True: "std", False: "mean"}.get(normalize, normalize)  # type: ignore[call-overload]
    if mode not in ("std", "mean", "agent_scale"):
        raise ValueError(f"normalize must be 'std', 'mean' or 'agent_scale', got {normalize!r}")
    samples = advantage_samples(played, siblings, by_node)
    if not samples:
        return np.zeros_like(team.theta)
    groups: dict[tuple, list[float]] = {}
    for key, _, reward, _ in samples:
        groups.setdefault(key, []).append(reward)
    stats = {k: (float(np.mean(v)), float(np.std(v))) for k, v in groups.items()}
    square: dict[str, list[float]] = {}
    for key, agent, reward, _ in samples:
        square.setdefault(agent, []).append((reward - stats[key][0]) ** 2)
    sigma = {a: float(np.sqrt(np.mean(v))) for a, v in square.items()}
    probs = team.probs()
    grad = np.zeros_like(team.theta)
    for key, agent, reward, choices in samples:
        if not choices:
            continue
        mean, std = stats[key]
        scale = std if mode == "std" else sigma[agent] if mode == "agent_scale" else 1.0
        adv = (reward - mean) / scale if scale > 0 else 0.0
        i = team.index(agent)
        for column, taken in choices:
            grad[i, column] += adv * (float(taken) - probs[i, column])
    if not siblings:
        return grad / max(len(played), 1)
    turns = sum(len(p.record.turns) for p in played) / max(len(played), 1)
    return grad * turns / len(samples)


def advantage_samples(
    played: Sequence[Played], siblings: Sequence[SiblingTurn] = (), by_node: bool = False
) -> list[tuple[tuple, str, float, list[Decision]]]:
    """``(group key, agent, reward, choices)`` per turn of ``played`` and per sibling: the
    rows :func:`policy_gradient` reads; the key ``(agent, round)``, or ``(episode, agent,
    round)`` with ``by_node``."""

    def key(episode: int, agent: str, round_: int) -> tuple:
        return (episode, agent, round_) if by_node else (agent, round_)

    out = [
        (key(e, t.agent, t.round), t.agent, t.reward, choices)
        for e, ep in enumerate(played)
        for t, choices in zip(ep.record.turns, ep.decisions, strict=True)
    ]
    out += [(key(s.origin, s.agent, s.round), s.agent, s.reward, s.decisions) for s in siblings]
    return out


def rank_correlation(x: Sequence[float], y: Sequence[float]) -> float:
    """Spearman's rank correlation (average ranks for ties); NaN if either side is constant."""
    rx, ry = _ranks(np.asarray(x, dtype=float)), _ranks(np.asarray(y, dtype=float))
    if np.ptp(rx) == 0 or np.ptp(ry) == 0:
        return float("nan")
    return float(np.corrcoef(rx, ry)[0, 1])


def _ranks(v: np.ndarray) -> np.ndarray:
    order = np.argsort(v, kind="stable")
    ranks = np.empty(len(v))
    ranks[order] = np.arange(len(v), dtype=float)
    for value in np.unique(v):  # average ranks of ties
        tied = v == value
        ranks[tied] = ranks[tied].mean()
    return ranks
