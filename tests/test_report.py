"""marti report on small synthetic run directories (the files marti train writes): figures
checked by hand, the page regenerated from the files it cites, mismatched problems refused."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
import yaml

from marti_env.stats import mean_ci, paired_difference
from marti_trainer.cli import main
from marti_trainer.report import (
    ReportOptions,
    build_report,
    check_report,
    options_of,
    write_report,
)

PROBLEMS = [(f"arithmetic/test/L1/{i}", str(i)) for i in range(10)]


def fake_run(
    root: Path,
    name: str,
    seed: int,
    credit: str,
    final: float,
    start: float = 0.2,
    problems: list[tuple[str, str]] = PROBLEMS,
    finished: bool = True,
    steps: int = 2,
    eval_size: int = 10,
    exp_name: str = "sweep",
    env_id: str = "mad-v0",
    outcomes: list[float] | None = None,
    credit_kwargs: dict | None = None,
) -> Path:
    """A run directory as `marti train` leaves it: config.yaml, metrics.jsonl (reward per
    step: ``outcomes`` when given, else 0.1 x step and 0.5 at the last; evaluations at 0 and
    ``steps``), env.credit_kwargs when given, eval/step_N.jsonl (one 0/1 outcome per problem,
    the first ``round(final * n)`` right, two turns each) and summary.json."""
    run = root / name
    (run / "eval").mkdir(parents=True)
    config = {
        "exp_name": exp_name, "seed": seed, "total_steps": steps, "run_name": name,
        "env": {"id": env_id, "credit": credit, "eval_tasks": {"size": eval_size}},
        "rollout": {"tasks_per_step": 4, "n_samples": 2},
        "log": {"output_dir": str(root)},
    }  # fmt: skip
    if credit_kwargs is not None:
        config["env"]["credit_kwargs"] = credit_kwargs
    (run / "config.yaml").write_text(yaml.safe_dump(config))
    rows = [{"step": 0, "time": 0.0, "eval/accuracy": start}]
    rows += [{"step": s, "time": float(s), "rollout/outcome": 0.1 * s} for s in range(1, steps)]
    rows.append({"step": steps, "time": 9.0, "rollout/outcome": 0.5, "eval/accuracy": final})
    if outcomes is not None:
        for row, outcome in zip(rows[1:], outcomes, strict=True):
            row["rollout/outcome"] = outcome
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    right = round(final * len(problems))
    for step, k in ((0, round(start * len(problems))), (steps, right)):
        records = [
            {"task": {"id": t, "answer": a}, "outcome": float(i < k), "turns": [{}, {}]}
            for i, (t, a) in enumerate(problems)
        ]
        path = run / "eval" / f"step_{step:06d}.jsonl"
        path.write_text("".join(json.dumps(r) + "\n" for r in records))
    if finished:
        (run / "summary.json").write_text(json.dumps({"accuracy_after": final}))
    return run


def drop_outcomes(run: Path, steps: set[int] | None = None) -> None:
    """Remove the training outcome (``rollout/outcome``) from ``run``'s metrics.jsonl at
    ``steps``, or at every step: a run that logged it at other steps, or not at all."""
    metrics = run / "metrics.jsonl"
    rows = [json.loads(line) for line in metrics.read_text().splitlines()]
    for row in rows:
        if steps is None or row["step"] in steps:
            row.pop("rollout/outcome", None)
    metrics.write_text("".join(json.dumps(r) + "\n" for r in rows))


@pytest.fixture
def sweep(tmp_path) -> Path:
    """Config `quality` at 0.5, 0.6, 0.7 and baseline `none` at 0.4, 0.6, 0.5 (seeds 0-2)."""
    root = tmp_path / "sweep"
    for seed, (q, n) in enumerate([(0.5, 0.4), (0.6, 0.6), (0.7, 0.5)]):
        fake_run(root, f"env.credit=quality__seed={seed}", seed, "quality", q)
        fake_run(root, f"env.credit=none__seed={seed}", seed, "none", n)
    return root


TRAINING = "## Paired differences in training outcome"


def _row(markdown: str, start: str, training: bool = False) -> list[str]:
    """The cells of the one line starting with ``start``: in the training-outcome section with
    ``training``, else anywhere outside it."""
    section, lines = None, []
    for line in markdown.splitlines():
        if line.startswith("## "):
            section = line
        if (section == TRAINING) == training and line.startswith(start):
            lines.append(line)
    (line,) = lines
    return [c.strip() for c in line.strip("|").split("|")]


def test_tables_hold_the_hand_computed_figures(sweep):
    page = build_report(ReportOptions((str(sweep),), baseline="env.credit=none")).markdown
    # per config: quality mean (50 + 60 + 70) / 3 = 60.0; none (40 + 60 + 50) / 3 = 50.0
    quality = _row(page, "| env.credit=quality | 3 |")
    assert quality[2] == mean_ci([0.5, 0.6, 0.7]).format(1, 100) and quality[2].startswith("60.0 [")
    assert _row(page, "| env.credit=none | 3 |")[2].startswith("50.0 [")
    assert quality[6] == "0: 50.0, 1: 60.0, 2: 70.0"
    # gain over step 0 (0.2 for every run): +30, +40, +50 points -> mean +40; three seeds
    # cannot pass the sign-flip test (smallest p = 2/2^3 = 0.25) however clear the gain
    assert quality[4] == "+40.0 [+30.0, +50.0]"
    assert quality[5] == (
        "indistinguishable at 95% (the bootstrap CI excludes 0, but the exact sign-flip "
        "test gives p=0.25 with 3 pairs)"
    )
    # paired: d = 0.1, 0.0, 0.2 -> +10.0 points, W/T/L 2/1/0; the CI reaches 0
    pair = _row(page, "| env.credit=quality | env.credit=none | 3 |")
    expected = paired_difference([0.5, 0.6, 0.7], [0.4, 0.6, 0.5])
    assert pair[3] == expected.difference.format(1, 100, signed=True)
    assert pair[3].startswith("+10.0 [") and pair[4] == "2/1/0"
    assert pair[6] == "indistinguishable at 95%"
    # P(quality > none) over the 9 run pairs: wins 5>4, 6>4, 6>5, 7>4, 7>6, 7>5 = 6,
    # ties 5=5, 6=6 = 2 -> (6 + 2/2) / 9 = 0.78
    assert pair[5].startswith("0.78 [")
    # per run: 5 of 10 right -> Wilson [23.7, 76.3]
    run = _row(page, "| env.credit=quality | 0 |")
    assert run[4:6] == ["10", "50.0 [23.7, 76.3]"]
    # step 0: problems 0-1 right; final: 0-4 right -> 3 gained, 0 lost, p = 2 / 2^3 = 0.25
    assert run[7] == "3 / 0, p = 0.25"


def test_page_cites_its_files_and_is_regenerated_from_them(sweep, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    out = tmp_path / "docs" / "results.md"
    written = write_report(ReportOptions(("sweep",), baseline="env.credit=none"), out)
    assert [p.name for p in written] == [
        "results.md", "results_curves.png", "results_generations.png",
    ]  # fmt: skip
    assert all(p.stat().st_size > 1000 for p in written[1:])
    page = out.read_text()
    cited = {
        c[0]: c[1]
        for c in (_cells(line) for line in page.splitlines())
        if len(c) == 2 and len(c[1]) == 64
    }
    metrics = Path("sweep/env.credit=none__seed=1/metrics.jsonl")
    assert len(cited) == 6 * 5  # config, metrics, summary, step-0 and final eval of 6 runs
    assert cited[metrics.as_posix()] == hashlib.sha256(metrics.read_bytes()).hexdigest()
    assert check_report(out) == []
    assert main(["report", "--check", str(out)]) == 0
    # the same files give the same page, byte for byte
    write_report(ReportOptions(("sweep",), baseline="env.credit=none"), out, plots=False)
    assert out.read_text() == page
    # a run file edited after the fact: the page no longer matches what it cites
    rows = metrics.read_text().splitlines()
    rows[-1] = rows[-1].replace('"eval/accuracy": 0.6', '"eval/accuracy": 0.9')
    metrics.write_text("\n".join(rows) + "\n")
    problems = check_report(out)
    assert f"{metrics.as_posix()}: changed since the page was written" in problems
    assert any("differs from a fresh `marti report`" in p for p in problems)
    assert main(["report", "--check", str(out)]) == 1


def _cells(line: str) -> list[str]:
    return [c.strip() for c in line.strip("|").split("|")] if line.startswith("|") else []


def test_mismatched_heldout_sets_are_refused_for_pairing(tmp_path):
    root = tmp_path / "runs"
    fake_run(root, "a", 0, "quality", 0.5)
    fake_run(root, "b", 0, "none", 0.5, problems=PROBLEMS[:8])
    with pytest.raises(
        ValueError, match=r"refusing to pair .*a with .*b \(seed 0\): .*10 against 8"
    ):
        build_report(ReportOptions((str(root),), baseline="env.credit=none"))
    other = [(t, a) if i else (t, "99") for i, (t, a) in enumerate(PROBLEMS)]
    fake_run(tmp_path / "r2", "a", 0, "quality", 0.5)
    fake_run(tmp_path / "r2", "b", 0, "none", 0.5, problems=other)
    with pytest.raises(
        ValueError, match=r"problem arithmetic/test/L1/0 has answer '0' against '99'"
    ):
        build_report(ReportOptions((str(tmp_path / "r2"),), baseline="env.credit=none"))
    # without a baseline nothing is paired: the page is written
    assert "## Paired" not in build_report(ReportOptions((str(root),))).markdown
    # configs that differ in their held-out set are refused too, naming the key
    fake_run(tmp_path / "r3", "a", 0, "quality", 0.5, credit_kwargs={"alpha": 0.5})
    fake_run(tmp_path / "r3", "b", 0, "none", 0.5, eval_size=20, credit_kwargs={})
    match = r"env.credit=quality.* with .*env.credit=none.*: env.eval_tasks.size 10 against 20"
    with pytest.raises(ValueError, match=match):
        build_report(ReportOptions((str(tmp_path / "r3"),), baseline="env.credit=none"))


def test_versus_pairs_different_config_files_and_names_what_differs(tmp_path):
    root = tmp_path / "suite"
    finals = {"single": [0.5, 0.6, 0.7], "mad": [0.4, 0.6, 0.5], "mad_q": [0.6, 0.6, 0.6]}
    for name, accs in finals.items():
        env, credit = ("single-v0", "none") if name == "single" else ("mad-v0", "none")
        credit = "quality" if name == "mad_q" else credit
        for seed, acc in enumerate(accs):
            fake_run(root, f"{name}__{seed}", seed, credit, acc, exp_name=name, env_id=env)
    opts = ReportOptions((str(root),), versus=("exp_name=single", "exp_name=mad"))
    page = build_report(opts).markdown
    # groups are labelled by their exp_name (each has one, and they differ)
    assert _row(page, "| single | 3 |")[2].startswith("60.0 [")
    # mad - single: -0.1, 0.0, -0.2 -> -10.0 points, W/T/L 0/1/2; the keys that differ named
    pair = _row(page, "| mad | single | 3 |")
    expected = paired_difference([0.4, 0.6, 0.5], [0.5, 0.6, 0.7])
    assert pair[3] == expected.difference.format(1, 100, signed=True)
    assert pair[3].startswith("-10.0 [") and pair[4] == "0/1/2"
    assert pair[7] == "env.id"
    assert _row(page, "| mad_q | single | 3 |")[7] == "env.credit, env.id"
    # the second table: against mad; mad_q - mad = +0.2, 0.0, +0.1
    assert _row(page, "| mad_q | mad | 3 |")[3].startswith("+10.0 [")
    assert _row(page, "| single | mad | 3 |")[3].startswith("+10.0 [")
    # recorded in the page, so --check reruns it
    out = tmp_path / "docs" / "suite.md"
    write_report(opts, out, plots=False)
    assert '"versus": ["exp_name=single", "exp_name=mad"]' in out.read_text().splitlines()[0]
    assert check_report(out) == []
    # bad specs are named
    with pytest.raises(ValueError, match=r"--versus exp_name=nobody: no config has it"):
        build_report(ReportOptions((str(root),), versus=("exp_name=nobody",)))
    # a config with no seed in common with the baseline: a row that says so
    fake_run(root, "late__7", 7, "none", 0.5, exp_name="late", env_id="chain-v0")
    late = _row(build_report(opts).markdown, "| late | single | 0 |")
    assert late[3:7] == ["n/a", "", "", "no common seeds"] and late[7] == "env.id"
    with pytest.raises(ValueError, match=r"--versus env.id=mad-v0: 2 configs have it"):
        build_report(ReportOptions((str(root),), versus=("env.id=mad-v0",)))
    with pytest.raises(ValueError, match=r"--versus colour: not a config key"):
        build_report(ReportOptions((str(root),), versus=("colour=red",)))
    with pytest.raises(ValueError, match=r"expected key=value"):
        build_report(ReportOptions((str(root),), versus=("exp_name",)))
    # other held-out problems: refused, as with --baseline
    fake_run(tmp_path / "r2", "a", 0, "none", 0.5, exp_name="a")
    fake_run(
        tmp_path / "r2",
        "b",
        0,
        "none",
        0.5,
        exp_name="b",
        env_id="single-v0",
        problems=PROBLEMS[:8],
    )
    with pytest.raises(ValueError, match=r"refusing to pair .*b with .*a \(seed 0\)"):
        build_report(ReportOptions((str(tmp_path / "r2"),), versus=("exp_name=a",)))


def test_options_of_are_the_keys_under_key_kwargs():
    assert options_of("env.credit", "env.credit_kwargs.alpha")
    assert options_of("env.credit", "env.credit_kwargs")  # an empty mapping flattens to it
    assert not options_of("env.credit", "env.credit")
    assert not options_of("env.credit", "env.kwargs.rounds")
    assert not options_of("env.credit", "env.credit_kwargsx.a")


def test_baseline_pairs_shaping_on_and_off_within_each_workflow_beside_versus(tmp_path):
    root = tmp_path / "suite"
    finals = {
        ("single", "none"): [0.5, 0.6, 0.7], ("single_q", "quality"): [0.6, 0.6, 0.6],
        ("mad", "none"): [0.4, 0.6, 0.5], ("mad_q", "quality"): [0.5, 0.8, 0.5],
        ("chain_q", "quality"): [0.3, 0.3, 0.3],
    }  # fmt: skip
    for (name, credit), accs in finals.items():
        env = {"single": "single-v0", "mad": "mad-v0", "chain": "chain-v0"}[name.split("_")[0]]
        # shaping on carries its options; shaping off an empty mapping (as configs save it)
        options = {"alpha": 0.5, "scope": "agent_window"} if credit == "quality" else {}
        for seed, acc in enumerate(accs):
            fake_run(
                root, f"{name}__{seed}", seed, credit, acc, exp_name=name, env_id=env,
                credit_kwargs=options,
            )  # fmt: skip
    opts = ReportOptions((str(root),), baseline="env.credit=none", versus=("exp_name=single",))
    page = build_report(opts).markdown
    shaping = page[page.index("## Paired differences against env.credit=none") :]
    shaping = shaping[: shaping.index("## Paired differences against exp_name=single")]
    # each shaped config against its own workflow unshaped, though credit_kwargs differ too
    pair = _row(shaping, "| mad_q | mad | 3 |")  # +0.1, +0.2, 0.0
    assert pair[3] == paired_difference([0.5, 0.8, 0.5], [0.4, 0.6, 0.5]).difference.format(
        1, 100, signed=True
    )
    assert pair[4] == "2/1/0"
    assert _row(shaping, "| single_q | single | 3 |")[4] == "1/1/1"
    # a shaped workflow with no unshaped run: a row that says so; no row pairs across envs
    assert _row(shaping, "| chain_q | (none) | 0 |")[6] == (
        "no baseline config equals it apart from env.credit (and env.credit_kwargs)"
    )
    assert "| mad_q | single |" not in shaping
    # the --versus table still pairs across config files, naming the options that differ
    assert _row(page, "| mad_q | single | 3 |")[7] == (
        "env.credit, env.credit_kwargs.alpha, env.credit_kwargs.scope, env.id"
    )
    # two baselines that differ only in their options: the one with the config's options
    runs = tmp_path / "alphas"
    for name, credit, alpha, acc in (
        ("q05", "quality", 0.5, 0.5), ("q10", "quality", 1.0, 0.7), ("s10", "sibling", 1.0, 0.6)
    ):  # fmt: skip
        fake_run(runs, name, 0, credit, acc, exp_name=name, credit_kwargs={"alpha": alpha})
    opts = ReportOptions((str(runs),), baseline="env.credit=quality")
    assert _row(build_report(opts).markdown, "| s10 | q10 | 1 |")[3] == "-10.0 [n/a]"  # not q05
    # ... and without one, an error naming both rather than a pick by order
    fake_run(runs, "n", 0, "none", 0.4, exp_name="n", credit_kwargs={})
    with pytest.raises(ValueError, match=r"n has 2 possible baselines.*\(q05; q10\)"):
        build_report(opts)


def test_training_outcome_is_paired_on_seeds_that_trained_for_the_same_steps(tmp_path):
    """The mean training outcome (area under the training curve / steps) paired like the final
    accuracy; a seed whose runs' curves cover different steps is left out and named."""
    root = tmp_path / "sweep"
    curves = {  # seed -> (quality's, none's) outcome per step
        0: ([0.2, 0.6], [0.0, 0.4]),  # means 0.4 and 0.2: +20 points
        1: ([0.4, 0.8], [0.4, 0.8]),  # 0.6 and 0.6: a tie
        2: ([0.1, 0.5], [0.1, 0.3]),  # 0.3 and 0.2: +10 points
        3: ([0.9, 0.9], [0.0, 0.0]),  # none's run lost its step-1 row (below): not paired
        4: ([0.9, 0.9], [0.0, 0.0]),  # quality's run logged no training outcome: not paired
    }
    for seed, (q, n) in curves.items():
        fake_run(root, f"q{seed}", seed, "quality", 0.5, outcomes=q)
        fake_run(root, f"n{seed}", seed, "none", 0.5, outcomes=n)
    drop_outcomes(root / "n3", steps={1})
    drop_outcomes(root / "q4")
    report = build_report(ReportOptions((str(root),), baseline="env.credit=none"))
    quality = {g.label: g for g in report.groups}["env.credit=quality"].by_seed()
    assert quality[0].training_outcome == pytest.approx(0.4)
    pair = _row(report.markdown, "| env.credit=quality | env.credit=none |", training=True)
    expected = paired_difference([0.4, 0.6, 0.3], [0.2, 0.6, 0.2])
    assert pair[2] == "3" and pair[4] == "2/1/0"
    assert pair[3] == expected.difference.format(1, 100, signed=True)
    assert pair[3].startswith("+10.0 [")
    assert pair[6].endswith(
        "(not paired: no training curve: seeds 4; trained for different steps: seeds 3)"
    )
    assert quality[4].training_outcome is None
    # the held-out table still pairs all five seeds (every final accuracy is 0.5: all ties)
    assert _row(report.markdown, "| env.credit=quality | env.credit=none |")[2:5] == [
        "5", "+0.0 [+0.0, +0.0]", "0/5/0",
    ]  # fmt: skip
    assert TRAINING not in report.summary


def test_unfinished_runs_are_listed_not_counted(sweep):
    fake_run(sweep, "env.credit=none__seed=3", 3, "none", 0.9, finished=False)
    report = build_report(ReportOptions((str(sweep),)))
    assert [r.seed for r in report.unfinished] == [3]
    assert _row(report.markdown, "| env.credit=none | 3 |")[6] == "0: 40.0, 1: 60.0, 2: 50.0"
    assert "env.credit=none__seed=3`" in report.markdown


def test_bad_input_is_named(sweep, tmp_path):
    with pytest.raises(ValueError, match=r"--baseline env.credit=shapley: no config has it"):
        build_report(ReportOptions((str(sweep),), baseline="env.credit=shapley"))
    with pytest.raises(ValueError, match=r"--baseline optim.lrr: not a config key"):
        build_report(ReportOptions((str(sweep),), baseline="optim.lrr=1"))
    with pytest.raises(FileNotFoundError, match="holds no run"):
        build_report(ReportOptions((str(tmp_path / "sweep" / "env.credit=none__seed=0" / "eval"),)))
    dup = tmp_path / "dup"
    fake_run(dup, "x", 0, "none", 0.5)
    fake_run(dup, "y", 0, "none", 0.6)
    with pytest.raises(ValueError, match=r"x and .*y are the same config and seed"):
        build_report(ReportOptions((str(dup),)))
    bad = fake_run(tmp_path / "bad", "z", 0, "none", 0.5)
    with (bad / "metrics.jsonl").open("a") as f:
        f.write("{not json\n")
    with pytest.raises(ValueError, match=r"z/metrics.jsonl:4: not JSON"):
        build_report(ReportOptions((str(tmp_path / "bad"),)))


def test_avg_at_k_runs_get_a_bootstrap_interval_over_problems(tmp_path):
    run = fake_run(tmp_path / "runs", "k2", 0, "none", 0.6)
    # eval.samples = 2: two episodes per problem. Problems 0-3 right twice, 4-7 once, 8-9
    # never: per-problem scores 1 x4, 0.5 x4, 0 x2 -> avg@2 = (4 + 2) / 10 = 0.6
    pattern = [(1.0, 1.0)] * 4 + [(1.0, 0.0)] * 4 + [(0.0, 0.0)] * 2
    records = [
        {"task": {"id": t, "answer": a}, "outcome": o, "turns": [{}, {}]}
        for (t, a), pair in zip(PROBLEMS, pattern, strict=True)
        for o in pair
    ]
    path = run / "eval" / "step_000002.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    report = build_report(ReportOptions((str(tmp_path / "runs"),)))
    (r,) = report.groups[0].runs
    assert r.problems["arithmetic/test/L1/4"] == 0.5 and len(r.problems) == 10
    expected = mean_ci([1.0] * 4 + [0.5] * 4 + [0.0] * 2, 0.95, 0, "percentile", 2_000)
    row = _row(report.markdown, "| all runs | 0 |")
    assert row[5] == expected.format(1, 100) + " (bootstrap)" and row[5].startswith("60.0 [")
    # generations per step: 4 tasks x 2 samples x 2 turns per episode
    assert r.generations_per_step == 16.0


def test_summary_block_in_a_readme_is_generated_and_checked(sweep, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    readme = tmp_path / "README.md"
    readme.write_text("# Project\n\n## Results\n\nno markers yet\n")
    opts = ReportOptions(("sweep",), baseline="env.credit=none", summary_into="README.md")
    with pytest.raises(ValueError, match=r"README.md: add the lines <!-- marti report summary"):
        write_report(opts, "docs/results.md", plots=False)
    assert not (tmp_path / "docs").exists()  # refused before writing anything
    begin = "<!-- marti report summary: begin results.md -->"
    end = "<!-- marti report summary: end results.md -->"
    readme.write_text(f"# Project\n\n## Results\n\n{begin}\nold figures\n{end}\n\nMore.\n")
    written = write_report(opts, "docs/results.md", plots=False)
    assert [p.name for p in written] == ["results.md", "README.md"]
    text = readme.read_text()
    assert "old figures" not in text and text.endswith(f"{end}\n\nMore.\n")
    assert "[results.md](docs/results.md)" in text
    assert "### Held-out accuracy per config" in text  # one level below the README's section
    assert "| env.credit=quality | env.credit=none | 3 | +10.0 [" in text
    assert "## Sources" not in text and check_report("docs/results.md") == []
    readme.write_text(
        text.replace("| env.credit=quality | 3 | 60.0", "| env.credit=quality | 3 | 65.0")
    )
    assert check_report("docs/results.md") == [
        "README.md: its summary differs from a fresh `marti report`"
    ]
    # a second page's summary in the same README, in its own block
    two = "<!-- marti report summary: begin two.md -->\n<!-- marti report summary: end two.md -->"
    readme.write_text(readme.read_text() + "\n" + two + "\n")
    write_report(ReportOptions(("sweep",), summary_into="README.md"), "docs/two.md", plots=False)
    text = readme.read_text()
    assert "[two.md](docs/two.md)" in text and "[results.md](docs/results.md)" in text
    assert check_report("docs/two.md") == []
    # in a deeper section its headings go one level below that section's, whatever the
    # other page's block and a fenced code block in between hold
    fence = "```bash\n# a comment, not a heading\n```"
    two_begin = two.splitlines()[0]
    readme.write_text(
        readme.read_text().replace(two_begin, f"### Deeper\n\n{fence}\n\n{two_begin}")
    )
    write_report(ReportOptions(("sweep",), summary_into="README.md"), "docs/two.md", plots=False)
    text = readme.read_text()
    deeper = text[text.index("### Deeper") :]
    assert "#### Held-out accuracy per config" in deeper and "\n### Held-out" not in deeper
    assert "\n### Held-out accuracy per config" in text[: text.index("### Deeper")]
    write_report(opts, "docs/results.md", plots=False)  # its block was edited above
    assert check_report("docs/two.md") == [] and check_report("docs/results.md") == []
    # the unnamed markers of before: the error says the markers name their page now
    readme.write_text("<!-- marti report summary: begin -->\nx\n<!-- marti report summary: end -->")
    with pytest.raises(ValueError, match=r"summary markers now name their page"):
        write_report(opts, "docs/results.md", plots=False)


def test_section_level_is_the_last_heading_outside_code_and_summaries():
    from marti_trainer.report import section_level

    assert section_level("no heading") == 1
    assert section_level("# A\n\n## B\ntext\n") == 2
    assert section_level("### C\n```\n# code comment\n```\n") == 3
    assert section_level("### C\n~~~\n# code comment\n~~~\n") == 3
    begin, end = (
        "<!-- marti report summary: begin x.md -->",
        "<!-- marti report summary: end x.md -->",
    )
    block = f"{begin}\n#### In x\n{end}"
    assert section_level(f"## D\n{block}\n") == 2
    assert section_level("## E\n#not a heading\n") == 2


def test_python_objects_saved_as_repr_group_across_processes(tmp_path):
    # runs of `marti bench credit --tier llm` with a reward given in code: config.yaml holds
    # its repr, whose address differs from one process to the next
    for seed, address in ((0, "0x7f01"), (1, "0x7f99")):
        run = fake_run(tmp_path / "runs", f"s{seed}", seed, "none", 0.5)
        config = yaml.safe_load((run / "config.yaml").read_text())
        config["env"]["kwargs"] = {"reward": f"<function length_reward at {address}>"}
        (run / "config.yaml").write_text(yaml.safe_dump(config))
    (group,) = build_report(ReportOptions((str(tmp_path / "runs"),))).groups
    assert [r.seed for r in group.runs] == [0, 1]
    assert group.config["env.kwargs.reward"] == "<function length_reward>"


def test_generated_tokens_come_from_the_training_transcripts(tmp_path):
    run = fake_run(tmp_path / "runs", "t", 0, "none", 0.5)  # 2 steps of 4 tasks x 2 samples
    episode = {"turns": [{"meta": {"response_tokens": 3}}, {"meta": {"response_tokens": 5}}]}
    (run / "transcripts.jsonl").write_text((json.dumps(episode) + "\n") * 16)
    (group,) = build_report(ReportOptions((str(tmp_path / "runs"),))).groups
    # 8 episodes per step x (3 + 5) tokens = 64 per step
    assert group.runs[0].tokens == {0: 0.0, 1: 64.0, 2: 128.0}
    assert "t/transcripts.jsonl" in build_report(ReportOptions((str(run),))).markdown
    # a log that does not hold 8 episodes per step is not guessed at
    (run / "transcripts.jsonl").write_text((json.dumps(episode) + "\n") * 15)
    (group,) = build_report(ReportOptions((str(run),))).groups
    assert group.runs[0].tokens == {}


def test_digests_give_the_same_tables_as_the_run_directories(sweep, tmp_path, monkeypatch):
    """``--save-digests``: a few kB per run that the report reads like the run itself, so a
    page generated from committed digests has the same tables and can be checked."""
    monkeypatch.chdir(tmp_path)
    assert main(["report", "sweep", "--save-digests", "digests"]) == 0
    digests = sorted(Path("digests").iterdir())
    assert [p.name for p in digests][:2] == [
        "env.credit=none__seed=0.run.json", "env.credit=none__seed=1.run.json",
    ]  # fmt: skip
    assert len(digests) == 6 and all(p.stat().st_size < 4000 for p in digests)
    from_runs = build_report(ReportOptions(("sweep",), baseline="env.credit=none")).markdown
    from_digests = build_report(ReportOptions(("digests",), baseline="env.credit=none")).markdown

    def tables(page: str) -> list[str]:  # the figures, without the per-run paths and sources
        return [line for line in page.splitlines() if line.startswith("| env.credit=")
                and "seed=" not in line]  # fmt: skip

    # per config (2), paired on accuracy (1) and training outcome (1), step-0 comparison (2)
    assert tables(from_digests) == tables(from_runs) and len(tables(from_runs)) == 6
    out = Path("docs/results.md")
    note = "The problems come from 3 templates, so they are not independent."
    opts = ReportOptions(("digests",), baseline="env.credit=none", note=note)
    write_report(opts, out, plots=False)
    assert f"**Note.** {note}" in out.read_text() and check_report(out) == []
    digests[0].write_text(digests[0].read_text().replace('"seed":0', '"seed":"x"'))
    with pytest.raises(ValueError, match=r"env\.credit=none__seed=0\.run\.json: not a run digest"):
        build_report(ReportOptions(("digests",)))
    from marti_trainer.report import write_digests

    fake_run(tmp_path / "u", "r", 0, "none", 0.5, finished=False)
    with pytest.raises(ValueError, match="no finished run"):
        write_digests([tmp_path / "u"], "x")


def test_replay_generations_count_as_inference(tmp_path):
    """A re-execution credit's replays join the generations per step: 4 tasks x 2 episodes
    x 2 turns = 16, plus a mean of (6 + 10) / 2 = 8 replay generations -> 24."""
    from marti_trainer.report import read_run

    run = fake_run(tmp_path, "r", 0, "leave_one_out_replay", 0.5)
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    for row, extra in zip([r for r in rows if "rollout/outcome" in r], (6, 10), strict=True):
        row["rollout/replay_generations"] = extra
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert read_run(run).generations_per_step == 16 + 8


def test_training_compute_is_the_per_step_mean_summed_over_policies(tmp_path, monkeypatch):
    """Update tokens per step: step 1 logs 100 + 50 (two policies), step 2 logs 90 (its
    first row is replaced by the last), step 3 skipped every sample (no tokens logged: 0)
    -> (150 + 90 + 0) / 3 = 80; zero-advantage share: mean(0.5, 0.25) = 0.375, 0.125 and
    1.0 -> 0.5. In a report: a run without them is n/r, a config where one of two runs has
    them says so, and the figures survive a digest (an older digest reads as n/r)."""
    from marti_trainer.report import read_run, training_compute, write_digests

    step1 = {"step": 1, "charts/a/update_tokens": 100.0, "charts/b/update_tokens": 50.0,
             "charts/update_tokens_per_s": 9e9, "losses/a/zero_advantage_frac": 0.5,
             "losses/b/zero_advantage_frac": 0.25}  # fmt: skip
    step2 = {"step": 2, "charts/a/update_tokens": 90.0, "losses/a/zero_advantage_frac": 0.125}
    history = [
        {"step": 0, "eval/accuracy": 0.2}, step1,
        {"step": 2, "charts/a/update_tokens": 999.0, "losses/a/zero_advantage_frac": 0.9},
        step2, {"step": 3, "losses/a/zero_advantage_frac": 1.0},
    ]  # fmt: skip
    assert training_compute(history) == (80.0, 0.5)
    assert training_compute(history[:1]) == (None, None)
    runs = tmp_path / "runs"
    for seed, credit in ((0, "none"), (1, "none"), (0, "quality")):
        fake_run(runs, f"{credit}{seed}", seed, credit, 0.5)
    metrics = runs / "none0" / "metrics.jsonl"
    rows = [json.loads(line) for line in metrics.read_text().splitlines()]
    rows[1].update(step1)
    rows[2].update(step2)
    metrics.write_text("".join(json.dumps(r) + "\n" for r in rows))
    # 4 tasks x 2 samples per step, 3 + 5 response tokens each: 64 rollout tokens per step
    episode = {"turns": [{"meta": {"response_tokens": 3}}, {"meta": {"response_tokens": 5}}]}
    (runs / "none0" / "transcripts.jsonl").write_text((json.dumps(episode) + "\n") * 16)
    run = read_run(runs / "none0")
    assert (run.update_tokens, run.zero_advantage_frac) == (120.0, 0.25)
    page = build_report(ReportOptions((str(runs),))).markdown
    assert "| env.credit=none | 2 | 16 | 64 (1 of 2) | 120 (1 of 2) | 0.25 (1 of 2) |" in page
    assert "| env.credit=quality | 1 | 16 | n/r | n/r | n/r |" in page
    monkeypatch.chdir(tmp_path)
    (digest, *_) = write_digests(["runs"], "digests")
    assert digest.name == "none0.run.json"
    assert (read_run(digest).update_tokens, read_run(digest).zero_advantage_frac) == (120.0, 0.25)
    old = {k: v for k, v in json.loads(digest.read_text()).items()
           if k not in ("update_tokens", "zero_advantage_frac")}  # fmt: skip
    digest.write_text(json.dumps(old))
    assert (read_run(digest).update_tokens, read_run(digest).zero_advantage_frac) == (None, None)
    # no run recorded it: no section at all
    assert "## Compute per config" not in build_report(ReportOptions((str(digest),))).markdown


def test_machines_are_listed_and_step0_evaluations_compared_across_seeds(tmp_path, monkeypatch):
    """Each run's machine (run.json, carried by its digest) is in the runs table with a
    legend; the step-0 evaluations of a config's seeds are compared problem by problem."""
    from marti_trainer.report import read_run, step0_disagreements, write_digests

    root = tmp_path / "sweep"
    runs = [fake_run(root, f"seed={s}", s, "none", 0.5, start=0.2) for s in range(4)]
    # seed 2's step-0 evaluation got problems 3 and 4 right instead of 0 and 1
    path = runs[2] / "eval" / "step_000000.jsonl"
    records = [json.loads(line) for line in path.read_text().splitlines()]
    for i, r in enumerate(records):
        r["outcome"] = float(i in (3, 4))
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    (runs[3] / "eval" / "step_000000.jsonl").unlink()  # seed 3: no step-0 transcript
    starts = (["cpu X"], ["cpu Y", "cpu X"], [], [None, "cpu Y"])  # seed 3: resumed on Y
    for run, machines in zip(runs, starts, strict=True):
        sessions = [{"from_step": 0}] + [{"from_step": 1}] * (len(machines) - 1)
        for session, machine in zip(sessions, machines, strict=False):
            if machine:
                session["machine"] = machine
        (run / "run.json").write_text(json.dumps({"sessions": sessions}))
    read = [read_run(r) for r in runs]
    assert [r.machines for r in read] == [["cpu X"], ["cpu Y", "cpu X"], [], [None, "cpu Y"]]
    assert step0_disagreements(read) == {1: 0, 2: 4}  # 0, 1 lost; 3, 4 gained
    assert step0_disagreements(read[:1]) == {}
    with pytest.raises(ValueError, match="repeated seeds"):
        step0_disagreements([read[0], read[0]])
    page = build_report(ReportOptions((str(root),))).markdown
    machine = {s: _row(page, f"| all runs | {s} |")[-1] for s in range(4)}
    assert machine == {0: "A", 1: "B+A", 2: "n/r", 3: "n/r+B"}
    assert "Machines:\n\n- A: cpu X\n- B: cpu Y\n- n/r: not recorded" in page
    # the step-0 machine is the fresh start's: seed 1 was evaluated at step 0 on B
    assert _row(page, "| all runs | greedy | 3 |")[3:] == [
        "seed 0 (A)", "seed 1 (B): 0, seed 2 (n/r): 4, seed 3: no step-0 evaluation",
    ]  # fmt: skip
    # a digest carries the machines; a malformed list is named
    monkeypatch.chdir(tmp_path)
    (digest, *_) = write_digests(["sweep"], "digests")
    assert read_run(digest).machines == ["cpu X"]
    digest.write_text(digest.read_text().replace('"machines":["cpu X"]', '"machines":"cpu X"'))
    with pytest.raises(ValueError, match=r"not a run digest.*'machines' is not a list"):
        read_run(digest)
    for bad in ('{"sessions": 3}', '{"sessions": ["x"]}'):
        (runs[0] / "run.json").write_text(bad)
        with pytest.raises(ValueError, match=r"seed=0/run\.json: not a run\.json"):
            read_run(runs[0])


def test_describe_machine_reads_the_cpu_and_gpus(monkeypatch):
    import platform

    from marti_trainer.machine import describe_machine

    cpuinfo = "processor\t: 0\nmodel name\t: Some CPU 9000\nflags\t\t: fpu avx512_bf16 sse\n"
    text = describe_machine(cpuinfo, gpus=["H200", "H200"], cpus=2)
    assert text == "Some CPU 9000, 2 cores, avx512_bf16 + 2 x H200"
    old = "model name\t: Old CPU\nflags\t: fpu sse\n"
    assert describe_machine(old, [], 4) == "Old CPU, 4 cores"
    # ARM Linux has no model name: the architecture and the implementer/part codes
    monkeypatch.setattr(platform, "machine", lambda: "aarch64")
    arm = "processor\t: 0\nBogoMIPS\t: 50.00\nCPU implementer\t: 0x41\nCPU part\t: 0xd0c\n"
    assert describe_machine(arm, [], 8) == "aarch64 CPU (implementer 0x41, part 0xd0c), 8 cores"
    # nothing readable: the processor string, else the architecture
    monkeypatch.setattr(platform, "processor", lambda: "")
    assert describe_machine("", [], 1) == "aarch64 CPU, 1 core"


def test_update_rewrites_a_page_with_its_own_arguments(sweep, tmp_path, monkeypatch, capsys):
    """``--update PAGE``: after a new run, the page is rewritten with the arguments in its
    header (note, baseline) and then follows from its files again."""
    monkeypatch.chdir(tmp_path)
    note = "Three seeds only."
    argv = ["report", "sweep", "--baseline", "env.credit=none", "--note", note, "--no-plots"]
    assert main([*argv, "--out", "page.md"]) == 0
    fake_run(Path("sweep"), "env.credit=none__seed=3", 3, "none", 0.9)
    assert check_report("page.md") != []
    assert main(["report", "--update", "page.md", "--no-plots"]) == 0
    page = Path("page.md").read_text()
    assert check_report("page.md") == [] and f"**Note.** {note}" in page
    assert "from 7 finished runs" in page and _row(page, "| env.credit=none | 4 |")
    Path("other.md").write_text("# typed by hand\n")
    for bad, message in (
        (["sweep", "--update", "page.md"], "--update PAGE takes no run folders"),
        (["--update", "page.md", "--check", "page.md"], "not both"),
        (["--update", "other.md"], "other.md: not a page written by `marti report`"),
        (["--update", "none.md"], "none.md: no such page"),
        (
            ["--update", "page.md", "--note", "x"],
            "use the options recorded in the page; drop --note",
        ),
        (["--check", "page.md", "--versus", "a=b", "--seed", "1"], "drop --versus, --seed"),
    ):
        capsys.readouterr()
        assert main(["report", *bad]) == 2
        assert message in capsys.readouterr().err
    monkeypatch.chdir(tmp_path / "sweep")  # the recorded paths are relative to tmp_path
    assert main(["report", "--update", "../page.md"]) == 2
    assert "reports ['sweep'], not found here" in capsys.readouterr().err


def test_runs_group_regardless_of_their_held_out_seed(tmp_path):
    """eval.seed, like seed, does not define a config (before it existed every run
    evaluated with its own seed); any other key that differs, or is missing, does."""
    from marti_trainer.report import RunRecord, group_runs
    from marti_trainer.report.tables import _mixed_heldout_seeds

    base = {"seed": 0, "exp_name": "x", "optim.lr": 1e-5, "log.output_dir": "runs"}
    old = RunRecord(tmp_path / "a", 0, dict(base), True)
    new = RunRecord(tmp_path / "b", 1, {**base, "seed": 1, "eval.seed": 0}, True)
    other = RunRecord(tmp_path / "c", 0, {**base, "eval.chunk_tasks": 16}, True)
    groups = group_runs([old, new, other])
    assert [[r.path.name for r in g.runs] for g in groups] == [["a", "b"], ["c"]]
    (line, _) = _mixed_heldout_seeds(groups)  # the page says where the episodes differ
    assert "eval.seed null (the run's seed) for seed 0; 0 for seed 1." in line
    assert groups[1].label not in line


def test_the_summary_holds_the_tables_and_the_page_says_where_episodes_differ(tmp_path):
    for credit in ("none", "quality"):
        for seed in (0, 1):
            run = fake_run(tmp_path / "runs", f"{credit}{seed}", seed, credit, 0.5)
            if seed:
                config = yaml.safe_load((run / "config.yaml").read_text())
                config["eval"] = {"seed": 0}
                (run / "config.yaml").write_text(yaml.safe_dump(config))
    report = build_report(ReportOptions((str(tmp_path / "runs"),), baseline="env.credit=none"))
    assert "Held-out episodes of env.credit=none: eval.seed null" in report.markdown
    assert "Held-out episodes" not in report.summary
    assert report.summary.startswith("## Held-out accuracy per config")
    assert "| env.credit=none | 2 | 50.0 [" in report.summary  # the tables before and after
    assert "| env.credit=quality | env.credit=none | 2 |" in report.summary


def test_a_setting_added_later_groups_a_config_saved_before_it(tmp_path):
    """A run saved before ``total_tokens`` existed lacks the key; one saved after records its
    default (None): the same config (``ADDED_SETTINGS``, as ``marti sweep`` compares them).
    A value other than the default is another config."""
    from marti_trainer.report import RunRecord, group_runs

    base = {"seed": 0, "exp_name": "x", "optim.lr": 1e-5}
    old = RunRecord(tmp_path / "a", 0, dict(base), True)
    new = RunRecord(tmp_path / "b", 1, {**base, "seed": 1, "total_tokens": None}, True)
    capped = RunRecord(tmp_path / "c", 0, {**base, "total_tokens": 5000}, True)
    groups = group_runs([old, new, capped])
    assert [[r.path.name for r in g.runs] for g in groups] == [["a", "b"], ["c"]]
    assert groups[0].label == "total_tokens=None" and groups[1].label == "total_tokens=5000"


def test_runs_that_stop_at_different_steps_keep_their_final_evaluation(tmp_path):
    """A token budget stops each seed at its own step: the accuracy curve pairs the seeds'
    last evaluations (x: their mean step), so the final one is not dropped, and the others
    at each step they all have before any seed's last."""
    from marti_trainer.report import RunRecord, group_runs
    from marti_trainer.report.plots import _plot_data

    config = {"seed": 0, "exp_name": "x", "total_tokens": 900}
    runs = [
        RunRecord(tmp_path / "a", 0, dict(config), True, evals=[(0, 0.2), (7, 0.4)],
                  generations_per_step=10.0, tokens={0: 0.0, 7: 880.0}),
        RunRecord(tmp_path / "b", 1, {**config, "seed": 1}, True, evals=[(0, 0.2), (9, 0.6)],
                  generations_per_step=10.0, tokens={0: 0.0, 9: 920.0}),
    ]  # fmt: skip
    data = _plot_data(group_runs(runs), 0.95, 0)
    (start, final) = data["accuracy"]["all runs"]
    assert start[:2] == (0.0, 0.2) and final[:2] == (8.0, pytest.approx(0.5))
    assert [p[0] for p in data["generations"]["all runs"]] == [0.0, 80.0]
    assert [p[0] for p in data["tokens"]["all runs"]] == [0.0, 900.0]
    shared = [
        RunRecord(tmp_path / "c", 0, dict(config), True, evals=[(0, 0.2), (5, 0.3), (9, 0.5)]),
        RunRecord(tmp_path / "d", 1, {**config, "seed": 1}, True, evals=[(0, 0.2), (9, 0.7)]),
    ]
    steps = [p[0] for p in _plot_data(group_runs(shared), 0.95, 0)["accuracy"]["all runs"]]
    assert steps == [0.0, 9.0]  # step 5 is one run's only
    # evaluations every 5 steps, seeds stopped at 10 and 12: the final ones pair (x = 11),
    # not seed e's final with seed f's mid-run evaluation at step 10
    periodic = [
        RunRecord(tmp_path / "e", 0, dict(config), True, evals=[(0, 0.2), (5, 0.3), (10, 0.4)]),
        RunRecord(tmp_path / "f", 1, {**config, "seed": 1}, True,
                  evals=[(0, 0.2), (5, 0.5), (10, 0.6), (12, 0.8)]),
    ]  # fmt: skip
    points = _plot_data(group_runs(periodic), 0.95, 0)["accuracy"]["all runs"]
    assert [p[:2] for p in points] == [
        (0.0, 0.2), (5.0, pytest.approx(0.4)), (11.0, pytest.approx(0.6))
    ]  # fmt: skip


def test_modes_group_seeds_that_ended_at_the_same_answers(sweep, tmp_path, monkeypatch):
    """``--modes KAPPA``: runs of any config whose final outcomes agree problem by problem
    (each fake run gets its first ``final * 10`` problems right) form one mode."""
    page = build_report(ReportOptions((str(sweep),), modes=0.9)).markdown
    table = page.split("## Where the seeds ended")[1].split("## Runs")[0]
    rows = [_cells(row) for row in table.splitlines() if row.startswith("| ") and "---" not in row]
    # quality 0.5/0.6/0.7 and none 0.4/0.6/0.5 (seeds 0-2): the two runs at 0.6 and the two
    # at 0.5 are identical; 0.7 against 0.6 agrees on 9 of 10, p_e = 0.42 + 0.12 = 0.54,
    # kappa = (0.9 - 0.54) / 0.46 = 0.78 < 0.9, so 0.7 and 0.4 stand alone
    assert rows[1:] == [
        ["1", "1", "70.0", "env.credit=quality: 1 (2)", "n/a"],
        ["2", "2", "60.0", "env.credit=none: 1 (1), env.credit=quality: 1 (1)", "identical"],
        ["3", "2", "50.0", "env.credit=none: 1 (2), env.credit=quality: 1 (0)", "identical"],
        ["4", "1", "40.0", "env.credit=none: 1 (0)", "n/a"],
    ]
    # at 0.75 every neighbour links (0.4-0.5 and 0.5-0.6: kappa (0.9 - 0.5) / 0.5 = 0.8):
    # one mode; its least kappa, 0.4 against 0.7: p_o 0.7, p_e 0.28 + 0.18 = 0.46 -> 0.44
    page = build_report(ReportOptions((str(sweep),), modes=0.75)).markdown
    both = "env.credit=none: 3 (0, 1, 2), env.credit=quality: 3 (0, 1, 2)"
    assert f"| 1 | 6 | 40.0-70.0 | {both} | 70.0%, 0.44 |" in page
    for bad in (0.0, 1.5):
        with pytest.raises(ValueError, match=f"--modes must be a kappa in \\(0, 1\\], got {bad}"):
            build_report(ReportOptions((str(sweep),), modes=bad))
    # recorded in the page, so --check regenerates the table
    monkeypatch.chdir(tmp_path)
    assert main(["report", "sweep", "--modes", "0.9", "--no-plots", "--out", "page.md"]) == 0
    assert '"modes": 0.9' in Path("page.md").read_text().splitlines()[0]
    assert check_report("page.md") == []
    # avg@k scores are not 0/1 outcomes: refused, naming the run
    run = fake_run(tmp_path / "k2", "k2", 0, "none", 0.5)
    records = [{"task": {"id": t, "answer": a}, "outcome": float(i % 2), "turns": [{}, {}]}
               for i, (t, a) in enumerate(PROBLEMS) for _ in range(2)]  # fmt: skip
    records[0]["outcome"] = 1.0  # problem 0: right once of twice -> 0.5
    (run / "eval" / "step_000002.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    with pytest.raises(ValueError, match=r"k2: problem 'arithmetic/test/L1/0' scores 0.5; modes"):
        build_report(ReportOptions((str(tmp_path / "k2"),), modes=0.9))


def test_modes_join_runs_at_the_floor_and_leave_out_runs_without_outcomes(tmp_path):
    """Near 0% accuracy kappa is ~0 even for runs that differ on one problem: runs that
    differ on at most 1% of the problems link anyway. A run whose final transcript is gone
    is named under the table, and runs on other reference answers never link."""
    problems = [(f"arithmetic/test/L1/{i}", str(i)) for i in range(200)]
    root = tmp_path / "runs"
    fake_run(root, "a", 0, "none", 0.0, problems=problems, eval_size=200)
    fake_run(root, "b", 0, "quality", 0.005, problems=problems, eval_size=200)  # 1 of 200
    fake_run(root, "c", 1, "none", 0.0, problems=problems, eval_size=200)
    (root / "c" / "eval" / "step_000002.jsonl").unlink()
    page = build_report(ReportOptions((str(root),), modes=0.9)).markdown
    # a and b differ on 1 problem of 200 (0.5%): kappa (0.995 - 0.995) / 0.005 = 0
    both = "env.credit=none: 1 (0), env.credit=quality: 1 (0)"
    assert f"| 1 | 2 | 0.0-0.5 | {both} | 99.5%, 0.00 |" in page
    assert page.split("## Runs")[0].rstrip().endswith("- `" + str(root / "c") + "`")
    other = [(t, "x" + a) for t, a in problems]
    fake_run(tmp_path / "r2", "a", 0, "none", 0.0, problems=problems, eval_size=200)
    fake_run(tmp_path / "r2", "b", 1, "none", 0.0, problems=other, eval_size=200)
    page = build_report(ReportOptions((str(tmp_path / "r2"),), modes=0.9)).markdown
    assert "| 1 | 1 | 0.0 | all runs: 1 (0) | n/a |" in page
    assert "| 2 | 1 | 0.0 | all runs: 1 (1) | n/a |" in page
