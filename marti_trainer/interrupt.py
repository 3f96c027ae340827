"""Graceful stops: SIGINT or SIGTERM asks a training loop to finish its step and save.

    with StopRequest() as stop:
        for step in ...:
            ...                                   # a signal here only sets stop.requested
            if stop.requested: save(); break

The first SIGINT/SIGTERM sets :attr:`StopRequest.requested` to the signal's name and prints
one line; a second one raises :class:`KeyboardInterrupt` at once (the work of the current
step is lost, earlier checkpoints stay valid). Outside the main thread Python cannot install
signal handlers, and the context manager does nothing.
"""

from __future__ import annotations

import signal
import sys
import threading
from types import FrameType
from typing import Any

__all__ = ["StopRequest"]

_SIGNALS = (signal.SIGINT, signal.SIGTERM)


class StopRequest:
    """Turns the first SIGINT/SIGTERM into a flag (see the module docstring)."""

    def __init__(self) -> None:
        self.requested: str | None = None
        self._previous: dict[int, Any] = {}

    def __enter__(self) -> StopRequest:
        if threading.current_thread() is threading.main_thread():
            self._previous = {s: signal.signal(s, self._handle) for s in _SIGNALS}
        return self

    def __exit__(self, *exc: object) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
        self._previous = {}

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        name = signal.Signals(signum).name
        if self.requested is not None:
            raise KeyboardInterrupt(f"second {name}: stopping without saving the current step")
        self.requested = name
        print(
            f"\n{name}: finishing the current step, then saving a checkpoint "
            f"(send {name} again to stop at once)",
            file=sys.stderr,
            flush=True,
        )
