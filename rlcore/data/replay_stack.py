"""One storage for N seeds' replay buffers (``train.seeds`` trained as one program, stacked networks): each seed's
:class:`ReplayBuffer` reads and writes its own slice of stacked arrays, so one gather draws every seed's batch.

Each seed's buffer stays what it was (its own ring, writes, checkpoints and slots drawn from its own generator by
:meth:`ReplayBuffer.draw_slots`, as its one-seed run draws them): only where its arrays live changes. A gradient step
of N stacked seeds then costs one fancy-index gather per field over (N, B) slots instead of N samples of seven gathers
and five tensors each, and hands the stacked networks (N, B, ...) batches they no longer stack.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from rlcore.data.replay import TRANSITION_FIELDS, ReplayBuffer

ARRAYS = ("observations", *TRANSITION_FIELDS)
"""The arrays of a :class:`ReplayBuffer` that live in the stack."""


class ReplayStack:
    """The replays of N seeds of one configuration (same capacities, shapes and dtypes) moved into stacked arrays
    (N, *array_shape) of the same names; their contents so far are kept (a resumed seed's restored buffer)."""

    def __init__(self, replays: Sequence[ReplayBuffer]) -> None:
        self.replays = list(replays)
        first = self.replays[0]
        for name in ARRAYS:
            own = [getattr(replay, name) for replay in self.replays]
            if any(array.shape != own[0].shape or array.dtype != own[0].dtype for array in own):
                raise ValueError(f"replay {name}: the seeds' buffers differ in shape or dtype")
            stacked = np.zeros((len(own), *own[0].shape), dtype=own[0].dtype)
            for k, (replay, array) in enumerate(zip(self.replays, own, strict=True)):
                written = replay.obs_writes if name == "observations" else replay.added
                filled = min(written, len(array))  # the rows written so far (a ring: all of them once full)
                stacked[k, :filled] = array[:filled]
                setattr(replay, name, stacked[k])  # the seed's buffer writes into its slice from here on
            setattr(self, name, stacked)
        self.obs_capacity = first.obs_capacity
        self.capacity = first.capacity

    observations: np.ndarray
    actions: np.ndarray
    rewards: np.ndarray
    discounts: np.ndarray
    obs_write: np.ndarray
    next_write: np.ndarray

    def sample(
        self, seeds: Sequence[int], batch_size: int, rngs: Sequence[np.random.Generator | None]
    ) -> dict[str, torch.Tensor]:
        """The batches of the seeds ``seeds`` (indices into the stack), (M, B, ...) per field of a sampled batch
        (``rlcore.data.replay.FIELDS``):
        seed ``seeds[j]``'s drawn from ``rngs[j]`` as its buffer's :meth:`ReplayBuffer.sample` draws them (the same
        slots, the same values); ``rngs[j]`` None: absent from this step, nothing drawn, its rows its first slot's
        (finite) contents."""
        slots = np.zeros((len(seeds), batch_size), dtype=np.int64)
        for j, (k, rng) in enumerate(zip(seeds, rngs, strict=True)):
            if rng is not None:
                slots[j] = self.replays[k].draw_slots(batch_size, rng)
        # One flat index per (seed, draw) into the arrays seen as (N * rows, ...): np.take gathers a sample of 8
        # seeds x 64 in ~120 us, indexing with (seed, slot) pairs took ~200.
        members = np.asarray(seeds, dtype=np.int64)[:, None]
        flat_slots = (members * self.capacity + slots).ravel()
        obs_rows = members * self.obs_capacity + _take(self.obs_write, flat_slots, slots.shape) % self.obs_capacity
        next_rows = members * self.obs_capacity + _take(self.next_write, flat_slots, slots.shape) % self.obs_capacity
        fields = {  # FIELDS' order
            "obs": _take(self.observations, obs_rows.ravel(), slots.shape),
            "actions": _take(self.actions, flat_slots, slots.shape),
            "rewards": _take(self.rewards, flat_slots, slots.shape),
            "next_obs": _take(self.observations, next_rows.ravel(), slots.shape),
            "discounts": _take(self.discounts, flat_slots, slots.shape),
        }
        return {key: torch.from_numpy(value) for key, value in fields.items()}


def _take(stacked: np.ndarray, flat_index: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    """Rows ``flat_index`` of ``stacked`` (N, R, *rest) seen as (N * R, *rest), shaped (*shape, *rest)."""
    rest = stacked.shape[2:]
    return np.take(stacked.reshape(-1, *rest), flat_index, axis=0).reshape(*shape, *rest)
