"""What a lost actor looks like to the caller: :class:`DeadActorError`, raised by :func:`get`."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import ray
import ray.exceptions as rex

__all__ = ["RESUME_HINT", "DeadActorError", "get"]

RESUME_HINT = (
    "Actors are not restarted: fix the cause (out of memory? a node lost?) and resume from the "
    "last checkpoint with `marti train CONFIG --resume`."
)

_LOST: tuple[type[BaseException], ...] = tuple(
    getattr(rex, name)
    for name in ("RayActorError", "WorkerCrashedError", "NodeDiedError", "LocalRayletDiedError")
    if hasattr(rex, name)
)


class DeadActorError(RuntimeError):
    """A trainer actor or rollout worker of the run died (or never started).

    Attributes:
        role: ``"trainer"`` or ``"rollout worker"``.
        name: The trained unit's name, or ``"worker <i>"``.
        agents: The agents whose samples the actor serves.
        during_start: True if the actor failed in its constructor (a setup error such as a
            missing model, not a crash): resuming will not help until that is fixed.
    """

    def __init__(self, role: str, name: str, agents: Sequence[str], cause: BaseException) -> None:
        self.role, self.name, self.agents = role, name, tuple(agents)
        self.during_start = bool(getattr(cause, "actor_init_failed", False))
        who = f"{role} {name!r} (agents {', '.join(self.agents) or '-'})"
        if self.during_start:
            message = f"the Ray {who} failed to start: {cause}"
        else:
            message = f"the Ray {who} died: {_first_line(cause)}. {RESUME_HINT}"
        super().__init__(message)


def _first_line(exc: BaseException) -> str:
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    reason = next((line for line in lines if line.startswith("The actor is dead because")), None)
    parts = [lines[0] if lines else type(exc).__name__, reason]
    return " ".join(x.rstrip(".") + "." for x in parts if x).rstrip(".")


def get(refs: Any, role: str, name: str, agents: Sequence[str] = ()) -> Any:
    """``ray.get(refs)``; a lost actor or worker process becomes :class:`DeadActorError`.

    Errors raised by the remote method itself propagate as Ray raises them (an instance of
    both ``RayTaskError`` and the original exception class).
    """
    try:
        return ray.get(refs)
    except _LOST as exc:
        raise DeadActorError(role, name, agents, exc) from exc
