"""Env factory: every vectorization mode trains; the evaluator reports complete, seeded episodes."""

from pathlib import Path

import pytest
from conftest import PROJECT

from rlcore.config import EnvConfig
from rlcore.envs import make_vector_env
from rlcore.evaluation import Evaluator
from rlcore.io import read_json
from rlcore.params import load_params
from rlcore.policies import ActorCritic
from rlcore.stages import train_stage


@pytest.mark.parametrize("mode", ["vector_entry_point", "sync", "async"])
def test_training_runs_on_every_vectorization_mode(tmp_path: Path, mode: str):
    params = load_params(
        PROJECT / "params.yaml",
        [
            f"env.vectorization={mode}",
            "env.num_envs=4",
            "train.max_steps=1024",
            "train.eval_every=512",
            "train.eval_episodes=2",
            "train.progress_bar=off",
        ],
    )
    train_stage(params, tmp_path)
    summary = read_json(tmp_path / "runs" / params.name / "train_summary.json")
    assert summary["env_steps"] == 1024 and len(summary["evaluations"]) == 2


def test_env_kwargs_reach_the_env():
    env = make_vector_env(
        EnvConfig(id="CartPole-v1", kwargs={"max_episode_steps": 7}, vectorization="vector_entry_point"), 2
    )
    env.reset(seed=0)
    for _ in range(6):
        _, _, _, truncated, _ = env.step(env.action_space.sample() * 0)
    _, _, terminated, truncated, _ = env.step(env.action_space.sample() * 0)
    assert truncated.all() and not terminated.any()  # cut by the 7-step limit, not by the pole falling


def test_evaluator_reports_every_episode_with_the_same_seeds_each_call():
    params = load_params(PROJECT / "params.yaml", ["env.id=Pendulum-v1"])
    evaluator = Evaluator(EnvConfig(id="Pendulum-v1"), episodes=5, seed=3, deterministic=False, max_parallel_envs=2)
    env = make_vector_env(EnvConfig(id="Pendulum-v1"), 1)
    policy = ActorCritic(env.single_observation_space, env.single_action_space, params.policy)
    first, second = evaluator.evaluate(policy), evaluator.evaluate(policy)
    assert first.episodes == 5 and first.lengths == [200] * 5  # Pendulum's time limit: complete episodes
    assert first.returns == second.returns  # seeded episodes and sampling: comparable across calls
    assert first.min_return <= first.mean_return <= first.max_return
