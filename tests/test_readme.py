"""The docs' code examples run (as PettingZoo runs its docs' examples in CI), and the README's
test command is the one CI runs.

A ``python`` block whose first line is ``# from examples/<file>.py`` (or
``# from docs/examples/<file>.py``) is an excerpt of an example that tests/test_examples.py
(or tests/test_docs.py) runs: its lines must appear in that file, in order (``...`` lines
stand for omitted ones), so the excerpt cannot drift from the code CI runs. Other blocks are
run as they are."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from tests.conftest import REPO

README = REPO / "README.md"
PAGES = ("custom_loops.md", "model.md", "workflows.md", "backends.md")
DOCS = [README, *(REPO / "docs" / page for page in PAGES)]
EXCERPT = re.compile(r"# from ((?:docs/)?examples/[\w/]+\.py)\n")


def python_blocks(path) -> list[str]:
    if not path.exists():
        return []
    return re.findall(r"```python\n(.*?)```", path.read_text(encoding="utf-8"), flags=re.S)


def check_block(code: str, tmp_path) -> None:
    """Run ``code``, or check it as an excerpt of the example it names."""
    excerpt = EXCERPT.match(code)
    if excerpt is None:
        out = subprocess.run(
            [sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=600
        )
        assert out.returncode == 0, out.stderr[-3000:]
        return
    source = (REPO / excerpt.group(1)).read_text(encoding="utf-8").splitlines()
    at = 0
    for line in code[excerpt.end() :].splitlines():
        if not line.strip() or line.strip() == "...":
            continue
        while at < len(source) and source[at].rstrip() != line.rstrip():
            at += 1
        assert at < len(source), f"{line!r} is not in {excerpt.group(1)} (in this order)"
        at += 1


@pytest.mark.parametrize("index", range(len(python_blocks(README))))
def test_readme_python_examples_run(index, tmp_path):
    check_block(python_blocks(README)[index], tmp_path)


@pytest.mark.parametrize(
    ("doc", "index"),
    [(d.name, i) for d in DOCS[1:] for i in range(len(python_blocks(d)))],
)
def test_docs_python_examples_run(doc, index, tmp_path):
    path = next(d for d in DOCS if d.name == doc)
    check_block(python_blocks(path)[index], tmp_path)


def test_an_excerpt_that_drifted_fails(tmp_path):
    check_block("# from examples/custom_loop.py\nimport argparse\n...\nimport torch\n", tmp_path)
    with pytest.raises(AssertionError, match=r"is not in examples/custom_loop\.py"):
        check_block("# from examples/custom_loop.py\nvec = gym.make_vec('x')\n", tmp_path)
    with pytest.raises(AssertionError, match="in this order"):  # lines out of order
        check_block("# from examples/custom_loop.py\nimport torch\nimport argparse\n", tmp_path)


def test_ci_runs_the_readme_test_command():
    ci = (REPO / ".ci" / "run").read_text(encoding="utf-8")
    command = re.search(r"^TEST_CMD='(.*)'$", ci, flags=re.M)
    assert command, ".ci/run must define TEST_CMD"
    assert command.group(1) in README.read_text(encoding="utf-8")
