"""Uniform replay: a preallocated NumPy ring of transitions over a ring of observations, n-step returns folded in
at insertion.

Each stored transition is ``(obs, action, reward, next_obs, discount)`` where ``reward`` is the
n-step discounted sum and ``discount`` is ``gamma**k`` for the k steps it spans, or 0 when the
episode terminated inside them. A TD target is then ``reward + discount * V(next_obs)`` whatever
n is: time-limit truncation bootstraps (discount > 0), termination does not.

Observations are stored once. A transition holds two indices into the observation ring (``obs_write``,
``next_write``: the write numbers of its rows) instead of two copies: inside an episode a step's ``obs`` is
the previous step's ``next_obs`` (next-step autoreset), so a lane of the vector env writes one row per step
plus one at each episode's start. The observation ring has ``capacity + capacity // 8`` rows (plus a few
per env for n-step windows in progress), enough for episodes that average 8 steps or more; with shorter
episodes (or observations that never repeat) the oldest transitions are dropped early, so that every
transition in the buffer reads intact rows (``len`` says how many there are). Frames of 84x84x4 bytes
thus cost 1.125 frames per transition instead of 2.

Saved as ``.npz`` (no pickle) holding only the filled rows of both rings, so a save -> load round trip is
bit-identical and a resumed run samples what the uninterrupted run would have. Partial n-step windows of
episodes in progress are not saved: a resumed run restarts its episodes anyway.
"""

from __future__ import annotations

import zipfile
from pathlib import Path
from typing import Any

import numpy as np
import torch

from rlcore.common.errors import CheckpointError
from rlcore.common.files import atomic_path

FIELDS = ("obs", "actions", "rewards", "next_obs", "discounts")
"""The fields of a sampled batch."""
TRANSITION_FIELDS = ("actions", "rewards", "discounts", "obs_write", "next_write")
"""The per-transition arrays of the ring (the observation ring is ``observations``)."""


class OlderReplayFormatError(CheckpointError):
    """A replay file from before observations were stored once: a resumed run starts with an empty buffer."""


EPISODE_RESERVE = 8
"""Observation rows per ``capacity`` transitions beyond one each: 1/8 more, for episodes of 8 steps or longer."""


class ReplayBuffer:
    """A ring of ``capacity`` transitions from ``num_envs`` envs.

    Shapes: ``observations`` (obs_capacity, *obs_shape) in ``obs_dtype``; per transition ``actions``
    (capacity, *action_shape), ``rewards``/``discounts`` (capacity,) float32, ``obs_write``/``next_write``
    (capacity,) int64 (row = write number % obs_capacity). :meth:`sample` gathers both observations.
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
        self.num_envs = num_envs
        # Rows that n-step windows in progress (and each lane's latest row) still need, beyond the stored ones.
        self.obs_capacity = capacity + capacity // EPISODE_RESERVE + 2 * num_envs * (n_step + 1)
        self.observations = np.zeros((self.obs_capacity, *obs_shape), dtype=obs_dtype)
        self.obs_writes = 0
        """Observation rows written so far; write number ``w`` lives in row ``w % obs_capacity`` until overwritten."""
        self.actions = np.zeros((capacity, *action_shape), dtype=action_dtype)
        self.rewards = np.zeros(capacity, dtype=np.float32)
        self.discounts = np.zeros(capacity, dtype=np.float32)
        self.obs_write = np.zeros(capacity, dtype=np.int64)
        self.next_write = np.zeros(capacity, dtype=np.int64)
        self.added = 0
        """Transitions inserted so far; transition ``s`` sits in slot ``s % capacity``."""
        self.oldest = 0
        """The oldest transition still stored; those before it were overwritten or dropped (their rows were)."""
        self._oldest_write = 0
        """A lower bound of the smallest write number a stored transition reads (its obs row: a transition's
        next_obs row is always written after its obs row), recomputed only when rows at or past it are
        overwritten: n-step windows emit transitions out of write order."""
        self._lane_row = np.full(num_envs, -1, dtype=np.int64)
        """Per env: the write number of its latest next_obs row (-1: none), reused when the next obs equals it."""
        self._pending: list[list[tuple[int, np.ndarray, float]]] = [[] for _ in range(num_envs)]

    # --- what is stored --------------------------------------------------------------------------------------

    @property
    def size(self) -> int:
        return self.added - self.oldest

    @property
    def pos(self) -> int:
        """The slot the next transition goes to."""
        return self.added % self.capacity

    def __len__(self) -> int:
        return self.size

    def slots(self) -> np.ndarray:
        """The slots of the stored transitions, oldest first, (size,) int64."""
        return np.arange(self.oldest, self.added, dtype=np.int64) % self.capacity

    def observation(self, writes: np.ndarray) -> np.ndarray:
        """The observations with these write numbers, (len(writes), *obs_shape)."""
        return self.observations[np.asarray(writes) % self.obs_capacity]

    @property
    def nbytes(self) -> int:
        """Bytes of the preallocated storage."""
        arrays = [self.observations, *(getattr(self, name) for name in TRANSITION_FIELDS)]
        return sum(array.nbytes for array in arrays)

    # --- adding ----------------------------------------------------------------------------------------------

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
        envs = np.flatnonzero(valid)
        if len(envs) == 0:
            return
        obs_writes = self._write_observations(obs, next_obs, envs)
        next_writes = self._lane_row[envs]
        if self.n_step == 1:
            discounts = self.gamma * (1.0 - terminated[envs].astype(np.float32))
            self._insert(obs_writes, actions[envs], rewards[envs], next_writes, discounts)
            return
        complete: list[tuple[int, np.ndarray, float, int, float]] = []
        ended = (terminated | truncated).tolist()
        for env, obs_write, next_write in zip(envs.tolist(), obs_writes.tolist(), next_writes.tolist(), strict=True):
            window = self._pending[env]
            window.append((obs_write, actions[env], float(rewards[env])))
            if ended[env]:
                while window:  # every pending start gets its (shorter) return up to the episode's end
                    complete.append(self._completed(window, next_write, bool(terminated[env])))
                    window.pop(0)
            elif len(window) == self.n_step:
                complete.append(self._completed(window, next_write, False))
                window.pop(0)
        if complete:  # one insertion for the step's complete transitions, in the order they completed
            obs_rows, first_actions, returns, next_rows, discounts = zip(*complete, strict=True)
            self._insert(
                np.array(obs_rows), np.stack(first_actions), np.array(returns), np.array(next_rows), np.array(discounts)
            )

    def _write_observations(self, obs: np.ndarray, next_obs: np.ndarray, envs: np.ndarray) -> np.ndarray:
        """Store ``obs`` of ``envs`` where it is not the lane's latest row already, then their ``next_obs``;
        returns the obs rows' write numbers (envs,) and leaves the next_obs rows in ``_lane_row``."""
        latest = self._lane_row[envs]
        reused = (latest >= 0) & (latest >= self.obs_writes - self.obs_capacity)  # the row is still there...
        if reused.any():  # ...and holds this very observation (a continuing episode)
            held = self.observation(latest[reused]).reshape(int(reused.sum()), -1)
            reused[reused] = (held == obs[envs[reused]].reshape(len(held), -1)).all(axis=1)
        new_obs = envs[~reused]
        first = self._reserve(len(new_obs) + len(envs))
        obs_writes = latest.copy()
        obs_writes[~reused] = first + np.arange(len(new_obs))
        next_writes = first + len(new_obs) + np.arange(len(envs))
        self.observations[obs_writes[~reused] % self.obs_capacity] = obs[new_obs]
        self.observations[next_writes % self.obs_capacity] = next_obs[envs]
        self._lane_row[envs] = next_writes
        return obs_writes

    def _reserve(self, rows: int) -> int:
        """Make room for ``rows`` new observation rows; returns the first one's write number. Transitions that
        read a row about to be overwritten are dropped, oldest first."""
        first = self.obs_writes
        self.obs_writes += rows
        overwritten = self.obs_writes - 1 - self.obs_capacity  # the newest write number that is gone
        if self.size and overwritten >= self._oldest_write:
            writes = self.obs_write[self.slots()]
            gone = np.flatnonzero(writes <= overwritten)
            if len(gone):
                self.oldest += int(gone[-1]) + 1  # the buffer is a window of the newest transitions
                writes = writes[int(gone[-1]) + 1 :]
            self._oldest_write = int(writes.min()) if len(writes) else self.obs_writes
        return first

    def _completed(
        self, window: list[tuple[int, np.ndarray, float]], next_write: int, terminal: bool
    ) -> tuple[int, np.ndarray, float, int, float]:
        """The transition from the window's first step to ``next_write``: its obs row, action, n-step return,
        next_obs row and discount."""
        ret = sum(self.gamma**k * reward for k, (_, _, reward) in enumerate(window))
        discount = 0.0 if terminal else self.gamma ** len(window)
        obs_write, first_action, _ = window[0]
        return obs_write, first_action, ret, next_write, discount

    def _insert(
        self,
        obs_writes: np.ndarray,
        actions: np.ndarray,
        rewards: np.ndarray,
        next_writes: np.ndarray,
        discounts: np.ndarray,
    ) -> None:
        count = len(rewards)
        self.oldest = max(self.oldest, self.added + count - self.capacity)  # the ring's oldest slots are overwritten
        if self.size == 0:
            self._oldest_write = int(obs_writes.min())
        else:
            self._oldest_write = min(self._oldest_write, int(obs_writes.min()))
        slots = (self.added + np.arange(count)) % self.capacity
        self.actions[slots] = actions
        self.rewards[slots] = rewards
        self.discounts[slots] = discounts
        self.obs_write[slots] = obs_writes
        self.next_write[slots] = next_writes
        self.added += count

    # --- sampling --------------------------------------------------------------------------------------------

    def sample(self, batch_size: int, rng: np.random.Generator) -> dict[str, torch.Tensor]:
        """``batch_size`` transitions drawn uniformly with replacement, as torch tensors (batch first)."""
        slots = self.draw_slots(batch_size, rng)
        return {
            "obs": torch.from_numpy(self.observation(self.obs_write[slots])),
            "actions": torch.from_numpy(self.actions[slots]),
            "rewards": torch.from_numpy(self.rewards[slots]),
            "next_obs": torch.from_numpy(self.observation(self.next_write[slots])),
            "discounts": torch.from_numpy(self.discounts[slots]),
        }

    def draw_slots(self, batch_size: int, rng: np.random.Generator) -> np.ndarray:
        """The slots of ``batch_size`` stored transitions drawn uniformly with replacement from ``rng``, (B,)."""
        draws = rng.integers(0, self.size, size=batch_size)
        # A full ring holds a transition in every slot: a draw is a slot. Otherwise count from the oldest.
        return draws if self.size == self.capacity else (self.oldest + draws) % self.capacity

    # --- checkpoints -----------------------------------------------------------------------------------------

    def save(self, path: Path, env_steps: int) -> None:
        """Write the filled rows of both rings, as they lie, to ``path`` (.npz) atomically."""
        slots, rows = min(self.added, self.capacity), min(self.obs_writes, self.obs_capacity)
        arrays = {name: getattr(self, name)[:slots] for name in TRANSITION_FIELDS}
        meta = np.array(
            [self.capacity, self.added, self.oldest, env_steps, self.n_step, self.obs_writes], dtype=np.int64
        )
        with atomic_path(path) as tmp, open(tmp, "wb") as handle:
            np.savez(handle, meta=meta, gamma=np.array(self.gamma), observations=self.observations[:rows], **arrays)

    def load(self, path: Path) -> int:
        """Restore from :meth:`save`'s file; returns the env step count it was saved at."""
        try:
            with np.load(path, allow_pickle=False) as data:
                if "observations" not in data:
                    raise OlderReplayFormatError(
                        f"{path}: a replay buffer saved by an older rlcore (observations stored twice); "
                        "this version cannot read it"
                    )
                capacity, added, oldest, env_steps, n_step, obs_writes = (int(v) for v in data["meta"])
                arrays = {name: data[name] for name in ("observations", *TRANSITION_FIELDS)}
        except (OSError, EOFError, ValueError, KeyError, zipfile.BadZipFile) as exc:
            raise CheckpointError(f"{path}: not a readable replay buffer (truncated or corrupt?): {exc}") from None
        if capacity != self.capacity or n_step != self.n_step:
            raise CheckpointError(
                f"{path}: replay buffer has capacity {capacity} and n_step {n_step}, params say "
                f"algo.buffer_size {self.capacity} and algo.n_step {self.n_step}"
            )
        expected = {"observations": min(obs_writes, self.obs_capacity)}
        expected.update({name: min(added, capacity) for name in TRANSITION_FIELDS})
        for name, values in arrays.items():
            target = getattr(self, name)
            if values.shape[1:] != target.shape[1:] or values.dtype != target.dtype or len(values) != expected[name]:
                label = "obs" if name == "observations" else name
                raise CheckpointError(
                    f"{path}: replay field {label!r} has shape {values.shape}, expected "
                    f"({expected[name]}, {', '.join(map(str, target.shape[1:]))})"
                )
        for name, values in arrays.items():
            getattr(self, name)[: len(values)] = values
        self.obs_writes, self.added, self.oldest = obs_writes, added, oldest
        self._oldest_write = int(self.obs_write[self.slots()].min()) if self.size else obs_writes
        self._lane_row[:] = -1
        for window in self._pending:
            window.clear()
        return env_steps
