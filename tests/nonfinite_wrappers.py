"""Gymnasium wrappers for tests: envs that hand back non-finite values (a diverging simulator, a buggy wrapper), and
one whose rewards are finite but too large for float32 losses (what makes a run diverge without a NaN from the env)."""

import gymnasium as gym
import numpy as np


class NaNReward(gym.RewardWrapper):
    """Every reward is NaN."""

    def reward(self, reward: float) -> float:
        return float("nan")


class InfReward(gym.RewardWrapper):
    """Every reward is +inf."""

    def reward(self, reward: float) -> float:
        return float("inf")


class NaNObservation(gym.ObservationWrapper):
    """Every observation (from reset and step) is NaN."""

    def observation(self, observation: np.ndarray) -> np.ndarray:
        return np.full_like(observation, np.nan)


class NaNObservationAfter(gym.Wrapper):
    """Observations turn NaN from the episode's ``steps``-th step on (reset observations stay finite)."""

    def __init__(self, env: gym.Env, steps: int = 3) -> None:
        super().__init__(env)
        self.after = steps
        self.count = 0

    def reset(self, **kwargs):  # type: ignore[no-untyped-def]
        self.count = 0
        return self.env.reset(**kwargs)

    def step(self, action):  # type: ignore[no-untyped-def]
        obs, reward, terminated, truncated, info = self.env.step(action)
        self.count += 1
        if self.count >= self.after:
            obs = np.full_like(obs, np.nan)
        return obs, reward, terminated, truncated, info


class HugeReward(gym.RewardWrapper):
    """Rewards of ``scale`` (finite): float32 value losses overflow (1e20 squared), float64 returns do not."""

    def __init__(self, env: gym.Env, scale: float = 1e20) -> None:
        super().__init__(env)
        self.scale = scale

    def reward(self, reward: float) -> float:
        return self.scale
