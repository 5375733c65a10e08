"""Actions between the policy's convention and the env's: indices from 0 (Discrete) or flat float vectors (Box).

A Box action of any shape is a flat vector of ``prod(shape)`` values for policies, buffers and datasets; only
the env gets it reshaped (a (2, 3) Box: the policy's 6 values, in C order).

Policies and buffers keep the policy's convention; :func:`to_env_actions` is applied only when a step is
sent to the env. :func:`random_actions` is the one place uniformly random actions are drawn (off-policy
warm-up, random and epsilon-noise collection).
"""

from __future__ import annotations

import numpy as np
import torch
from gymnasium import spaces


def to_env_actions(actions: torch.Tensor | np.ndarray, action_space: spaces.Space) -> np.ndarray:
    """Policy outputs (B,) or (B, action_dim), CPU tensor or array -> what the vector env accepts
    (offset by the space's ``start``, clipped to the bounds, reshaped)."""
    values = np.asarray(actions)
    if isinstance(action_space, spaces.Discrete):
        return values.astype(np.int64) + int(action_space.start)
    assert isinstance(action_space, spaces.Box)
    values = values.reshape((-1, *action_space.shape))
    return np.clip(values, action_space.low, action_space.high).astype(action_space.dtype)


def random_actions(action_space: spaces.Space, count: int, rng: np.random.Generator) -> np.ndarray:
    """``count`` uniform actions in the policy's convention: (count,) int64 indices from 0 (Discrete) or
    (count, action_dim) float32 values within the bounds (Box, flat)."""
    if isinstance(action_space, spaces.Discrete):
        return rng.integers(0, int(action_space.n), size=count)
    assert isinstance(action_space, spaces.Box)
    low, high = action_space.low.reshape(-1), action_space.high.reshape(-1)
    return rng.uniform(low, high, size=(count, low.size)).astype(np.float32)
