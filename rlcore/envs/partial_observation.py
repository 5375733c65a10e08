"""Partial observability by declaration: keep some entries of a vector observation, hide the rest.

``env.wrappers: [{wrapper: rlcore.envs.partial_observation.KeepObservations, kwargs: {indices: [0, 2]}}]`` turns
CartPole-v1 (cart position, cart velocity, pole angle, pole angular velocity) into CartPole without velocities: a
policy must infer them from how positions change, i.e. remember (``policy.memory``;
``configs/ppo-lstm-cartpole-po.yaml``).
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces


class KeepObservations(gym.ObservationWrapper[np.ndarray, Any, np.ndarray]):
    """Observations (n,) of a flat ``Box`` reduced to the entries at ``indices`` (k,), in that order."""

    def __init__(self, env: gym.Env[np.ndarray, Any], indices: list[int]) -> None:
        super().__init__(env)
        space = env.observation_space
        if not isinstance(space, spaces.Box) or len(space.shape) != 1:
            raise ValueError(f"KeepObservations needs a flat Box observation space, got {space}")
        size = space.shape[0]
        if not indices or any(not 0 <= index < size for index in indices):
            raise ValueError(f"KeepObservations: indices must be a non-empty list in [0, {size}), got {indices}")
        self.indices = np.asarray(indices, dtype=np.int64)
        self.observation_space = spaces.Box(space.low[self.indices], space.high[self.indices], dtype=space.dtype)

    def observation(self, observation: np.ndarray) -> np.ndarray:
        return observation[self.indices]
