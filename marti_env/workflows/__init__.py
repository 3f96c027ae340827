"""Workflow rules, one file each, registered by name (the ``workflow:`` key of a YAML spec)."""

from __future__ import annotations

from marti_env.workflows.base import Prompt, Workflow, clip_middle, defuse_markers
from marti_env.workflows.chain import ChainOfAgents
from marti_env.workflows.code_team import CodeTeam
from marti_env.workflows.gate import Gate
from marti_env.workflows.mad import Debate
from marti_env.workflows.majority import MajorityVote
from marti_env.workflows.moa import MixtureOfAgents
from marti_env.workflows.signal import Signal
from marti_env.workflows.single import Single
from marti_env.workflows.split_sum import SplitSum
from marti_env.workflows.voting import majority_vote

WORKFLOWS: dict[str, type[Workflow]] = {
    cls.name: cls
    for cls in (
        Debate,
        MixtureOfAgents,
        ChainOfAgents,
        Single,
        MajorityVote,
        SplitSum,
        Gate,
        Signal,
        CodeTeam,
    )
}
"""Workflow name -> class. Add yours here or pass the class to ``marti_env.register``."""

__all__ = [
    "WORKFLOWS",
    "ChainOfAgents",
    "CodeTeam",
    "Debate",
    "Gate",
    "MajorityVote",
    "MixtureOfAgents",
    "Prompt",
    "Signal",
    "Single",
    "SplitSum",
    "Workflow",
    "clip_middle",
    "defuse_markers",
    "majority_vote",
]
