"""Test helpers for evaluation (importable as ``recording_env`` from the tests folder):

- ``recording_env.RecordResets``: a wrapper (for ``env.wrappers``) that records the seed and first observation of
  every seeded reset, in call order (sub-env 0, 1, ... of each vector reset);
- ``recording_env:NeverEnding-v0``: an env registered without a time limit whose episodes never end (reward 1
  per step).
"""

from __future__ import annotations

from typing import Any, ClassVar

import gymnasium as gym
import numpy as np
from gymnasium import spaces


class RecordResets(gym.Wrapper):
    seeds: ClassVar[list[int]] = []
    observations: ClassVar[list[np.ndarray]] = []

    @classmethod
    def clear(cls) -> None:
        cls.seeds.clear()
        cls.observations.clear()

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[Any, dict[str, Any]]:
        obs, info = self.env.reset(seed=seed, options=options)
        if seed is not None:
            RecordResets.seeds.append(int(seed))
            RecordResets.observations.append(np.array(obs, copy=True))
        return obs, info


class NeverEndingEnv(gym.Env):
    observation_space = spaces.Box(-1.0, 1.0, (2,), np.float32)
    action_space = spaces.Discrete(2)

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[Any, dict[str, Any]]:
        super().reset(seed=seed)
        return self.np_random.uniform(-1, 1, 2).astype(np.float32), {}

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        return self.np_random.uniform(-1, 1, 2).astype(np.float32), 1.0, False, False, {}


if "NeverEnding-v0" not in gym.registry:
    gym.register("NeverEnding-v0", entry_point=NeverEndingEnv, max_episode_steps=None)
