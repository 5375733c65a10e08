"""Env factory: every vectorization mode trains; the evaluator reports complete, seeded episodes."""

from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
from conftest import PROJECT

from rlcore.common.errors import ConfigError
from rlcore.common.files import read_json
from rlcore.envs.config import EnvConfig
from rlcore.envs.vector import make_vector_env
from rlcore.evaluation.evaluator import Evaluator
from rlcore.nets.policies import ActorCritic
from rlcore.params import load_params
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


def test_env_wrappers_from_params_wrap_every_sub_env_of_every_env_rlcore_builds():
    params = load_params(
        PROJECT / "params.yaml",
        ["env.wrappers=[{wrapper: gymnasium.wrappers.TimeLimit, kwargs: {max_episode_steps: 5}}]"],
    )
    result = Evaluator(params.env, episodes=4, seed=0).evaluate(
        ActorCritic(gym.spaces.Box(-np.inf, np.inf, (4,)), gym.spaces.Discrete(2), params.policy)
    )
    assert result.lengths == [5, 5, 5, 5]  # the wrapper's limit, not CartPole's 500 (nor a fall)


def test_an_unknown_wrapper_is_refused_in_one_line():
    with pytest.raises(ConfigError, match=r"env.wrappers.0.wrapper: .*has no 'TimeLimitt' \(did you mean 'TimeLimit'"):
        load_params(PROJECT / "params.yaml", ["env.wrappers=[{wrapper: gymnasium.wrappers.TimeLimitt}]"])


class RecordingSettings:
    """Per-episode settings that set CartPole's pole length, drawn at every reset."""

    def __init__(self) -> None:
        self.lengths: list[float] = []

    def apply(self, env: gym.Env, rng: np.random.Generator) -> None:
        env.length = float(rng.uniform(0.2, 2.0))
        self.lengths.append(env.length)


def test_episode_settings_hook_applies_before_every_reset_of_every_sub_env():
    settings = RecordingSettings()
    env = make_vector_env(EnvConfig(id="CartPole-v1", kwargs={"max_episode_steps": 3}), 2, episode_settings=settings)
    env.reset(seed=0)
    for _ in range(4):  # three steps end every episode, the fourth resets both envs
        env.step(np.zeros(2, dtype=np.int64))
    assert len(settings.lengths) == 4  # 2 initial resets + 2 autoresets
    lengths = [sub_env.unwrapped.length for sub_env in env.envs]
    assert lengths == settings.lengths[2:]
    again = RecordingSettings()
    make_vector_env(EnvConfig(id="CartPole-v1"), 2, episode_settings=again).reset(seed=0)
    assert again.lengths == settings.lengths[:2]  # drawn from the sub-env's seed: reproducible
