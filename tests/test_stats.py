"""marti_env.stats against values computed by hand (the derivations are in the comments)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.stats import mannwhitneyu

from marti_env.stats import (
    Estimate,
    iqm,
    iqm_ci,
    mean_ci,
    paired_difference,
    probability_of_improvement,
    probability_of_improvement_ci,
    sign_flip_p_value,
    wilson_interval,
)
from tests.conftest import REPO

Z95 = 1.959963984540054  # standard normal quantile at 0.975


# ----------------------------------------------------------------------------- Estimate


def test_estimate_format():
    e = Estimate(0.674, 0.601, 0.742, 5)
    assert e.format() == "0.674 [0.601, 0.742]"
    assert str(e) == "0.674 [0.601, 0.742]"
    assert e.format(digits=1, scale=100) == "67.4 [60.1, 74.2]"
    assert Estimate(0.05, -0.01, 0.1, 5).format(2, signed=True) == "+0.05 [-0.01, +0.10]"
    assert Estimate(0.5, math.nan, math.nan, 1).format() == "0.500 [n/a]"
    assert e.covers(0.7) and not e.covers(0.8)
    assert not Estimate(0.5, math.nan, math.nan, 1).covers(0.5)


# ----------------------------------------------------------------------------- Wilson


def test_wilson_67_of_100():
    # p = 0.67, z^2 = 3.8415, 1 + z^2/n = 1.038415
    # centre = (0.67 + 3.8415/200) / 1.038415 = 0.689207 / 1.038415 = 0.663710
    # half = 1.959964 / 1.038415 * sqrt(0.67*0.33/100 + 3.8415/40000)
    #      = 1.887455 * sqrt(0.002211 + 0.000096) = 1.887455 * 0.048032 = 0.090658
    e = wilson_interval(67, 100)
    assert e.mean == 0.67 and e.n == 100 and e.method == "wilson"
    assert e.low == pytest.approx(0.663710 - 0.090658, abs=2e-5)
    assert e.high == pytest.approx(0.663710 + 0.090658, abs=2e-5)


def test_wilson_zero_successes_is_not_zero_width():
    # p = 0: centre = (z^2/20) / (1 + z^2/10) = 0.192073 / 1.384146 = 0.138767
    # half = (z / 1.384146) * sqrt(z^2 / 400) = 1.416010 * 0.097998 = 0.138767 -> [0, 0.277535]
    e = wilson_interval(0, 10)
    assert e.mean == 0.0
    assert e.low == pytest.approx(0.0, abs=1e-12)
    assert e.high == pytest.approx(0.277535, abs=2e-5)
    # symmetric: 10 of 10 mirrors it
    full = wilson_interval(10, 10)
    assert full.low == pytest.approx(1 - 0.277535, abs=2e-5) and full.high == pytest.approx(1.0)


def test_wilson_narrows_with_n_and_confidence():
    w100, w1000 = wilson_interval(30, 100), wilson_interval(300, 1000)
    assert (w1000.high - w1000.low) < (w100.high - w100.low) / 3  # ~ 1/sqrt(10) as wide
    w90 = wilson_interval(30, 100, confidence=0.90)
    assert w100.low < w90.low < w90.high < w100.high


@pytest.mark.parametrize(
    ("k", "n", "conf", "match"),
    [
        (11, 10, 0.95, r"successes must lie in \[0, n=10\], got 11"),
        (-1, 10, 0.95, "successes must lie"),
        (1, 0, 0.95, "n must be a positive integer"),
        (1.5, 10, 0.95, "successes must be an integer"),
        (1, 10, 1.0, r"confidence must be a number in \(0, 1\)"),
    ],
)
def test_wilson_bad_input(k, n, conf, match):
    with pytest.raises(ValueError, match=match):
        wilson_interval(k, n, conf)


# ----------------------------------------------------------------------------- mean_ci


def test_mean_ci_two_values_percentile():
    # Resamples of [0, 1] (n=2): mean 0 (prob 1/4), 0.5 (1/2), 1 (1/4).
    # 95%: the 2.5th percentile is 0 and the 97.5th is 1.
    e = mean_ci([0.0, 1.0], method="percentile", seed=3)
    assert (e.mean, e.low, e.high) == (0.5, 0.0, 1.0)
    # 40%: the 30th and 70th percentiles both fall in the middle mass: 0.5.
    e40 = mean_ci([0.0, 1.0], confidence=0.4, method="percentile", seed=3)
    assert (e40.low, e40.high) == (0.5, 0.5)


def test_mean_ci_large_sample_matches_normal_approximation():
    # 50 ones and 50 zeros: mean 0.5, sd of the mean sqrt(0.25/100) = 0.05,
    # normal 95% CI 0.5 +- 1.96 * 0.05 = [0.402, 0.598]
    values = [1.0] * 50 + [0.0] * 50
    for method in ("BCa", "percentile"):
        e = mean_ci(values, method=method, seed=0)
        assert e.mean == 0.5 and e.n == 100 and e.method == f"bootstrap-{method}"
        assert e.low == pytest.approx(0.5 - Z95 * 0.05, abs=0.012)
        assert e.high == pytest.approx(0.5 + Z95 * 0.05, abs=0.012)


def test_mean_ci_seeded_and_special_cases():
    values = [0.31, 0.35, 0.29, 0.40, 0.33]
    assert mean_ci(values, seed=7) == mean_ci(values, seed=7)
    assert mean_ci(values, seed=7).mean == pytest.approx(1.68 / 5)
    one = mean_ci([0.4])
    assert one.mean == 0.4 and not one.has_ci and one.method == "none"
    flat = mean_ci([0.2, 0.2, 0.2])
    assert (flat.low, flat.high, flat.method) == (0.2, 0.2, "degenerate")


@pytest.mark.parametrize(
    ("values", "match"),
    [([], "values is empty"), ([0.1, float("nan")], r"values\[1\] is nan"), ([[1, 2]], "one-d")],
)
def test_mean_ci_bad_input(values, match):
    with pytest.raises(ValueError, match=match):
        mean_ci(values)


# ----------------------------------------------------------------------------- IQM


def test_iqm_hand_values():
    # n=8: drop floor(8/4)=2 from each end -> mean(3, 4, 5, 6) = 4.5
    assert iqm(range(1, 9)) == 4.5
    # n=10: drop 2 from each end -> mean(3..8) = 5.5; the outlier 1000 does not matter
    assert iqm([1, 2, 3, 4, 5, 6, 7, 8, 9, 1000]) == 5.5
    # a runs x tasks array is flattened (rliable)
    assert iqm(np.array([[1, 5], [2, 6], [3, 7], [4, 8]])) == 4.5


def test_iqm_ci_is_stratified_by_task():
    # Task a: runs all 0; task b: runs all 10. A stratified resample draws 4 runs from each
    # task, so every resample is {0,0,0,0,10,10,10,10}: IQM = mean(0, 0, 10, 10) = 5 always.
    # (Pooled resampling would not keep four of each, and its IQMs would spread.)
    e = iqm_ci({"a": [0, 0, 0, 0], "b": [10, 10, 10, 10]}, seed=1)
    assert (e.mean, e.low, e.high, e.n) == (5.0, 5.0, 5.0, 8)
    assert e.method == "stratified-bootstrap-percentile"


def test_iqm_ci_layouts_agree_and_cover_point():
    rng = np.random.default_rng(0)
    runs_by_tasks = rng.normal(size=(6, 3))
    as_array = iqm_ci(runs_by_tasks, seed=2, n_resamples=2000)
    as_lists = iqm_ci([list(runs_by_tasks[:, j]) for j in range(3)], seed=2, n_resamples=2000)
    assert as_array == as_lists
    assert as_array.low < as_array.mean < as_array.high
    with pytest.raises(ValueError, match=r"scores\['b'\]\[0\] is inf"):
        iqm_ci({"a": [1.0], "b": [float("inf")]})


# ----------------------------------------------------------------------------- P(X > Y)


def test_probability_of_improvement_hand_values():
    # x=[1,2,3] vs y=[2,2]: pairs (1,2)x2 lose, (2,2)x2 tie, (3,2)x2 win -> (2 + 0.5*2)/6
    assert probability_of_improvement([1, 2, 3], [2, 2]) == 0.5
    assert probability_of_improvement([3, 4], [1, 2]) == 1.0
    # equals Mann-Whitney U / (N M)
    x, y = [0.3, 0.5, 0.5, 0.9], [0.1, 0.5, 0.7]
    u = mannwhitneyu(x, y).statistic
    assert probability_of_improvement(x, y) == pytest.approx(u / 12)
    # averaged over tasks: task a 1.0, task b 0.0 -> 0.5
    assert probability_of_improvement({"a": [3, 4], "b": [1]}, {"a": [1, 2], "b": [2]}) == 0.5


def test_probability_of_improvement_ci():
    # Every run of X beats every run of Y in every task: each resample gives 1.
    sure = probability_of_improvement_ci({"a": [5, 6, 7]}, {"a": [1, 2, 3]}, seed=0)
    assert (sure.mean, sure.low, sure.high, sure.n) == (1.0, 1.0, 1.0, 9)
    # Overlapping: the CI spans 0.5
    e = probability_of_improvement_ci([1, 2, 3, 4], [1.5, 2.5, 3.5, 4.5], seed=0)
    assert e.mean == pytest.approx(6 / 16)  # wins: 2>1.5, 3>1.5, 3>2.5, 4>1.5, 4>2.5, 4>3.5
    assert e.low < 0.5 < e.high
    with pytest.raises(ValueError, match=r"same tasks; only in one of them: \['b'\]"):
        probability_of_improvement({"a": [1]}, {"a": [1], "b": [2]})


# ----------------------------------------------------------------------------- paired


def test_paired_difference_counts_and_indistinguishable():
    # d = [0.1, 0.0, 0.2]: mean 0.1; 2 wins, 1 tie, 0 losses. A resample of three zeros
    # (prob 1/27 = 0.037 > 0.025) puts the 2.5th percentile at 0: the CI covers 0.
    p = paired_difference([0.5, 0.6, 0.7], [0.4, 0.6, 0.5], method="percentile")
    assert p.difference.mean == pytest.approx(0.1)
    assert (p.wins, p.ties, p.losses) == (2, 1, 0)
    assert p.difference.low == pytest.approx(0.0) and p.difference.covers(0.0)
    assert p.verdict == "indistinguishable at 95%"


def test_paired_difference_significant_and_negligible():
    a = [0.5, 0.6, 0.7, 0.55, 0.65, 0.6, 0.7, 0.5]
    b = [x - d for x, d in zip(a, [0.1, 0.1, 0.2, 0.1, 0.2, 0.1, 0.2, 0.1], strict=True)]
    # every d >= 0.1, so every resampled mean is >= 0.1: the CI excludes 0
    p = paired_difference(a, b, labels=("debate", "single"))
    assert p.p_value == pytest.approx(2 / 256)  # all 8 positive
    assert p.difference.mean == pytest.approx(0.1375)
    assert p.difference.low >= 0.1 - 1e-12
    assert p.verdict == "debate higher at 95%"
    assert paired_difference(b, a, labels=("debate", "single")).verdict == "single higher at 95%"
    small = paired_difference(a, b, min_effect=0.2)
    assert small.verdict.startswith("negligible: |+0.13")
    assert small.verdict.endswith("< min_effect 0.2 (though the 95% CI excludes 0)")
    assert p.format().endswith("8/0/0  debate higher at 95%")


def test_sign_flip_p_values_by_hand():
    # n=5, all d > 0 and distinct: of the 2^5 = 32 sign patterns only all-plus and
    # all-minus reach |mean| >= the observed one -> p = 2/32
    assert sign_flip_p_value([1.1, 1.2, 1.3, 1.4, 1.5], [1.0] * 5) == pytest.approx(2 / 32)
    # one tie (d = 0): its sign changes nothing, so 4 of the 32 patterns reach it -> 4/32
    assert sign_flip_p_value([1.1, 1.2, 1.0, 1.4, 1.5], [1.0] * 5) == pytest.approx(4 / 32)
    # n=8 all positive: 2/256
    assert sign_flip_p_value([2.0] * 8, [1.0] * 8) == pytest.approx(2 / 256)
    # d = [+1, -1]: patterns give means 0, 0, +1, -1, all |.| >= 0 -> p = 1
    assert sign_flip_p_value([1.0, 0.0], [0.0, 1.0]) == 1.0


def test_few_pairs_are_not_called_significant_by_a_narrow_bootstrap():
    # d = [0.1, 0.2]: the bootstrap CI is [0.1, 0.2] (resample means 0.1, 0.15, 0.2) and
    # excludes 0, but two pairs cannot show anything: sign-flip p = 2/4 = 0.5
    p = paired_difference([0.3, 0.4], [0.2, 0.2], method="percentile")
    assert (p.difference.low, p.difference.high) == pytest.approx((0.1, 0.2))
    assert p.p_value == 0.5
    assert p.verdict == (
        "indistinguishable at 95% (the bootstrap CI excludes 0, but the exact sign-flip "
        "test gives p=0.5 with 2 pairs)"
    )


def test_paired_difference_by_seed_mapping():
    # keys are matched, not positions: seed 1 pairs 0.6 with 0.5, seed 0 pairs 0.4 with 0.4
    p = paired_difference({1: 0.6, 0: 0.4}, {0: 0.4, 1: 0.5})
    assert p.difference.mean == pytest.approx(0.05) and (p.wins, p.ties) == (1, 1)
    with pytest.raises(ValueError, match=r"only in a: \[2\], only in b: \[\]"):
        paired_difference({0: 0.1, 1: 0.2, 2: 0.3}, {0: 0.1, 1: 0.2})
    with pytest.raises(ValueError, match="pairs need equal lengths"):
        paired_difference([0.1, 0.2], [0.1])
    one = paired_difference([0.3], [0.2])
    assert one.verdict == "too few pairs (n=1) for a CI"
    with pytest.raises(ValueError, match="min_effect must be a number >= 0"):
        paired_difference([0.1, 0.2], [0.1, 0.3], min_effect=-1)


def test_the_docs_page_shows_what_the_functions_return():
    page = (REPO / "docs" / "evidence.md").read_text(encoding="utf-8")
    debate = {0: 0.32, 1: 0.36, 2: 0.30, 3: 0.35, 4: 0.33}
    single = {0: 0.28, 1: 0.31, 2: 0.30, 3: 0.30, 4: 0.29}
    more = {s: v + 0.03 for s, v in enumerate([0.31, 0.33, 0.29, 0.32, 0.30] * 2)}
    base = dict(enumerate([0.28, 0.31, 0.27, 0.30, 0.29, 0.30, 0.28, 0.30, 0.26, 0.31]))
    shown = [
        wilson_interval(30, 100).format(1, 100),
        wilson_interval(300, 1000).format(1, 100),
        mean_ci([0.31, 0.36, 0.30, 0.33, 0.29], seed=0).format(),
        paired_difference(debate, single, labels=("debate", "single")).format(1, 100),
        paired_difference(more, base, labels=("debate", "single")).format(1, 100),
        paired_difference(more, base, min_effect=0.06).verdict,
    ]
    assert shown[0] == "30.0 [21.9, 39.6]" and shown[1] == "30.0 [27.2, 32.9]"
    flat = " ".join(line.lstrip("# ").strip() for line in page.splitlines())
    for text in shown:
        assert text in flat, text


def test_a_task_with_one_run_is_held_fixed_in_the_stratified_bootstrap():
    # Task a has one run (0.1): every resample keeps it; task b's runs are redrawn. The IQM
    # of [0.1, 0.2, 0.3, 0.5] drops one value from each end: mean(0.2, 0.3) = 0.25.
    est = iqm_ci({"a": [0.1], "b": [0.2, 0.3, 0.5]}, n_resamples=2_000)
    assert est.mean == pytest.approx(0.25)
    assert est.method == "stratified-bootstrap-percentile"
    assert 0.1 <= est.low <= 0.25 <= est.high <= 0.5
    # X's single run beats every run of Y, whatever is redrawn: P(X > Y) = 1 exactly.
    poi = probability_of_improvement_ci([0.5], [0.1, 0.2, 0.3], n_resamples=2_000)
    assert (poi.mean, poi.low, poi.high) == (1.0, 1.0, 1.0)


def test_cohen_kappa_by_hand():
    from marti_env.stats import cohen_kappa

    def runs(bits: str) -> dict[str, float]:
        return {f"p{i}": float(c) for i, c in enumerate(bits)}

    assert cohen_kappa(runs("1100"), runs("1010")) == (0.5, 0.0)  # p_e = 1/2
    assert cohen_kappa(runs("1100"), runs("1100")) == (1.0, 1.0)
    assert cohen_kappa(runs("1100"), runs("0011")) == (0.0, -1.0)
    # p_a = 3/4, p_b = 1/4: p_e = 3/16 + 3/16 = 3/8, kappa = (1/2 - 3/8) / (5/8) = 1/5
    p_o, kappa = cohen_kappa(runs("1110"), runs("1000"))
    assert p_o == 0.5 and kappa == pytest.approx(0.2)
    p_o, kappa = cohen_kappa(runs("1111"), runs("1111"))  # nothing beyond chance to agree on
    assert p_o == 1.0 and math.isnan(kappa)
    with pytest.raises(ValueError, match="same problems"):
        cohen_kappa(runs("11"), runs("111"))
    with pytest.raises(ValueError, match=r"b\['p1'\] = 0.5"):
        cohen_kappa(runs("11"), {"p0": 1.0, "p1": 0.5})


def test_mcnemar_exact_by_hand():
    from marti_env.stats import mcnemar_exact

    before = {f"p{i}": 0.0 for i in range(5)}
    assert mcnemar_exact(before, {k: 1.0 for k in before}) == (5, 0, 0.0625)  # 2 x 0.5^5
    before = {**{f"p{i}": 0.0 for i in range(6)}, "p6": 1.0}
    after = {**{f"p{i}": 1.0 for i in range(6)}, "p6": 0.0}
    assert mcnemar_exact(before, after) == (6, 1, pytest.approx(0.125))  # 2 x 8 / 2^7
    assert mcnemar_exact(before, before) == (0, 0, 1.0)
    with pytest.raises(ValueError, match="same problems"):
        mcnemar_exact(before, {"p0": 1.0})
    with pytest.raises(ValueError, match=r"after\['p0'\] = 0.5"):
        mcnemar_exact({"p0": 0.0}, {"p0": 0.5})
