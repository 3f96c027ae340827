"""Rewrite the generated blocks of README.md and docs/*.md from the result files they cite.

A generated block is the output of the command in its opening marker::

    <!-- generated: python benchmarks/bench_quickstart.py --render docs/results/x.json -->
    ...the command's stdout...
    <!-- end generated -->

so no figure in those blocks is typed by hand: tests/test_generated_docs.py reruns every
command and fails when a block differs from its output. Commands run from the repository
root; ``python`` is this interpreter. Only commands that read result files belong in a
marker (renderers, ``marti report``), never ones that train or measure.

    python benchmarks/regenerate_docs.py           # rewrite every block
    python benchmarks/regenerate_docs.py --check   # exit 1 and name the stale blocks
"""

from __future__ import annotations

import argparse
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
BLOCK = re.compile(r"<!-- generated: (.+?) -->\n(.*?)<!-- end generated -->", re.S)


@dataclass(frozen=True)
class Block:
    """One generated block: its page, 1-based line, command and current text."""

    page: Path
    line: int
    command: str
    text: str


def pages() -> list[Path]:
    return [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]


def blocks(page: Path) -> list[Block]:
    source = page.read_text(encoding="utf-8")
    return [
        Block(page, source.count("\n", 0, m.start()) + 1, m.group(1), m.group(2))
        for m in BLOCK.finditer(source)
    ]


def render(command: str) -> str:
    """The block text a command produces (its stdout, ending in one newline)."""
    argv = shlex.split(command)
    if argv[0] == "python":
        argv[0] = sys.executable
    out = subprocess.run(argv, cwd=REPO, capture_output=True, text=True, timeout=300)
    if out.returncode != 0:
        raise RuntimeError(f"`{command}` failed:\n{out.stderr[-2000:]}")
    return out.stdout.rstrip("\n") + "\n"


def regenerate(page: Path) -> bool:
    """Rewrite ``page``'s blocks; True if anything changed."""
    source = page.read_text(encoding="utf-8")
    new = BLOCK.sub(
        lambda m: f"<!-- generated: {m.group(1)} -->\n{render(m.group(1))}<!-- end generated -->",
        source,
    )
    if new != source:
        page.write_text(new, encoding="utf-8")
    return new != source


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="only report stale blocks")
    args = parser.parse_args()
    stale = [
        f"{b.page.relative_to(REPO)}:{b.line}: {b.command}"
        for page in pages()
        for b in blocks(page)
        if render(b.command) != b.text
    ]
    if args.check:
        print("\n".join(stale) or "all generated blocks are current")
        return 1 if stale else 0
    for page in pages():
        if regenerate(page):
            print(f"rewrote {page.relative_to(REPO)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
