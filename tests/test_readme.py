"""The docs' code examples run (as PettingZoo runs its docs' examples in CI), and the README's
test command is the one CI runs."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from tests.conftest import REPO

README = REPO / "README.md"


def python_blocks(path) -> list[str]:
    return re.findall(r"```python\n(.*?)```", path.read_text(encoding="utf-8"), flags=re.S)


@pytest.mark.parametrize("index", range(len(python_blocks(README))))
def test_readme_python_examples_run(index, tmp_path):
    code = python_blocks(README)[index]
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=600
    )
    assert out.returncode == 0, out.stderr[-3000:]


def test_ci_runs_the_readme_test_command():
    ci = (REPO / ".ci" / "run").read_text(encoding="utf-8")
    command = re.search(r"^TEST_CMD='(.*)'$", ci, flags=re.M)
    assert command, ".ci/run must define TEST_CMD"
    assert command.group(1) in README.read_text(encoding="utf-8")
