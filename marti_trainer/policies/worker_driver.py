"""The threaded skeleton of a continuous driver: :class:`WorkerDriver`.

The ``hf`` and ``vllm`` backends' continuous drivers subclass it: one worker thread serves
the queued requests, and a crash fails every request it held instead of stranding it.
"""

from __future__ import annotations

import threading
from abc import abstractmethod
from collections import deque
from collections.abc import Sequence

from marti_trainer.policies.base import Policy, PolicyError
from marti_trainer.policies.capabilities import DoneCallback, Driver, GenerationRequest

__all__ = ["WorkerDriver"]


class WorkerDriver(Driver):
    """A driver that serves requests in its own worker thread (the continuous drivers).

    The shared skeleton: :meth:`submit` queues requests in ``_pending`` (a deque) under
    ``_cond`` and wakes the worker; :meth:`close` stops it after its current step and joins
    it (so the backend is free on return). If the worker raises, every request it held and
    every pending or later one fails with a :class:`PolicyError` naming the crash: no
    request is left unanswered. Subclasses set ``crash_message``, call :meth:`_start` at the
    end of ``__init__`` and implement :meth:`_serve` (the loop; it returns once ``_closed``),
    :meth:`_in_progress` and, if needed, :meth:`_stopped`.
    """

    crash_message = "rollout driver crashed"
    join_timeout_s = 120.0  # close() waits at most this long for a step in progress

    def __init__(self, policy: Policy, on_done: DoneCallback) -> None:
        super().__init__(policy, on_done)
        self._pending: deque[GenerationRequest] = deque()
        self._cond = threading.Condition()
        self._closed = False
        self._crash: PolicyError | None = None  # set if the worker died: fails later requests
        self._thread: threading.Thread | None = None

    def _start(self, name: str) -> None:
        self._thread = threading.Thread(target=self._loop, name=name, daemon=True)
        self._thread.start()

    def submit(self, requests: Sequence[GenerationRequest]) -> None:
        with self._cond:
            crash = self._crash
            if crash is None:
                self._pending.extend(requests)
                self._cond.notify()
        if crash is not None:
            self._fail(requests, crash)

    def close(self) -> None:
        """Stop after the current step (joined, so the backend is free on return)."""
        with self._cond:
            self._closed = True
            self._pending.clear()
            self._cond.notify_all()
        if self._thread is not None and threading.current_thread() is not self._thread:
            self._thread.join(timeout=self.join_timeout_s)

    def _loop(self) -> None:
        try:
            self._serve()
        except BaseException as exc:  # never leave a request unanswered
            error = PolicyError(f"{self.crash_message}: {type(exc).__name__}: {exc}")
            error.__cause__ = exc
            with self._cond:
                stranded = [*self._in_progress(), *self._pending]
                self._pending.clear()
                self._crash = error
            self._fail(stranded, error)
        finally:
            self._stopped()

    @abstractmethod
    def _serve(self) -> None:
        """The worker's loop: serve ``_pending``; return once ``_closed`` is set."""

    @abstractmethod
    def _in_progress(self) -> list[GenerationRequest]:
        """Requests taken from ``_pending`` and not yet reported (failed on a crash)."""

    def _stopped(self) -> None:
        """Called in the worker when it ends, however it ends (free backend state)."""

    def _fail(self, requests: Sequence[GenerationRequest], error: BaseException) -> None:
        if not self._closed:
            for request in requests:
                self.on_done(request, None, error)
