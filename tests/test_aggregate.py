"""Across-run statistics (rlcore/evaluation/aggregate.py) and the seed figures (rlcore/evaluation/plots.py).

The pinned intervals were computed by rliable 1.2.0 itself: ``np.random.seed(0)`` then
``rliable.library.get_interval_estimates(..., reps=2000)`` (or ``create_performance_profile``), on arch 7.2.0 with
pandas 2.3.3, where ``rliable.library`` imports (on our pandas 3 it does not, which is why aggregate.py resamples
itself). Equal to the last bits: the same run indices in the same order, the same percentiles."""

from __future__ import annotations

import json

import numpy as np
import pytest
import scipy.stats
from rliable import metrics

from rlcore.common.errors import RLCoreError
from rlcore.evaluation import aggregate as agg
from rlcore.evaluation.plots import plot_performance_profile, plot_seed_curves

EIGHT = [10.0, 20.0, 30.0, 40.0, 50.0, 60.0, 70.0, 1000.0]
FIVE = [480.0, 500.0, 212.5, 455.25, 500.0]
TIGHT = {"rtol": 1e-12, "atol": 1e-9}  # returns of order 1-1000: equal up to float rounding
APPROX = {"rel": 1e-12, "abs": 1e-9}  # the same for pytest.approx


def by_seed(values: list[float], first_seed: int = 0) -> dict[int, float]:
    return {first_seed + k: value for k, value in enumerate(values)}


def test_iqm_of_eight_runs_is_the_trimmed_mean_by_hand_with_rliables_interval():
    result = agg.aggregate(by_seed(EIGHT), target=500.0)
    # 8 runs: the lowest 2 and the highest 2 are cut, the IQM is the mean of 30, 40, 50, 60
    assert result["iqm"] == pytest.approx(45.0, **APPROX)
    assert result["mean"] == pytest.approx(160.0, **APPROX)
    assert result["median"] == pytest.approx(45.0, **APPROX)
    assert result["optimality_gap"] == pytest.approx(500.0 - (280.0 + 500.0) / 8, **APPROX)  # 1000 counts as 500
    low, high = result["iqm_ci95"]
    assert low <= result["iqm"] <= high
    np.testing.assert_allclose(result["iqm_ci95"], [25.0, 292.5], **TIGHT)
    np.testing.assert_allclose(result["mean_ci95"], [29.968750000000057, 402.5], **TIGHT)
    np.testing.assert_allclose(result["median_ci95"], [20.0, 70.0], **TIGHT)
    np.testing.assert_allclose(result["optimality_gap_ci95"], [285.0, 470.03124999999983], **TIGHT)
    assert result["num_runs"] == 8 and result["seeds"] == list(range(8))
    assert result["target"] == 500.0 and result["confidence"] == 0.95
    assert result["bootstrap"]["resamples"] == agg.BOOTSTRAP_REPS == 2000


def test_the_same_scores_give_the_same_intervals_whatever_the_global_rng_and_the_dict_order():
    first = agg.aggregate(by_seed(FIVE))
    saved = np.random.get_state()
    try:
        np.random.seed(12345)  # rliable would follow the global RNG; aggregate.py has its own and leaves this alone
        before = np.random.get_state()
        again = agg.aggregate(dict(reversed(list(by_seed(FIVE).items()))))
        after = np.random.get_state()
    finally:
        np.random.set_state(saved)
    assert again == first
    assert np.array_equal(before[1], after[1]) and before[2] == after[2]


def test_point_estimates_are_rliables_functions_on_the_same_array():
    scores = np.random.RandomState(3).normal(200.0, 50.0, size=32)
    result = agg.aggregate(by_seed(list(scores), first_seed=100), target=250.0)
    matrix = scores[:, None]  # rliable's (num_runs, num_tasks)
    assert result["iqm"] == pytest.approx(float(metrics.aggregate_iqm(matrix)), **APPROX)
    assert result["iqm"] == pytest.approx(float(scipy.stats.trim_mean(scores, 0.25)), **APPROX)
    assert result["mean"] == pytest.approx(float(metrics.aggregate_mean(matrix)), **APPROX)
    assert result["median"] == pytest.approx(float(np.median(scores)), **APPROX)
    gap = float(metrics.aggregate_optimality_gap(matrix, gamma=250.0))
    assert result["optimality_gap"] == pytest.approx(gap, **APPROX)
    assert result["seeds"] == list(range(100, 132))
    for name in ("iqm", "mean", "median", "optimality_gap"):
        low, high = result[f"{name}_ci95"]
        assert low < result[name] < high, name


def test_five_runs_match_rliables_intervals():
    result = agg.aggregate(by_seed(FIVE), target=500.0)
    assert result["iqm"] == pytest.approx((455.25 + 480.0 + 500.0) / 3, **APPROX)
    np.testing.assert_allclose(result["iqm_ci95"], [293.4166666666667, 500.0], **TIGHT)
    np.testing.assert_allclose(result["mean_ci95"], [318.55, 496.0], **TIGHT)
    np.testing.assert_allclose(result["median_ci95"], [212.5, 500.0], **TIGHT)
    np.testing.assert_allclose(result["optimality_gap_ci95"], [4.0, 181.45], **TIGHT)


def test_without_a_target_there_is_no_optimality_gap_and_the_result_is_json():
    result = agg.aggregate(by_seed(FIVE))
    assert "optimality_gap" not in result and result["target"] is None
    assert json.loads(json.dumps(result, allow_nan=False)) == result


def test_a_run_given_as_episodes_is_scored_by_their_mean():
    episodes = {0: [470.0, 490.0], 1: [500.0], 2: np.array([200.0, 225.0]), 3: [455.25], 4: [500.0, 500.0, 500.0]}
    assert agg.aggregate(episodes) == agg.aggregate(by_seed(FIVE))


def test_one_seed_is_called_one_seed_every_interval_has_zero_width():
    result = agg.aggregate({7: 123.0}, target=500.0)
    assert result["num_runs"] == 1 and result["seeds"] == [7]
    for name, value in (("iqm", 123.0), ("mean", 123.0), ("median", 123.0), ("optimality_gap", 377.0)):
        assert result[name] == pytest.approx(value, **APPROX)
        assert result[f"{name}_ci95"] == [result[name], result[name]]  # rliable gives the same


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: agg.aggregate({}), "scores: expected the scores of at least one run, got none"),
        (lambda: agg.aggregate([1.0, 2.0]), "scores: expected a mapping of seed to score, got list"),
        (lambda: agg.aggregate({0: 1.0, 1: float("nan")}), "scores.1: expected a finite number, got nan"),
        (lambda: agg.aggregate({0: 1.0, 3: []}), "scores.3: expected at least one episode return, got none"),
        (lambda: agg.aggregate({0: 1.0, 1: "2"}), "scores.1: expected a number, got '2'"),
        (lambda: agg.aggregate({"a": 1.0}), "scores: expected integer seeds as keys, got 'a'"),
        (lambda: agg.aggregate({0: 1.0}, target=float("inf")), "target: expected a finite number, got inf"),
        (lambda: agg.probability_of_improvement([], [1.0]), "scores_x: expected the scores of at least one run"),
        (lambda: agg.probability_of_improvement([1.0], []), "scores_y: expected the scores of at least one run"),
        (lambda: agg.iqm_band({}), "curves: expected at least one seed's learning curve, got none"),
        (lambda: agg.performance_profile({}), "scores_by_method: expected at least one method, got none"),
    ],
)
def test_refuses_what_cannot_be_aggregated_with_one_line(call, message):
    with pytest.raises(RLCoreError) as raised:
        call()
    assert isinstance(raised.value, agg.AggregateError)
    assert str(raised.value).startswith(message) and "\n" not in str(raised.value)


def test_probability_of_improvement_of_clearly_better_runs():
    better, worse = [450.0, 470.0, 490.0, 500.0, 480.0], [100.0, 150.0, 120.0, 200.0, 90.0]
    result = agg.probability_of_improvement(better, worse)
    assert result["probability_of_improvement"] == pytest.approx(1.0, **APPROX)
    assert result["probability_of_improvement_ci95"][0] > 0.9
    assert (result["num_runs_x"], result["num_runs_y"]) == (5, 5)


def test_probability_of_improvement_of_identical_runs_is_one_half():
    result = agg.probability_of_improvement(by_seed(FIVE), FIVE)
    assert result["probability_of_improvement"] == 0.5  # rliable's rule for equal score arrays
    low, high = result["probability_of_improvement_ci95"]
    assert low < 0.5 < high


def test_probability_of_improvement_matches_rliable_with_unequal_run_counts():
    x, y = np.array([5.0, 6.0, 7.0, 8.0, 9.0]), [1.0, 2.0, 3.0, 4.5, 6.5, 7.5]
    result = agg.probability_of_improvement(x, y)
    assert result["probability_of_improvement"] == pytest.approx(25 / 30, **APPROX)  # 25 of 30 pairs have x > y
    np.testing.assert_allclose(result["probability_of_improvement_ci95"], [0.5333333333333333, 1.0], **TIGHT)


def test_iqm_band_matches_rliables_sample_efficiency_curve():
    curves = {
        seed: ([0, 1000, 2000], values)
        for seed, values in enumerate(
            [[0.0, 10.0, 50.0], [0.0, 20.0, 80.0], [0.0, 30.0, 60.0], [0.0, 40.0, 90.0], [0.0, 5.0, 100.0]]
        )
    }
    band = agg.iqm_band(curves)
    assert band["steps"] == [0, 1000, 2000] and band["seeds"] == [0, 1, 2, 3, 4]
    np.testing.assert_allclose(band["iqm"], [0.0, 20.0, (60.0 + 80.0 + 90.0) / 3], **TIGHT)
    for step in range(3):
        column = np.array([values[step] for _, values in curves.values()])[:, None]
        assert band["iqm"][step] == pytest.approx(float(metrics.aggregate_iqm(column)), **APPROX)
    np.testing.assert_allclose(band["low"], [0.0, 6.666666666666667, 53.333333333333336], **TIGHT)
    np.testing.assert_allclose(band["high"], [0.0, 33.41666666666622, 96.66666666666667], **TIGHT)


def test_iqm_band_ends_where_the_shortest_seed_ends():
    band = agg.iqm_band({0: ([0, 10, 20], [1.0, 2.0, 3.0]), 1: ([0, 10], [1.0, 4.0])})
    assert band["steps"] == [0, 10]
    assert band["iqm"] == pytest.approx([1.0, 3.0], **APPROX)  # two runs: nothing is trimmed


def test_performance_profile_matches_rliable():
    thresholds, profiles, intervals = agg.performance_profile(
        {"m": [1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0]}, [0.0, 2.5, 5.0, 7.5]
    )
    np.testing.assert_allclose(thresholds, [0.0, 2.5, 5.0, 7.5])
    np.testing.assert_allclose(profiles["m"], [1.0, 0.75, 0.375, 0.125], **TIGHT)
    np.testing.assert_allclose(intervals["m"], [[1.0, 0.375, 0.125, 0.0], [1.0, 1.0, 0.75, 0.375]], **TIGHT)


def test_both_seed_figures_are_written_as_png(tmp_path):
    curves = {seed: ([0, 500, 1000, 1500], [10.0 + seed, 60.0 - seed, 150.0 + 5 * seed, 200.0]) for seed in range(4)}
    band = plot_seed_curves(curves, tmp_path / "seeds.png", title="seeds")
    assert band["seeds"] == [0, 1, 2, 3]
    plot_performance_profile({"ppo": FIVE, "baseline": [300.0, 420.0, 150.0, 500.0]}, tmp_path / "profile.png")
    for name in ("seeds.png", "profile.png"):
        data = (tmp_path / name).read_bytes()
        assert data.startswith(b"\x89PNG\r\n\x1a\n") and len(data) > 5000, name
