"""The docs point at what exists, and their example files run.

Every relative link and every backticked repository path in README.md and docs/*.md must
name an existing file or folder, and every backticked dotted name under ``marti_env`` or
``marti_trainer`` an existing module (and a name its file mentions), so a rename that
forgets the docs fails here. The examples
in docs/examples/ run: the new workflow of docs/workflows.md (a script, PettingZoo's API
tests on the env it registers, and the page's YAML spec by entry point); the new credit
method of docs/credit.md runs in tests/test_credit_bench.py.
"""

from __future__ import annotations

import importlib
import re
import subprocess
import sys
from pathlib import Path

import pytest
from pettingzoo.test import parallel_api_test

import marti_env
from tests.conftest import REPO

PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
CODE_SPAN = re.compile(r"(?<!`)`([^`\n]+)`(?!`)")
TOP_DIRS = ("marti_env", "marti_trainer", "envs", "baselines", "benchmarks", "examples")
TOP_DIRS += ("docs", "tests", ".ci")
PLACEHOLDER = re.compile(r"[<>*{}$]|\.\.\.")
DOTTED = re.compile(r"(?<![\w./])(?:marti_env|marti_trainer)(?:\.\w+)+")
EXAMPLE = REPO / "docs" / "examples" / "my_workflow.py"


def prose(path: Path) -> str:
    """The page without its fenced code blocks (commands and code there are run, not read)."""
    return re.sub(r"^```.*?^```", "", path.read_text(encoding="utf-8"), flags=re.M | re.S)


def relative_links(text: str) -> list[str]:
    targets = [t.split("#", 1)[0] for t in LINK.findall(text)]
    return [t for t in targets if t and not re.match(r"[a-z][a-z0-9+.-]*:", t)]


def repository_paths(text: str) -> list[str]:
    """Words of backticked spans that start with a top-level folder of the repository
    (``marti_trainer/cli/bench.py``, ``docs/credit.md``, ``tests/test_x.py::test_y``);
    placeholders (``envs/<id>.yaml``, ``runs/*``) are not paths."""
    paths = []
    for span in CODE_SPAN.findall(text):
        for word in span.split():
            word = word.strip("\"'(),;:").split("::", 1)[0].removeprefix("./")
            if word.split("/", 1)[0] in TOP_DIRS and "/" in word and not PLACEHOLDER.search(word):
                paths.append(word)
    return paths


def unresolved_names(text: str) -> list[str]:
    """Backticked dotted names (``marti_trainer.rollout.group_key_of``) whose modules do not
    exist, or whose first name after the last module does not occur in that module's file
    (a cheap check, without importing anything)."""
    bad = []
    for span in CODE_SPAN.findall(text):
        for name in DOTTED.findall(span):
            path, rest = REPO / name.split(".")[0], name.split(".")[1:]
            while rest and path.is_dir():
                if (path / rest[0]).is_dir():
                    path = path / rest[0]
                elif (path / f"{rest[0]}.py").is_file():
                    path = path / f"{rest[0]}.py"
                else:
                    break
                rest = rest[1:]
            source = path / "__init__.py" if path.is_dir() else path
            if rest and not re.search(rf"\b{rest[0]}\b", source.read_text(encoding="utf-8")):
                bad.append(name)
    return bad


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.relative_to(REPO).as_posix())
def test_links_and_paths_in_the_docs_exist(page):
    text = prose(page)
    missing = [f"link {t}" for t in relative_links(text) if not (page.parent / t).exists()]
    missing += [f"path `{p}`" for p in repository_paths(text) if not (REPO / p).exists()]
    missing += [f"name `{n}`" for n in unresolved_names(text)]
    assert not missing, f"{page.relative_to(REPO)} names what does not exist: {missing}"


def test_the_checker_finds_links_and_paths():
    text = "[a](docs/x.md#top) [b](https://x.org) `python benchmarks/bench_x.py --out runs/y`"
    text += " `envs/<id>.yaml` `tests/test_a.py::test_b` `marti_env/`"
    assert relative_links(text) == ["docs/x.md"]
    assert repository_paths(text) == ["benchmarks/bench_x.py", "tests/test_a.py", "marti_env/"]
    text = "`marti_env.make(id)`, `marti_trainer.rollout.engine.rollout` `marti_trainer.gone`"
    text += " `marti_trainer.cli.bench` `marti_trainer.cli.bench_cli` `marti_env.credit.nope`"
    expected = ["marti_trainer.gone", "marti_trainer.cli.bench_cli", "marti_env.credit.nope"]
    assert unresolved_names(text) == expected


# --- docs/examples/my_workflow.py (docs/workflows.md) -------------------------------------


@pytest.fixture
def my_workflow(monkeypatch):
    """docs/examples/my_workflow.py imported as ``my_workflow``; its envs unregistered after."""
    monkeypatch.syspath_prepend(str(EXAMPLE.parent))
    sys.modules.pop("my_workflow", None)
    try:
        yield importlib.import_module("my_workflow")
    finally:
        sys.modules.pop("my_workflow", None)
        for env_id in ("solve-check-v0", "solve-check-v1"):
            marti_env.registry.pop(env_id, None)


def test_the_new_workflow_example_runs():
    out = subprocess.run(
        [sys.executable, str(EXAMPLE)], cwd=REPO, capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert "Proposed solution:" in out.stdout  # the checker is shown the solver's answer
    assert out.stdout.splitlines()[-1] == "154 1.0 {'solver_0': 1.0, 'checker_0': 1.0}"


def test_the_new_workflow_passes_pettingzoo_api_tests(my_workflow):
    env = marti_env.make("solve-check-v0", max_response_chars=2000)
    assert env.workflow.name == "solve_then_check"
    parallel_api_test(env, 20)


def test_the_pages_yaml_spec_registers_by_entry_point(my_workflow, tmp_path):
    page = (REPO / "docs" / "workflows.md").read_text(encoding="utf-8")
    spec = re.search(r"```yaml\n(.*?)```", page, re.S).group(1)
    spec = spec.replace("my_package.workflows:", "my_workflow:").replace("-v0", "-v1")
    path = tmp_path / "solve-check-v1.yaml"
    path.write_text(spec, encoding="utf-8")
    registered = marti_env.load_spec_file(path)
    assert registered.workflow is my_workflow.SolveThenCheck
    mine, theirs = marti_env.make("solve-check-v1"), marti_env.make("solve-check-v0")
    assert mine.reset(seed=3)[0] == theirs.reset(seed=3)[0]  # the same prompts as the file's
