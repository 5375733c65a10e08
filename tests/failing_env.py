"""``failing_env:Failing-v0``: an env whose first step raises (for retry tests)."""

import gymnasium as gym
import numpy as np
from gymnasium import spaces


class FailingEnv(gym.Env):
    observation_space = spaces.Box(-1.0, 1.0, (2,), np.float32)
    action_space = spaces.Discrete(2)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return np.zeros(2, np.float32), {}

    def step(self, action):
        raise RuntimeError("failing_env: the simulator crashed on its first step")


if "Failing-v0" not in gym.registry:
    gym.register("Failing-v0", entry_point=FailingEnv, max_episode_steps=10)
