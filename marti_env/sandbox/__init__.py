"""Running untrusted programs: a bwrap sandbox with resource limits and a worker pool.

>>> from marti_env.sandbox import Sandbox
>>> with Sandbox() as box:  # doctest: +SKIP
...     box.run("def f(x):\n    return x + 1", ["assert f(1) == 2"]).all_passed
True

See :mod:`marti_env.sandbox.executor` and docs/code.md (threat model, known gaps).
"""

from marti_env.sandbox.executor import (
    FALLBACK_GAPS,
    ExecutionResult,
    Job,
    Sandbox,
    SandboxLimits,
    SandboxUnavailable,
    SandboxWarning,
    TestResult,
    bwrap_path,
    bwrap_problem,
)

__all__ = [
    "FALLBACK_GAPS",
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
