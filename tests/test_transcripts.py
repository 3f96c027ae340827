"""The training-transcript reader: step splitting and its checks against metrics.jsonl."""

import json

import pytest

from marti_trainer.transcripts import read_training_steps


def _run(tmp_path, episodes, last_step):
    (tmp_path / "transcripts.jsonl").write_text("".join(json.dumps({"i": i}) + "\n"
                                                        for i in range(episodes)))  # fmt: skip
    (tmp_path / "metrics.jsonl").write_text(
        "".join(f'{{"step": {s}}}\n' for s in range(last_step + 1))
    )
    return tmp_path


def test_splits_the_episodes_by_step_in_file_order(tmp_path):
    steps = read_training_steps(_run(tmp_path, 6, 3), 2)
    assert [[r["i"] for r in step] for step in steps] == [[0, 1], [2, 3], [4, 5]]


def test_names_the_file_and_line_of_bad_input(tmp_path):
    with pytest.raises(ValueError, match=r"transcripts.jsonl: missing"):
        read_training_steps(tmp_path, 2)
    run = _run(tmp_path, 4, 2)
    with pytest.raises(
        ValueError, match=r"2 steps of 2 episodes, but .*metrics.jsonl ends at step 1"
    ):
        read_training_steps(_run(tmp_path, 4, 1), 2)
    with pytest.raises(ValueError, match=r"3 episodes, not a whole number of training steps of 2"):
        read_training_steps(_run(tmp_path, 3, 2), 2)
    (run / "transcripts.jsonl").write_text('{"i": 0}\n[1]\n')
    with pytest.raises(ValueError, match=r"transcripts.jsonl:2: not an episode record"):
        read_training_steps(run, 2)
    (run / "transcripts.jsonl").write_text('{"i": 0}\n{"i": \n')
    with pytest.raises(ValueError, match=r"transcripts.jsonl:2: not an episode record"):
        read_training_steps(run, 2)
    (run / "transcripts.jsonl").write_text('{"i": 0}\n{"i": 1}\n')
    (run / "metrics.jsonl").write_text("")
    with pytest.raises(ValueError, match=r"metrics.jsonl: no training steps to check"):
        read_training_steps(run, 2)
