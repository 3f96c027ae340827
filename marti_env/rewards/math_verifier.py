"""Rule-based verification of a final math answer against a reference answer.

How time is bounded
-------------------
``MathVerifier`` answers in tiers, cheapest first:

0. **Length cap.** A pair where either answer is longer than ``max_answer_chars`` is
   rejected (not equivalent) in O(1).
1. **Fast path, in process.** Both answers go through :func:`canonical_answer`. If both are
   plain numbers they are compared exactly (``Fraction``); if the canonical strings are
   equal the answer is right. No computer algebra, microseconds per call (the canonical
   forms are memoised, so a repeated answer does not pay twice).
2. **Cache.** Verdicts of the tiers below are kept in an LRU cache keyed by
   ``(pred, gold)``: screening rejections and math-verify results alike.
3. **Screen.** The prediction goes through :func:`~marti_env.rewards.screen.screen_answer`,
   which rejects obvious blow-ups (power towers, huge factorials, deep nesting, absurdly
   many digits) in microseconds, before anything parses them. Rejections are counted
   (:meth:`MathVerifier.cache_info` ``.rejected``, by rule in
   :meth:`MathVerifier.rejections`).
4. **Slow path, in a helper process.** Everything else goes to math-verify
   (``parse`` + ``verify``), which runs in one persistent helper subprocess per verifier
   (and per process that uses it), started lazily on the first slow-path call.
   Inside the helper one ``setitimer`` budget of ``timeout_s`` covers the whole request; a
   request that is still running ``timeout_s + kill_grace_s`` after it was sent (work a
   signal cannot interrupt, such as one long C-level big-integer multiplication) gets the
   helper SIGKILLed; a fresh helper is started at once in the background. A timeout scores
   as "not equivalent".

Why a subprocess even on the main thread: math-verify's own timeouts use ``SIGALRM``, which
(a) raises ``ValueError`` off the main thread, (b) cancels any alarm the caller set, and
(c) cannot stop C code; a killed process always stops. Measured (math-verify 0.9.0, sympy
1.14, 2 busy cores): in process with 1 s timeouts, ``9^{9^{9^9}}``, ``100000000!`` and
other towers all returned within 1.1 s with sympy's pure-Python integers, but with
``gmpy2`` installed (sympy then computes ``n!`` in one GMP call) ``100000000!`` took 70 s
and ``(10^7)!`` 6.7 s; through this class (``timeout_s=1``) they return False after 3 s
(budget + kill grace), then the next call waits ~1.5 s for the fresh helper; the screen
now rejects all of these before math-verify sees them. The cost is
one pipe round trip per uncached slow-path call (well under 1 ms, against ~5-50 ms for
math-verify: no measurable throughput difference), the helper's start-up (~1-2 s, once)
and its memory (math-verify + sympy: ~60 MB resident after the first checks).
The parent process never imports math-verify or sympy. Helper requests are serialised by a
lock, so a verifier shared by threads runs one slow-path check at a time; give each thread
its own verifier for parallel checks. The helper is started with ``subprocess`` (not
``multiprocessing``), so it also works inside daemonic pool workers and Ray workers.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import select
import subprocess
import sys
import threading
import time
import weakref
from collections import Counter, OrderedDict
from typing import Any, NamedTuple

from marti_env.rewards.boxed import extract_boxed
from marti_env.rewards.canonical import _canonicalize
from marti_env.rewards.screen import MAX_ANSWER_CHARS, RejectReason, screen_answer

__all__ = ["CacheInfo", "MathVerifier", "default_verifier", "shared_verifier"]

logger = logging.getLogger(__name__)

# math-verify logs whole (possibly 100 KB) inputs at WARNING on timeouts; it only runs in
# the helper, where it is silenced too, but a user importing it here gets the same quiet.
logging.getLogger("math_verify").setLevel(logging.ERROR)

_WORKER_PATH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_mv_worker.py")
_STARTUP_TIMEOUT_S = 120.0  # generous: two busy cores can make the sympy import slow
_HELPER_MEMORY_MB = 4096  # RLIMIT_AS for the helper; hostile inputs get MemoryError


class CacheInfo(NamedTuple):
    """Counters of :meth:`MathVerifier.cache_info` (like ``functools.lru_cache``).

    Attributes:
        hits: Calls answered from the verdict cache (math-verify results and rejections).
        misses: Calls that ran math-verify (each one fills the cache).
        maxsize: The cache's capacity (``cache_size``).
        currsize: Verdicts in the cache now.
        timeouts: math-verify checks that ran out of budget or whose helper hung or died.
        helper_restarts: Helper processes replaced after a hang or a crash.
        rejected: Calls rejected without math-verify: over ``max_answer_chars``, or by the
            screen (cached rejections count again each time; see
            :meth:`MathVerifier.rejections` for the rules that fired).
    """

    hits: int
    misses: int
    maxsize: int
    currsize: int
    timeouts: int
    helper_restarts: int
    rejected: int = 0


class _HelperError(RuntimeError):
    """The helper could not be started (an environment problem, not an input problem)."""


class _Helper:
    """One math-verify helper process and its line-based JSON pipe."""

    def __init__(self) -> None:
        env = dict(os.environ)
        # Let the helper import math_verify from wherever this process found it.
        env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
        self.proc = subprocess.Popen(
            [sys.executable, "-u", "-s", _WORKER_PATH, str(_HELPER_MEMORY_MB)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            env=env,
            start_new_session=True,  # Ctrl-C in a terminal goes to the parent only
            close_fds=True,
        )
        self.owner_pid = os.getpid()
        self.ready = False
        self._buffer = b""
        self._next_id = 0

    def _read_line(self, deadline: float) -> bytes | None:
        """Read one line before ``deadline`` (``time.monotonic``); None on timeout/EOF."""
        import time

        fd = self.proc.stdout.fileno()  # type: ignore[union-attr]
        while b"\n" not in self._buffer:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return None
            ready, _, _ = select.select([fd], [], [], remaining)
            if not ready:
                return None
            chunk = os.read(fd, 65536)
            if not chunk:
                return None  # EOF: the helper died
            self._buffer += chunk
        line, _, self._buffer = self._buffer.partition(b"\n")
        return line

    def wait_ready(self) -> None:
        import time

        line = self._read_line(time.monotonic() + _STARTUP_TIMEOUT_S)
        if line is None:
            self.kill()
            raise _HelperError(
                f"math-verify helper did not start within {_STARTUP_TIMEOUT_S:.0f} s "
                f"({sys.executable} {_WORKER_PATH})"
            )
        try:
            tag, detail = json.loads(line)
        except ValueError:
            tag, detail = "garbled", line[:200]
        if tag != "ready":
            self.kill()
            raise _HelperError(f"math-verify helper failed to start: {detail}")
        self.ready = True

    def request(self, pred: str, gold: str, budget_s: float, deadline_s: float) -> object:
        """Send one check; return True/False/"timeout"/"error", or None if it died/hung."""
        import time

        if not self.ready:
            self.wait_ready()
        self._next_id += 1
        rid = self._next_id
        message = json.dumps([rid, pred, gold, budget_s], ensure_ascii=True) + "\n"
        try:
            self.proc.stdin.write(message.encode("ascii"))  # type: ignore[union-attr]
            self.proc.stdin.flush()  # type: ignore[union-attr]
        except (BrokenPipeError, OSError, ValueError):
            return None
        deadline = time.monotonic() + deadline_s
        while True:
            line = self._read_line(deadline)
            if line is None:
                return None
            try:
                got_id, result = json.loads(line)
            except ValueError:
                return None
            if got_id == rid:
                return result

    def alive(self) -> bool:
        return self.proc.poll() is None

    def forget(self) -> None:
        """Close this process's copies of the pipes of a helper inherited through fork."""
        for stream in (self.proc.stdin, self.proc.stdout):
            with contextlib.suppress(OSError):
                stream.close()  # type: ignore[union-attr]
        self.proc.returncode = 0  # not our child: never wait for it

    def kill(self) -> None:
        if self.owner_pid != os.getpid():
            self.forget()  # inherited through fork: the process belongs to our parent
            return
        with contextlib.suppress(OSError):
            self.proc.kill()
        for stream in (self.proc.stdin, self.proc.stdout):
            with contextlib.suppress(OSError):
                stream.close()  # type: ignore[union-attr]
        with contextlib.suppress(subprocess.TimeoutExpired, OSError):
            self.proc.wait(timeout=5)


class MathVerifier:
    """Checks final math answers against reference answers; safe on hostile input.

    Args:
        timeout_s: Wall-clock budget of one math-verify check (parse of both answers and the
            comparison together). Must be positive and finite.
        cache_size: Maximum number of ``(pred, gold)`` results kept in the LRU cache; 0
            disables caching.
        max_answer_chars: Answers (extracted prediction or gold) longer than this are
            rejected: judged not equivalent without any parsing, and counted in
            ``cache_info().rejected``. Default 1000 characters (the longest reference answer
            of MATH, GSM8K, AMC and AIME is far shorter); 0 rejects every answer.
        kill_grace_s: Extra seconds, after ``timeout_s``, before a helper that has not
            answered is killed. The worst-case time of one call is about
            ``timeout_s + kill_grace_s`` (plus the helper's one-off start-up, bounded by
            120 s, on the first slow-path call of a process or after a kill).

    Contract:
        * :meth:`score` and :meth:`equivalent` never raise on any ``str`` arguments; a
          parse failure, a rejection, a timeout or a helper crash all mean "not
          equivalent". They raise
          ``TypeError`` for non-``str`` arguments and ``RuntimeError`` only if the helper
          process cannot be started at all (math-verify missing: an installation problem).
        * A prediction must be a ``\\boxed{}`` answer: :meth:`score` never lets math-verify
          hunt for numbers in unboxed text (on 100 KB of random text it finds one).
        * Plain numbers are compared exactly (``0.333333`` is not ``1/3``, although
          math-verify's 6-digit rounding would accept it); everything else is up to
          math-verify with its defaults (``float_rounding=6``, ``strict=True``).
        * A prediction the screen rejects (:func:`~marti_env.rewards.screen.screen_answer`
          with its default bounds and ``max_chars=max_answer_chars``) is not equivalent,
          whatever the gold; the gold is trusted data and only length-capped.
        * A check that timed out or whose helper died is cached as False like any other
          result, so a hostile answer the policy repeats costs its timeout once; a
          rejection is cached too, so a repeated rejected answer costs one lookup.
        * Thread-safe, picklable (caches and the helper are dropped), fork-aware (a forked
          child keeps the cache but starts its own helper, with fresh locks).
    """

    def __init__(
        self,
        timeout_s: float = 5.0,
        cache_size: int = 100_000,
        max_answer_chars: int = MAX_ANSWER_CHARS,
        *,
        kill_grace_s: float = 2.0,
    ) -> None:
        for name, value in (("timeout_s", timeout_s), ("kill_grace_s", kill_grace_s)):
            if not isinstance(value, (int, float)) or isinstance(value, bool):
                raise TypeError(f"{name} must be a number, got {type(value).__name__}")
            if not (0 < value < float("inf")):
                raise ValueError(f"{name} must be positive and finite, got {value!r}")
        for name, value in (("cache_size", cache_size), ("max_answer_chars", max_answer_chars)):
            if not isinstance(value, int) or isinstance(value, bool):
                raise TypeError(f"{name} must be an int, got {type(value).__name__}")
            if value < 0:
                raise ValueError(f"{name} must be >= 0, got {value}")
        self.timeout_s = float(timeout_s)
        self.kill_grace_s = float(kill_grace_s)
        self.cache_size = cache_size
        self.max_answer_chars = max_answer_chars
        self._init_runtime()

    # -- state that never travels -------------------------------------------------------

    def _init_runtime(self) -> None:
        _INSTANCES.add(self)
        # A verdict is True/False (math-verify) or the screen's reason for a rejection.
        self._cache: OrderedDict[tuple[str, str], bool | str] = OrderedDict()
        self._cache_lock = threading.Lock()
        self._helper_lock = threading.Lock()
        self._helper: _Helper | None = None
        self._hits = 0
        self._misses = 0
        self._timeouts = 0
        self._restarts = 0
        self._busy_s = 0.0
        self._rejections: Counter[str] = Counter()

    def __getstate__(self) -> dict[str, Any]:
        return {
            "timeout_s": self.timeout_s,
            "kill_grace_s": self.kill_grace_s,
            "cache_size": self.cache_size,
            "max_answer_chars": self.max_answer_chars,
        }

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._init_runtime()

    def __repr__(self) -> str:
        return (
            f"MathVerifier(timeout_s={self.timeout_s}, cache_size={self.cache_size}, "
            f"max_answer_chars={self.max_answer_chars}, kill_grace_s={self.kill_grace_s})"
        )

    def __del__(self) -> None:
        with contextlib.suppress(Exception):
            self.close()

    def close(self) -> None:
        """Stop the helper process (a later slow-path call starts a new one)."""
        helper = getattr(self, "_helper", None)
        if helper is not None:
            self._helper = None
            helper.kill()

    # -- public API ---------------------------------------------------------------------

    def score(self, response: str, answer: str | None) -> float:
        """Return 1.0 if the last ``\\boxed{}`` answer of ``response`` equals ``answer``.

        Returns 0.0 when ``answer`` is None, when ``response`` has no non-empty, balanced
        final ``\\boxed{}`` (see :func:`extract_boxed`), or when the answers differ.
        """
        if not isinstance(response, str):
            raise TypeError(f"response must be a str, got {type(response).__name__}")
        if answer is None:
            return 0.0
        pred = extract_boxed(response)
        if pred is None:
            return 0.0
        return 1.0 if self.equivalent(pred, answer) else 0.0

    def equivalent(self, pred: str, gold: str) -> bool:
        """Whether the extracted answer ``pred`` is mathematically equal to ``gold``.

        Both are final answers (no ``\\boxed{}`` needed): LaTeX or plain text, e.g.
        ``equivalent("\\\\frac{1}{2}", "0.5")``. See the class docstring for the tiers.
        """
        if not isinstance(pred, str) or not isinstance(gold, str):
            raise TypeError(
                f"pred and gold must be str, got {type(pred).__name__} and {type(gold).__name__}"
            )
        start = time.perf_counter()
        try:
            return self._equivalent(pred, gold)
        finally:
            spent = time.perf_counter() - start
            with self._cache_lock:
                self._busy_s += spent

    @property
    def busy_s(self) -> float:
        """Wall-clock seconds spent in :meth:`equivalent` so far, summed over threads (a
        profile's "verification" time)."""
        with self._cache_lock:
            return self._busy_s

    def _equivalent(self, pred: str, gold: str) -> bool:
        if len(pred) > self.max_answer_chars or len(gold) > self.max_answer_chars:
            return self._rejected("length")
        canon_pred, value_pred = _canonicalize(pred)
        canon_gold, value_gold = _canonicalize(gold)
        if not canon_pred or not canon_gold:
            return False
        if value_pred is not None and value_gold is not None:
            return value_pred == value_gold
        if canon_pred == canon_gold:
            return True
        key = (pred, gold)
        if self.cache_size:
            with self._cache_lock:
                cached = self._cache.get(key)
                if cached is not None:
                    self._cache.move_to_end(key)
                    self._hits += 1
            if cached is not None:
                return cached if isinstance(cached, bool) else self._rejected(cached)
        reason = screen_answer(pred, max_chars=self.max_answer_chars)
        if reason is not None:
            self._store(key, reason)
            return self._rejected(reason)
        if self.cache_size:
            with self._cache_lock:
                self._misses += 1
        result = self._slow_check(pred, gold)
        self._store(key, result)
        return result

    def _rejected(self, reason: RejectReason | str) -> bool:
        with self._cache_lock:
            self._rejections[reason] += 1
        return False

    def _store(self, key: tuple[str, str], verdict: bool | str) -> None:
        if not self.cache_size:
            return
        with self._cache_lock:
            self._cache[key] = verdict
            self._cache.move_to_end(key)
            while len(self._cache) > self.cache_size:
                self._cache.popitem(last=False)

    def cache_info(self) -> CacheInfo:
        """Counters: cache hits and misses, sizes, timeouts, restarts, rejections (see
        :class:`CacheInfo`). A trainer logs ``rejected`` to see hostile answers."""
        with self._cache_lock:
            return CacheInfo(
                self._hits,
                self._misses,
                self.cache_size,
                len(self._cache),
                self._timeouts,
                self._restarts,
                sum(self._rejections.values()),
            )

    def rejections(self) -> dict[str, int]:
        """Rejected calls by rule: ``"length"`` (over ``max_answer_chars``) and the
        reasons of :func:`~marti_env.rewards.screen.screen_answer`. Not reset by
        :meth:`cache_clear` (like ``timeouts``)."""
        with self._cache_lock:
            return dict(self._rejections)

    def cache_clear(self) -> None:
        """Empty the cache and reset its counters."""
        with self._cache_lock:
            self._cache.clear()
            self._hits = self._misses = 0

    # -- slow path ----------------------------------------------------------------------

    def _slow_check(self, pred: str, gold: str) -> bool:
        with self._helper_lock:
            helper = self._helper
            if helper is not None and (helper.owner_pid != os.getpid() or not helper.alive()):
                if helper.owner_pid == os.getpid():
                    self._restarts += 1
                helper.kill()
                helper = None
            if helper is None:
                try:
                    helper = self._helper = _Helper()
                except OSError as exc:
                    raise RuntimeError(f"cannot start the math-verify helper: {exc}") from exc
            try:
                result = helper.request(
                    pred, gold, self.timeout_s, self.timeout_s + self.kill_grace_s
                )
            except _HelperError as exc:
                self._helper = None
                raise RuntimeError(str(exc)) from None
            if result is None:  # hung past the deadline, or died: kill and respawn now
                self._timeouts += 1
                self._restarts += 1
                logger.warning(
                    "math-verify helper hung or died (pred of %d chars, gold of %d chars); "
                    "restarting it",
                    len(pred),
                    len(gold),
                )
                helper.kill()
                try:
                    self._helper = _Helper()  # starts importing in the background
                except OSError:
                    self._helper = None  # the next slow-path call tries again
                return False
            if result == "timeout":
                self._timeouts += 1
            return result is True


_INSTANCES: weakref.WeakSet[MathVerifier] = weakref.WeakSet()


def _after_fork_in_child() -> None:
    """Give every verifier fresh locks and no helper in a forked child.

    A lock held by another thread at fork time would stay locked forever in the child, and
    the inherited helper belongs to the parent: the child starts its own on demand.
    """
    global _default_lock
    _default_lock = threading.Lock()
    for verifier in list(_INSTANCES):
        helper = verifier._helper
        verifier._helper = None
        verifier._cache_lock = threading.Lock()
        verifier._helper_lock = threading.Lock()
        if helper is not None:
            helper.forget()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)

_shared: dict[int, MathVerifier] = {}
_default_lock = threading.Lock()


def shared_verifier(max_answer_chars: int = MAX_ANSWER_CHARS) -> MathVerifier:
    """The process-wide shared :class:`MathVerifier` with these settings (created lazily).

    Rewards made by name (``make_reward("math", max_answer_chars=...)``) and every env of
    the process use these, so one helper process serves all of them per setting.
    """
    verifier = _shared.get(max_answer_chars)
    if verifier is None:
        with _default_lock:
            verifier = _shared.get(max_answer_chars)
            if verifier is None:
                verifier = _shared[max_answer_chars] = MathVerifier(
                    max_answer_chars=max_answer_chars
                )
    return verifier


def default_verifier() -> MathVerifier:
    """The process-wide shared :class:`MathVerifier` with default settings (created lazily)."""
    return shared_verifier()
