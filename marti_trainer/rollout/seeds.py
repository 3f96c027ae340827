"""Seeds that depend only on *what* is run, never on *when* it is scheduled.

Episode ``i`` of task ``j`` is reset with ``env_seed(seed, j, i)`` and the request of agent
``a`` (its position in ``env.possible_agents``) in round ``r`` of that episode samples with
``request_seed(seed, j, i, r, a)``. So an episode's transcript is a function of
``(seed, j, i)``, the task, the policies' weights and the env's arguments, whatever the
batch composition, the concurrency or the order in which generations return.
"""

from __future__ import annotations

import hashlib

__all__ = ["derive_seed", "env_seed", "request_seed"]

_ENV, _REQUEST = 1, 2  # domain tags: env and request seeds never collide


def derive_seed(*parts: int) -> int:
    """A 63-bit seed from a tuple of integers (BLAKE2b of their decimal forms).

    Distinct tuples give independent-looking seeds; the same tuple always gives the same
    seed, on every platform and Python version.
    """
    data = ",".join(str(int(p)) for p in parts).encode()
    return int.from_bytes(hashlib.blake2b(data, digest_size=8).digest(), "little") >> 1


def env_seed(seed: int, task_index: int, sample_index: int) -> int:
    """The ``reset`` seed of episode ``sample_index`` of task ``task_index``."""
    return derive_seed(_ENV, seed, task_index, sample_index)


def request_seed(
    seed: int, task_index: int, sample_index: int, round: int, agent_index: int
) -> int:
    """The ``SamplingParams.seed`` of one agent's request in one round of one episode."""
    return derive_seed(_REQUEST, seed, task_index, sample_index, round, agent_index)
