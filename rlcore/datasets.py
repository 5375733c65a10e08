"""Datasets of transitions as Parquet: the schema, a streaming writer, and a validating reader.

Schema version 1, one row per transition, rows grouped by episode (contiguous, in step order),
close to Minari's Arrow layout (a converter only has to regroup rows into episodes):

| column | Arrow type | meaning |
|---|---|---|
| ``episode_id`` | int64 | episode number, unique in the file |
| ``step`` | int32 | index of the transition in its episode, from 0 |
| ``observation`` | fixed_size_list<float32>[obs_dim] | observation before the action, flattened |
| ``action`` | int64 (Discrete) or fixed_size_list<float32>[action_dim] (Box) | the action taken |
| ``reward`` | float32 | reward received |
| ``next_observation`` | fixed_size_list<float32>[obs_dim] | observation after the action (an episode's last) |
| ``terminated`` | bool | the episode reached a terminal state (no value after it) |
| ``truncated`` | bool | the episode was cut (time limit, or the end of collection): bootstrap |
| ``log_prob`` | float32, nullable | log-probability of the action under the behaviour policy, where known |

File metadata key ``rlcore`` holds JSON: ``schema_version``, ``env`` (id, kwargs), ``observation_space``,
``action_space``, ``policy`` (provenance: kind, path, sha256, epsilon), ``seed``, ``episodes``,
``transitions`` and ``episode_return`` statistics. A file without it (your own data) is read against the
env named in params.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import torch
from gymnasium import spaces

from rlcore.errors import RLCoreError
from rlcore.io import AtomicTarget, atomic_path

SCHEMA_VERSION = 1
METADATA_KEY = b"rlcore"
COLUMNS = (
    "episode_id",
    "step",
    "observation",
    "action",
    "reward",
    "next_observation",
    "terminated",
    "truncated",
    "log_prob",
)


class DatasetError(RLCoreError):
    """A dataset file is missing, unreadable, or does not fit the env; nothing is trained on it."""


def arrow_schema(obs_dim: int, action_space: spaces.Space) -> pa.Schema:
    vector = pa.list_(pa.float32(), obs_dim)
    if isinstance(action_space, spaces.Discrete):
        action = pa.int64()
    else:
        assert action_space.shape is not None
        action = pa.list_(pa.float32(), int(np.prod(action_space.shape)))
    return pa.schema(
        [
            pa.field("episode_id", pa.int64(), nullable=False),
            pa.field("step", pa.int32(), nullable=False),
            pa.field("observation", vector, nullable=False),
            pa.field("action", action, nullable=False),
            pa.field("reward", pa.float32(), nullable=False),
            pa.field("next_observation", vector, nullable=False),
            pa.field("terminated", pa.bool_(), nullable=False),
            pa.field("truncated", pa.bool_(), nullable=False),
            pa.field("log_prob", pa.float32(), nullable=True),
        ]
    )


class DatasetWriter:
    """Streams complete episodes into a Parquet file, one row group per ``row_group_size`` transitions.

    Memory holds at most one row group plus the episodes in progress. The file is written under a
    temporary name and renamed into place by :meth:`close`, with the metadata (statistics included).
    """

    def __init__(
        self,
        path: Path,
        observation_space: spaces.Box,
        action_space: spaces.Space,
        metadata: dict[str, Any],
        row_group_size: int = 65_536,
    ) -> None:
        self.path = Path(path)
        self.obs_dim = int(np.prod(observation_space.shape))
        self.discrete = isinstance(action_space, spaces.Discrete)
        self.schema = arrow_schema(self.obs_dim, action_space)
        self.metadata = dict(metadata)
        self.row_group_size = row_group_size
        self._atomic = AtomicTarget(self.path)
        self._writer = _RowGroupWriter(self._atomic.tmp, self.schema, row_group_size)
        self._pending: list[dict[str, Any]] = []  # column -> array (log_prob: array or None)
        self._pending_rows = 0
        self.episodes = 0
        self.transitions = 0
        self.returns: list[float] = []

    def add_episode(
        self,
        obs: np.ndarray,
        actions: np.ndarray,
        rewards: np.ndarray,
        next_obs: np.ndarray,
        terminated: np.ndarray,
        truncated: np.ndarray,
        log_probs: np.ndarray | None,
    ) -> None:
        """One complete episode, T transitions: obs/next_obs (T, *obs_shape), actions (T,) or (T, action_dim)."""
        length = len(rewards)
        self._pending.append(
            {
                "episode_id": np.full(length, self.episodes, dtype=np.int64),
                "step": np.arange(length, dtype=np.int32),
                "observation": np.asarray(obs, dtype=np.float32).reshape(length, self.obs_dim),
                "action": np.asarray(actions, dtype=np.int64 if self.discrete else np.float32).reshape(length, -1),
                "reward": np.asarray(rewards, dtype=np.float32),
                "next_observation": np.asarray(next_obs, dtype=np.float32).reshape(length, self.obs_dim),
                "terminated": np.asarray(terminated, dtype=bool),
                "truncated": np.asarray(truncated, dtype=bool),
                "log_prob": None if log_probs is None else np.asarray(log_probs, dtype=np.float32),
            }
        )
        self.episodes += 1
        self.transitions += length
        self.returns.append(float(np.sum(rewards)))
        self._pending_rows += length
        if self._pending_rows >= self.row_group_size:
            self._flush()

    def _flush(self) -> None:
        if not self._pending:
            return
        columns: dict[str, pa.Array] = {}
        for name in COLUMNS:
            parts = [episode[name] for episode in self._pending]
            field = self.schema.field(name)
            if name == "log_prob":  # unknown log-probabilities (None or NaN) are stored as nulls
                values = np.concatenate(
                    [
                        np.full(len(e["reward"]), np.nan, np.float32) if p is None else p
                        for e, p in zip(self._pending, parts, strict=True)
                    ]
                )
                columns[name] = pa.array(values, type=pa.float32(), mask=np.isnan(values))
            elif pa.types.is_fixed_size_list(field.type):
                flat = np.concatenate(parts).reshape(-1)
                columns[name] = pa.FixedSizeListArray.from_arrays(pa.array(flat, pa.float32()), field.type.list_size)
            else:
                columns[name] = pa.array(np.concatenate(parts).reshape(-1), type=field.type)
        self._writer.write(pa.table(columns, schema=self.schema))
        self._pending, self._pending_rows = [], 0

    def close(self) -> dict[str, Any]:
        """Finish the file, rename it into place and return its metadata."""
        self._flush()
        self.metadata.update(
            schema_version=SCHEMA_VERSION,
            episodes=self.episodes,
            transitions=self.transitions,
            episode_return=return_stats(self.returns),
        )
        self._writer.close(self.metadata)
        try:
            self._atomic.commit()
        finally:
            self._atomic.discard()
        return self.metadata

    def abort(self) -> None:
        """Drop the partial file (the previous dataset at ``path``, if any, is untouched)."""
        self._writer.close(None)
        self._atomic.discard()


class _RowGroupWriter:
    """A Parquet writer that writes full row groups only, carrying the rest over to the next rows (or the close),
    so a file is full row groups plus one shorter last group whatever the sizes of the tables written."""

    def __init__(self, path: Path, schema: pa.Schema, row_group_size: int) -> None:
        # Dictionary encoding does nothing for float vectors but cost time; byte-stream-split helps zstd on floats.
        floats = ["observation.list.element", "next_observation.list.element", "reward", "log_prob"]
        if pa.types.is_fixed_size_list(schema.field("action").type):
            floats.append("action.list.element")
        self.parquet = pq.ParquetWriter(
            path, schema, compression="zstd", use_dictionary=False, use_byte_stream_split=floats
        )
        self.row_group_size = row_group_size
        self._carry: list[pa.Table] = []
        self._carry_rows = 0

    def write(self, table: pa.Table) -> None:
        self._carry.append(table)
        self._carry_rows += table.num_rows
        if self._carry_rows >= self.row_group_size:
            rows = pa.concat_tables(self._carry)
            full = self._carry_rows - self._carry_rows % self.row_group_size
            self.parquet.write_table(rows.slice(0, full), row_group_size=self.row_group_size)
            self._carry, self._carry_rows = [rows.slice(full)], self._carry_rows - full

    def close(self, metadata: dict[str, Any] | None = None) -> None:
        """Write the carried rows and, unless ``metadata`` is None (an abort), the ``rlcore`` metadata."""
        try:
            if metadata is not None:
                if self._carry_rows:
                    self.parquet.write_table(pa.concat_tables(self._carry), row_group_size=self.row_group_size)
                self.parquet.add_key_value_metadata({METADATA_KEY: json.dumps(metadata).encode()})
        finally:
            self.parquet.close()


def return_stats(returns: list[float] | np.ndarray) -> dict[str, float]:
    """mean, std, min and max of episode returns (all 0 for no episode)."""
    values = np.asarray(returns if len(returns) else [0.0], dtype=np.float64)
    return {
        "mean": float(values.mean()),
        "std": float(values.std()),
        "min": float(values.min()),
        "max": float(values.max()),
    }


def merge_datasets(
    sources: list[Path], path: Path, metadata: dict[str, Any], row_group_size: int = 65_536
) -> dict[str, Any]:
    """Concatenate datasets written by :class:`DatasetWriter` (the shards of one collection) into ``path``.

    Episodes keep their order, source by source, and are renumbered from 0. Streams one row group at a time
    (memory: about one output row group); the file appears under ``path`` only once complete. ``metadata``
    is stored with the merged counts and return statistics, as :meth:`DatasetWriter.close` would.
    """
    schema = _open(sources[0]).schema_arrow.remove_metadata()
    returns: list[np.ndarray] = []
    episodes = transitions = 0
    with atomic_path(Path(path)) as tmp:
        writer = _RowGroupWriter(tmp, schema, row_group_size)
        merged = None
        try:
            for source in sources:
                parquet = _open(source)
                if not parquet.schema_arrow.equals(schema, check_metadata=False):
                    raise DatasetError(f"{source}: its columns differ from {sources[0]}'s; cannot merge them")
                count = int(read_metadata(source).get("episodes", 0))
                shard_returns = np.zeros(count, dtype=np.float64)
                for group in range(parquet.num_row_groups):
                    table = parquet.read_row_group(group).replace_schema_metadata(None)
                    local = table.column("episode_id").to_numpy()
                    shard_returns += np.bincount(
                        local, weights=table.column("reward").to_numpy().astype(np.float64), minlength=count
                    )[:count]
                    writer.write(table.set_column(0, schema.field(0), pa.array(local + episodes, pa.int64())))
                returns.append(shard_returns)
                episodes += count
                transitions += parquet.metadata.num_rows
            merged = {
                **metadata,
                "schema_version": SCHEMA_VERSION,
                "episodes": episodes,
                "transitions": transitions,
                "episode_return": return_stats(np.concatenate(returns)),
            }
        finally:
            writer.close(merged)  # None after an error: no metadata, and atomic_path drops the file
    return merged


@dataclass
class OfflineData:
    """Transitions as NumPy arrays, rows in file order: obs/next_obs (N, *obs_shape) float32,
    actions (N,) int64 or (N, action_dim) float32, rewards (N,) float32, terminated/truncated (N,) bool,
    episode_id (N,) int64."""

    obs: np.ndarray
    actions: np.ndarray
    rewards: np.ndarray
    next_obs: np.ndarray
    terminated: np.ndarray
    truncated: np.ndarray
    episode_id: np.ndarray
    metadata: dict[str, Any]

    def __len__(self) -> int:
        return len(self.rewards)

    @classmethod
    def concat(cls, parts: list[OfflineData]) -> OfflineData:
        """``parts`` one after another (the first one's metadata)."""
        # mypy cannot match *args of unknown length against the dataclass fields (misc, arg-type)
        return cls(  # type: ignore[misc]
            *(np.concatenate([getattr(part, name) for part in parts]) for name in  # type: ignore[arg-type]
              ("obs", "actions", "rewards", "next_obs", "terminated", "truncated", "episode_id")),
            metadata=parts[0].metadata,
        )  # fmt: skip

    def subset(self, rows: np.ndarray) -> OfflineData:
        return OfflineData(
            self.obs[rows],
            self.actions[rows],
            self.rewards[rows],
            self.next_obs[rows],
            self.terminated[rows],
            self.truncated[rows],
            self.episode_id[rows],
            self.metadata,
        )

    def split_by_episode(self, validation_fraction: float, seed: int) -> tuple[OfflineData, OfflineData | None]:
        """(train, validation): whole episodes go to one side, never split inside an episode."""
        episodes = np.unique(self.episode_id)
        count = int(round(len(episodes) * validation_fraction))
        if validation_fraction <= 0 or len(episodes) < 2:
            return self, None
        count = min(max(count, 1), len(episodes) - 1)
        held_out = np.random.default_rng(seed).permutation(episodes)[:count]
        is_validation = np.isin(self.episode_id, held_out)
        return self.subset(np.flatnonzero(~is_validation)), self.subset(np.flatnonzero(is_validation))

    def tensors(self) -> dict[str, torch.Tensor]:
        """Torch views of the arrays (no copy), keyed like replay batches."""
        return {
            "obs": torch.from_numpy(self.obs),
            "actions": torch.from_numpy(self.actions),
            "rewards": torch.from_numpy(self.rewards),
            "next_obs": torch.from_numpy(self.next_obs),
            "terminated": torch.from_numpy(self.terminated),
        }


def read_metadata(path: Path) -> dict[str, Any]:
    """The file's ``rlcore`` metadata ({} for a file written elsewhere); checks the schema version."""
    parquet = _open(path)
    raw = (parquet.metadata.metadata or {}).get(METADATA_KEY)
    if raw is None:
        return {}
    try:
        metadata: dict[str, Any] = json.loads(raw)
    except ValueError as exc:
        raise DatasetError(f"{path}: unreadable rlcore metadata (not JSON: {exc})") from None
    if not isinstance(metadata, dict):
        raise DatasetError(f"{path}: unreadable rlcore metadata (a JSON object expected)")
    version = metadata.get("schema_version")
    if version != SCHEMA_VERSION:
        raise DatasetError(f"{path}: dataset schema version {version!r}; this rlcore reads version {SCHEMA_VERSION}")
    return metadata


def _open(path: Path) -> pq.ParquetFile:
    path = Path(path)
    if not path.is_file():
        raise DatasetError(f"{path}: dataset not found")
    try:
        return pq.ParquetFile(path)
    except (pa.ArrowException, OSError) as exc:
        raise DatasetError(f"{path}: not a readable Parquet file (truncated or corrupt?): {exc}") from None


def load_dataset(path: Path, observation_space: spaces.Box, action_space: spaces.Space, env_id: str) -> OfflineData:
    """Read and validate a whole dataset against the env it will be trained for.

    Row groups are decoded one at a time straight into preallocated arrays, so memory peaks at the result plus
    one row group. Every problem is one :class:`DatasetError` line naming the file: a missing, mistyped or null
    column, shapes that do not fit ``env_id``, non-finite values, an episode without a final terminated/truncated
    row, an unknown schema version, or a truncated file.
    """
    path = Path(path)
    metadata = read_metadata(path)
    parquet = _open(path)
    obs_dim = int(np.prod(observation_space.shape))
    _check_columns(path, parquet.schema_arrow, obs_dim, action_space, env_id)
    arrays = _decode(path, parquet, range(parquet.num_row_groups), obs_dim, action_space)
    episode_id, step = arrays["episode_id"], arrays["step"]
    same = episode_id[1:] == episode_id[:-1]
    if not np.all(np.where(same, step[1:] > step[:-1], episode_id[1:] > episode_id[:-1])):
        order = np.lexsort((step, episode_id))  # files we write are in order already: no sort, no copy
        arrays = {name: values[order] for name, values in arrays.items()}
    data = _as_data(arrays, observation_space, action_space, metadata)
    _check_values(path, data, action_space, env_id)
    return data


def iter_dataset(
    path: Path, observation_space: spaces.Box, action_space: spaces.Space, env_id: str
) -> Iterator[OfflineData]:
    """A dataset too large for memory, one validated row group at a time, in file order.

    The same checks as :func:`load_dataset`; an episode may continue into the next chunk, but every episode
    must have ended by the end of the file. Rows must be in episode and step order (as the writer writes them).
    """
    path = Path(path)
    metadata = read_metadata(path)
    parquet = _open(path)
    obs_dim = int(np.prod(observation_space.shape))
    _check_columns(path, parquet.schema_arrow, obs_dim, action_space, env_id)
    last = parquet.num_row_groups - 1
    for group in range(parquet.num_row_groups):
        arrays = _decode(path, parquet, range(group, group + 1), obs_dim, action_space)
        data = _as_data(arrays, observation_space, action_space, metadata)
        _check_values(path, data, action_space, env_id, last_episode_may_continue=group < last)
        yield data


def transition_count(path: Path) -> int:
    """Rows (transitions) in the dataset at ``path``, from the Parquet footer."""
    return int(_open(path).metadata.num_rows)


def read_row_group(
    path: Path, group: int, observation_space: spaces.Box, action_space: spaces.Space, metadata: dict[str, Any]
) -> OfflineData:
    """Row group ``group`` of a dataset that :func:`iter_dataset` has already validated (no checks again)."""
    parquet = _open(path)
    arrays = _decode(Path(path), parquet, range(group, group + 1), int(np.prod(observation_space.shape)), action_space)
    return _as_data(arrays, observation_space, action_space, metadata)


def _decode(
    path: Path, parquet: pq.ParquetFile, groups: range, obs_dim: int, action_space: spaces.Space
) -> dict[str, np.ndarray]:
    """The columns of ``groups`` decoded straight into preallocated arrays (memory: result + one row group)."""
    total = sum(parquet.metadata.row_group(group).num_rows for group in groups)
    discrete = isinstance(action_space, spaces.Discrete)
    assert action_space.shape is not None
    action_shape = (total,) if discrete else (total, int(np.prod(action_space.shape)))
    arrays: dict[str, np.ndarray] = {
        "episode_id": np.empty(total, np.int64),
        "step": np.empty(total, np.int64),
        "observation": np.empty((total, obs_dim), np.float32),
        "action": np.empty(action_shape, np.int64 if discrete else np.float32),
        "reward": np.empty(total, np.float32),
        "next_observation": np.empty((total, obs_dim), np.float32),
        "terminated": np.empty(total, bool),
        "truncated": np.empty(total, bool),
    }
    start = 0
    for group in groups:
        try:
            batch = parquet.read_row_group(group, columns=list(arrays))
        except (pa.ArrowException, OSError) as exc:
            raise DatasetError(f"{path}: not a readable Parquet file (truncated or corrupt?): {exc}") from None
        stop = start + batch.num_rows
        for name, target in arrays.items():
            column = batch.column(name)
            if column.null_count:  # nulls would corrupt the arrays; only log_prob may be unknown
                raise DatasetError(
                    f"{path}: column {name!r} has {column.null_count} null values in row group {group} "
                    "(only 'log_prob' may be null)"
                )
            if pa.types.is_fixed_size_list(column.type):
                flat = column.combine_chunks().flatten().to_numpy(zero_copy_only=False)
                target[start:stop] = flat.reshape(batch.num_rows, -1)
            else:
                target[start:stop] = column.to_numpy()
        start = stop
    return arrays


def _as_data(
    arrays: dict[str, np.ndarray], observation_space: spaces.Box, action_space: spaces.Space, metadata: dict[str, Any]
) -> OfflineData:
    discrete = isinstance(action_space, spaces.Discrete)
    assert action_space.shape is not None
    return OfflineData(
        obs=arrays["observation"].reshape(-1, *observation_space.shape),
        actions=arrays["action"] if discrete else arrays["action"].reshape(-1, *action_space.shape),
        rewards=arrays["reward"],
        next_obs=arrays["next_observation"].reshape(-1, *observation_space.shape),
        terminated=arrays["terminated"],
        truncated=arrays["truncated"],
        episode_id=arrays["episode_id"],
        metadata=metadata,
    )


def _check_columns(path: Path, schema: pa.Schema, obs_dim: int, action_space: spaces.Space, env_id: str) -> None:
    required = [name for name in COLUMNS if name != "log_prob"]
    for name in required:
        if name not in schema.names:
            raise DatasetError(f"{path}: missing column {name!r} (a dataset needs: {', '.join(required)})")
    expected = {
        "episode_id": pa.types.is_integer,
        "step": pa.types.is_integer,
        "reward": pa.types.is_floating,
        "terminated": pa.types.is_boolean,
        "truncated": pa.types.is_boolean,
    }
    for name, check in expected.items():
        kind = schema.field(name).type
        if not check(kind):
            raise DatasetError(f"{path}: column {name!r} has type {kind}, expected {check.__name__[3:]}")
    for name in ("observation", "next_observation"):
        kind = schema.field(name).type
        if not pa.types.is_fixed_size_list(kind) or not pa.types.is_floating(kind.value_type):
            raise DatasetError(f"{path}: column {name!r} has type {kind}, expected fixed_size_list<float32>")
        if kind.list_size != obs_dim:
            raise DatasetError(
                f"{path}: column {name!r} holds {kind.list_size} values per row, but {env_id} "
                f"observations have {obs_dim}"
            )
    kind = schema.field("action").type
    if isinstance(action_space, spaces.Discrete):
        if not pa.types.is_integer(kind):
            raise DatasetError(f"{path}: column 'action' has type {kind}, but {env_id} has discrete actions (int64)")
    else:
        assert action_space.shape is not None
        size = int(np.prod(action_space.shape))
        if not pa.types.is_fixed_size_list(kind) or kind.list_size != size:
            raise DatasetError(
                f"{path}: column 'action' has type {kind}, but {env_id} actions are fixed_size_list<float32>[{size}]"
            )


def _check_values(
    path: Path, data: OfflineData, action_space: spaces.Space, env_id: str, last_episode_may_continue: bool = False
) -> None:
    if len(data) == 0:
        raise DatasetError(f"{path}: the dataset has no transitions")
    for name, values in (
        ("reward", data.rewards),
        ("observation", data.obs),
        ("next_observation", data.next_obs),
        ("action", data.actions),
    ):
        if np.isfinite(values).all():  # the common case, cheap; row positions only when something is wrong
            continue
        finite = np.isfinite(values).reshape(len(values), -1).all(axis=1)
        if not finite.all():
            first = int(np.flatnonzero(~finite)[0])
            raise DatasetError(
                f"{path}: {int((~finite).sum())} rows with a NaN or infinite {name} (first at row {first})"
            )
    if isinstance(action_space, spaces.Discrete):
        bad = (data.actions < 0) | (data.actions >= action_space.n)
        if bad.any():
            raise DatasetError(
                f"{path}: action {int(data.actions[bad][0])} is outside {env_id}'s "
                f"{int(action_space.n)} discrete actions"
            )
    last_rows = np.flatnonzero(np.r_[data.episode_id[1:] != data.episode_id[:-1], True])
    if last_episode_may_continue:
        last_rows = last_rows[:-1]
    ends = data.terminated[last_rows] | data.truncated[last_rows]
    if not ends.all():
        episode = int(data.episode_id[last_rows[np.flatnonzero(~ends)[0]]])
        raise DatasetError(f"{path}: episode {episode} does not end with a terminated or truncated row")
