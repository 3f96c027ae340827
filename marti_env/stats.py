"""Statistics for comparing training runs: confidence intervals, robust aggregates, paired tests.

One job: turn a handful of numbers (held-out accuracies of runs, seeds, tasks) into estimates
with honest uncertainty. Each function is small and pure; randomness (the bootstrap) takes a
``seed``; bad input raises ``ValueError`` naming the argument.

* :func:`wilson_interval`: one run's held-out accuracy, ``k`` right of ``n``, with a binomial
  CI (Wilson 1927).
* :func:`mean_ci`: the mean over seeds with a bootstrap CI (Efron 1987, BCa).
* :func:`iqm` / :func:`iqm_ci`: interquartile mean over runs x tasks and its
  stratified-bootstrap CI (Agarwal et al. 2021, arXiv 2108.13264).
* :func:`probability_of_improvement` / :func:`probability_of_improvement_ci`: P(X > Y) in the
  Mann-Whitney form, averaged over tasks, with a stratified-bootstrap CI (same paper).
* :func:`paired_difference`: two configs on the same seeds (and problems): mean difference,
  CI, wins/ties/losses and a plain verdict ("indistinguishable at 95%"), checked by the
  exact sign-flip test :func:`sign_flip_p_value`.
* :func:`mcnemar_exact`: one run before and after training on the same problems (0/1
  outcomes): problems gained, lost, and the exact McNemar p-value (McNemar 1947).
* :func:`cohen_kappa`: how far two runs' 0/1 outcomes on the same problems agree beyond
  what their accuracies alone would give (Cohen 1960): two seeds that ended at the same
  policy score near 1.

Every CI is an :class:`Estimate` (``est.format()`` -> ``"0.674 [0.601, 0.742]"``). The
bootstrap is :func:`scipy.stats.bootstrap` (independent resampling of each sample given to
it, which is what "stratified" means here); nothing is resampled by hand. Only numpy and
scipy are imported.
"""

from __future__ import annotations

import inspect
import math
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy import stats as _st

__all__ = [
    "Estimate",
    "PairedDifference",
    "cohen_kappa",
    "iqm",
    "iqm_ci",
    "mcnemar_exact",
    "mean_ci",
    "paired_difference",
    "probability_of_improvement",
    "probability_of_improvement_ci",
    "sign_flip_p_value",
    "wilson_interval",
]

DEFAULT_RESAMPLES = 10_000
"""Bootstrap resamples: the Monte Carlo error of a 95% percentile bound is then well under
a tenth of the interval's width for the sample sizes of a seed sweep."""


@dataclass(frozen=True)
class Estimate:
    """A point estimate with a two-sided confidence interval.

    Attributes:
        mean: The point estimate (a mean, an interquartile mean, a proportion or a
            probability; always computed on the data as given, not on resamples).
        low: Lower end of the CI (``nan`` when there is none, e.g. a single value).
        high: Upper end of the CI.
        n: How many values it rests on (seeds, problems, or runs x tasks).
        confidence: The CI's level, e.g. 0.95.
        method: How the CI was made: ``"wilson"``, ``"bootstrap-BCa"``,
            ``"bootstrap-percentile"``, ``"stratified-bootstrap-percentile"``,
            ``"degenerate"`` (all values equal) or ``"none"`` (too few values).
    """

    mean: float
    low: float
    high: float
    n: int
    confidence: float = 0.95
    method: str = ""

    @property
    def has_ci(self) -> bool:
        """Whether both ends of the interval are finite numbers."""
        return math.isfinite(self.low) and math.isfinite(self.high)

    def covers(self, value: float) -> bool:
        """Whether ``low <= value <= high`` (False when there is no interval)."""
        return self.has_ci and self.low <= value <= self.high

    def format(self, digits: int = 3, scale: float = 1.0, signed: bool = False) -> str:
        """``"0.674 [0.601, 0.742]"``; ``scale=100, digits=1`` gives points
        (``"67.4 [60.1, 74.2]"``), ``signed`` a leading ``+`` on non-negative numbers.
        Without an interval: ``"0.674 [n/a]"``."""
        sign = "+" if signed else ""

        def f(x: float) -> str:
            return f"{x * scale:{sign}.{digits}f}"

        if not self.has_ci:
            return f"{f(self.mean)} [n/a]"
        return f"{f(self.mean)} [{f(self.low)}, {f(self.high)}]"

    def __str__(self) -> str:
        return self.format()


# ----------------------------------------------------------------------------- input checks


def _check_confidence(confidence: float) -> None:
    if not (isinstance(confidence, (int, float)) and 0 < confidence < 1):
        raise ValueError(f"confidence must be a number in (0, 1), got {confidence!r}")


def _values(values: Any, name: str) -> np.ndarray:
    """A 1-D float array of finite numbers, or a ValueError naming ``name``."""
    try:
        arr = np.asarray(values, dtype=float)
    except (TypeError, ValueError) as e:
        raise ValueError(f"{name} must be a sequence of numbers: {e}") from None
    if arr.ndim != 1:
        raise ValueError(f"{name} must be one-dimensional, got shape {arr.shape}")
    if arr.size == 0:
        raise ValueError(f"{name} is empty")
    bad = np.flatnonzero(~np.isfinite(arr))
    if bad.size:
        raise ValueError(f"{name}[{bad[0]}] is {arr[bad[0]]}, not a finite number")
    return arr


def _by_task(scores: Any, name: str) -> list[np.ndarray]:
    """Scores per task: a mapping task -> runs, a sequence of per-task sequences, or a 2-D
    array (runs x tasks, rliable's layout). Tasks may have different numbers of runs."""
    if isinstance(scores, Mapping):
        if not scores:
            raise ValueError(f"{name} has no tasks")
        return [_values(v, f"{name}[{k!r}]") for k, v in scores.items()]
    if isinstance(scores, np.ndarray):
        if scores.ndim != 2:
            raise ValueError(f"{name} as an array must be runs x tasks (2-D), got {scores.shape}")
        return [_values(scores[:, j], f"{name}[:, {j}]") for j in range(scores.shape[1])]
    if not isinstance(scores, Sequence) or isinstance(scores, str) or not scores:
        raise ValueError(f"{name} must be a non-empty mapping task -> runs or list of lists")
    return [_values(v, f"{name}[{j}]") for j, v in enumerate(scores)]


def _rng_kwargs(seed: int, function: Callable[..., Any] = _st.bootstrap) -> dict[str, Any]:
    """scipy >= 1.15 names the generator ``rng``; older versions ``random_state``."""
    gen = np.random.default_rng(seed)
    params = inspect.signature(function).parameters
    return {"rng": gen} if "rng" in params else {"random_state": gen}


def _bootstrap(
    samples: tuple[np.ndarray, ...],
    statistic: Callable[..., Any],
    confidence: float,
    seed: int,
    method: str,
    n_resamples: int,
    batch: int = 2_000,
) -> tuple[float, float]:
    """``scipy.stats.bootstrap`` over ``samples`` (each resampled on its own), vectorised
    along the last axis, ``batch`` resamples at a time (memory); the interval's ends
    (``nan`` when scipy finds none, or when no sample has two values).

    A sample of one value (a task with a single run) has only itself to redraw: it is held
    fixed and passed to ``statistic`` as is (scipy refuses samples of one value)."""
    movable = [i for i, sample in enumerate(samples) if sample.size >= 2]
    if not movable:
        return math.nan, math.nan
    if len(movable) < len(samples):
        fixed, inner = samples, statistic

        def statistic(*drawn: np.ndarray, axis: int = -1) -> Any:
            lead = drawn[0].shape[:-1]
            full = [np.broadcast_to(sample, (*lead, sample.size)) for sample in fixed]
            for i, sample in zip(movable, drawn, strict=True):
                full[i] = sample
            return inner(*full, axis=axis)

        samples = tuple(samples[i] for i in movable)
    with warnings.catch_warnings():
        # Degenerate resamples (BCa on near-constant data) give nan, handled by callers.
        warnings.simplefilter("ignore", category=RuntimeWarning)
        warnings.simplefilter("ignore", category=getattr(_st, "DegenerateDataWarning", Warning))
        res = _st.bootstrap(
            samples,
            statistic,
            n_resamples=n_resamples,
            vectorized=True,
            axis=-1,
            confidence_level=confidence,
            method=method,
            batch=max(1, min(n_resamples, batch)),
            **_rng_kwargs(seed),
        )
    return float(res.confidence_interval.low), float(res.confidence_interval.high)


# ----------------------------------------------------------------------------- per cell


def wilson_interval(successes: int, n: int, confidence: float = 0.95) -> Estimate:
    """Accuracy ``successes / n`` with the Wilson score interval (Wilson 1927, JASA 22:209).

    With ``p = k/n`` and ``z`` the standard normal quantile at ``(1 + confidence) / 2``::

        centre = (p + z^2 / 2n) / (1 + z^2 / n)
        half   = z / (1 + z^2 / n) * sqrt(p (1 - p) / n + z^2 / 4n^2)
        CI     = [centre - half, centre + half]

    Unlike the normal (Wald) interval it stays inside [0, 1] and is not zero-width at 0 or
    n successes. ``mean`` is ``p`` itself (the CI is not centred on it).
    """
    _check_confidence(confidence)
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n <= 0:
        raise ValueError(f"n must be a positive integer (the number of problems), got {n!r}")
    if isinstance(successes, bool) or not isinstance(successes, (int, np.integer)):
        raise ValueError(f"successes must be an integer, got {successes!r}")
    if not 0 <= successes <= n:
        raise ValueError(f"successes must lie in [0, n={n}], got {successes}")
    z = float(_st.norm.ppf((1 + confidence) / 2))
    p = successes / n
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z / denom * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    return Estimate(
        p, max(0.0, centre - half), min(1.0, centre + half), int(n), confidence, "wilson"
    )


# ----------------------------------------------------------------------------- across seeds


def mean_ci(
    values: Sequence[float],
    confidence: float = 0.95,
    seed: int = 0,
    method: str = "BCa",
    n_resamples: int = DEFAULT_RESAMPLES,
) -> Estimate:
    """The mean of ``values`` (one per seed) with a bootstrap CI (Efron & Tibshirani 1993,
    ch. 13-14; BCa: Efron 1987, JASA 82:171) from :func:`scipy.stats.bootstrap`.

    ``mean = sum(x) / n``; the CI is the bias-corrected and accelerated (``method="BCa"``)
    or plain percentile (``"percentile"``) interval of the means of ``n_resamples``
    resamples of the values, drawn with replacement by a generator seeded with ``seed``.
    With one value there is no interval (``low = high = nan``, method ``"none"``); with all
    values equal the interval is that value (``"degenerate"``). When BCa is undefined (its
    jackknife acceleration is 0/0) the percentile interval is used and ``method`` says so.

    Note: with 3-5 seeds every bootstrap interval is too narrow (it cannot see the spread
    the seeds did not show); treat it as a lower bound on the uncertainty.
    """
    _check_confidence(confidence)
    if method not in ("BCa", "percentile"):
        raise ValueError(f"method must be 'BCa' or 'percentile', got {method!r}")
    x = _values(values, "values")
    mean = float(x.mean())
    if x.size == 1:
        return Estimate(mean, math.nan, math.nan, 1, confidence, "none")
    if np.all(x == x[0]):  # x[0], not the sum's rounding of it
        return Estimate(
            float(x[0]), float(x[0]), float(x[0]), int(x.size), confidence, "degenerate"
        )

    def stat(a: np.ndarray, axis: int = -1) -> np.ndarray:
        return a.mean(axis=axis)

    low, high = _bootstrap((x,), stat, confidence, seed, method, n_resamples)
    used = method
    if method == "BCa" and not (math.isfinite(low) and math.isfinite(high)):
        low, high = _bootstrap((x,), stat, confidence, seed, "percentile", n_resamples)
        used = "percentile"
    return Estimate(mean, low, high, int(x.size), confidence, f"bootstrap-{used}")


# ----------------------------------------------------------------------------- across tasks


def iqm(values: Sequence[float] | np.ndarray) -> float:
    """Interquartile mean (Agarwal et al. 2021, arXiv 2108.13264, sec. 4.3): the mean of
    the middle 50% of the values after dropping ``floor(n/4)`` from each end, i.e.
    ``scipy.stats.trim_mean(values, 0.25)`` on all values flattened (rliable's
    definition). Robust to a few outlier runs, less noisy than the median.

    Example: ``iqm([1, 2, ..., 8]) = mean(3, 4, 5, 6) = 4.5``.
    """
    x = _values(np.ravel(np.asarray(values, dtype=float)), "values")
    return float(_st.trim_mean(x, 0.25))


def iqm_ci(
    scores: Mapping[str, Sequence[float]] | Sequence[Sequence[float]] | np.ndarray,
    confidence: float = 0.95,
    seed: int = 0,
    n_resamples: int = DEFAULT_RESAMPLES,
) -> Estimate:
    """IQM over all runs of all tasks, with a stratified-bootstrap percentile CI
    (Agarwal et al. 2021, arXiv 2108.13264, sec. 4.1-4.3).

    ``scores``: per task, the score of each run (a mapping task -> runs, a list of lists,
    or a runs x tasks array). Each resample draws, within every task independently, as many
    runs as that task has, with replacement (the stratified bootstrap: task identity is
    kept), and computes the IQM of all drawn scores; the CI is the percentile interval of
    those IQMs (as rliable's ``get_interval_estimates``).
    """
    _check_confidence(confidence)
    tasks = _by_task(scores, "scores")
    point = iqm(np.concatenate(tasks))
    n = int(sum(t.size for t in tasks))
    if all(t.size == 1 for t in tasks):  # nothing to resample within any task
        return Estimate(point, math.nan, math.nan, n, confidence, "none")
    if np.all(np.concatenate(tasks) == tasks[0][0]):
        return Estimate(point, point, point, n, confidence, "degenerate")

    def stat(*samples: np.ndarray, axis: int = -1) -> np.ndarray:
        return _st.trim_mean(np.concatenate(samples, axis=-1), 0.25, axis=-1)

    low, high = _bootstrap(tuple(tasks), stat, confidence, seed, "percentile", n_resamples)
    return Estimate(point, low, high, n, confidence, "stratified-bootstrap-percentile")


def _poi_one_task(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Mann-Whitney P(X > Y) + P(X = Y)/2 along the last axis (leading axes broadcast)."""
    gt = (x[..., :, None] > y[..., None, :]).mean(axis=(-2, -1))
    eq = (x[..., :, None] == y[..., None, :]).mean(axis=(-2, -1))
    return gt + 0.5 * eq


def probability_of_improvement(
    x: Sequence[float] | Mapping[str, Sequence[float]],
    y: Sequence[float] | Mapping[str, Sequence[float]],
) -> float:
    """P(X > Y): the probability that a run of X beats a run of Y on a task, averaged over
    tasks (Agarwal et al. 2021, arXiv 2108.13264, sec. 4.3).

    Per task, in the Mann-Whitney U form (runs ``x_1..x_N`` of X, ``y_1..y_M`` of Y)::

        P(X_m > Y_m) = 1/(N M) * sum_i sum_j S(x_i, y_j),  S = 1 if x > y, 1/2 if equal, else 0

    which is ``U / (N M)`` for scipy's ``mannwhitneyu(x, y).statistic``. 0.5 means neither is
    better. ``x`` and ``y`` are one task's runs (sequences) or mappings task -> runs with the
    same tasks.
    """
    xs, ys = _paired_tasks(x, y)
    return float(np.mean([_poi_one_task(a, b) for a, b in zip(xs, ys, strict=True)]))


def _paired_tasks(x: Any, y: Any) -> tuple[list[np.ndarray], list[np.ndarray]]:
    if isinstance(x, Mapping) != isinstance(y, Mapping):
        raise ValueError("x and y must both be mappings task -> runs, or both one task's runs")
    if isinstance(x, Mapping):
        if set(x) != set(y):
            only = sorted(set(x) ^ set(y), key=str)
            raise ValueError(f"x and y must have the same tasks; only in one of them: {only}")
        if not x:
            raise ValueError("x has no tasks")
        keys = list(x)
        return (
            [_values(x[k], f"x[{k!r}]") for k in keys],
            [_values(y[k], f"y[{k!r}]") for k in keys],
        )
    return [_values(x, "x")], [_values(y, "y")]


def probability_of_improvement_ci(
    x: Sequence[float] | Mapping[str, Sequence[float]],
    y: Sequence[float] | Mapping[str, Sequence[float]],
    confidence: float = 0.95,
    seed: int = 0,
    n_resamples: int = DEFAULT_RESAMPLES,
) -> Estimate:
    """:func:`probability_of_improvement` with a stratified-bootstrap percentile CI: each
    resample redraws the runs of X and of Y within every task independently, with
    replacement (Agarwal et al. 2021, sec. 4.3; rliable's ``get_interval_estimates`` on
    ``probability_of_improvement``). ``n`` counts the run pairs compared."""
    _check_confidence(confidence)
    xs, ys = _paired_tasks(x, y)
    point = probability_of_improvement(
        {i: a for i, a in enumerate(xs)}, {i: b for i, b in enumerate(ys)}
    )
    n = int(sum(a.size * b.size for a, b in zip(xs, ys, strict=True)))
    if all(a.size == 1 and b.size == 1 for a, b in zip(xs, ys, strict=True)):
        return Estimate(point, math.nan, math.nan, n, confidence, "none")
    samples = tuple(s for pair in zip(xs, ys, strict=True) for s in pair)

    def stat(*s: np.ndarray, axis: int = -1) -> np.ndarray:
        per_task = [_poi_one_task(s[2 * i], s[2 * i + 1]) for i in range(len(s) // 2)]
        return np.mean(per_task, axis=0)

    batch = max(1, 4_000_000 // n)  # each resample compares n pairs: bound the memory
    low, high = _bootstrap(samples, stat, confidence, seed, "percentile", n_resamples, batch)
    return Estimate(point, low, high, n, confidence, "stratified-bootstrap-percentile")


# ----------------------------------------------------------------------------- paired


@dataclass(frozen=True)
class PairedDifference:
    """Config A minus config B on the same seeds (and held-out problems).

    Attributes:
        difference: Mean of the per-pair differences ``a_i - b_i`` with its bootstrap CI.
        wins: Pairs where A is higher; ``ties``: equal; ``losses``: B higher.
        min_effect: Differences smaller than this (in absolute value) are called negligible.
        verdict: ``"indistinguishable at 95%"`` when the CI covers zero, or (with a note
            giving ``p_value``) when the CI excludes zero but the exact sign-flip test does
            not reject at that level, as happens with few pairs; ``"negligible: |+0.004| <
            min_effect 0.01 (though the 95% CI excludes 0)"`` when significant but small;
            ``"A higher at 95%"`` / ``"B higher at 95%"`` otherwise (with the labels given);
            ``"too few pairs (n=1) for a CI"`` with one pair.
        p_value: Two-sided p-value of :func:`sign_flip_p_value` (nan with one pair).
    """

    difference: Estimate
    wins: int
    ties: int
    losses: int
    min_effect: float
    verdict: str
    p_value: float = math.nan

    def format(self, digits: int = 3, scale: float = 1.0) -> str:
        """``"+0.052 [+0.010, +0.094]  4/0/1  B higher at 95%"``
        (difference, wins/ties/losses, verdict)."""
        d = self.difference.format(digits, scale, signed=True)
        return f"{d}  {self.wins}/{self.ties}/{self.losses}  {self.verdict}"


def sign_flip_p_value(
    a: Sequence[float], b: Sequence[float], seed: int = 0, n_resamples: int = DEFAULT_RESAMPLES
) -> float:
    """Two-sided p-value of the paired permutation (sign-flip) test of ``mean(a - b) = 0``
    (Fisher 1935; :func:`scipy.stats.permutation_test` with ``permutation_type="samples"``).

    Under the null each pair's two values are exchangeable, so each ``d_i = a_i - b_i`` is
    as likely ``+d_i`` as ``-d_i``; ``p = P(|mean(+-d)| >= |mean(d)|)`` over the ``2^n``
    sign patterns: exact for n <= 16, else ``n_resamples`` seeded random patterns. It
    needs no normality, and it shows what few seeds can say: with n pairs the smallest
    possible p is ``2 / 2^n`` (0.0625 for 5 pairs, however large the differences).
    """
    xa, xb = _values(a, "a"), _values(b, "b")
    if xa.size != xb.size:
        raise ValueError(f"a has {xa.size} values and b {xb.size}: pairs need equal lengths")

    def stat(x: np.ndarray, y: np.ndarray, axis: int = -1) -> np.ndarray:
        return np.mean(x - y, axis=axis)

    exact = xa.size <= 16
    res = _st.permutation_test(
        (xa, xb),
        stat,
        permutation_type="samples",
        vectorized=True,
        n_resamples=np.inf if exact else n_resamples,
        **_rng_kwargs(seed, _st.permutation_test),
    )
    return float(min(1.0, res.pvalue))


def _check_outcome_pair(
    x: Mapping[str, float], y: Mapping[str, float], names: tuple[str, str]
) -> None:
    """Two 0/1 evaluations of the same problems, or ValueError naming what differs or the
    first outcome that is not 0 or 1."""
    if set(x) != set(y):
        differ = sorted(set(x) ^ set(y))[:3]
        raise ValueError(
            f"{names[0]} and {names[1]} must hold the same problems; differ in {differ}"
        )
    for name, outcomes in zip(names, (x, y), strict=True):
        bad = next((k for k, v in outcomes.items() if v not in (0.0, 1.0)), None)
        if bad is not None:
            raise ValueError(f"{name}[{bad!r}] = {outcomes[bad]!r}: outcomes must be 0 or 1")


def mcnemar_exact(
    before: Mapping[str, float], after: Mapping[str, float]
) -> tuple[int, int, float]:
    """Problems gained and lost between two 0/1 evaluations of the same problems, and the
    two-sided exact McNemar p-value (McNemar 1947): under "no change", each discordant
    problem is equally likely gained or lost, so ``p = P(|Binomial(g + l, 1/2) - (g + l)/2|
    >= |g - (g + l)/2|)`` (:func:`scipy.stats.binomtest`). It measures one run's change
    over its problems, not the spread between seeds (:func:`paired_difference` does that).

    By hand: 5 gained, 0 lost: p = 2 x 0.5^5 = 0.0625; 6 gained, 1 lost: p = 2 x (1 + 7) /
    2^7 = 0.125. No discordant problem: p = 1.

    Raises:
        ValueError: the problem sets differ, or an outcome is not 0 or 1 (naming it).
    """
    _check_outcome_pair(before, after, ("before", "after"))
    gained = sum(1 for k in before if before[k] == 0.0 and after[k] == 1.0)
    lost = sum(1 for k in before if before[k] == 1.0 and after[k] == 0.0)
    if gained + lost == 0:
        return 0, 0, 1.0
    return gained, lost, float(_st.binomtest(gained, gained + lost, 0.5).pvalue)


def cohen_kappa(a: Mapping[str, float], b: Mapping[str, float]) -> tuple[float, float]:
    """Agreement of two 0/1 evaluations of the same problems: the observed share of problems
    on which they agree, ``p_o``, and Cohen's kappa (Cohen 1960), ``(p_o - p_e) / (1 - p_e)``
    with ``p_e = p_a p_b + (1 - p_a)(1 - p_b)`` the agreement two independent runs of
    accuracies ``p_a`` and ``p_b`` would reach by chance. Kappa is 1 for identical outcomes,
    near 0 for unrelated ones; it is ``nan`` when both runs score every problem alike
    (``p_e = 1``: nothing to agree beyond chance).

    By hand: a = 1100, b = 1010 (four problems): p_o = 2/4, p_a = p_b = 1/2, p_e = 1/2,
    kappa = 0; a = b = 1100: kappa = 1; a = 1100, b = 0011: kappa = -1.

    Raises:
        ValueError: the problem sets differ, or an outcome is not 0 or 1 (naming it).
    """
    _check_outcome_pair(a, b, ("a", "b"))
    if not a:
        raise ValueError("a and b hold no problems")
    n = len(a)
    p_o = sum(1 for k in a if a[k] == b[k]) / n
    p_a, p_b = sum(a.values()) / n, sum(b.values()) / n
    p_e = p_a * p_b + (1 - p_a) * (1 - p_b)
    return p_o, (p_o - p_e) / (1 - p_e) if p_e < 1 else float("nan")


def paired_difference(
    a: Sequence[float] | Mapping[Any, float],
    b: Sequence[float] | Mapping[Any, float],
    confidence: float = 0.95,
    seed: int = 0,
    min_effect: float = 0.0,
    labels: tuple[str, str] = ("A", "B"),
    method: str = "BCa",
    n_resamples: int = DEFAULT_RESAMPLES,
) -> PairedDifference:
    """Compare two configs run on the same seeds: ``d_i = a_i - b_i`` per pair.

    ``a`` and ``b`` are aligned sequences (pair ``i`` is ``a[i], b[i]``) or mappings keyed
    by seed (the keys must match). The difference is ``mean(d)`` with :func:`mean_ci`'s
    bootstrap CI of the paired differences (pairing removes the seed-to-seed variation both
    configs share, e.g. the same initial accuracy). Wins/ties/losses count ``d_i > 0``,
    ``= 0``, ``< 0``. The verdict follows the rule in :class:`PairedDifference`, in this
    order: too few pairs, CI covers zero, sign-flip ``p >= 1 - confidence``
    (:func:`sign_flip_p_value`: a bootstrap CI of 2-5 values is too narrow and can exclude
    zero when no test could), ``|mean(d)| < min_effect``, else the higher label.
    """
    if not (isinstance(min_effect, (int, float)) and min_effect >= 0):
        raise ValueError(f"min_effect must be a number >= 0, got {min_effect!r}")
    if isinstance(a, Mapping) != isinstance(b, Mapping):
        raise ValueError("a and b must both be mappings seed -> value, or both sequences")
    if isinstance(a, Mapping):
        if set(a) != set(b):
            only_a = sorted(set(a) - set(b), key=str)
            only_b = sorted(set(b) - set(a), key=str)
            raise ValueError(
                f"a and b must cover the same seeds to be paired: only in a: {only_a}, "
                f"only in b: {only_b}"
            )
        keys = sorted(a, key=str)
        a, b = [a[k] for k in keys], [b[k] for k in keys]
    xa, xb = _values(a, "a"), _values(b, "b")
    if xa.size != xb.size:
        raise ValueError(f"a has {xa.size} values and b {xb.size}: pairs need equal lengths")
    d = xa - xb
    est = mean_ci(d, confidence, seed, method, n_resamples)
    level = f"{100 * confidence:g}%"
    p = sign_flip_p_value(xa, xb, seed, n_resamples) if xa.size > 1 else math.nan
    if not est.has_ci:
        verdict = f"too few pairs (n={est.n}) for a CI"
    elif est.covers(0.0):
        verdict = f"indistinguishable at {level}"
    elif p >= 1 - confidence - 1e-12:
        verdict = (
            f"indistinguishable at {level} (the bootstrap CI excludes 0, but the exact "
            f"sign-flip test gives p={p:.3g} with {est.n} pairs)"
        )
    elif abs(est.mean) < min_effect:
        verdict = (
            f"negligible: |{est.mean:+.3g}| < min_effect {min_effect:g} "
            f"(though the {level} CI excludes 0)"
        )
    else:
        verdict = f"{labels[0] if est.mean > 0 else labels[1]} higher at {level}"
    return PairedDifference(
        est, int((d > 0).sum()), int((d == 0).sum()), int((d < 0).sum()), float(min_effect),
        verdict, p,
    )  # fmt: skip
