"""Workflow rules, one file each, registered by name (the ``workflow:`` key of a YAML spec)."""

from __future__ import annotations

from marti_env.workflows.base import Prompt, Workflow, clip_middle, defuse_markers
from marti_env.workflows.chain import ChainOfAgents
from marti_env.workflows.mad import Debate
from marti_env.workflows.majority import MajorityVote
from marti_env.workflows.moa import MixtureOfAgents
from marti_env.workflows.single import Single
from marti_env.workflows.voting import majority_vote

WORKFLOWS: dict[str, type[Workflow]] = {
    cls.name: cls for cls in (Debate, MixtureOfAgents, ChainOfAgents, Single, MajorityVote)
}
"""Workflow name -> class. Add yours here or pass the class to ``marti_env.register``."""

__all__ = [
    "WORKFLOWS",
    "ChainOfAgents",
    "Debate",
    "MajorityVote",
    "MixtureOfAgents",
    "Prompt",
    "Single",
    "Workflow",
    "clip_middle",
    "defuse_markers",
    "majority_vote",
]
