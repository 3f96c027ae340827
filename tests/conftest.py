"""Shared fixtures. The real default model and Ray cluster are session-scoped (loaded once).

Benchmark data: a test that needs a named set asks ``data_file("amc")`` (or is marked
``needs_data("amc")``). Where the set is absent, the test skips with one message naming the
set, where it was looked for and the command that gets it (``marti data get amc ...``); sets
that ship inside the package (GSM8K test, MATH-500) are always present.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

# MKL's conditional numerical reproducibility (CNR), pinned to its AVX2 code path in strict
# mode: on Intel CPUs MKL otherwise picks AVX-512 kernels at run time (GEMM, and the VML
# functions behind torch.exp/log/sqrt, whose first-call dispatch can race: pytorch issue
# #188792), and two processes could differ in the last bit; AMD CPUs take that AVX2 path
# anyway (oneMKL developer guide, "Obtaining Numerically Reproducible Results"). The Ray tests
# compare actors with the pytest process bit for bit, and a last-bit difference does not stay
# small there: Adam's first step is about lr * sign(g) for a near-zero gradient element g, and
# seeded sampling from a random model's near-uniform distribution flips a token, so it became
# a 1% entropy difference on an Intel Xeon. Set before any MKL call; the local Ray cluster
# the tests start inherits it.
os.environ.setdefault("MKL_CBWR", "AVX2,STRICT")

import pytest

from marti_env.tasks.catalog import MissingDataError, data_dir, locate

REPO = Path(__file__).resolve().parents[1]


def missing_data(*names: str) -> str | None:
    """The skip message for the first absent set among ``names``, or None if all are here."""
    for name in names:
        try:
            locate(name)
        except MissingDataError as e:
            return str(e)
    return None


def needs_data(*names: str) -> pytest.MarkDecorator:
    """Mark a test that reads the named sets: skipped, naming the set and the command that
    gets it, when one is absent."""
    reason = missing_data(*names)
    return pytest.mark.skipif(reason is not None, reason=reason or "")


@pytest.fixture
def data_file() -> Callable[[str], Path]:
    """``data_file(name) -> Path`` of a named set's file; skips the test when it is absent."""

    def get(name: str) -> Path:
        try:
            return locate(name)
        except MissingDataError as e:
            pytest.skip(str(e))

    return get


@pytest.fixture
def shared_data() -> Path:
    """The data directory (:func:`marti_env.tasks.catalog.data_dir`); prefer ``data_file``."""
    root = data_dir()
    if not root.is_dir():
        pytest.skip(f"no benchmark data directory at {root}: see `marti data list`")
    return root


def _kept_environ():
    before = dict(os.environ)
    yield
    if dict(os.environ) != before:
        os.environ.clear()
        os.environ.update(before)


@pytest.fixture(autouse=True)
def _restore_environ():
    """Undo what a test leaves in ``os.environ``. Starting a vLLM engine sets process-wide
    variables (``LD_PRELOAD`` of torch's libgomp, inductor thread counts, ...) that later
    child processes such as Ray workers inherit: on an Intel Xeon with AMX, a vLLM test
    followed by test_ray_training_resumes_and_matches_local made that test's Ray actors
    compute a 1% different entropy at its resumed step. ``VLLMPolicy`` now undoes them itself
    (``_engine_environ``, tested in tests/test_policy_vllm.py); this guards the suite
    against any other test or library that leaves variables set."""
    yield from _kept_environ()


@pytest.fixture(scope="module", autouse=True)
def _restore_environ_per_module():
    """The same for module-scoped fixtures: an engine that a module's fixture starts is
    started before any function-scoped fixture runs, so ``_restore_environ`` takes its
    variables for the clean state (tests/test_policy_vllm.py did this, and the full suite
    then failed the Ray test above). Autouse, so it is set up before the module's own
    fixtures and torn down after them."""
    yield from _kept_environ()
