"""Where problems come from: procedural arithmetic, JSON/JSONL files, Hugging Face datasets.

``make_task_source(spec)`` turns a config value into a :class:`TaskSource`; see
:mod:`marti_env.tasks.source` for the accepted forms.
"""

from marti_env.tasks.arithmetic import ArithmeticTasks
from marti_env.tasks.files import (
    LoadedTasks,
    TaskDataError,
    TaskDataWarning,
    load_tasks,
    read_task_file,
)
from marti_env.tasks.hf import load_hf_dataset, read_hf_dataset
from marti_env.tasks.source import ListTasks, TaskSource, data_dir, make_task_source
from marti_env.tasks.task import Task

__all__ = [
    "ArithmeticTasks",
    "ListTasks",
    "LoadedTasks",
    "Task",
    "TaskDataError",
    "TaskDataWarning",
    "TaskSource",
    "data_dir",
    "load_hf_dataset",
    "load_tasks",
    "make_task_source",
    "read_hf_dataset",
    "read_task_file",
]
