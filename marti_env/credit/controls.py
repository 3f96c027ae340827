"""Control credit: ``random``, a method that carries no credit signal by construction.

A benchmark needs a floor as well as a ceiling: a method that cannot beat ``random`` teaches
the team nothing about who helped. The fast tier has its own ``random`` control (i.i.d.
standard normal rewards in its trainer, :mod:`marti_env.credit.bench.harness`); this is
the same kind of rewards as a credit method (drawn from the episode's own content, so
identical episodes get identical draws), so ``marti train`` and the LLM tier of ``marti
bench credit`` can train with it.
"""

from __future__ import annotations

import zlib
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from marti_env.credit._checks import check_int
from marti_env.credit.base import CreditMethod, FinalAnswerRule, register_credit
from marti_env.record import EpisodeRecord


def random_rewards(seed: int, task_id: str, responses: Sequence[str]) -> list[float]:
    """One i.i.d. standard normal reward per response, r_t ~ N(0, 1), from numpy's
    generator seeded by ``[seed, CRC-32(task_id), CRC-32(the responses joined by NUL)]``:
    the same episode always gets the same rewards, and episodes that differ in any response
    get independent ones.

    >>> random_rewards(0, "t", ["a", "b"]) == random_rewards(0, "t", ["a", "b"])
    True
    """
    text = "\x00".join(responses).encode("utf-8", "surrogatepass")
    rng = np.random.default_rng([seed, zlib.crc32(task_id.encode()), zlib.crc32(text)])
    return [float(x) for x in rng.standard_normal(len(responses))]


@register_credit("random")
@dataclass
class RandomCredit(CreditMethod):
    """Random credit (a control): every turn gets an i.i.d. standard normal reward,
    unrelated to the outcome (:func:`random_rewards`). Stateless, so a resumed run pays
    the same rewards as an uninterrupted one.

    Args:
        seed: Root seed of the draws (0..2**32 - 1).
    """

    seed: int = 0

    def __post_init__(self) -> None:
        self.seed = check_int(self.name, "seed", self.seed, low=0, high=2**32 - 1)

    def assign(self, episode: EpisodeRecord, rule: FinalAnswerRule) -> Sequence[float]:
        return random_rewards(self.seed, episode.task.id, [t.response for t in episode.turns])
