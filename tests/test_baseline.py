"""``select.baseline_run`` across seeds (issue 28): P(this run > the baseline) over the seeds' test scores, read from
the baseline's ``metrics.json``; one seed against one seed keeps the learning curves alone; bad baseline input is
refused in one line naming the file."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
from conftest import outputs

from rlcore.common.errors import RLCoreError
from rlcore.stages.baseline import RunScores, baseline_inputs, improvement, improvement_words, read_baseline
from tests.cli_support import assert_refused, run_in_process
from tests.conftest import PROJECT

CURVE = ("dvclive", "plots", "metrics", "eval", "mean_return.tsv")


def write_run(root: Path, name: str, scores: dict[int, Any] | float) -> Path:
    """A trained and selected run without its checkpoints: ``runs/<name>/`` (one run, or ``seed_<k>/`` per seed of
    ``scores``) with its learning curves, and ``reports/<name>/metrics.json`` with its test scores."""
    if isinstance(scores, dict):
        for seed in scores:
            _curve(root / "runs" / name / f"seed_{seed}")
        best = min(scores)
        record: dict[str, Any] = {
            "mean_return": scores[best],
            "checkpoint": f"runs/{name}/seed_{best}/checkpoints/step_0000000512.pt",
            "train_seed": best,
            "per_seed": {str(seed): {"test": {"mean_return": score, "episodes": 4}} for seed, score in scores.items()},
        }
    else:
        _curve(root / "runs" / name)
        record = {"mean_return": scores, "checkpoint": f"runs/{name}/checkpoints/step_0000000512.pt"}
    metrics = outputs(root, name).metrics
    metrics.parent.mkdir(parents=True, exist_ok=True)
    metrics.write_text(json.dumps(record))
    return metrics


def _curve(run_dir: Path) -> None:
    tsv = run_dir.joinpath(*CURVE)
    tsv.parent.mkdir(parents=True, exist_ok=True)
    tsv.write_text("step\tmean_return\n512\t20.0\n1024\t40.0\n")


def this_run(scores: dict[int, float]) -> RunScores:
    several = len(scores) > 1
    return RunScores("mine", scores, several, Path("curve.tsv"), min(scores) if several else None)


def p_by_hand(x: list[float], y: list[float]) -> float:
    """P(X > Y) by counting: pairs where X's run wins, plus half the ties, over all pairs."""
    wins = sum(1.0 if a > b else 0.5 if a == b else 0.0 for a in x for b in y)
    return wins / (len(x) * len(y))


@pytest.mark.parametrize(
    ("x", "y", "expected"),
    [
        ([3.0, 1.0, 2.0], [1.0, 0.0], 5.5 / 6),  # 3>1, 3>0, 1=1 (half), 1>0, 2>1, 2>0
        ([500.0, 480.0], [500.0, 480.0], 0.5),  # the same scores
        ([10.0, 11.0, 12.0, 13.0], [1.0, 2.0], 1.0),
        ([1.0, 2.0], [5.0, 6.0, 7.0], 0.0),
        ([2.0, 2.0, 4.0], [2.0, 3.0], 3.0 / 6),  # 2=2 (half) twice, 4>2, 4>3
    ],
    ids=["mixed-with-a-tie", "identical", "all-better", "all-worse", "ties"],
)
def test_probability_of_improvement_over_a_baseline_with_seeds_is_the_pairwise_count(
    tmp_path: Path, x: list[float], y: list[float], expected: float
) -> None:
    assert p_by_hand(x, y) == pytest.approx(expected, rel=0, abs=1e-15)
    source = write_run(tmp_path, "base", dict(enumerate(y)))
    baseline = read_baseline(tmp_path, "base", needs_scores=True)
    assert baseline.scores == dict(enumerate(y)) and baseline.source == source.relative_to(tmp_path)
    result = improvement(this_run(dict(enumerate(x))), baseline)
    assert result is not None
    assert result["probability_of_improvement"] == pytest.approx(expected, rel=0, abs=1e-12)
    assert (result["num_runs_x"], result["num_runs_y"]) == (len(x), len(y))
    assert (result["seeds_x"], result["seeds_y"]) == (list(range(len(x))), list(range(len(y))))
    low, high = result["probability_of_improvement_ci95"]
    ends = ("probability_of_improvement_ci95_low", "probability_of_improvement_ci95_high")
    assert [result[key] for key in ends] == [low, high]
    assert 0.0 <= low <= expected <= high <= 1.0
    if expected in (0.0, 1.0):  # every resample keeps every pair on the same side
        assert low == high == expected
    json.dumps(result, allow_nan=False)  # metrics.json-safe


def test_the_interval_is_the_bootstrap_of_the_pairwise_count(tmp_path: Path) -> None:
    """The interval resamples each side's runs: recomputed here with the same draws (rliable's order: X's indices,
    then Y's, per resample) and the by-hand count."""
    import numpy as np

    from rlcore.evaluation.aggregate import BOOTSTRAP_REPS, BOOTSTRAP_SEED

    x, y = [3.0, 1.0, 2.0, 7.0], [1.0, 0.0, 2.5]
    write_run(tmp_path, "base", dict(enumerate(y)))
    result = improvement(this_run(dict(enumerate(x))), read_baseline(tmp_path, "base", needs_scores=True))
    assert result is not None
    state = np.random.RandomState(BOOTSTRAP_SEED)
    resampled = []
    for _ in range(BOOTSTRAP_REPS):
        rows_x = state.choice(len(x), (len(x), 1), replace=True)[:, 0]
        rows_y = state.choice(len(y), (len(y), 1), replace=True)[:, 0]
        resampled.append(p_by_hand([x[i] for i in rows_x], [y[i] for i in rows_y]))
    expected = np.percentile(resampled, [2.5, 97.5])
    assert result["probability_of_improvement_ci95"] == pytest.approx(list(expected), rel=0, abs=1e-12)


def test_one_seed_against_one_seed_draws_the_curves_alone(tmp_path: Path) -> None:
    """Today's behaviour: no P(X > Y) (it would be 0, 1/2 or 1), and the baseline's scores are not needed."""
    _curve(tmp_path / "runs" / "base")  # trained, never selected
    baseline = read_baseline(tmp_path, "base", needs_scores=False)
    assert baseline.scores == {} and not baseline.several and baseline.label == "base"
    assert baseline.curve == tmp_path.joinpath("runs", "base", *CURVE)
    assert improvement(this_run({0: 400.0}), baseline) is None


def test_seeds_against_a_one_seed_baseline_count_it_as_one_run(tmp_path: Path) -> None:
    write_run(tmp_path, "base", 300.0)
    baseline = read_baseline(tmp_path, "base", needs_scores=True)
    assert baseline.scores == {0: 300.0} and not baseline.several
    run = this_run({0: 500.0, 1: 200.0, 2: 300.0})
    result = improvement(run, baseline)
    assert result is not None and result["probability_of_improvement"] == pytest.approx(1.5 / 3, rel=0, abs=1e-12)
    assert (result["num_runs_x"], result["num_runs_y"], result["seeds_y"]) == (3, 1, None)
    words = " ".join(improvement_words(run, baseline, result))
    assert "over 3 runs of `mine` and one run (one seed) of `base`" in words
    assert "`base` has one seed: the interval reflects only `mine`'s seeds" in words


def test_one_seed_against_a_baseline_with_seeds_counts_this_run_as_one(tmp_path: Path) -> None:
    write_run(tmp_path, "base", {3: 100.0, 5: 300.0})
    baseline = read_baseline(tmp_path, "base", needs_scores=False)  # a baseline with seeds is always scored
    assert baseline.several and baseline.label == "base (seed 3)"
    assert baseline.curve == tmp_path.joinpath("runs", "base", "seed_3", *CURVE)
    run = this_run({0: 200.0})
    result = improvement(run, baseline)
    assert result is not None and result["probability_of_improvement"] == 0.5
    assert (result["num_runs_x"], result["num_runs_y"], result["seeds_x"], result["seeds_y"]) == (1, 2, None, [3, 5])
    assert "`mine` has one seed" in " ".join(improvement_words(run, baseline, result))


def test_the_flow_cache_key_reads_the_baseline_s_curves_and_scores(tmp_path: Path) -> None:
    metrics = write_run(tmp_path, "base", {0: 1.0, 1: 2.0})
    write_run(tmp_path, "other", 5.0)  # another run's scores: not an input
    assert baseline_inputs(tmp_path, "base") == [
        tmp_path.joinpath("runs", "base", "seed_0", *CURVE),
        tmp_path.joinpath("runs", "base", "seed_1", *CURVE),
        metrics,
    ]


# --- bad baseline input: one line naming the file -----------------------------------------------------------------


def _metrics(root: Path) -> Path:
    return outputs(root, "base").metrics


def _edit(root: Path, change: Any) -> None:
    _edit_file(_metrics(root), change)


def _edit_file(path: Path, change: Any) -> None:
    record = json.loads(path.read_text())
    change(record)
    path.write_text(json.dumps(record))


def _set_test_score(value: Any) -> Any:
    return lambda record: record["per_seed"]["1"]["test"].__setitem__("mean_return", value)


BAD_BASELINES: dict[str, tuple[Any, tuple[str, ...]]] = {
    "not selected": (
        lambda root: _metrics(root).unlink(),
        ("reports/base/metrics.json does not score", "runs/base/", "rlcore select"),
    ),
    "metrics.json not JSON": (
        lambda root: _metrics(root).write_text("{not json"),
        ("reports/base/metrics.json does not score", "runs/base/"),
    ),
    "a seed missing from the scores": (
        lambda root: _edit(root, lambda record: record["per_seed"].pop("1")),
        ("reports/base/metrics.json", "scores seeds [0]", "holds seeds [0, 1]"),
    ),
    "a seed's folder gone": (
        lambda root: _curve(root / "runs" / "base" / "seed_7"),
        ("reports/base/metrics.json", "scores seeds [0, 1]", "holds seeds [0, 1, 7]"),
    ),
    "scores of one run": (
        lambda root: _edit(root, lambda record: record.pop("per_seed")),
        ("reports/base/metrics.json", "scores one run", "seeds [0, 1]"),
    ),
    "NaN test score": (
        lambda root: _edit(root, _set_test_score(math.nan)),
        ("reports/base/metrics.json", "per_seed.1.test.mean_return", "finite number", "NaN"),
    ),
    "test score a string": (
        lambda root: _edit(root, _set_test_score("500")),
        ("per_seed.1.test.mean_return", "finite number", '"500"'),
    ),
    "test score missing": (
        lambda root: _edit(root, lambda record: record["per_seed"]["1"].pop("test")),
        ("per_seed.1.test.mean_return", "finite number", "null"),
    ),
    "seed key not a number": (
        lambda root: _edit(root, lambda record: record["per_seed"].__setitem__("one", {})),
        ("reports/base/metrics.json", "per_seed", "seeds as keys", '"one"'),
    ),
    "scores another run": (
        lambda root: _edit(root, lambda record: record.update(checkpoint="runs/other/checkpoints/step_0000000512.pt")),
        ("reports/base/metrics.json does not score a checkpoint of runs/base/", "rlcore select"),
    ),
    "not trained": (
        lambda root: __import__("shutil").rmtree(root / "runs" / "base"),
        ("select.baseline_run:", "runs/base", "no learning curve"),
    ),
}


@pytest.mark.parametrize("label", list(BAD_BASELINES))
def test_a_bad_baseline_with_seeds_is_refused_in_one_line(label: str, tmp_path: Path) -> None:
    write_run(tmp_path, "base", {0: 1.0, 1: 2.0})
    spoil, fragments = BAD_BASELINES[label]
    spoil(tmp_path)
    with pytest.raises(RLCoreError) as refused:
        read_baseline(tmp_path, "base", needs_scores=True)
    message = str(refused.value)
    assert "\n" not in message and message.startswith("select.baseline_run:"), message
    for fragment in fragments:
        assert fragment in message, message


def test_a_one_seed_baseline_with_a_bad_score_is_refused_when_this_run_has_seeds(tmp_path: Path) -> None:
    write_run(tmp_path, "base", math.inf)
    read_baseline(tmp_path, "base", needs_scores=False)  # one seed against one: the score is not read
    infinite = r"reports/base/metrics.json: mean_return: expected a finite number, got Infinity"
    with pytest.raises(RLCoreError, match=infinite):
        read_baseline(tmp_path, "base", needs_scores=True)
    _edit_file(outputs(tmp_path, "base").metrics, lambda record: record.update(mean_return=1.0, per_seed={}))
    one_run = r"reports/base/metrics.json: scores seeds of runs/base/, which holds one run"
    with pytest.raises(RLCoreError, match=one_run):
        read_baseline(tmp_path, "base", needs_scores=True)


def test_select_refuses_this_run_as_its_own_baseline_and_writes_nothing(tmp_path: Path) -> None:
    (tmp_path / "params.yaml").write_text((PROJECT / "params.yaml").read_text())
    outcome = run_in_process(["select", "--set", "select.baseline_run=ppo-cartpole"], tmp_path)
    assert_refused(outcome, "select.baseline_run:", "'ppo-cartpole' is this run")
    assert sorted(path.name for path in tmp_path.iterdir()) == ["params.yaml"]
