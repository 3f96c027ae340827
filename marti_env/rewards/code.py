"""The code verifier: a program's hidden-test pass fraction, run in the sandbox.

``reward="code"`` makes every workflow run on :class:`~marti_env.tasks.code.CodeTask`s:

* a turn's answer is the program in its response (:func:`~marti_env.tasks.code.extract_program`);
* a turn's score is the program's pass fraction on the task's hidden tests;
* the episode's outcome is 1.0 when the team's final program passes every test, else 0.0;
* majority votes group programs by behaviour on the tests (per test: passed, and the
  observed value or error type), not by text, so two differently written correct
  programs vote together.

These three rules are the :class:`AnswerRule` protocol; the env uses a reward's own rule
when it has one, else boxed answers (math). Executions are cached per (task, program), so
a program is run once per episode however many times it is scored or voted on.
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections import OrderedDict
from typing import Any, Protocol, runtime_checkable

from marti_env.sandbox import ExecutionResult, Job, Sandbox, SandboxLimits
from marti_env.tasks.code import CodeTask, extract_program, program_for
from marti_env.tasks.task import Task

__all__ = ["AnswerRule", "CodeReward", "code_reward", "shared_sandbox"]


@runtime_checkable
class AnswerRule(Protocol):
    """How a reward reads answers, when they are not boxed math answers.

    ``extract_answer(response)`` is a turn's answer (or None); ``answer_key(task, answer)``
    groups answers in majority votes; ``score_answer(task, answer)`` scores the team's
    final answer (the episode's outcome).
    """

    def extract_answer(self, response: str) -> str | None: ...

    def answer_key(self, task: Task, answer: str) -> str: ...

    def score_answer(self, task: Task, answer: str) -> float: ...


_SANDBOXES: dict[tuple[Any, ...], Sandbox] = {}
_SANDBOX_LOCK = threading.Lock()


def shared_sandbox(isolation: str = "bwrap", timeout_s: float = 5.0) -> Sandbox:
    """The process-wide :class:`Sandbox` for these settings (started on first use)."""
    key = (isolation, float(timeout_s))
    with _SANDBOX_LOCK:
        box = _SANDBOXES.get(key)
        if box is None:
            box = _SANDBOXES[key] = Sandbox(isolation, SandboxLimits(timeout_s=timeout_s))  # type: ignore[arg-type]
        return box


class CodeReward:
    """Score a response to a code task by running its program on the hidden tests.

    Args:
        isolation: The sandbox's isolation: ``"bwrap"`` (the default) refuses to run
            model-written programs where bubblewrap cannot run; ``"auto"`` falls back to
            resource limits only there (no filesystem, network or process isolation: an
            explicit opt-in); ``"limits"`` always; see :class:`~marti_env.sandbox.Sandbox`.
        timeout_s: Wall-clock budget of one execution (the program and all its tests).
        cache_size: Executions kept (least recently used dropped first).
        sandbox: A sandbox to use instead of the shared one for ``isolation`` and
            ``timeout_s`` (then those two must be left at their defaults).

    Raises (from :meth:`score` and the rule's methods):
        ValueError: the task is not a :class:`~marti_env.tasks.code.CodeTask`.
    """

    def __init__(
        self,
        *,
        isolation: str = "bwrap",
        timeout_s: float = 5.0,
        cache_size: int = 4096,
        sandbox: Sandbox | None = None,
    ) -> None:
        if isolation not in ("auto", "bwrap", "limits"):
            raise ValueError(f"isolation must be 'auto', 'bwrap' or 'limits', got {isolation!r}")
        if (
            isinstance(timeout_s, bool)
            or not isinstance(timeout_s, (int, float))
            or not (0 < timeout_s <= 600)
        ):
            raise ValueError(f"timeout_s must be a number in (0, 600], got {timeout_s!r}")
        if isinstance(cache_size, bool) or not isinstance(cache_size, int) or cache_size < 0:
            raise ValueError(f"cache_size must be an integer >= 0, got {cache_size!r}")
        if sandbox is not None and (isolation != "bwrap" or timeout_s != 5.0):
            raise ValueError("CodeReward takes a sandbox or isolation/timeout_s, not both")
        self.isolation = isolation
        self.timeout_s = float(timeout_s)
        self.cache_size = cache_size
        self._sandbox = sandbox
        self._cache: OrderedDict[tuple[str, str], ExecutionResult] = OrderedDict()
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"CodeReward(isolation={self.isolation!r}, timeout_s={self.timeout_s})"

    def __getstate__(self) -> dict[str, Any]:  # pickles without its sandbox and cache
        state = self.__dict__.copy()
        state["_sandbox"] = None
        state["_cache"] = OrderedDict()
        del state["_lock"]
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()

    @property
    def sandbox(self) -> Sandbox:
        if self._sandbox is None:
            self._sandbox = shared_sandbox(self.isolation, self.timeout_s)
        return self._sandbox

    # -- scoring --------------------------------------------------------------------------

    def score(self, task: Task, response: str) -> float:
        """The pass fraction of the response's program (0.0 when it has none)."""
        code_task = _code_task(task)
        program = extract_program(response)
        if program is None:
            return 0.0
        return self.run(code_task, program).pass_fraction

    def extract_answer(self, response: str) -> str | None:
        """The program in ``response`` (see :func:`~marti_env.tasks.code.extract_program`)."""
        return extract_program(response)

    def score_answer(self, task: Task, answer: str) -> float:
        """1.0 when program ``answer`` passes every hidden test, else 0.0."""
        return 1.0 if self.run(_code_task(task), answer).all_passed else 0.0

    def answer_key(self, task: Task, answer: str) -> str:
        """The program's behaviour on the tests, as a string (equal for programs that pass
        and fail the same tests with the same observed values or error types)."""
        return json.dumps(self.run(_code_task(task), answer).signature())

    def run(self, task: CodeTask, program: str) -> ExecutionResult:
        """Run ``program`` on ``task``'s tests (cached per task and program, except when the
        sandbox itself failed)."""
        text = json.dumps([task.id, task.setup, list(task.tests), program_for(task, program)])
        key = (task.id, hashlib.sha256(text.encode("utf-8", "replace")).hexdigest())
        with self._lock:
            hit = self._cache.get(key)
            if hit is not None:
                self._cache.move_to_end(key)
                return hit
        result = self.sandbox.run_job(Job(program_for(task, program), task.tests, task.setup))
        # A failure of the sandbox itself says nothing about the program: not cached. (A
        # timeout is: rerunning an endless loop costs its whole budget every time.)
        if self.cache_size and result.status != "sandbox_error":
            with self._lock:
                self._cache[key] = result
                while len(self._cache) > self.cache_size:
                    self._cache.popitem(last=False)
        return result


def code_reward(*, isolation: str = "bwrap", timeout_s: float = 5.0) -> CodeReward:
    """The ``"code"`` reward of :func:`~marti_env.rewards.make_reward`; its options are
    ``isolation`` and ``timeout_s`` (see :class:`CodeReward`)."""
    return CodeReward(isolation=isolation, timeout_s=timeout_s)


def _code_task(task: Task) -> CodeTask:
    if not isinstance(task, CodeTask):
        raise ValueError(
            f"the code reward needs code tasks, and task {task.id!r} is a {type(task).__name__}; "
            "use tasks='humaneval', 'code_gen' or {'type': 'code_file', 'path': ...}"
        )
    return task
