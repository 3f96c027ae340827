"""The credit leaderboard is generated from its result files, never typed by hand."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from marti_env.credit.bench import BenchConfig, run_benchmark
from marti_env.credit.bench.leaderboard import (
    leaderboard_markdown,
    load_results,
    merge_results,
    variant_of,
)
from marti_env.credit.bench.report import write_outputs
from tests.conftest import REPO

TINY = BenchConfig(
    updates=2, batch=4, eval_episodes=8, attr_configs=1, attr_episodes=8, probe_episodes=8
)


# the sweeps and the classic envs: a generated page each, from its result files
SWEEPS = {
    "docs/credit_sweep_n.md": ["credit_sweep_n"],
    "docs/credit_sweep_q.md": ["credit_sweep_q"],
    "docs/credit_sweep_k.md": ["credit_sweep_k"],
    "docs/credit_sweep_m.md": ["credit_sweep_m"],
    "docs/credit_sweep_m_episodes.md": ["credit_sweep_m_episodes"],
    "docs/credit_replay.md": ["credit_replay", "credit_sibling_train", "credit_replay_signal"],
    "docs/credit_replay_episodes.md": ["credit_replay_episodes"],
    "docs/credit_sibling_train_mean.md": ["credit_sibling_train_mean"],
}


@pytest.mark.parametrize(("page", "names"), sorted(SWEEPS.items()))
def test_docs_sweep_pages_are_generated(page, names):
    sources = [REPO / "docs" / "results" / f"{name}.json" for name in names]
    cited = [str(source.relative_to(REPO)) for source in sources]
    expected = leaderboard_markdown(load_results(sources), cited, page)
    assert (REPO / page).read_text(encoding="utf-8") == expected
    assert f"--leaderboard-out {page}`" in expected  # the page's own command rewrites it


def test_docs_leaderboard_is_the_generated_page():
    sources = sorted((REPO / "docs" / "results").glob("credit_sim_*.json"))
    page = REPO / "docs" / "credit_leaderboard.md"
    if not sources:
        pytest.skip("no docs/results/credit_sim_*.json yet")
    names = [str(p.relative_to(REPO)) for p in sources]
    assert page.read_text(encoding="utf-8") == leaderboard_markdown(load_results(sources), names)


def test_page_from_two_runs(tmp_path):
    a = run_benchmark(["none", "shapley"], ["gate-v0"], [0, 1, 2], TINY)
    b = run_benchmark(["none", "shapley"], ["split-sum-v0"], [0, 1, 2], TINY)
    paths = [
        write_outputs(r, tmp_path / n, plot_png=False)["json"] for r, n in ((a, "a"), (b, "b"))
    ]
    results = load_results(paths)
    page = leaderboard_markdown(results, ["a.json", "b.json"])
    assert "## `gate-v0`" in page and "## `split-sum-v0`" in page
    assert "| `shapley` |" in page and "## Across envs" in page
    assert page.count("verifier_ba") == 1  # a column of the gate env only
    assert "Where methods cannot be told apart" in page
    merged = merge_results(results)
    assert merged["envs"] == ["gate-v0", "split-sum-v0"] and len(merged["rows"]) == 30
    # a run again adds nothing; a cell with other rows is refused
    assert merge_results([results[0], results[0]])["rows"] == results[0]["rows"]
    changed = json.loads(json.dumps(results[0]))
    changed["rows"][0]["acc_final"] += 0.125
    cell = f"env '{changed['rows'][0]['env']}', method '{changed['rows'][0]['method']}'"
    with pytest.raises(ValueError, match=f"result 1 holds {cell} with other rows"):
        merge_results([results[0], changed])
    # a method benchmarked later, without the controls: its cells join, `none` is not repeated
    c = run_benchmark(["none", "score"], ["gate-v0"], [0, 1, 2], replace(TINY, controls=False))
    (c_path,) = [write_outputs(c, tmp_path / "c", plot_png=False)["json"]]
    both = merge_results([results[0], *load_results([c_path])])
    assert both["methods"][-1] == "score" and both["methods"][:2] == ["none", "shapley"]
    assert sum(r["method"] == "none" for r in both["rows"]) == 3
    assert "| `score` |" in leaderboard_markdown([results[0], *load_results([c_path])], ["a", "c"])
    other = dict(results[1], seeds=[0])
    with pytest.raises(ValueError, match="another seeds"):
        merge_results([results[0], other])
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"rows": []}))
    with pytest.raises(ValueError, match=r"bad\.json: not a credit benchmark results\.json"):
        load_results([bad])


def test_a_credit_irrelevant_variant_is_a_control_not_a_family(tmp_path):
    envs = ["gate-v0", "signal-v0", "gate-v0:binding=false"]
    result = run_benchmark(["none", "score"], envs, [0, 1], replace(TINY, controls=False))
    path = write_outputs(result, tmp_path / "r", plot_png=False)["json"]
    page = leaderboard_markdown(load_results([path]), ["r.json"])
    variant = page.split("## `gate-v0:binding=false`")[1]
    assert variant.lstrip().startswith("The credit-irrelevant variant of `gate-v0` (a control)")
    assert "over all runs of the 2 envs" in page  # the variant is not a family
    assert "(`gate-v0:binding=false`) are controls and are left out" in page
    assert "## Where a method does not tie on a credit-irrelevant variant" in page
    told_apart = page.split("## Where methods cannot be told apart from `none`")[1]
    assert "binding=false" not in told_apart.split("## Where a method does not tie")[0]
    assert variant_of("gate-v0:binding=false") == "gate-v0"
    assert variant_of("split-sum-v0:num_distractors=0:num_solvers=1") == "split-sum-v0"
    assert variant_of("gate-v0:binding=true") is None and variant_of("mad-v0") is None
    # a file without variants keeps its page as before: no such section
    plain = run_benchmark(["none"], ["gate-v0", "signal-v0"], [0, 1], replace(TINY, controls=False))
    path = write_outputs(plain, tmp_path / "p", plot_png=False)["json"]
    assert "credit-irrelevant" not in leaderboard_markdown(load_results([path]), ["p.json"])


def test_results_written_before_a_setting_existed_merge_with_new_ones(tmp_path):
    new = run_benchmark(["none"], ["gate-v0"], [0, 1], replace(TINY, controls=False))
    (new,) = load_results([write_outputs(new, tmp_path / "n", plot_png=False)["json"]])
    old = json.loads(json.dumps(new))
    old["config"]["normalize"] = True  # "std", as older files wrote it
    del old["config"]["equal_budget"]  # the default, before the option
    old["envs"] = ["signal-v0"]
    for r in old["rows"] + old["summary"]:
        r["env"] = "signal-v0"
    assert merge_results([old, new])["envs"] == ["signal-v0", "gate-v0"]
    old["config"]["normalize"] = "mean"
    with pytest.raises(ValueError, match="result 1 has another config than result 0"):
        merge_results([old, new])
