"""Every generated block in README.md and docs/*.md is the output of the command in its
marker (benchmarks/regenerate_docs.py), so no figure in those blocks is typed by hand."""

from __future__ import annotations

import importlib.util
import sys

import pytest

from tests.conftest import REPO

_spec = importlib.util.spec_from_file_location(
    "regenerate_docs", REPO / "benchmarks" / "regenerate_docs.py"
)
regen = importlib.util.module_from_spec(_spec)
sys.modules["regenerate_docs"] = regen  # dataclasses look their module up there
_spec.loader.exec_module(regen)

BLOCKS = [b for page in regen.pages() for b in regen.blocks(page)]


@pytest.mark.parametrize("block", BLOCKS, ids=lambda b: f"{b.page.name}:{b.line}")
def test_generated_block_is_its_commands_output(block):
    assert regen.render(block.command) == block.text, (
        f"{block.page.relative_to(REPO)}:{block.line} is stale or edited by hand; "
        "run python benchmarks/regenerate_docs.py"
    )


def test_the_readme_has_generated_blocks():
    assert any(b.page.name == "README.md" for b in BLOCKS)


def test_a_hand_edited_block_is_found(tmp_path):
    page = tmp_path / "page.md"
    command = "python -c \"print('| a |')\""
    page.write_text(f"x\n<!-- generated: {command} -->\n| b |\n<!-- end generated -->\n")
    (block,) = regen.blocks(page)
    assert block.line == 2 and block.command == command
    assert regen.render(block.command) == "| a |\n" != block.text
