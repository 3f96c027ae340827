"""The rules of a workflow, apart from the PettingZoo plumbing.

A :class:`Workflow` says who speaks in each round, what each speaker is shown, and how the
team's final answer is chosen. It is plain Python over :class:`~marti_env.record.Turn`
lists, so the rules are tested with hand-written transcripts; :class:`marti_env.env.WorkflowEnv`
is the thin PettingZoo adapter that drives any workflow.
"""

from __future__ import annotations

import copy
import functools
import re
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from marti_env.record import Turn
from marti_env.rewards.canonical import canonical_answer
from marti_env.tasks.task import Task
from marti_env.workflows.voting import majority_vote


@dataclass(frozen=True)
class Prompt:
    """What one agent is asked in one round: a prompt template and its field values."""

    template: str
    values: Mapping[str, str]


def clip_middle(text: str, max_chars: int) -> str:
    """``text`` if it fits in ``max_chars``, else its head and tail around an omission note.

    Used for what an agent is *shown* of another's response; the episode record keeps the
    full text. Keeps the tail because the final answer sits at the end of a solution.
    """
    if len(text) <= max_chars:
        return text
    note = f"\n[... {len(text) - max_chars} characters omitted ...]\n"
    head = max_chars // 4
    return text[:head] + note + text[len(text) - (max_chars - head) :]


# Chat-template control tokens: the ``<|name|>`` family (ChatML, Llama 3, Phi, Qwen,
# SmolLM2: ``<|im_start|>``, ``<|eot_id|>``), Gemma's turn tokens, Llama 2's and Mistral's.
_CHAT_TOKENS = re.compile(
    r"<\|[^|<>\s]{1,64}\|>|</?(?:start|end)_of_turn>|\[/?INST\]|<</?SYS>>|</?s>",
    re.IGNORECASE,
)


@functools.lru_cache(maxsize=64)
def _marker_lines(labels: tuple[str, ...], headings: tuple[str, ...]) -> re.Pattern[str] | None:
    forms = [rf"{re.escape(label)}[ \t]*[0-9]+[ \t]*:" for label in labels]
    forms += [re.escape(heading) for heading in headings]
    if not forms:
        return None
    return re.compile(rf"^(?=[ \t]*(?:{'|'.join(forms)}))", re.MULTILINE | re.IGNORECASE)


def defuse_markers(text: str, labels: Sequence[str] = (), headings: Sequence[str] = ()) -> str:
    """``text`` with whatever imitates the transcript's own structure made inert.

    What an agent is shown of another agent's response sits between the env's own markers:
    the labels :func:`numbered` writes (``Response 2:``) and the headings of the prompt
    template (``Proposed solution:``, ``A reviewer's critique of it:``). A response that
    writes such a marker at the start of a line would change how many responses the next
    prompt seems to hold, or whose text a passage seems to be. Rules:

    1. Every line whose first non-blank characters are a marker gets ``"> "`` in front
       (quoted, so the marker no longer starts a line). A marker is a label followed by a
       number and a colon (``Response 12:``, spaces allowed around the number), or a
       heading; both compared case-insensitively.
    2. Chat-template control tokens get a space after their first character, so a
       tokenizer cannot read them as special tokens (which would open a new chat turn):
       ``<|im_start|>`` → ``< |im_start|>``. Covered: the ``<|name|>`` family (ChatML, Llama
       3, Phi, Qwen, SmolLM2), ``<start_of_turn>``/``<end_of_turn>`` (Gemma),
       ``[INST]``/``[/INST]``, ``<<SYS>>`` and ``<s>``/``</s>`` (Llama 2, Mistral).

    Text without markers is returned unchanged. Linear time; never raises.
    """
    pattern = _marker_lines(tuple(labels), tuple(headings))
    if pattern is not None:
        text = pattern.sub("> ", text)
    return _CHAT_TOKENS.sub(lambda m: m.group(0)[0] + " " + m.group(0)[1:], text)


class Workflow(ABC):
    """Rules of a multi-agent workflow.

    Subclasses set ``name``, ``templates`` (template name -> allowed fields) and implement
    the abstract methods. Construction validates the workflow's own arguments and raises
    ``ValueError`` naming the bad one.

    Attributes:
        agents: Agent names, ``<role>_<i>``, in a fixed order.
        num_rounds: Number of rounds; every episode lasts exactly this many env steps.
        max_shared_chars: What an agent is shown of another's response is clipped to this
            many characters (head and tail kept).
        labels: The labels :func:`numbered` writes before the responses this workflow
            shows (``("Response",)``); lines of a shown response that imitate them are
            defused (see :func:`defuse_markers`).
        headings: The prompt templates' headings (``Prompts.headings()``), defused the
            same way; the env sets them (:meth:`with_headings`).
    """

    name: ClassVar[str]
    templates: ClassVar[Mapping[str, frozenset[str]]]
    labels: ClassVar[tuple[str, ...]] = ()
    headings: tuple[str, ...] = ()
    answer_key: Callable[[str], str] = staticmethod(canonical_answer)
    """Groups answers in votes: the canonical form of a math answer by default."""
    agents: tuple[str, ...]
    num_rounds: int

    def __init__(self, *, max_shared_chars: int = 6000) -> None:
        if max_shared_chars < 200:
            raise ValueError(f"max_shared_chars must be >= 200, got {max_shared_chars}")
        self.max_shared_chars = max_shared_chars

    def required_fields(self) -> Mapping[str, Mapping[str, str]]:
        """Template fields this workflow's arguments rely on: ``{template: {field: why}}``.
        The env refuses prompts whose template leaves one out (a user's prompt would
        otherwise drop it silently). None by default."""
        return {}

    @abstractmethod
    def role(self, agent: str) -> str:
        """The role of ``agent`` (e.g. ``"debater"``)."""

    @abstractmethod
    def actors(self, round: int) -> tuple[str, ...]:
        """The agents that act in ``round``, in the order their turns are recorded."""

    @abstractmethod
    def request(
        self,
        agent: str,
        round: int,
        task: Task,
        transcript: Sequence[Turn],
        rng: np.random.Generator,
    ) -> Prompt:
        """What ``agent`` is asked in ``round``, given the turns taken so far.

        ``rng`` is the episode's generator (for seeded shuffles); a workflow must draw from
        it the same amount whatever the transcript says, so episodes stay reproducible.
        """

    @abstractmethod
    def rule_inputs(self, transcript: Sequence[Turn]) -> dict[str, str | None]:
        """The answers the final-answer rule reads, by agent (e.g. the last debate round)."""

    @abstractmethod
    def final_rule(self, answers: Mapping[str, str | None], tie_order: Sequence[str]) -> str | None:
        """The team's final answer given the rule's inputs (pure: also used by credit
        methods to ask "what would the team have answered without this agent?")."""

    # -- shared helpers -------------------------------------------------------------------

    def final_answer(self, transcript: Sequence[Turn], tie_order: Sequence[str]) -> str | None:
        return self.final_rule(self.rule_inputs(transcript), tie_order)

    def shown(self, turn: Turn) -> str:
        """How a turn's response is shown to other agents: clipped (:func:`clip_middle`),
        then with imitated markers defused (:func:`defuse_markers`)."""
        return defuse_markers(
            clip_middle(turn.response, self.max_shared_chars), self.labels, self.headings
        )

    def with_headings(self, headings: Sequence[str]) -> Workflow:
        """A shallow copy of this workflow that also defuses ``headings`` in shown text."""
        clone = copy.copy(self)
        clone.headings = tuple(headings)
        return clone

    def vote(self, answers: Mapping[str, str | None], tie_order: Sequence[str]) -> str | None:
        """Majority vote over answers grouped by :attr:`answer_key` (see :func:`majority_vote`)."""
        return majority_vote(answers, tie_order, self.answer_key)

    def with_answer_key(self, key: Callable[[str], str]) -> Workflow:
        """A shallow copy of this workflow whose votes group answers by ``key`` (the env sets
        a code task's: programs grouped by behaviour on the tests)."""
        clone = copy.copy(self)
        clone.answer_key = key  # type: ignore[method-assign]
        return clone

    def turn_score(self, task: Task, agent: str, response: str) -> float | None:
        """A turn's score by this workflow's own rule, or None to use the env's reward
        (the default; ``code-team-v0``'s tester is scored on its tests instead)."""
        return None

    def describe(self) -> dict[str, Any]:
        """Who acts in each round, for ``pprint``/docs."""
        return {
            r: [f"{a} ({self.role(a)})" for a in self.actors(r)] for r in range(self.num_rounds)
        }


def check_int(name: str, value: Any, low: int, high: int) -> int:
    """Validate an integer workflow argument, naming it in the error."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise ValueError(f"{name} must be an integer, got {value!r}")
    if not low <= value <= high:
        raise ValueError(f"{name} must be in [{low}, {high}], got {value}")
    return int(value)


def numbered(responses: Sequence[str], label: str) -> str:
    """``"<label> 1:\\n...\\n\\n<label> 2:\\n..."``: how several responses are shown together."""
    return "\n\n".join(f"{label} {i}:\n{text}" for i, text in enumerate(responses, start=1))
