"""Where an offline run's minibatches come from: the whole dataset in memory, or streamed through a buffer.

Both sources have ``rows`` (training transitions), ``metadata``, ``how`` (for the log), ``update_normalizer``
and ``batch(step, rng, batch_size)``. :class:`InMemoryBatches` (``dataset.in_memory: true``) indexes arrays read
whole.
:class:`RowGroupStream` (``dataset.in_memory: false``) is a shuffle buffer of whole row groups, refreshed one at a
time. The buffer holds the ``K`` row groups loaded last (``K`` fits
``dataset.buffer_transitions``); every ``swap_every`` gradient steps (about one row group's worth of
batches) the oldest group leaves and the next one in the schedule comes in. The schedule visits every
row group once per pass, in a permutation seeded by ``seed`` and the pass number, so the buffer at any
gradient step is a function of that step alone: a resumed run rebuilds exactly the buffer it left.

Validation episodes are chosen by a seeded hash of their ``episode_id`` (never split inside an episode,
without knowing the number of episodes up front) and held in memory up to ``validation_limit`` rows.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch
from gymnasium import spaces

from rlcore.data.reader import OfflineData, agent_rows, group_rows, iter_dataset, read_row_group
from rlcore.data.schema import DatasetError
from rlcore.nets.blocks import ObsNormalizer


def validation_mask(episode_id: np.ndarray, fraction: float, seed: int) -> np.ndarray:
    """True for the rows of held-out episodes: a splitmix64 hash of (seed, episode id) below ``fraction``."""
    x = episode_id.astype(np.uint64) + np.uint64((seed * 0x9E3779B97F4A7C15) % 2**64)  # array ops wrap mod 2^64
    x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    x = x ^ (x >> np.uint64(31))
    return (x >> np.uint64(11)).astype(np.float64) / 2.0**53 < fraction


def gather(
    tensors: dict[str, torch.Tensor], index: torch.Tensor, fields: Sequence[str] | None
) -> dict[str, torch.Tensor]:
    """Rows ``index`` of ``fields`` of ``tensors`` (None: every field). ``index_select`` and only the fields an
    algorithm reads: a minibatch's gather was ~55 us for BC's 256 rows of five fields, ~21 us so (the same rows)."""
    names = tensors if fields is None else fields
    return {name: torch.index_select(tensors[name], 0, index) for name in names}


class InMemoryBatches:
    """Uniform minibatches by index from training data read whole (``rlcore.data.reader.load_dataset``)."""

    def __init__(self, data: OfflineData) -> None:
        self.rows, self.metadata = len(data), data.metadata
        self.how = ""  # for the log line
        self._tensors = data.tensors()

    def update_normalizer(self, normalizer: ObsNormalizer) -> None:
        normalizer.update(self._tensors["obs"])

    def batch(
        self, step: int, rng: np.random.Generator, batch_size: int, fields: Sequence[str] | None = None
    ) -> dict[str, torch.Tensor]:
        """A uniform minibatch of ``fields`` (None: every field), (batch_size, ...) each."""
        index = torch.from_numpy(rng.integers(0, self.rows, size=batch_size))
        return gather(self._tensors, index, fields)


class RowGroupStream:
    """Training minibatches over a Parquet dataset without reading it whole; see the module docstring."""

    def __init__(
        self,
        path: Path,
        observation_space: spaces.Space,
        action_space: spaces.Space,
        env_id: str,
        buffer_transitions: int,
        batch_size: int,
        seed: int,
        validation_fraction: float,
        validation_limit: int,
        agents: list[str] | None = None,
        groups: list[str] | None = None,
    ) -> None:
        self.path = Path(path)
        self.observation_space, self.action_space = observation_space, action_space
        self.seed, self.validation_fraction = seed, validation_fraction
        self.agents, self.agent_groups = agents, groups  # dataset.agents, dataset.groups (self.groups: row groups)
        # One validating pass (every check of load_dataset, a row group at a time) that keeps the validation rows.
        held_out: list[OfflineData] = []
        kept = 0
        self.sizes: list[int] = []  # iter_dataset yields one row group at a time
        self.rows = 0
        found: list[np.ndarray] = []  # the agent column's names, a row group at a time (dataset.agents)
        found_groups: list[np.ndarray] = []  # the group column's (dataset.groups)
        for chunk in iter_dataset(self.path, observation_space, action_space, env_id):
            self.metadata = chunk.metadata
            self.sizes.append(len(chunk))
            validation = validation_mask(chunk.episode_id, validation_fraction, seed)
            wanted = self._wanted(chunk)
            if agents is not None and chunk.agent is not None:
                found.append(np.unique(chunk.agent))
            if groups is not None and chunk.group is not None:
                found_groups.append(np.unique(chunk.group))
            self.rows += int((wanted & ~validation).sum())
            rows = np.flatnonzero(validation & wanted)[: validation_limit - kept]
            if len(rows):
                held_out.append(chunk.subset(rows))
                kept += len(rows)
        if agents is not None:  # refused as a dataset read whole refuses it
            agent_rows(np.concatenate(found) if found else None, agents, self.path)
        if groups is not None:
            group_rows(np.concatenate(found_groups) if found_groups else None, groups, self.path, self.metadata)
        if self.rows == 0:
            raise DatasetError(
                f"{self.path}: every episode is held out for validation, none is left to train on "
                f"(dataset.validation_fraction is {validation_fraction})"
            )
        self.validation = OfflineData.concat(held_out) if held_out else None
        self.groups = [group for group, size in enumerate(self.sizes) if size]  # row groups with rows, in order
        sizes = [self.sizes[group] for group in self.groups]
        self.groups_in_buffer = int(np.clip(buffer_transitions // max(sizes), 1, len(sizes)))
        self.swap_every = max(1, round(float(np.mean(sizes)) / batch_size))
        self.how = f"streamed through a buffer of {self.groups_in_buffer} row groups; "
        self._permutations: dict[int, np.ndarray] = {}
        self._groups: dict[int, dict[str, torch.Tensor]] = {}
        self._loaded = -1
        self._tensors: dict[str, torch.Tensor] = {}

    def update_normalizer(self, normalizer: ObsNormalizer) -> None:
        """Feed the training rows' observations to ``normalizer``, a row group at a time."""
        for group in self.groups:
            normalizer.update(self._load(group)["obs"])

    def batch(
        self, step: int, rng: np.random.Generator, batch_size: int, fields: Sequence[str] | None = None
    ) -> dict[str, torch.Tensor]:
        """A uniform minibatch of ``fields`` (None: every field) from the buffer as it is at gradient step ``step``."""
        self._refresh(self.groups_in_buffer + step // self.swap_every)
        index = torch.from_numpy(rng.integers(0, len(self._tensors["rewards"]), size=batch_size))
        return gather(self._tensors, index, fields)

    def _scheduled(self, k: int) -> int:
        """The row group loaded ``k``-th: pass ``k // n`` visits every group with rows once, in its own seeded
        order."""
        n = len(self.groups)
        epoch, position = divmod(k, n)
        if epoch not in self._permutations:
            self._permutations = {epoch: np.random.default_rng([self.seed, epoch]).permutation(n)}
        return self.groups[int(self._permutations[epoch][position])]

    def _refresh(self, loaded: int) -> None:
        if loaded == self._loaded:
            return
        wanted = [self._scheduled(k) for k in range(loaded - self.groups_in_buffer, loaded)]
        self._groups = {group: self._groups.get(group) or self._load(group) for group in wanted}
        parts = [self._groups[group] for group in wanted]
        self._tensors = {name: torch.cat([part[name] for part in parts]) for name in parts[0]}
        self._loaded = loaded

    def _load(self, group: int) -> dict[str, torch.Tensor]:
        """Row group ``group``'s training rows (validation episodes left out) as tensors."""
        chunk = read_row_group(self.path, group, self.observation_space, self.action_space, self.metadata)
        validation = validation_mask(chunk.episode_id, self.validation_fraction, self.seed)
        return chunk.subset(np.flatnonzero(~validation & self._wanted(chunk))).tensors()

    def _wanted(self, chunk: OfflineData) -> np.ndarray:
        """(rows,) bool: the rows of ``dataset.agents`` and ``dataset.groups`` (every row without them; in a dataset
        without agents or groups every row too: those are refused once the validating pass is through)."""
        wanted = np.ones(len(chunk), dtype=bool)
        for names, labels in ((self.agents, chunk.agent), (self.agent_groups, chunk.group)):
            if names is not None and labels is not None:
                wanted &= np.isin(labels, np.asarray(names, dtype=object))
        return wanted
