"""Evaluation that is really held out (issue 11): every episode its own seed, disjoint seed ranges for training,
periodic, validation and test episodes, capped episodes, robust scores with intervals, and the test score of the
selected model in reports/metrics.json."""

from __future__ import annotations

from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
from cli_support import run_in_process
from conftest import PROJECT, QUICK, one_line_error, outputs, sets
from recording_env import RecordResets

from rlcore.common import seeds
from rlcore.common.errors import ConfigError
from rlcore.common.files import read_json
from rlcore.common.numbers import score_with_interval
from rlcore.envs.config import EnvConfig
from rlcore.evaluation.evaluator import EvalResult, Evaluator, bootstrap_interval, interquartile_mean
from rlcore.nets.policies import ActorCritic
from rlcore.params import load_params
from rlcore.stages import evaluate_stage, select_stage, train_stage

TESTS = Path(__file__).resolve().parent
RECORD = "env.wrappers=[{wrapper: recording_env.RecordResets}]"
NEVER_ENDING = "NeverEnding-v0"  # registered by importing recording_env (the command: recording_env:NeverEnding-v0)


# --- scores -------------------------------------------------------------------------------------------------


def test_interquartile_mean_is_the_mean_of_the_middle_half_of_the_sorted_returns():
    # 8 returns, sorted 1 2 3 5 7 8 10 100: 2 cut from each end, mean of 3 5 7 8.
    assert interquartile_mean([10, 1, 7, 3, 100, 5, 2, 8]) == pytest.approx(5.75)
    # 10 returns: floor(10 / 4) = 2 cut from each end (rliable / scipy.stats.trim_mean(x, 0.25)), mean of 2..7.
    assert interquartile_mean([1000, 0, 1, 2, 3, 4, 5, 6, 7, 8]) == pytest.approx(4.5)
    # Fewer than 4: nothing to cut.
    assert interquartile_mean([1, 2, 9]) == pytest.approx(4.0)
    assert EvalResult.from_episodes([10, 1, 7, 3, 100, 5, 2, 8], [1] * 8).iqm_return == pytest.approx(5.75)


def test_bootstrap_interval_is_deterministic_contains_the_mean_and_narrows_with_more_episodes():
    rng = np.random.default_rng(7)
    few, many = rng.normal(100, 30, 20), rng.normal(100, 30, 500)
    assert bootstrap_interval(few) == bootstrap_interval(few.copy())  # seeded: the same returns, the same interval
    for returns in (few, many):
        low, high = bootstrap_interval(returns)
        assert low < returns.mean() < high
    assert bootstrap_interval(many)[1] - bootstrap_interval(many)[0] < 0.5 * (
        bootstrap_interval(few)[1] - bootstrap_interval(few)[0]
    )
    # A 95% interval of the mean of 500 draws of N(100, 30): about ±1.96 · 30 / sqrt(500) = ±2.6.
    low, high = bootstrap_interval(many)
    assert 4.0 < high - low < 6.5
    assert bootstrap_interval([500.0] * 10) == (500.0, 500.0)
    result = EvalResult.from_episodes(list(few), [1] * 20)
    assert (result.ci95_low, result.ci95_high) == bootstrap_interval(few)


# --- seeds --------------------------------------------------------------------------------------------------


def _disjoint(*ranges: range) -> bool:
    spans = sorted((r.start, r.stop) for r in ranges)
    return all(stop <= next_start for (_, stop), (next_start, _) in zip(spans, spans[1:], strict=False))


def test_seed_ranges_are_pairwise_disjoint_even_at_the_params_limits():
    largest = seeds.SEED_LIMIT - 1
    for seed, offset in [(0, 0), (largest, largest), (12345, 999)]:
        training = seeds.training_seeds(seed, seeds.MAX_TRAIN_STEPS, num_envs=1024, overshoot=2**20)
        periodic = seeds.periodic_seeds(seed, seeds.PERIODIC_EPISODES_PER_SEED)
        validation = seeds.validation_seeds(offset, seeds.MAX_EVAL_EPISODES)
        test = seeds.test_seeds(offset, seeds.MAX_EVAL_EPISODES)
        assert _disjoint(training, periodic, validation, test), (seed, offset)
        assert test.stop <= 4 * seeds.BLOCK <= 2**53  # exact as int64 and float64
    # Different runs, different periodic episodes.
    assert _disjoint(*(seeds.periodic_seeds(seed, seeds.PERIODIC_EPISODES_PER_SEED) for seed in (0, 1, 2, largest)))


def test_a_run_resets_its_envs_only_with_seeds_of_its_own_range_per_stage(tmp_path: Path):
    """Train (training + periodic), evaluate (validation) and select (test) on CartPole, recording every seeded
    reset: each stage's seeds are exactly its ranges, and the four sets are pairwise disjoint."""
    params = load_params(
        PROJECT / "params.yaml",
        [
            *QUICK,
            RECORD,
            "seed=3",
            "env.num_envs=4",
            "train.max_steps=1024",
            "train.eval_every=512",
            "eval.episodes=5",
            "eval.test_episodes=20",
            "train.progress_bar=off",
        ],
    )
    recorded = {}
    for stage in (train_stage, evaluate_stage, select_stage):
        RecordResets.clear()
        stage(params, tmp_path)
        recorded[stage.__name__] = set(RecordResets.seeds)
    training = set(range(3, 3 + 4))  # reset once, at env step 0: seed + i
    periodic = set(seeds.periodic_seeds(3, params.train.eval_episodes))
    validation = set(seeds.validation_seeds(params.eval.seed, 5))
    test = set(seeds.test_seeds(params.eval.seed, 20))
    assert recorded["train_stage"] == training | periodic
    assert recorded["evaluate_stage"] == validation
    assert recorded["select_stage"] == test
    # Whatever step a run of train.max_steps resumes at, its training envs stay below every evaluation seed.
    every_training_seed = seeds.training_seeds(3, params.train.max_steps, 4, overshoot=512)
    assert _disjoint(
        every_training_seed, range(min(periodic), max(periodic) + 1), range(min(validation), max(test) + 1)
    )
    assert not (periodic & validation or periodic & test or validation & test)
    selection = read_json(outputs(tmp_path).selection)
    assert selection["test"]["seeds"] == {"first": min(test), "count": 20}
    assert selection["validation"]["seeds"] == {"first": min(validation), "count": 5}


def test_a_seed_outside_its_range_is_refused_in_one_line(project: Path):
    result = run_in_process(["train", *sets([*QUICK, "seed=-1"])], project)
    one_line_error(result, "seed", "2**32", "-1")
    with pytest.raises(ConfigError, match=r"train.eval_episodes: must be <= 65536"):
        load_params(PROJECT / "params.yaml", ["train.eval_episodes=70000"])
    with pytest.raises(ConfigError, match=r"eval.seed: must be < 4294967296"):
        load_params(PROJECT / "params.yaml", [f"eval.seed={2**32}"])


# --- every episode its own seed ------------------------------------------------------------------------------


@pytest.mark.slow
def test_the_evaluate_stage_runs_100_distinct_episodes_on_pendulum(tmp_path: Path):
    """100 episodes at 32 side by side: every one starts from its own state (batches used to share seeds: 35)."""
    base = [
        "name=pendulum",
        "env.id=Pendulum-v1",
        "train.max_steps=1024",
        "train.eval_every=512",
        "train.eval_episodes=2",
        "train.target_return=null",
        "train.progress_bar=off",
    ]
    train_stage(load_params(PROJECT / "params.yaml", base), tmp_path)  # two checkpoints: a fixed policy each
    params = load_params(PROJECT / "params.yaml", [*base, RECORD, "eval.episodes=100", "eval.max_parallel_envs=32"])
    RecordResets.clear()
    evaluate_stage(params, tmp_path)
    # Sub-envs reset in order, batch after batch: the first 100 seeded resets start episodes 0..99 of the first
    # checkpoint's evaluation.
    initial = np.stack(RecordResets.observations[:100])
    assert len(np.unique(initial, axis=0)) == 100
    assert RecordResets.seeds[:100] == list(seeds.validation_seeds(params.eval.seed, 100))
    for candidate in read_json(outputs(tmp_path).evaluations)["candidates"]:
        assert candidate["episodes"] == 100
        assert len(set(candidate["returns"])) == 100  # a deterministic policy: distinct starts, distinct returns


# --- episode cap ---------------------------------------------------------------------------------------------


def test_an_env_without_time_limit_needs_eval_max_episode_steps(project: Path):
    assert gym.spec(NEVER_ENDING).max_episode_steps is None
    with pytest.raises(ConfigError, match=r"eval.max_episode_steps: NeverEnding-v0 has no time limit"):
        Evaluator(EnvConfig(id=NEVER_ENDING), episodes=2, seed=0)
    # Through the command: refused at load, in one line, before anything runs.
    result = run_in_process(["evaluate", "--set", f"env.id=recording_env:{NEVER_ENDING}"], project)
    one_line_error(result, "eval.max_episode_steps", "NeverEnding-v0", "no time limit")
    # env.kwargs.max_episode_steps is a time limit too.
    load_params(PROJECT / "params.yaml", [f"env.id={NEVER_ENDING}", "env.kwargs={max_episode_steps: 30}"])


def test_a_never_ending_episode_stops_at_the_cap_and_counts_as_truncated():
    policy = ActorCritic(
        gym.spaces.Box(-1.0, 1.0, (2,)), gym.spaces.Discrete(2), load_params(PROJECT / "params.yaml").policy
    )
    evaluator = Evaluator(EnvConfig(id=NEVER_ENDING), episodes=5, seed=0, max_parallel_envs=2, max_episode_steps=50)
    result = evaluator.evaluate(policy)
    assert result.lengths == [50] * 5 and result.returns == [50.0] * 5
    assert result.truncated == 5


def test_episodes_ended_by_the_env_are_not_truncated_and_the_cap_applies_below_the_time_limit():
    config = load_params(PROJECT / "params.yaml").policy
    policy = ActorCritic(gym.spaces.Box(-np.inf, np.inf, (4,)), gym.spaces.Discrete(2), config)
    fallen = Evaluator(EnvConfig(id="CartPole-v1"), episodes=6, seed=0).evaluate(policy)  # untrained: falls early
    assert max(fallen.lengths) < 500 and fallen.truncated == 0
    capped = Evaluator(EnvConfig(id="CartPole-v1"), episodes=6, seed=0, max_episode_steps=5).evaluate(policy)
    assert capped.lengths == [5] * 6 and capped.truncated == 6


# --- the reported score --------------------------------------------------------------------------------------

TEST_KEYS = {
    "mean_return",
    "iqm_return",
    "ci95_low",
    "ci95_high",
    "std_return",
    "median_return",
    "min_return",
    "max_return",
    "episodes",
    "truncated",
}
STEP_KEYS = {"step", "step_unit", "env_steps", "gradient_steps", "checkpoint"}
VALIDATION_KEYS = {"metric", "value", "episodes", "mean_return", "iqm_return", "ci95_low", "ci95_high"}


def test_select_reports_the_test_score_of_the_selected_model_beside_the_validation_score(project: Path):
    params = load_params(project / "params.yaml", [*QUICK, "eval.test_episodes=40", "train.progress_bar=off"])
    for stage in (train_stage, evaluate_stage, select_stage):
        stage(params, project)
    metrics = read_json(outputs(project).metrics)
    assert TEST_KEYS | STEP_KEYS | {"validation"} <= metrics.keys()
    assert metrics["validation"].keys() >= VALIDATION_KEYS
    assert metrics["episodes"] == 40 and metrics["validation"]["episodes"] == 3
    assert metrics["ci95_low"] <= metrics["mean_return"] <= metrics["ci95_high"]
    evaluations = read_json(outputs(project).evaluations)
    selected = next(c for c in evaluations["candidates"] if c["checkpoint"] == metrics["checkpoint"])
    assert (
        metrics["validation"]["value"]
        == selected["mean_return"]
        == max(c["mean_return"] for c in evaluations["candidates"])
    )
    selection = read_json(outputs(project).selection)
    assert selection["test"]["mean_return"] == metrics["mean_return"]
    assert selection["validation"]["mean_return"] == selected["mean_return"]
    report = (outputs(project).report).read_text()
    mean, low, high = score_with_interval(metrics["mean_return"], metrics["ci95_low"], metrics["ci95_high"])
    assert f"**Test score: {mean}**" in report and f"95% CI [{low}, {high}]" in report
    assert "over 40 test episodes" in report and "over 3 validation episodes" in report
    assert "selected on the validation episodes and is reported on test episodes" in report
