"""Load tasks from a Hugging Face dataset (optional: needs ``pip install datasets``).

``datasets`` is imported inside :func:`load_hf_dataset` only, so ``import marti_env`` works
without it. Rows follow the same rules as files (see :mod:`marti_env.tasks.files`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from marti_env.tasks.files import LoadedTasks, OnError, TaskDataError, check_limit, convert_rows
from marti_env.tasks.task import Task

__all__ = ["load_hf_dataset", "read_hf_dataset"]


def load_hf_dataset(
    name: str,
    split: str = "test",
    prompt_field: str | None = None,
    answer_field: str | None = None,
    limit: int | None = None,
    *,
    config: str | None = None,
    on_error: OnError = "raise",
    **load_kwargs: Any,
) -> list[Task]:
    """Load one split of a Hugging Face dataset as tasks.

    ``name`` is either a local directory written by ``Dataset.save_to_disk`` /
    ``DatasetDict.save_to_disk`` (read with ``datasets.load_from_disk``; for a plain
    ``Dataset`` ``split`` is ignored) or anything ``datasets.load_dataset`` accepts (a Hub
    id such as ``"openai/gsm8k"``, or a builder such as ``"json"`` with
    ``data_files=...`` in ``load_kwargs``). Offline use: set ``HF_DATASETS_OFFLINE=1``.

    Rows are converted by the shared row rules (prompt|problem|question and answer by
    default, numbers canonicalised, GSM8K ``####`` answers extracted, missing ids become
    ``<dataset>/<split>/<row index>``). Unlike :func:`~marti_env.tasks.load_tasks`, only the
    first ``limit`` rows are read and validated, so large datasets stay cheap.

    Args:
        name: Hub id, builder name, or a ``save_to_disk`` directory.
        split: The split to load.
        prompt_field: Column holding the problem text (default: prompt|problem|question).
        answer_field: Column holding the answer (default: ``answer``).
        limit: Read at most this many rows (the first ones); ``None`` reads all.
        config: The dataset configuration (``load_dataset``'s ``name``), e.g. ``"main"``.
        on_error: ``"raise"`` (default) or ``"skip"`` malformed rows, with a warning (see
            :mod:`marti_env.tasks.files`); :func:`read_hf_dataset` also returns the count.
        **load_kwargs: Passed on to ``datasets.load_dataset``.

    Raises:
        ImportError: ``datasets`` is not installed.
        TaskDataError: A malformed row, or a ``save_to_disk`` directory without ``split``.
    """
    return read_hf_dataset(
        name,
        split,
        prompt_field,
        answer_field,
        limit,
        config=config,
        on_error=on_error,
        **load_kwargs,
    ).tasks


def read_hf_dataset(
    name: str,
    split: str = "test",
    prompt_field: str | None = None,
    answer_field: str | None = None,
    limit: int | None = None,
    *,
    config: str | None = None,
    on_error: OnError = "raise",
    **load_kwargs: Any,
) -> LoadedTasks:
    """:func:`load_hf_dataset`, returning the tasks with the count and first problems of
    the rows ``on_error="skip"`` left out."""
    check_limit(limit)
    try:
        import datasets
    except ImportError as err:
        raise ImportError(
            "load_hf_dataset needs the Hugging Face 'datasets' package: "
            "pip install datasets (or pip install 'marti[datasets]')"
        ) from err

    local = Path(name).expanduser()
    if local.is_dir():
        data = datasets.load_from_disk(str(local))
        if isinstance(data, datasets.DatasetDict):
            if split not in data:
                raise TaskDataError(
                    str(local), f"no split {split!r}; available: {sorted(data.keys())}"
                )
            data = data[split]
        label = f"{local.name}/{split}"
    else:
        data = datasets.load_dataset(name, config, split=split, **load_kwargs)
        label = f"{name}/{split}" if config is None else f"{name}/{config}/{split}"
    if limit is not None and limit < len(data):
        data = data.select(range(limit))
    rows = ((f"{label}: row {i}", row) for i, row in enumerate(data))
    return convert_rows(
        rows,
        name=label,
        prompt_field=prompt_field,
        answer_field=answer_field,
        on_error=on_error,
        origin=label,
    )
