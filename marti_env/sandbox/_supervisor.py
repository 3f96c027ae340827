"""The trusted supervisor that runs jobs inside the sandbox (a plain script).

The host starts one per worker as ``python -I -S -c <this file's source>`` (inside bwrap, or
directly in the limits-only fallback), then writes one JSON job per line to its standard
input and reads one JSON result line per job from its standard output, until it closes the
input. It imports only the standard library and never runs model code itself: for each job
it forks a fresh child that

1. starts a new session (its own process group), closes every inherited descriptor but the
   three pipes it reports on, reads ``/dev/null`` as standard input;
2. sets the resource limits (CPU seconds, address space, processes, file size, open
   files, no core files), then drops to the job's uid/gid when one is given (the host
   is root: the kernel does not apply the process limit to root);
3. runs ``program`` (``exec`` in a fresh namespace named ``solution``), then ``setup``,
   then each test, and writes one JSON line per test to the result pipe.

Job (JSON): ``{"program", "setup", "tests": [str], "timeout_s", "limits": {...},
"uid", "gid", "max_output_bytes", "keep_output_bytes", "workdir"}``.

Result (JSON): ``{"status", "tests": [{"passed", "error", "value", "time_s"}], "stdout",
"stderr", "stdout_truncated", "stderr_truncated", "returncode", "signal", "wall_s",
"leftover_killed"}`` with status ``ok`` (the child ran every test and exited), ``error``
(the program did not load), ``exited`` (it exited before the last test), ``crashed``
(killed by a signal), ``timeout`` (the wall-clock deadline passed), ``output_limit`` (it
wrote more than ``max_output_bytes``).

The supervisor marks itself non-dumpable (so a program of the same uid cannot open its
``/proc`` files) and a child subreaper (so orphaned descendants, a double-forked daemon
included, become its children); when the child exits or the deadline passes it kills
the child's process group and then every descendant it can find, until none is left.
Between jobs it empties the job's tmp dir (and ``/dev/shm`` inside bwrap), so a job
finds neither the processes nor the files of the one before.
"""

import contextlib
import json
import os
import selectors
import signal
import sys
import time

PR_SET_DUMPABLE = 4
PR_SET_CHILD_SUBREAPER = 36


def _prctl(option, value):
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(option, value, 0, 0, 0) == 0
    except Exception:
        return False


def _children(me):
    """Pids whose parent is ``me`` (from /proc/<me>/task/*/children, else a /proc scan)."""
    found = set()
    task_dir = f"/proc/{me}/task"
    try:
        for tid in os.listdir(task_dir):
            with open(f"{task_dir}/{tid}/children") as f:
                found.update(int(p) for p in f.read().split())
        return found
    except OSError:
        pass
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat") as f:
                stat = f.read()
            ppid = int(stat[stat.rindex(")") + 2 :].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        if ppid == me:
            found.add(int(name))
    return found


def _reap():
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def _kill_tree(pgid):
    """SIGKILL the child's process group, then every descendant (orphans are ours: we are a
    subreaper), until no child is left. Returns how many processes were signalled."""
    killed = 0
    with contextlib.suppress(OSError):
        os.killpg(pgid, signal.SIGKILL)
    me = os.getpid()
    for _ in range(1000):
        _reap()
        kids = _children(me)
        if not kids:
            break
        for pid in kids:
            try:
                os.kill(pid, signal.SIGKILL)
                killed += 1
            except OSError:
                pass
        time.sleep(0.001)
    _reap()
    return killed


def _set_limits(limits):
    import resource

    names = {
        "cpu_s": resource.RLIMIT_CPU,
        "address_space_bytes": resource.RLIMIT_AS,
        "processes": resource.RLIMIT_NPROC,
        "file_size_bytes": resource.RLIMIT_FSIZE,
        "open_files": resource.RLIMIT_NOFILE,
    }
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    for key, which in names.items():
        value = limits.get(key)
        if value is None:
            continue
        soft = int(value)
        hard = soft + 1 if key == "cpu_s" else soft  # SIGXCPU at soft, SIGKILL at hard
        _, old_hard = resource.getrlimit(which)
        if old_hard != resource.RLIM_INFINITY:
            soft, hard = min(soft, old_hard), min(hard, old_hard)
        resource.setrlimit(which, (soft, hard))


def _describe(exc):
    message = str(exc)
    text = f"{type(exc).__name__}: {message}" if message else type(exc).__name__
    return text if len(text) <= 300 else text[:300] + "..."


def _child(job, out_w, err_w, res_w):
    """Runs in the forked child; never returns."""
    code = 70
    try:
        os.setsid()
        devnull = os.open("/dev/null", os.O_RDONLY)
        os.dup2(devnull, 0)
        os.dup2(out_w, 1)
        os.dup2(err_w, 2)
        os.dup2(res_w, 3)
        os.closerange(4, 65536)
        _set_limits(job.get("limits") or {})
        if job.get("gid") is not None:
            os.setgroups([])
            os.setgid(int(job["gid"]))
        if job.get("uid") is not None:
            os.setuid(int(job["uid"]))
        os.chdir(job["workdir"])
        results = os.fdopen(3, "w", buffering=1, encoding="utf-8")
        sys.stdout = open(1, "w", buffering=1, encoding="utf-8", errors="replace", closefd=False)  # noqa: SIM115
        sys.stderr = open(2, "w", buffering=1, encoding="utf-8", errors="replace", closefd=False)  # noqa: SIM115
        sys.stdin = open(0, encoding="utf-8", closefd=False)  # noqa: SIM115
    except BaseException:
        os._exit(code)
    namespace = {"__name__": "solution", "__builtins__": __builtins__}
    try:
        exec(compile(job["program"], "<program>", "exec"), namespace)
        if job.get("setup"):
            exec(compile(job["setup"], "<setup>", "exec"), namespace)
    except BaseException as exc:
        results.write(json.dumps({"load_error": _describe(exc)}) + "\n")
        results.flush()
        os._exit(0)
    for i, test in enumerate(job["tests"]):
        start = time.perf_counter()
        passed, error, value = False, None, None
        try:
            value, passed = _run_test(test, namespace)
            if not passed:
                error = "AssertionError"
        except BaseException as exc:
            error = _describe(exc)
        row = {
            "i": i,
            "passed": passed,
            "error": error,
            "value": value,
            "time_s": time.perf_counter() - start,
        }
        try:
            line = json.dumps(row)
        except BaseException:
            row["value"] = None
            line = json.dumps(row)
        results.write(line + "\n")
        results.flush()
    os._exit(0)


def _run_test(test, namespace):
    """``(observed, passed)``: for ``assert A == B`` the repr of ``A`` (the behaviour the
    majority vote clusters by) and whether ``A == B``; otherwise ``(None, True)`` if the
    snippet runs without raising."""
    import ast

    tree = ast.parse(test, "<test>", "exec")
    if (
        len(tree.body) == 1
        and isinstance(tree.body[0], ast.Assert)
        and isinstance(tree.body[0].test, ast.Compare)
        and len(tree.body[0].test.ops) == 1
        and isinstance(tree.body[0].test.ops[0], ast.Eq)
    ):
        compare = tree.body[0].test
        left = eval(compile(ast.Expression(compare.left), "<test>", "eval"), namespace)
        right = eval(compile(ast.Expression(compare.comparators[0]), "<test>", "eval"), namespace)
        observed = repr(left)
        if len(observed) > 200:
            observed = observed[:200] + "..."
        return observed, bool(left == right)
    exec(compile(tree, "<test>", "exec"), namespace)
    return None, True


def _empty_dir(path):
    """Remove everything under ``path`` (what the last job left in its tmp dir)."""
    import shutil

    try:
        entries = os.listdir(path)
    except OSError:
        return
    for name in entries:
        full = os.path.join(path, name)
        try:
            if os.path.isdir(full) and not os.path.islink(full):
                os.chmod(full, 0o700)
                shutil.rmtree(full, ignore_errors=True)
            else:
                os.unlink(full)
        except OSError:
            pass


def main():
    """Serve jobs: one JSON line in, one JSON line out, until standard input closes."""
    _prctl(PR_SET_DUMPABLE, 0)
    _prctl(PR_SET_CHILD_SUBREAPER, 1)
    stdin = sys.stdin.buffer
    while True:
        line = stdin.readline()
        if not line:
            return
        job = json.loads(line)
        result = run_job(job)
        _empty_dir(job["workdir"])
        if job.get("private_shm") and os.path.isdir("/dev/shm"):
            _empty_dir("/dev/shm")
        sys.stdout.write(json.dumps(result) + "\n")
        sys.stdout.flush()


def run_job(job):
    """Run one job in a forked child (see the module docstring); the result dict."""
    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    res_r, res_w = os.pipe()
    start = time.perf_counter()
    deadline = start + float(job["timeout_s"])
    pid = os.fork()
    if pid == 0:
        _child(job, out_w, err_w, res_w)
        os._exit(70)
    for fd in (out_w, err_w, res_w):
        os.close(fd)
    max_bytes = int(job["max_output_bytes"])
    keep = int(job["keep_output_bytes"])
    bufs = {out_r: bytearray(), err_r: bytearray(), res_r: bytearray()}
    total = {out_r: 0, err_r: 0}
    sel = selectors.DefaultSelector()
    for fd in bufs:
        os.set_blocking(fd, False)
        sel.register(fd, selectors.EVENT_READ)
    pidfd = os.pidfd_open(pid)
    sel.register(pidfd, selectors.EVENT_READ)
    status = None
    exit_status = None
    open_fds = set(bufs)
    while True:
        remaining = deadline - time.perf_counter()
        if remaining <= 0:
            status = "timeout"
            break
        for key, _ in sel.select(timeout=remaining):
            fd = key.fd
            if fd == pidfd:
                _, exit_status = os.waitpid(pid, 0)
                sel.unregister(pidfd)
                continue
            try:
                chunk = os.read(fd, 65536)
            except BlockingIOError:
                continue
            if not chunk:
                sel.unregister(fd)
                open_fds.discard(fd)
                continue
            if fd == res_r:
                if len(bufs[fd]) < max_bytes:
                    bufs[fd] += chunk
                continue
            total[fd] += len(chunk)
            if len(bufs[fd]) < keep:
                bufs[fd] += chunk[: keep - len(bufs[fd])]
            if total[out_r] + total[err_r] > max_bytes:
                status = "output_limit"
        if status is not None or exit_status is not None:
            break
    if exit_status is None:  # timeout or output limit: the child is still running
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)
        _, exit_status = os.waitpid(pid, 0)
    leftover = _kill_tree(pid)
    for fd in list(open_fds):  # what the child wrote before it ended
        try:
            while True:
                chunk = os.read(fd, 65536)
                if not chunk:
                    break
                if fd == res_r:
                    if len(bufs[fd]) < max_bytes:
                        bufs[fd] += chunk
                    continue
                total[fd] += len(chunk)
                if len(bufs[fd]) < keep:
                    bufs[fd] += chunk[: keep - len(bufs[fd])]
        except OSError:
            pass
    wall = time.perf_counter() - start
    sel.close()
    for fd in (out_r, err_r, res_r, pidfd):  # this process serves many jobs: no fd leaks
        with contextlib.suppress(OSError):
            os.close(fd)
    tests = [None] * len(job["tests"])
    load_error = None
    forged = False
    for line in bytes(bufs[res_r]).decode("utf-8", "replace").splitlines():
        try:
            row = json.loads(line)
        except ValueError:
            continue
        if not isinstance(row, dict):
            continue
        if "load_error" in row:
            load_error = str(row["load_error"])[:400]
            continue
        i = row.get("i")
        if not (isinstance(i, int) and 0 <= i < len(tests)) or tests[i] is not None:
            # only the program could have written it: the harness writes each index once
            forged = True
            continue
        value = row.get("value")
        tests[i] = {
            "passed": row.get("passed") is True,
            "error": None if row.get("error") is None else str(row["error"])[:400],
            "value": None if value is None else str(value)[:300],
            "time_s": float(row["time_s"]) if isinstance(row.get("time_s"), float) else 0.0,
        }
    returncode = os.waitstatus_to_exitcode(exit_status)
    sig = -returncode if returncode is not None and returncode < 0 else None
    if forged and status is None:
        status = "error"
        load_error = "forged result rows (a test index out of range or written twice)"
        tests = [None] * len(tests)
    if status is None:
        if load_error is not None:
            status = "error"
        elif sig is not None:
            status = "crashed"
        elif any(t is None for t in tests) or returncode != 0:
            status = "exited"
        else:
            status = "ok"
    reason = {"timeout": "timed out", "output_limit": "output limit exceeded"}.get(status)
    if reason is None:
        reason = load_error or (f"killed by signal {sig}" if sig else "did not run")
    for i, t in enumerate(tests):
        if t is None:
            tests[i] = {"passed": False, "error": reason, "value": None, "time_s": 0.0}
    result = {
        "status": status,
        "tests": tests,
        "load_error": load_error,
        "stdout": bytes(bufs[out_r]).decode("utf-8", "replace"),
        "stderr": bytes(bufs[err_r]).decode("utf-8", "replace"),
        "stdout_truncated": total[out_r] > keep,
        "stderr_truncated": total[err_r] > keep,
        "returncode": returncode,
        "signal": sig,
        "wall_s": wall,
        "leftover_killed": leftover,
    }
    return result


if __name__ == "__main__":
    main()
