"""``marti report``: a results page generated from run files, never typed by hand.

One job: read finished runs (a run directory, or any folder holding them such as a
``marti sweep`` output), group them by config, and write a markdown page with confidence
intervals, paired comparisons and plots, citing every file it read.

    marti report runs/sweep__quickstart --baseline algorithm.group_by=agent --out docs/results.md

What it reads, per run (what :mod:`marti_trainer.train` writes): ``config.yaml`` (the
resolved config), ``metrics.jsonl`` (``eval/accuracy`` at each evaluation, the training
reward ``rollout/outcome`` per step), ``summary.json`` (present once the run finished:
unfinished runs are listed, not counted) and the final held-out evaluation's transcript
``eval/step_<N>.jsonl`` (per-problem outcomes: the problem set and the Wilson interval).

What it writes:

* **Per config**: runs are grouped by their config without the seeds and where they live
  (``seed``, ``run_name``, ``exp_name``, ``eval.seed``, ``log.*``); a group is labelled by
  the keys that differ between groups. Final held-out accuracy: mean over seeds with a bootstrap CI
  (:func:`marti_env.stats.mean_ci`), its IQM, and the gain over the step-0 evaluation as a
  paired difference (did training help at all?).
* **Paired differences** (``--baseline key=value``): each config against the config that
  differs from it only in ``key``, whose value is ``value`` (and in the options of that
  value, ``key_kwargs.*``: :func:`options_of`), on the seeds both have
  (:func:`marti_env.stats.paired_difference`, and P(config > baseline) by
  :func:`marti_env.stats.probability_of_improvement_ci`). Runs are paired only when
  their held-out problems are the same; otherwise the report refuses, saying which runs
  and how their problem sets differ.
* **Across config files** (``--versus key=value``, repeatable; ``exp_name`` works): every
  other config against the one config that has ``key=value``, whatever else differs, with
  the keys that differ named (single agent against a debate at equal budget). Groups are
  labelled by ``exp_name`` when each has one and the names tell them apart.
* **Compute per config**: generations, rollout tokens, update tokens and the share of
  zero-advantage samples per training step (:func:`training_compute`): equal inference is
  not equal training compute. Left out when no run recorded its update.
* **Per run**: final accuracy with its Wilson interval over the held-out problems.
* **Where the seeds ended** (``--modes KAPPA``): runs of any config grouped by how far
  their final per-problem outcomes agree (:func:`answer_modes`, Cohen's kappa at least
  KAPPA), so a difference between configs that comes from how many of their seeds fell
  into a collapsed policy is seen as such.
* **Plots** (PNG next to the page): training reward and held-out accuracy against the
  step, mean over seeds with a CI band; held-out accuracy against generations (sampled
  model calls: step x tasks_per_step x n_samples x turns per episode) and against the
  response tokens the training rollouts generated (from ``transcripts.jsonl``).
* **Sources**: every file read, with its SHA-256, and the arguments, so
  :func:`check_report` (``marti report --check PAGE``) regenerates the page from the same
  files and says whether it still matches.

The page holds no date, so the same files give the same page, byte for byte.

**Run digests.** A run directory holds checkpoints and transcripts (hundreds of MB); a
*digest* (``<name>.run.json``, :func:`write_digests`, ``marti report --save-digests DIR``)
holds only what the report reads of it (config, evaluations, training curve, per-problem
outcomes and answers of the final evaluation, tokens per step, update compute): a few kB
to commit under ``docs/results/`` so a results page is regenerated and checked from files
in the repository.
A digest is read wherever a run directory is.

Modules, each importing only those below it: :mod:`~marti_trainer.report.pages` (write,
update and check a page; summary blocks), :mod:`~marti_trainer.report.tables` (the page's
markdown and its tables), :mod:`~marti_trainer.report.plots` (curves and bands),
:mod:`~marti_trainer.report.pairing` (groups of runs and their pairings),
:mod:`~marti_trainer.report.runs` (reading runs and digests).
"""

from marti_trainer.report.pages import (
    check_report,
    page_options,
    section_level,
    summary_block,
    summary_markers,
    write_report,
)
from marti_trainer.report.pairing import (
    Group,
    Pairing,
    differing_keys,
    group_runs,
    options_of,
    pair_versus,
    pair_with_baseline,
    training_pairs,
)
from marti_trainer.report.runs import (
    DIGEST_SUFFIX,
    RunRecord,
    find_runs,
    read_run,
    training_compute,
    write_digests,
)
from marti_trainer.report.tables import (
    HEADER,
    Report,
    ReportOptions,
    answer_modes,
    build_report,
    step0_disagreements,
)

__all__ = [
    "DIGEST_SUFFIX",
    "HEADER",
    "Group",
    "Pairing",
    "Report",
    "ReportOptions",
    "RunRecord",
    "answer_modes",
    "build_report",
    "check_report",
    "differing_keys",
    "find_runs",
    "group_runs",
    "options_of",
    "page_options",
    "pair_versus",
    "pair_with_baseline",
    "read_run",
    "section_level",
    "step0_disagreements",
    "summary_block",
    "summary_markers",
    "training_compute",
    "training_pairs",
    "write_digests",
    "write_report",
]
