"""Across-run statistics of one task over N seeds: IQM, mean, median and optimality gap with stratified bootstrap 95%
intervals, the probability of improvement over another set of runs, and performance profiles (Agarwal et al., 2021,
"Deep RL at the Edge of the Statistical Precipice", as computed by their library rliable).

The point estimates are rliable's own functions (``rliable.metrics``). The intervals are rliable's
``library.get_interval_estimates`` (stratified bootstrap, percentile method) written once here, because
``rliable.library`` does not import on our pins: it subclasses ``arch.bootstrap``, and every arch that rliable 1.2
accepts (``arch<8``) calls a private pandas decorator whose signature pandas 3 changed (arch 8 fixes that but drops
the ``random_state`` keyword rliable passes). The resampling below draws the same indices in the same order as
rliable does after ``np.random.seed(BOOTSTRAP_SEED)``, and takes the percentiles as arch does, so each interval equals
rliable's ``get_interval_estimates(..., reps=BOOTSTRAP_REPS)`` run on pandas 2 (tests/test_aggregate.py pins numbers
computed that way).

Unit of analysis: the run (one seed). A run given as several episode returns is scored by their mean, as Agarwal et
al. score a run, so the bootstrap resamples runs and the IQM trims runs, never single episodes.

One seed is called one seed: with one run every resample is that run, so every interval has zero width (rliable gives
the same). That width says nothing about the spread over seeds; ``num_runs`` says how many there were.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from rlcore.common.errors import RLCoreError

CONFIDENCE = 0.95
"""Coverage of every interval."""
BOOTSTRAP_REPS = 2000
"""Bootstrap resamples per interval. rliable's default is 50 000; 2000 (its default for performance profiles) keeps an
aggregate to about half a second, and the percentile endpoints' Monte Carlo error at 2000 resamples is about 3% of the
interval's half-width (for a normal-shaped bootstrap distribution), fixed once the seed is (below)."""
BOOTSTRAP_SEED = 0
"""The bootstrap's own RNG seed: the same scores always give the same intervals."""
PROFILE_THRESHOLDS = 101
"""Thresholds of a performance profile when none are given: evenly spaced from the lowest score to the highest."""

RunScore = float | Sequence[float]
"""One run's score, or its episodes' returns (then the run scores their mean)."""


class AggregateError(RLCoreError):
    """Scores that cannot be aggregated: no run, a run without episodes, or a score that is not a finite number."""


def aggregate(scores: Mapping[int, RunScore], target: float | None = None) -> dict[str, Any]:
    """Across-run statistics of one task: ``scores`` maps each seed to its run's score (or episode returns).

    Returns a JSON-safe dict: ``iqm`` (the 25%-trimmed mean over runs, ``rliable.metrics.aggregate_iqm``), ``mean``,
    ``median`` (over runs; rliable's ``aggregate_median`` is the median over *tasks* of task means, which for one task
    is the mean), and with a ``target`` the ``optimality_gap`` (``target - mean(min(score, target))``, in the scores'
    units), each with its ``<name>_ci95`` ``[low, high]``; ``num_runs``, ``seeds`` (ascending, the runs' order in the
    bootstrap), ``target``, ``confidence`` and ``bootstrap`` (method, resamples, seed)."""
    from rliable import metrics  # here, not at import: scipy and rliable take ~3 s to load

    if not isinstance(scores, Mapping):
        raise AggregateError(f"scores: expected a mapping of seed to score, got {type(scores).__name__}")
    seeds = _seed_keys(scores, "scores")
    runs = _run_scores([scores[seed] for seed in seeds], "scores", names=seeds)
    estimators: dict[str, Callable[[np.ndarray], float]] = {
        "iqm": metrics.aggregate_iqm,
        "mean": metrics.aggregate_mean,
        "median": np.median,
    }
    if target is not None:
        gamma = _finite(target, "target")
        estimators["optimality_gap"] = lambda matrix: metrics.aggregate_optimality_gap(matrix, gamma=gamma)
    matrix = runs[:, None]  # rliable's layout: (num_runs, num_tasks)
    indices = _run_indices(len(runs), BOOTSTRAP_REPS)
    resampled = np.empty((BOOTSTRAP_REPS, len(estimators)), dtype=np.float64)
    for rep in range(BOOTSTRAP_REPS):
        sample = matrix[indices[rep], _TASK]
        resampled[rep] = [function(sample) for function in estimators.values()]
    result: dict[str, Any] = {"num_runs": len(runs), "seeds": seeds}
    for column, (name, function) in enumerate(estimators.items()):
        result[name] = float(function(matrix))
        result[f"{name}_ci95"] = percentile_interval(resampled[:, column])
    result["target"] = None if target is None else float(target)
    result["confidence"] = CONFIDENCE
    result["bootstrap"] = _bootstrap_record(BOOTSTRAP_REPS)
    return result


def iqm(scores: Sequence[RunScore]) -> float:
    """The interquartile mean of runs' scores: rliable's ``aggregate_iqm``, the mean of the middle 50% of runs (the
    25%-trimmed mean, ``scipy.stats.trim_mean``); with fewer than 4 runs nothing is trimmed (the mean)."""
    from rliable import metrics  # here, not at import: scipy and rliable take ~3 s to load

    return float(metrics.aggregate_iqm(_run_scores(scores, "scores")[:, None]))


def probability_of_improvement(
    scores_x: Sequence[RunScore] | Mapping[int, RunScore], scores_y: Sequence[RunScore] | Mapping[int, RunScore]
) -> dict[str, Any]:
    """P(X > Y): the probability that a run of X scores higher than a run of Y (ties count half; the Mann-Whitney U
    statistic over ``num_runs_x * num_runs_y``, ``rliable.metrics.probability_of_improvement``; exactly 0.5 when both
    hold the same scores), with its interval from resampling X's and Y's runs independently (rliable's
    ``StratifiedIndependentBootstrap``). A mapping's runs are taken in ascending seed order."""
    from rliable import metrics  # here, not at import: scipy and rliable take ~3 s to load

    x = _run_scores(_in_seed_order(scores_x, "scores_x"), "scores_x")[:, None]
    y = _run_scores(_in_seed_order(scores_y, "scores_y"), "scores_y")[:, None]
    point = float(metrics.probability_of_improvement(x, y))
    random_state = np.random.RandomState(BOOTSTRAP_SEED)
    x_rows = np.empty((BOOTSTRAP_REPS, len(x)), dtype=np.intp)
    y_rows = np.empty((BOOTSTRAP_REPS, len(y)), dtype=np.intp)
    for rep in range(BOOTSTRAP_REPS):
        # rliable draws X's indices, then Y's, once per resample: the same order keeps its numbers
        x_rows[rep] = random_state.choice(len(x), x.shape, replace=True)[:, 0]
        y_rows[rep] = random_state.choice(len(y), y.shape, replace=True)[:, 0]
    resampled = _pairwise_wins(x[x_rows, 0], y[y_rows, 0])
    return {
        "probability_of_improvement": point,
        "probability_of_improvement_ci95": percentile_interval(resampled),
        "num_runs_x": len(x),
        "num_runs_y": len(y),
        "confidence": CONFIDENCE,
        "bootstrap": _bootstrap_record(BOOTSTRAP_REPS),
    }


def _pairwise_wins(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """P(X > Y) of each resample (``x``: (reps, n), ``y``: (reps, m)) by counting pairs, ties half: the Mann-Whitney
    U statistic over ``n * m`` that rliable's ``probability_of_improvement`` gets from ``scipy.stats.mannwhitneyu``
    (U is a sum of half-integer ranks, exact in float64, as the count is, so both give the same float; rliable's
    0.5 for equal arrays is the count's too), for every resample at once instead of one test per resample."""
    above = (x[:, :, None] > y[:, None, :]).sum(axis=(1, 2))
    ties = (x[:, :, None] == y[:, None, :]).sum(axis=(1, 2))
    return (above + 0.5 * ties) / (x.shape[1] * y.shape[1])


def performance_profile(
    scores_by_method: Mapping[str, Sequence[RunScore] | Mapping[int, RunScore]],
    thresholds: Sequence[float] | np.ndarray | None = None,
) -> tuple[np.ndarray, dict[str, np.ndarray], dict[str, np.ndarray]]:
    """Score distributions (rliable's ``create_performance_profile``): for each method, the fraction of its runs
    that score above each threshold, with its pointwise interval (rows low, high) from resampling the method's runs.
    Returns ``(thresholds, profiles, intervals)``; by default :data:`PROFILE_THRESHOLDS` thresholds from the lowest
    run score of any method to the highest."""
    if not scores_by_method:
        raise AggregateError("scores_by_method: expected at least one method, got none")
    runs = {
        name: _run_scores(_in_seed_order(scores, f"scores_by_method.{name}"), f"scores_by_method.{name}")
        for name, scores in scores_by_method.items()
    }
    if thresholds is None:
        every = np.concatenate(list(runs.values()))
        taus = np.linspace(every.min(), every.max(), PROFILE_THRESHOLDS)
    else:
        taus = np.asarray(thresholds, dtype=np.float64)
        if taus.ndim != 1 or len(taus) == 0 or not np.isfinite(taus).all():
            raise AggregateError("thresholds: expected a non-empty list of finite numbers")

    def fraction_above(samples: np.ndarray) -> np.ndarray:
        """rliable's ``library.score_distributions``, ``np.mean(scores > tau)`` for every tau, for a stack of samples
        (..., runs): a mean of zeros and ones is an exact count over the runs, so comparing all at once changes no
        bit."""
        return np.mean(samples[..., None] > taus, axis=-2)

    profiles, intervals = {}, {}
    for name, values in runs.items():
        profiles[name] = fraction_above(values)
        # rliable bootstraps each method with the global RNG where the previous one left it; a fresh seed per method
        # makes a method's band independent of which methods are drawn beside it
        resampled = fraction_above(values[_run_indices(len(values), BOOTSTRAP_REPS)[:, :, 0]])
        intervals[name] = np.array([percentile_interval(resampled[:, k]) for k in range(len(taus))]).T
    return taus, profiles, intervals


def iqm_band(curves: Mapping[int, tuple[Sequence[float], Sequence[float]]]) -> dict[str, Any]:
    """The IQM across seeds of learning curves (``curves``: seed -> (steps, values)) at every step all seeds share,
    with its pointwise interval, as rliable's sample-efficiency curves compute it: scores shaped (runs, 1 task, steps),
    runs resampled independently at each step (``StratifiedBootstrap`` draws run indices of the scores' whole shape),
    the IQM at each step (``scipy.stats.trim_mean`` along the runs axis, what ``rliable.metrics.aggregate_iqm``
    computes for one step). A seed that stopped early ends the band at its last step. Returns ``steps``, ``iqm``,
    ``low``, ``high`` (lists) and ``seeds``."""
    import scipy.stats  # here, not at import: scipy takes ~3 s to load

    if not curves:
        raise AggregateError("curves: expected at least one seed's learning curve, got none")
    seeds = _seed_keys(curves, "curves")
    series = []
    for seed in seeds:
        steps, values = curves[seed]
        if len(steps) != len(values):
            raise AggregateError(f"curves.{seed}: expected as many values as steps, got {len(values)} and {len(steps)}")
        series.append(dict(zip(steps, values, strict=True)))
    shared = sorted(set.intersection(*(set(curve) for curve in series)))
    table = np.array(
        [[_finite(curve[step], f"curves.{seed}") for step in shared] for seed, curve in zip(seeds, series, strict=True)]
    )
    table = table.reshape(len(seeds), len(shared))
    iqm = scipy.stats.trim_mean(table, 0.25, axis=0) if shared else np.empty(0)
    low, high = np.empty(0), np.empty(0)
    if shared:
        indices = np.random.RandomState(BOOTSTRAP_SEED).choice(len(seeds), (BOOTSTRAP_REPS, *table.shape), replace=True)
        columns = np.arange(len(shared))[None, :]
        resampled = np.stack([scipy.stats.trim_mean(table[rows, columns], 0.25, axis=0) for rows in indices])
        low, high = np.array([percentile_interval(resampled[:, k]) for k in range(len(shared))]).T
    return {
        "steps": [int(step) if float(step).is_integer() else float(step) for step in shared],
        "iqm": [float(value) for value in iqm],
        "low": [float(value) for value in low],
        "high": [float(value) for value in high],
        "seeds": seeds,
    }


def percentile_interval(resampled: np.ndarray) -> list[float]:
    """``[low, high]``: the ``(1 - CONFIDENCE) / 2`` and ``(1 + CONFIDENCE) / 2`` percentiles of the resampled
    statistic, computed as arch's ``conf_int(method="percentile")`` does (the same float arithmetic)."""
    alpha = (1.0 - CONFIDENCE) / 2
    low, high = np.percentile(resampled, [100 * alpha, 100 * (1.0 - alpha)])
    return [float(low), float(high)]


_TASK = np.arange(1)[None, :]
"""The task index of a one-task (runs, tasks) matrix, shaped as rliable's strata indices (an ``np.ogrid``)."""


def _run_indices(num_runs: int, reps: int) -> np.ndarray:
    """Run indices of every resample, shape (reps, num_runs, 1). rliable's ``StratifiedBootstrap`` draws
    ``np.random.choice(num_runs, (num_runs, num_tasks))`` once per resample from the global RNG; one legacy
    ``RandomState`` draw of all resamples gives the same indices (the stream is consumed in the same order) without
    touching the global RNG."""
    return np.random.RandomState(BOOTSTRAP_SEED).choice(num_runs, (reps, num_runs, 1), replace=True)


def _run_scores(runs: Sequence[RunScore], what: str, names: Sequence[int] | None = None) -> np.ndarray:
    """One float per run: the run's score, or the mean of its episode returns. Refuses no run, a run without
    episodes and anything not finite."""
    if isinstance(runs, str | bytes) or len(runs) == 0:
        raise AggregateError(f"{what}: expected the scores of at least one run, got none")
    values = []
    for position, run in enumerate(runs):
        where = f"{what}.{names[position] if names is not None else position}"
        if isinstance(run, np.ndarray) and run.ndim == 0:
            run = run.item()
        if isinstance(run, Sequence | np.ndarray) and not isinstance(run, str | bytes):
            if len(run) == 0:
                raise AggregateError(f"{where}: expected at least one episode return, got none")
            values.append(float(np.mean([_finite(value, where) for value in run])))
        else:
            values.append(_finite(run, where))
    return np.array(values, dtype=np.float64)


def _finite(value: Any, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float | np.integer | np.floating):
        raise AggregateError(f"{where}: expected a number, got {value!r}")
    if not np.isfinite(value):
        raise AggregateError(f"{where}: expected a finite number, got {value!r}")
    return float(value)


def _seed_keys(by_seed: Mapping[Any, Any], what: str) -> list[int]:
    """The seeds (the keys) in ascending order: the order of the runs in every resample."""
    for seed in by_seed:
        if isinstance(seed, bool) or not isinstance(seed, int | np.integer):
            raise AggregateError(f"{what}: expected integer seeds as keys, got {seed!r}")
    return sorted(int(seed) for seed in by_seed)


def _in_seed_order(scores: Sequence[RunScore] | Mapping[int, RunScore], what: str) -> Sequence[RunScore]:
    if isinstance(scores, Mapping):
        return [scores[seed] for seed in _seed_keys(scores, what)]
    return scores


def _bootstrap_record(reps: int) -> dict[str, Any]:
    return {"method": "stratified bootstrap over runs, percentile interval", "resamples": reps, "seed": BOOTSTRAP_SEED}
