"""DQN and SAC (continuous and discrete) learn with the shipped presets, within the stated budgets."""

from pathlib import Path

import pytest
from conftest import PROJECT, outputs

from rlcore.common.files import read_json
from rlcore.params import load_params
from rlcore.stages import evaluate_stage, select_stage, train_stage


def _selected_score(root: Path, preset: str, overrides: list[str]) -> dict:
    # No wall-clock cap: the presets' 600 s ends training early under load (the Taxi preset at 100k env steps, load 10).
    params = load_params(
        PROJECT / "configs" / preset, [*overrides, "train.progress_bar=off", "train.max_wall_seconds=null"]
    )
    train_stage(params, root)
    evaluate_stage(params, root)
    select_stage(params, root)
    return read_json(outputs(root).metrics)


@pytest.mark.slow
def test_dqn_reaches_475_on_cartpole_within_50k_steps_seed_0(tmp_path: Path):
    # configs/dqn-cartpole.yaml, seed 0, budget 50k env steps; the evaluate stage's 10 held-out episodes count.
    metrics = _selected_score(tmp_path, "dqn-cartpole.yaml", ["seed=0", "train.max_steps=50000"])
    assert metrics["env_steps"] <= 50_000
    assert metrics["mean_return"] >= 475, metrics


@pytest.mark.slow
def test_sac_reaches_minus_200_on_pendulum_within_5k_steps_seed_0(tmp_path: Path):
    # Measured (2026-11-30, seed 0, the preset retuned that day): periodic evaluations -1379, -286, -283, -194, -192 at
    # 1k-5k env steps (then -191 at 6k, the old budget, whose run also selected the 5k checkpoint); the 5000 checkpoint
    # is selected, test mean -149.4 on 100 episodes. A tenth of the budget is the random warm-up (learning_starts 500).
    # Longer: benchmarks/sac_pendulum.py.
    metrics = _selected_score(tmp_path, "sac-pendulum.yaml", ["seed=0", "train.max_steps=5000"])
    assert metrics["env_steps"] <= 5_000
    assert metrics["mean_return"] >= -200, metrics


@pytest.mark.slow
def test_discrete_sac_reaches_150_on_cartpole_within_10k_steps_seed_1(tmp_path: Path):
    # Measured (2026-11-29, seed 1): periodic evaluations 121, 219, 186, 215, 223 at 2k-10k env steps; the 10,240
    # checkpoint is selected, test mean 226 on 100 episodes (46 CPU s of training). A tenth of the budget (1,024 env
    # steps: the random warm-up, learning_starts 1000) tests at 9.3. Reaching 400 (seed 1: 34,816 env steps, 128 CPU
    # s) is benchmarks/sac_discrete_cartpole.py's.
    metrics = _selected_score(
        tmp_path, "sac-discrete-cartpole.yaml", ["seed=1", "train.max_steps=10240", "train.target_return=450"]
    )
    assert metrics["env_steps"] <= 10_240
    assert metrics["mean_return"] >= 150, metrics


@pytest.mark.parametrize(
    "preset",
    [
        "dqn-cartpole.yaml",
        pytest.param("sac-pendulum.yaml", marks=pytest.mark.slow),
        pytest.param("sac-discrete-cartpole.yaml", marks=pytest.mark.slow),
    ],
)
def test_off_policy_runs_are_deterministic(tmp_path: Path, preset: str):
    # Two periodic evaluations, hundreds of updates past the warm-up: every source of randomness (replay sampling,
    # exploration, the target updates, the evaluation envs) has run by then.
    overrides = [
        "train.max_steps=800",
        "train.eval_every=400",
        "train.eval_episodes=2",
        "algo.learning_starts=200",
        "train.progress_bar=off",
    ]
    params = load_params(PROJECT / "configs" / preset, overrides)
    curves = []
    for run in ("a", "b"):
        train_stage(params, tmp_path / run)
        summary = read_json(tmp_path / run / "runs" / params.name / "train_summary.json")
        curves.append([(e["env_steps"], e["mean_return"]) for e in summary["evaluations"]])
    assert curves[0] == curves[1]
