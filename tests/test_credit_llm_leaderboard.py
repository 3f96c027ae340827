"""benchmarks/credit_llm_leaderboard.py: the LLM tier's tasks side by side, figures by hand."""

from __future__ import annotations

import pytest

from marti_env.stats import iqm_ci, mean_ci, paired_difference, probability_of_improvement
from tests.test_evaluate import _load_benchmark
from tests.test_report import drop_outcomes, fake_run

board = _load_benchmark("credit_llm_leaderboard")


def _task(root, finals: dict[str, list[float]], outcomes=None):
    """One task folder: per method, one run per seed with that final accuracy."""
    for method, accs in finals.items():
        for seed, acc in enumerate(accs):
            curve = (outcomes or {}).get(method, [None] * len(accs))[seed]
            fake_run(root, f"{method}__{seed}", seed, method, acc, exp_name=method,
                     outcomes=curve)  # fmt: skip
    return root


def _cells(markdown: str, start: str) -> list[str]:
    (line,) = [x for x in markdown.splitlines() if x.startswith(start)]
    return [c.strip() for c in line.strip("|").split("|")]


def test_every_task_and_the_aggregate_hold_the_hand_computed_figures(tmp_path):
    a = _task(tmp_path / "a", {"none": [0.1, 0.2, 0.3, 0.4], "shapley": [0.5, 0.6, 0.7, 0.8]},
              {"none": [[0.0, 0.2]] * 4, "shapley": [[0.2, 0.4]] * 4})  # fmt: skip
    b = _task(tmp_path / "b", {"none": [0.5, 0.5, 0.5], "shapley": [0.5, 0.6, 0.4]})
    tasks = {"A": board.read_task("A", a), "B": board.read_task("B", b)}
    page = board.render(tasks)
    # task A: shapley - none = +0.4 on each of 4 seeds: all one way, sign-flip p = 2/16 = 0.125
    row = _cells(page, "| A | shapley | 4 |")
    assert row[3] == mean_ci([0.5, 0.6, 0.7, 0.8]).format(1, 100) and row[3].startswith("65.0 [")
    assert row[4] == "+40.0 [+40.0, +40.0]" and row[5] == "4/0/0"
    assert row[6].startswith("indistinguishable at 95%")  # 4 pairs cannot reach p < 0.05
    # training outcome: means 0.3 against 0.1 on every seed -> +20 points, 4/0/0
    assert row[7] == "+20.0 [+20.0, +20.0], 4/0/0"
    b_diff = paired_difference([0.5, 0.6, 0.4], [0.5, 0.5, 0.5]).difference.format(1, 100, True)
    assert _cells(page, "| B | shapley | 3 |")[4:6] == [b_diff, "1/1/1"]
    assert b_diff.startswith("+0.0 [-")
    # across tasks: IQM over the 7 runs of each method, P averaged over the two tasks
    # the IQM of shapley's 7 runs 0.4 0.5 0.5 0.6 0.6 0.7 0.8: one cut from each end, the mean
    # of 0.5 0.5 0.6 0.6 0.7 = 58.0
    shapley = _cells(page, "| shapley | 2 | 7 |")
    expected = iqm_ci({"A": [0.5, 0.6, 0.7, 0.8], "B": [0.5, 0.6, 0.4]})
    assert shapley[3] == expected.format(1, 100) and shapley[3].startswith("58.0 [")
    # A: every shapley run beats every none run (P = 1); B: 0.6 beats 3 of 3, 0.5 ties 3,
    # 0.4 beats none -> (3 + 1.5 + 0) / 9 = 0.5; average (1 + 0.5) / 2 = 0.75
    p = probability_of_improvement({"A": [0.5, 0.6, 0.7, 0.8], "B": [0.5, 0.6, 0.4]},
                                   {"A": [0.1, 0.2, 0.3, 0.4], "B": [0.5, 0.5, 0.5]})  # fmt: skip
    assert p == pytest.approx(0.75) and shapley[4].startswith("0.75 [")
    assert _cells(page, "| none | 2 | 7 |")[4] == ""
    assert page.rstrip().endswith(
        "Not told apart from none at 95%: shapley on A (4 paired seeds); "
        "shapley on B (3 paired seeds)."
    )


def test_bad_input_names_the_task_and_method(tmp_path, capsys):
    a = _task(tmp_path / "a", {"shapley": [0.5, 0.6]})
    with pytest.raises(ValueError, match=r"task 'A' has no 'none' runs \(methods: \['shapley'\]\)"):
        board.render({"A": board.read_task("A", a)})
    # two configs of one method in one folder (another env: a different config)
    fake_run(tmp_path / "a", "other__0", 0, "shapley", 0.5, exp_name="x", env_id="moa-v0")
    with pytest.raises(ValueError, match=r"task 'A'.*two configs of method 'shapley'"):
        board.read_task("A", a)
    (tmp_path / "empty").mkdir()
    fake_run(tmp_path / "empty", "r", 0, "none", 0.5, finished=False)
    with pytest.raises(ValueError, match=r"task 'E'.*no finished run"):
        board.read_task("E", tmp_path / "empty")
    with pytest.raises(SystemExit):
        board.main(["no-folder-given"])
    assert "expected NAME=FOLDER" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        board.main([f"A={a}", f"A={a}"])
    assert "task names must differ" in capsys.readouterr().err


def test_a_seed_without_a_training_curve_is_named_in_its_cell(tmp_path):
    """A run that logged no training outcome leaves its seed out of the training column,
    named; with every seed out the cell is n/a with the reason."""
    a = _task(tmp_path / "a", {"none": [0.1, 0.2], "shapley": [0.5, 0.6]},
              {"none": [[0.0, 0.2]] * 2, "shapley": [[0.2, 0.4]] * 2})  # fmt: skip
    drop_outcomes(tmp_path / "a" / "none__1")
    row = _cells(board.render({"A": board.read_task("A", a)}), "| A | shapley | 2 |")
    # seed 0 alone: training outcomes 0.3 against 0.1, one pair so no CI
    assert row[7] == "+20.0 [n/a], 1/0/0 (1 of 2 seeds; no training curve: seeds 1)"
    drop_outcomes(tmp_path / "a" / "none__0")  # seed 0's lost it too
    row = _cells(board.render({"A": board.read_task("A", a)}), "| A | shapley | 2 |")
    assert row[7] == "n/a (no training curve: seeds 0, 1)"
