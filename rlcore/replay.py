"""Uniform replay: a preallocated NumPy ring per field, n-step returns folded in at insertion.

Each stored transition is ``(obs, action, reward, next_obs, discount)`` where ``reward`` is the
n-step discounted sum and ``discount`` is ``gamma**k`` for the k steps it spans, or 0 when the
episode terminated inside them. A TD target is then ``reward + discount * V(next_obs)`` whatever
n is: time-limit truncation bootstraps (discount > 0), termination does not.

Saved as ``.npz`` (no pickle) holding only the filled rows, so a save -> load round trip is
bit-identical. Partial n-step windows of episodes in progress are not saved: a resumed run restarts
its episodes anyway.
"""

from __future__ import annotations

import zipfile
from pathlib import Path
from typing import Any

import numpy as np
import torch

from rlcore.errors import CheckpointError
from rlcore.io import atomic_path

FIELDS = ("obs", "actions", "rewards", "next_obs", "discounts")


class ReplayBuffer:
    """A ring of ``capacity`` transitions from ``num_envs`` envs.

    Shapes: ``obs``/``next_obs`` (capacity, *obs_shape), ``actions`` (capacity, *action_shape),
    ``rewards``/``discounts`` (capacity,) float32.
    """

    def __init__(
        self,
        capacity: int,
        obs_shape: tuple[int, ...],
        action_shape: tuple[int, ...],
        action_dtype: np.dtype[Any] | type,
        num_envs: int,
        gamma: float,
        n_step: int = 1,
        obs_dtype: np.dtype[Any] | type = np.float32,
    ) -> None:
        self.capacity = capacity
        self.gamma = gamma
        self.n_step = n_step
        self.obs = np.zeros((capacity, *obs_shape), dtype=obs_dtype)
        self.next_obs = np.zeros((capacity, *obs_shape), dtype=obs_dtype)
        self.actions = np.zeros((capacity, *action_shape), dtype=action_dtype)
        self.rewards = np.zeros(capacity, dtype=np.float32)
        self.discounts = np.zeros(capacity, dtype=np.float32)
        self.pos = 0
        self.size = 0
        self._pending: list[list[tuple[np.ndarray, np.ndarray, float]]] = [[] for _ in range(num_envs)]

    def __len__(self) -> int:
        return self.size

    def add(
        self,
        obs: np.ndarray,
        actions: np.ndarray,
        rewards: np.ndarray,
        next_obs: np.ndarray,
        terminated: np.ndarray,
        truncated: np.ndarray,
        valid: np.ndarray,
    ) -> None:
        """Add one vector step: every argument has the env axis first, (N, ...).

        ``valid`` is False where next-step autoreset was resetting the env: those rows are no transition.
        """
        if self.n_step == 1:
            rows = np.flatnonzero(valid)
            discounts = self.gamma * (1.0 - terminated[rows].astype(np.float32))
            self._insert(obs[rows], actions[rows], rewards[rows], next_obs[rows], discounts)
            return
        for env in np.flatnonzero(valid):
            window = self._pending[env]
            window.append((obs[env], actions[env], float(rewards[env])))
            if terminated[env] or truncated[env]:
                while window:  # every pending start gets its (shorter) return up to the episode's end
                    self._emit(window, next_obs[env], bool(terminated[env]))
                    window.pop(0)
            elif len(window) == self.n_step:
                self._emit(window, next_obs[env], False)
                window.pop(0)

    def _emit(self, window: list[tuple[np.ndarray, np.ndarray, float]], next_obs: np.ndarray, terminal: bool) -> None:
        ret = sum(self.gamma**k * reward for k, (_, _, reward) in enumerate(window))
        discount = 0.0 if terminal else self.gamma ** len(window)
        first_obs, first_action, _ = window[0]
        self._insert(first_obs[None], first_action[None], np.array([ret]), next_obs[None], np.array([discount]))

    def _insert(
        self, obs: np.ndarray, actions: np.ndarray, rewards: np.ndarray, next_obs: np.ndarray, discounts: np.ndarray
    ) -> None:
        count = len(rewards)
        if count == 0:
            return
        rows = (self.pos + np.arange(count)) % self.capacity
        self.obs[rows] = obs
        self.actions[rows] = actions
        self.rewards[rows] = rewards
        self.next_obs[rows] = next_obs
        self.discounts[rows] = discounts
        self.pos = int((self.pos + count) % self.capacity)
        self.size = min(self.size + count, self.capacity)

    def sample(self, batch_size: int, rng: np.random.Generator) -> dict[str, torch.Tensor]:
        """``batch_size`` transitions drawn uniformly with replacement, as torch tensors (batch first)."""
        rows = rng.integers(0, self.size, size=batch_size)
        return {name: torch.from_numpy(getattr(self, name)[rows]) for name in FIELDS}

    def save(self, path: Path, env_steps: int) -> None:
        """Write the filled rows, in ring order, to ``path`` (.npz) atomically."""
        arrays = {name: getattr(self, name)[: self.size] for name in FIELDS}
        meta = np.array([self.capacity, self.pos, self.size, env_steps, self.n_step], dtype=np.int64)
        with atomic_path(path) as tmp, open(tmp, "wb") as handle:
            np.savez(handle, meta=meta, gamma=np.array(self.gamma), **arrays)

    def load(self, path: Path) -> int:
        """Restore from :meth:`save`'s file; returns the env step count it was saved at."""
        try:
            with np.load(path, allow_pickle=False) as data:
                capacity, pos, size, env_steps, n_step = (int(v) for v in data["meta"])
                arrays = {name: data[name] for name in FIELDS}
        except (OSError, EOFError, ValueError, KeyError, zipfile.BadZipFile) as exc:
            raise CheckpointError(f"{path}: not a readable replay buffer (truncated or corrupt?): {exc}") from None
        if capacity != self.capacity or n_step != self.n_step:
            raise CheckpointError(
                f"{path}: replay buffer has capacity {capacity} and n_step {n_step}, params say "
                f"algo.buffer_size {self.capacity} and algo.n_step {self.n_step}"
            )
        for name, values in arrays.items():
            target = getattr(self, name)
            if values.shape[1:] != target.shape[1:] or values.dtype != target.dtype or len(values) != size:
                raise CheckpointError(
                    f"{path}: replay field {name!r} has shape {values.shape}, expected "
                    f"({size}, {', '.join(map(str, target.shape[1:]))})"
                )
            target[:size] = values
        self.pos, self.size = pos, size
        return env_steps
