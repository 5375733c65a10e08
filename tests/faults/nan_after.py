"""A gymnasium wrapper for tests: rewards turn NaN once all its instances in the process took ``steps`` steps.

A run with it trains normally, writes its first checkpoints, then fails (diverges, or is stopped for the
non-finite reward): a replacement that fails after it has something on disk.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym


class NaNRewardAfter(gym.Wrapper):
    taken = 0
    """Steps of every instance in this process (training and evaluation envs alike)."""

    def __init__(self, env: gym.Env, steps: int = 1500) -> None:
        super().__init__(env)
        self.steps = steps

    def step(self, action: Any) -> Any:
        obs, reward, terminated, truncated, info = self.env.step(action)
        NaNRewardAfter.taken += 1
        return obs, float("nan") if NaNRewardAfter.taken > self.steps else reward, terminated, truncated, info
