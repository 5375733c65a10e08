"""``multi_action_env:rlcore-tests/MultiTarget-v0``: a test env with MultiDiscrete or MultiBinary actions.

Every step shows a random target per sub-action (the observation is the targets' one-hots side by side, float32)
and pays 1.0 only if *every* sub-action equals its target, else 0. Episodes are 20 steps (truncated), so the
optimum is 20 per episode and needs every sub-action right; a uniformly random policy earns
``20 / prod(sizes)`` (sizes (3, 3, 2): 1/18 per step). Targets are drawn from the env's ``np_random`` (seeded
through ``reset(seed=...)``).

kwargs: ``action`` ``"multi_discrete"`` (``MultiDiscrete(sizes, start=start)``) or ``"multi_binary"``
(``MultiBinary(len(sizes))``, sizes all 2 then); ``sizes`` the choices per sub-action; ``start`` (MultiDiscrete
only) the first value of each sub-action, so the reward checks the offset the policy's actions get.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces

ENV_ID = "rlcore-tests/MultiTarget-v0"
EPISODE_STEPS = 20


class MultiTargetEnv(gym.Env):
    def __init__(
        self, action: str = "multi_discrete", sizes: tuple[int, ...] = (3, 3, 2), start: tuple[int, ...] | None = None
    ) -> None:
        self.sizes = np.asarray(sizes, dtype=np.int64)
        if action == "multi_discrete":
            self.action_space: spaces.Space = spaces.MultiDiscrete(self.sizes, start=start)
            self.start = self.action_space.start.astype(np.int64)
        elif action == "multi_binary":
            if start is not None or np.any(self.sizes != 2):
                raise ValueError("multi_binary: sizes must all be 2 and start null")
            self.action_space = spaces.MultiBinary(len(self.sizes))
            self.start = np.zeros(len(self.sizes), dtype=np.int64)
        else:
            raise ValueError(f"action: expected 'multi_discrete' or 'multi_binary', got {action!r}")
        self.observation_space = spaces.Box(0.0, 1.0, (int(self.sizes.sum()),), np.float32)
        self.offsets = np.concatenate([[0], np.cumsum(self.sizes)[:-1]])
        self.target = np.zeros(len(self.sizes), dtype=np.int64)

    def _observe(self) -> np.ndarray:
        self.target = self.np_random.integers(0, self.sizes)
        obs = np.zeros(self.observation_space.shape, dtype=np.float32)
        obs[self.offsets + self.target] = 1.0
        return obs

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[Any, dict[str, Any]]:
        super().reset(seed=seed)
        return self._observe(), {}

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        # What rlcore sends must be a valid action of the space, in its dtype (offsets and casts are rlcore's job).
        assert np.asarray(action).dtype == self.action_space.dtype and self.action_space.contains(action), action
        correct = np.asarray(action, dtype=np.int64) - self.start == self.target
        return self._observe(), float(correct.all()), False, False, {"correct": int(correct.sum())}


if ENV_ID not in gym.registry:
    gym.register(ENV_ID, entry_point=MultiTargetEnv, max_episode_steps=EPISODE_STEPS)
