"""Actions between the policy's convention and the env's.

The policy's convention, per action space:

| space | one action | stored (rollouts, datasets) |
|---|---|---|
| ``Discrete(n, start)`` | an index from 0 | () int64 |
| ``MultiDiscrete(nvec, start)`` (1-D) | one index from 0 per sub-action | (k,) int64, k = len(nvec) |
| ``MultiBinary(n)`` (1-D) | n bits, 0 or 1 | (n,) int64 |
| ``Box`` of any shape | a flat vector of ``prod(shape)`` values, in C order | (prod(shape),) float32 |

Policies and buffers keep the policy's convention; :func:`to_env_actions` is applied only when a step is
sent to the env (offset by ``start``, clipped, reshaped, cast to the space's dtype). :func:`random_actions` is
the one place uniformly random actions are drawn (off-policy warm-up, random and epsilon-noise collection).
"""

from __future__ import annotations

import numpy as np
import torch
from gymnasium import spaces


def sub_action_sizes(action_space: spaces.Space) -> tuple[int, ...] | None:
    """The number of choices of each sub-action of a MultiDiscrete (``nvec``) or MultiBinary (2 each) space;
    None for any other space."""
    if isinstance(action_space, spaces.MultiDiscrete):
        return tuple(int(n) for n in action_space.nvec.reshape(-1))
    if isinstance(action_space, spaces.MultiBinary):
        return (2,) * int(np.prod(action_space.shape))
    return None


def action_layout(action_space: spaces.Space) -> tuple[tuple[int, ...], torch.dtype]:
    """(shape, dtype) of one stored action, without the batch dimensions (see the module's table)."""
    if isinstance(action_space, spaces.Discrete):
        return (), torch.int64
    sizes = sub_action_sizes(action_space)
    if sizes is not None:
        return (len(sizes),), torch.int64
    assert action_space.shape is not None
    return (int(np.prod(action_space.shape)),), torch.float32


def to_env_actions(actions: torch.Tensor | np.ndarray, action_space: spaces.Space) -> np.ndarray:
    """Policy outputs (B,) or (B, k), CPU tensor or array -> what the vector env accepts
    (offset by the space's ``start``, clipped to the bounds, reshaped, in the space's dtype)."""
    values = np.asarray(actions)
    if isinstance(action_space, spaces.Discrete):
        return values.astype(np.int64) + int(action_space.start)
    if isinstance(action_space, spaces.MultiDiscrete):
        return (values.astype(np.int64) + action_space.start.reshape(-1)).astype(action_space.dtype)
    if isinstance(action_space, spaces.MultiBinary):
        return values.astype(action_space.dtype)
    assert isinstance(action_space, spaces.Box)
    values = values.reshape((-1, *action_space.shape))
    return np.clip(values, action_space.low, action_space.high).astype(action_space.dtype)


def random_actions(action_space: spaces.Space, count: int, rng: np.random.Generator) -> np.ndarray:
    """``count`` uniform actions in the policy's convention: (count,) int64 indices from 0 (Discrete),
    (count, k) int64 sub-actions, each uniform over its own choices (MultiDiscrete, MultiBinary), or
    (count, action_dim) float32 values within the bounds (Box, flat)."""
    if isinstance(action_space, spaces.Discrete):
        return rng.integers(0, int(action_space.n), size=count)
    sizes = sub_action_sizes(action_space)
    if sizes is not None:
        return rng.integers(0, np.asarray(sizes, dtype=np.int64), size=(count, len(sizes)), dtype=np.int64)
    assert isinstance(action_space, spaces.Box)
    low, high = action_space.low.reshape(-1), action_space.high.reshape(-1)
    return rng.uniform(low, high, size=(count, low.size)).astype(np.float32)
