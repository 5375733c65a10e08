"""A gymnasium wrapper for tests: every reward becomes NaN (what a diverging simulator or a bad reward hands us)."""

import gymnasium as gym


class NaNReward(gym.RewardWrapper):
    def reward(self, reward: float) -> float:
        return float("nan")
