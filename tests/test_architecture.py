"""The architecture holds: the import contracts, no import cycle, a documented job per module.

The contracts live in pyproject.toml (``[tool.importlinter]``): marti_env imports nothing
of the trainer and no ML framework, marti_trainer's layers only import downwards (a new
top-level module must be placed in one), the policy backends and the engines are
independent. The graph check finds cycles among all marti_env and marti_trainer modules,
including imports inside functions and under ``TYPE_CHECKING``. docs/architecture.md lists
every module with its one job, and every module opens with a docstring.
"""

from __future__ import annotations

import ast
import re
import subprocess
import sys

import grimp

from tests.conftest import REPO

PACKAGES = ("marti_env", "marti_trainer")
ARCHITECTURE = REPO / "docs" / "architecture.md"


def _modules() -> list[str]:
    """Every module of the two packages, by its dotted name (packages by their __init__)."""
    names = []
    for package in PACKAGES:
        for path in sorted((REPO / package).rglob("*.py")):
            parts = path.relative_to(REPO).with_suffix("").parts
            if parts[-1] == "__init__":
                parts = parts[:-1]
            names.append(".".join(parts))
    return names


def test_import_contracts_hold():
    result = subprocess.run(
        [
            sys.executable,
            "-c",
            "from importlinter.cli import lint_imports_command as c; c()",
            "--no-cache",
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout[-6000:] + result.stderr[-2000:]
    assert "0 broken" in result.stdout


def test_no_import_cycles():
    graph = grimp.build_graph(*PACKAGES, include_external_packages=False, cache_dir=None)
    cycles = []
    for module in sorted(graph.modules):
        for imported in graph.find_modules_directly_imported_by(module):
            if graph.chain_exists(imported=module, importer=imported):
                chain = graph.find_shortest_chain(importer=imported, imported=module)
                cycles.append(" -> ".join([module, *chain]))
    assert not cycles, "import cycles:\n" + "\n".join(cycles)


def test_every_module_opens_with_a_docstring():
    missing = []
    for name in _modules():
        path = REPO / (name.replace(".", "/") + ".py")
        if not path.is_file():
            path = REPO / name.replace(".", "/") / "__init__.py"
        tree = ast.parse(path.read_text(encoding="utf-8"))
        if not (ast.get_docstring(tree) or "").strip():
            missing.append(str(path.relative_to(REPO)))
    assert not missing, f"modules without an opening docstring: {missing}"


def test_architecture_page_lists_every_module():
    text = ARCHITECTURE.read_text(encoding="utf-8")
    listed = set(re.findall(r"^\s*[-*]\s+`([a-z_][\w.]*)`", text, re.M))
    modules = set(_modules())
    missing = sorted(modules - listed)
    assert not missing, f"docs/architecture.md does not list: {missing}"
    stale = sorted(m for m in listed if m.split(".")[0] in PACKAGES and m not in modules)
    assert not stale, f"docs/architecture.md lists modules that do not exist: {stale}"
