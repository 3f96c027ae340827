"""The sandbox executor: results per test, limits checked, the isolation switch, the pool."""

from __future__ import annotations

import warnings

import psutil
import pytest

from marti_env.sandbox import (
    ExecutionResult,
    Job,
    Sandbox,
    SandboxLimits,
    SandboxUnavailable,
    SandboxWarning,
    TestResult,
    executor,
)

FAST = SandboxLimits(timeout_s=2.0, keep_output_bytes=64)


@pytest.fixture(scope="module")
def box():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SandboxWarning)
        sandbox = Sandbox("auto", FAST, workers=2)
    yield sandbox
    sandbox.close()


def test_pass_fail_per_test_with_observed_values(box):
    program = "def f(x):\n    print('called', x)\n    return x * 2\n"
    tests = ["assert f(2) == 4", "assert f(3) == 7", "assert f('a') == 'aa'", "f(None)"]
    result = box.run(program, tests)
    assert result.status == "ok"
    assert [t.passed for t in result.tests] == [True, False, True, False]
    assert [t.value for t in result.tests[:3]] == ["4", "6", "'aa'"]
    assert result.tests[1].error == "AssertionError"
    assert result.tests[3].error.startswith("TypeError")
    assert result.pass_fraction == 0.5 and not result.all_passed
    assert result.stdout.startswith("called 2\ncalled 3\n")
    assert result.wall_s > 0


def test_setup_runs_after_the_program(box):
    result = box.run(
        "def f():\n    return 1\n", ["assert g() == 2"], setup="def g():\n    return f() + 1\n"
    )
    assert result.all_passed


def test_a_program_that_does_not_load_fails_every_test(box):
    result = box.run("def f(:\n", ["assert f() == 1", "assert True"])
    assert result.status == "error" and "SyntaxError" in result.load_error
    assert result.num_passed == 0 and all("SyntaxError" in t.error for t in result.tests)


def test_output_is_capped(box):
    result = box.run("print('x' * 10_000)\n", ["assert True"])
    assert result.status == "ok" and result.all_passed
    assert len(result.stdout) == FAST.keep_output_bytes and result.stdout_truncated


def test_run_many_keeps_order_and_every_job_starts_clean(box):
    jobs = [
        Job(
            f"import os\nleft = sorted(os.listdir('.'))\nopen('mine', 'w').write('{i}')\n",
            (f"assert {i} == {i}", "assert left == []"),
        )
        for i in range(6)
    ]
    results = box.run_many(jobs)
    assert [r.tests[0].value for r in results] == [str(i) for i in range(6)]
    assert all(r.all_passed for r in results), [r.tests[1].value for r in results]


def test_no_tests_is_no_pass():
    result = ExecutionResult(status="ok", tests=())
    assert result.pass_fraction == 0.0 and not result.all_passed


def test_signature_is_behaviour_on_the_tests():
    a = ExecutionResult(
        "ok", (TestResult(True, None, "4"), TestResult(False, "AssertionError", "6"))
    )
    b = ExecutionResult(
        "ok", (TestResult(True, None, "4"), TestResult(False, "AssertionError", "6"))
    )
    c = ExecutionResult(
        "ok", (TestResult(True, None, "4"), TestResult(False, "AssertionError", "5"))
    )
    d = ExecutionResult(
        "error", (TestResult(False, "NameError: x"), TestResult(False, "NameError: y"))
    )
    assert a.signature() == b.signature() != c.signature()
    assert d.signature() == ((False, "NameError"), (False, "NameError"))


@pytest.mark.parametrize(
    "kwargs, culprit",
    [
        ({"timeout_s": 0}, "timeout_s"),
        ({"memory_mb": float("nan")}, "memory_mb"),
        ({"processes": True}, "processes"),
        ({"open_files": 8}, "open_files"),
        ({"memory_mb": 16}, "memory_mb"),
    ],
)
def test_limits_refuse_bad_values_naming_them(kwargs, culprit):
    with pytest.raises(ValueError, match=culprit):
        SandboxLimits(**kwargs)


def test_rlimits_in_bytes_and_seconds():
    limits = SandboxLimits(timeout_s=2.5, memory_mb=100, file_size_mb=2, open_files=32)
    assert limits.rlimits(processes=7) == {
        "cpu_s": 4,  # ceil(2.5) + 1
        "address_space_bytes": 100 * 1024 * 1024,
        "processes": 7,
        "file_size_bytes": 2 * 1024 * 1024,
        "open_files": 32,
    }
    assert limits.rlimits(processes=7, timeout_s=30)["cpu_s"] == 31  # a job's own budget
    assert SandboxLimits(cpu_s=3).rlimits(7, timeout_s=30)["cpu_s"] == 3  # explicit wins


def test_job_checks_its_fields():
    with pytest.raises(TypeError, match="tests"):
        Job("x = 1", "assert x == 1")  # a str, not a list of tests
    with pytest.raises(TypeError, match="program"):
        Job(b"x = 1", ())


def test_sandbox_arguments_are_checked():
    with pytest.raises(ValueError, match="isolation"):
        Sandbox("none")
    with pytest.raises(ValueError, match="workers"):
        Sandbox("limits", workers=0)


def test_isolation_bwrap_refuses_to_run_unisolated(monkeypatch):
    monkeypatch.setattr(executor, "bwrap_path", lambda: None)
    monkeypatch.setattr(executor, "_PROBES", {})
    with pytest.raises(SandboxUnavailable, match="refuses to run programs unisolated"):
        Sandbox("bwrap")


def test_fallback_warns_once_naming_what_is_not_isolated(monkeypatch):
    monkeypatch.setattr(executor, "bwrap_path", lambda: None)
    monkeypatch.setattr(executor, "_PROBES", {})
    monkeypatch.setattr(executor, "_WARNED", False)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        first = Sandbox("auto")
        Sandbox("auto")
    assert first.isolation == "limits"
    messages = [str(w.message) for w in caught if issubclass(w.category, SandboxWarning)]
    assert len(messages) == 1
    assert "no bwrap binary" in messages[0]
    assert "network" in messages[0] and "filesystem" in messages[0]
    assert first.run("x = 1", ["assert x == 1"]).all_passed
    first.close()


def test_a_worker_serves_many_jobs_without_leaking_descriptors():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SandboxWarning)
        sandbox = Sandbox("auto", FAST, workers=1)
    with sandbox:
        results = sandbox.run_many([Job("x = 1", ("assert x == 1",))] * 300)
        assert all(r.all_passed for r in results)
        (worker,) = [sandbox._idle.get()]
        sandbox._idle.put(worker)
        assert worker.proc is not None and worker.proc.poll() is None  # the same supervisor
        started = worker.proc.pid
        sandbox.run("x = 1", ["assert x == 1"])
        assert worker.proc.pid == started
        # the supervisor (bwrap's descendant, or the process itself) holds few descriptors
        top = psutil.Process(started)
        supervisors = [p for p in [top, *top.children(recursive=True)] if "-S" in p.cmdline()]
        assert supervisors and all(p.num_fds() < 20 for p in supervisors)
