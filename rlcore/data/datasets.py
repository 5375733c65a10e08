"""Datasets of transitions as Parquet: the schema, a streaming writer, and a validating reader.

Schema version 1, one row per transition, rows grouped by episode (contiguous, steps 0, 1, 2, ... in order;
episodes in any order, each id once), close to Minari's Arrow layout (a converter only has to regroup rows into
episodes):

| column | Arrow type | meaning |
|---|---|---|
| ``episode_id`` | int64 | episode number, unique in the file |
| ``step`` | int32 | index of the transition in its episode, from 0 |
| ``observation`` | see below | observation before the action, flattened |
| ``action`` | see below | the action taken, in the policy's convention (``rlcore.envs.actions``) |
| ``reward`` | float32 | reward received |
| ``next_observation`` | as ``observation`` | observation after the action (an episode's last) |
| ``terminated`` | bool | the episode reached a terminal state (no value after it) |
| ``truncated`` | bool | the episode was cut (time limit, or the end of collection): bootstrap |
| ``log_prob`` | float32, nullable | log-probability of the action under the behaviour policy, where known |

The ``observation`` and ``next_observation`` columns by observation space (``rlcore.envs.observations``: the dtype
observations are kept in everywhere):

| observation space | Arrow type | values |
|---|---|---|
| ``Box`` of floats, any shape | fixed_size_list<float32>[prod(shape)] | flattened in C order |
| ``Box`` of ``uint8``/``bool`` (frames) | fixed_size_binary[prod(shape)] | the raw bytes, C order |
| ``Discrete`` | fixed_size_binary[8] | the value's int64 bytes (little-endian) |
| ``Dict`` | the packed vector's: float32 list or uint8 binary | the packed vector (``rlcore.envs.observations.pack``) |

Frames are binary, not lists of uint8: one Parquet value per row instead of one per pixel (a list of uint8 is
stored as int32 values with a level each), so a frame stack is written and read as one copy and zstd compresses
whole frames. Measured on 10,000 random-policy Pong transitions ((4, 84, 84) uint8, 538 MB of raw frames;
``benchmarks/pixels.py frames-dataset``): 1.9 MB on disk, read and validated in 0.8 s; the same frames as
lists of uint8: 3.2 MB, 7.7 s to write and 5.7 s to read one column.

The ``action`` column by action space:

| action space | Arrow type | values |
|---|---|---|
| ``Discrete(n, start)`` | int64 | index from 0 (the env's value minus ``start``) |
| ``MultiDiscrete(nvec, start)``, 1-D | fixed_size_list<int64>[len(nvec)] | sub-action i: 0 to nvec[i] - 1 |
| ``MultiBinary(n)``, 1-D | fixed_size_list<int64>[n] | each bit 0 or 1 |
| ``Box`` of any shape | fixed_size_list<float32>[prod(shape)] | flattened in C order, clipped to the bounds |

File metadata key ``rlcore`` holds JSON: ``schema_version``, ``env`` (id, kwargs), ``observation_space``,
``action_space``, ``policy`` (provenance: kind, path, sha256, epsilon), ``seed``, ``episodes``,
``transitions``, ``episode_return`` statistics and ``rows_sha256`` (:class:`RowsDigest`: the rows as read for
training, so a reader can tell that the rows are still the ones the metadata describes). A file without it (your
own data) is read against the env named in params.

Integrity: the writer stores a CRC32 checksum in every Parquet page header and every read verifies them, so
bytes damaged after writing are refused ("page checksum mismatch") instead of decoded; ``rows_sha256``, where
recorded, is verified after every other check of a read.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import torch
from gymnasium import spaces

from rlcore.common.errors import RLCoreError, file_problem
from rlcore.common.files import AtomicTarget, atomic_path
from rlcore.envs.actions import action_layout, sub_action_sizes
from rlcore.envs.observations import storage_dtype

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
DIGEST_COLUMNS = COLUMNS[:-1]
"""The columns :class:`RowsDigest` covers: every one training reads (``log_prob`` is provenance only)."""


class DatasetError(RLCoreError):
    """A dataset file is missing, unreadable, or does not fit the env; nothing is trained on it."""


class RowsDigest:
    """sha256 of a dataset's rows as training reads them: each of :data:`DIGEST_COLUMNS` in row order, in the
    dtype it is decoded to (int64 ids, steps and integer actions, float32 vectors flattened, bool flags), so
    the digest depends on the values and their order only, not on the row groups, encodings or integer widths
    of the file. Hashes one column per sha256, combined at the end."""

    def __init__(self) -> None:
        self._columns = {name: hashlib.sha256() for name in DIGEST_COLUMNS}

    def update(self, arrays: Mapping[str, np.ndarray]) -> None:
        """The next rows, decoded as :func:`_allocate` lays them out (a column's canonical dtype)."""
        for name, digest in self._columns.items():
            digest.update(np.ascontiguousarray(arrays[name]).reshape(-1).view(np.uint8).data)

    def update_table(self, table: pa.Table) -> None:
        """The next rows, as an Arrow table in the dataset schema (what the writer writes)."""
        self.update({name: _canonical(table.column(name)) for name in DIGEST_COLUMNS})

    def hexdigest(self) -> str:
        total = hashlib.sha256()
        for name, digest in self._columns.items():
            total.update(f"{name}:{digest.hexdigest()}\n".encode())
        return total.hexdigest()


def _canonical(column: pa.ChunkedArray) -> np.ndarray:
    """A column's values in the dtype a read decodes them to (:func:`_allocate`; vectors flattened; binary
    observations as their raw bytes, which is what a decoded array of their dtype hashes as)."""
    kind = column.type
    if pa.types.is_fixed_size_binary(kind):
        return _binary_bytes(column.combine_chunks())
    if pa.types.is_fixed_size_list(kind):
        values = column.combine_chunks().flatten().to_numpy(zero_copy_only=False)
        return np.asarray(values, dtype=np.int64 if pa.types.is_integer(kind.value_type) else np.float32)
    values = column.to_numpy()
    if pa.types.is_integer(kind):
        return np.asarray(values, dtype=np.int64)
    if pa.types.is_floating(kind):
        return np.asarray(values, dtype=np.float32)
    return np.asarray(values, dtype=bool)


@dataclass(frozen=True)
class ObservationFormat:
    """How the observations of a space are stored in the ``observation`` columns (see the module docstring):
    ``size`` values per row in ``dtype`` (the storage dtype, ``rlcore.envs.observations``), as a list of float32 or
    as fixed-size binary."""

    size: int
    dtype: np.dtype[Any]

    @classmethod
    def of(cls, observation_space: gym.Space) -> ObservationFormat:
        size = int(np.prod(observation_space.shape)) if observation_space.shape else 1
        return cls(size, storage_dtype(observation_space))

    @property
    def binary(self) -> bool:
        return not np.issubdtype(self.dtype, np.floating)

    @property
    def arrow_type(self) -> pa.DataType:
        return pa.binary(self.size * self.dtype.itemsize) if self.binary else pa.list_(pa.float32(), self.size)

    def array(self, values: np.ndarray) -> pa.Array:
        """``values`` (rows, size) in ``dtype`` as an Arrow array of :attr:`arrow_type`."""
        flat = np.ascontiguousarray(values, dtype=self.dtype).reshape(-1)
        if self.binary:
            return pa.FixedSizeBinaryArray.from_buffers(self.arrow_type, len(values), [None, pa.py_buffer(flat)])
        return pa.FixedSizeListArray.from_arrays(pa.array(flat, pa.float32()), self.size)


def _binary_bytes(array: pa.FixedSizeBinaryArray) -> np.ndarray:
    """The values of a fixed-size binary array, concatenated, as uint8 (its offset honoured; no copy)."""
    width = array.type.byte_width
    data = np.frombuffer(array.buffers()[1], dtype=np.uint8)
    return data[array.offset * width : (array.offset + len(array)) * width]


def arrow_schema(observation: ObservationFormat, action_space: spaces.Space) -> pa.Schema:
    vector = observation.arrow_type
    shape, dtype = action_layout(action_space)
    value = pa.int64() if dtype == torch.int64 else pa.float32()
    action = pa.list_(value, shape[0]) if shape else value
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
        observation_space: gym.Space,
        action_space: spaces.Space,
        metadata: dict[str, Any],
        row_group_size: int = 65_536,
    ) -> None:
        self.path = Path(path)
        self.observation = ObservationFormat.of(observation_space)
        self.action_dtype = _numpy_action_dtype(action_space)
        self.schema = arrow_schema(self.observation, action_space)
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
        """One complete episode, T transitions: obs/next_obs (T, *obs_shape), actions (T,) or (T, k)."""
        length = len(rewards)
        self._pending.append(
            {
                "episode_id": np.full(length, self.episodes, dtype=np.int64),
                "step": np.arange(length, dtype=np.int32),
                "observation": np.asarray(obs, dtype=self.observation.dtype).reshape(length, self.observation.size),
                "action": np.asarray(actions, dtype=self.action_dtype).reshape(length, -1),
                "reward": np.asarray(rewards, dtype=np.float32),
                "next_observation": np.asarray(next_obs, dtype=self.observation.dtype).reshape(
                    length, self.observation.size
                ),
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
            elif name in ("observation", "next_observation"):
                columns[name] = self.observation.array(np.concatenate(parts))
            elif pa.types.is_fixed_size_list(field.type):
                flat = np.concatenate(parts).reshape(-1)
                columns[name] = pa.FixedSizeListArray.from_arrays(
                    pa.array(flat, field.type.value_type), field.type.list_size
                )
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
    so a file is full row groups plus one shorter last group whatever the sizes of the tables written. Every page
    carries a CRC32 checksum (verified by every read, :func:`_open`), and the close records the rows' sha256
    (:class:`RowsDigest`) in the metadata."""

    def __init__(self, path: Path, schema: pa.Schema, row_group_size: int) -> None:
        # Dictionary encoding does nothing for float vectors but cost time; byte-stream-split helps zstd on floats.
        floats = ["reward", "log_prob"]
        if pa.types.is_fixed_size_list(schema.field("observation").type):  # not for frames (binary)
            floats += ["observation.list.element", "next_observation.list.element"]
        action = schema.field("action").type
        if pa.types.is_fixed_size_list(action) and pa.types.is_floating(action.value_type):
            floats.append("action.list.element")
        self.parquet = pq.ParquetWriter(
            path,
            schema,
            compression="zstd",
            use_dictionary=False,
            use_byte_stream_split=floats,
            write_page_checksum=True,
        )
        self.row_group_size = row_group_size
        self.digest = RowsDigest()
        self._carry: list[pa.Table] = []
        self._carry_rows = 0

    def write(self, table: pa.Table) -> None:
        self.digest.update_table(table)
        self._carry.append(table)
        self._carry_rows += table.num_rows
        if self._carry_rows >= self.row_group_size:
            rows = pa.concat_tables(self._carry)
            full = self._carry_rows - self._carry_rows % self.row_group_size
            self.parquet.write_table(rows.slice(0, full), row_group_size=self.row_group_size)
            self._carry, self._carry_rows = [rows.slice(full)], self._carry_rows - full

    def close(self, metadata: dict[str, Any] | None = None) -> None:
        """Write the carried rows and, unless ``metadata`` is None (an abort), the ``rlcore`` metadata, to which
        it adds ``rows_sha256`` (the caller's dict is updated)."""
        try:
            if metadata is not None:
                if self._carry_rows:
                    self.parquet.write_table(pa.concat_tables(self._carry), row_group_size=self.row_group_size)
                metadata["rows_sha256"] = self.digest.hexdigest()
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
                    table = _read_row_group(source, parquet, group).replace_schema_metadata(None)
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
    """Transitions as NumPy arrays, rows in file order: obs/next_obs (N, *obs_shape) in their storage dtype
    (float32; uint8/bool frames and int64 Discrete values as they are),
    actions (N,) int64 (Discrete), (N, k) int64 (MultiDiscrete, MultiBinary) or (N, action_dim) float32 (Box),
    rewards (N,) float32, terminated/truncated (N,) bool, episode_id (N,) int64."""

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
    """The file's ``rlcore`` metadata ({} for a file written elsewhere): strict JSON (no NaN or Infinity), the
    schema version this rlcore reads, and the keys a read relies on well-typed."""
    return _metadata(Path(path), _open(path))


class _NonFiniteConstant(ValueError):
    pass


def _reject_constant(constant: str) -> Any:
    raise _NonFiniteConstant(constant)


def _metadata(path: Path, parquet: pq.ParquetFile) -> dict[str, Any]:
    raw = (parquet.metadata.metadata or {}).get(METADATA_KEY)
    if raw is None:
        return {}
    try:
        metadata = json.loads(raw, parse_constant=_reject_constant)
    except _NonFiniteConstant as exc:
        raise DatasetError(f"{path}: unreadable rlcore metadata: not valid JSON ({exc} is not a JSON value)") from None
    except (ValueError, RecursionError) as exc:  # UnicodeDecodeError is a ValueError
        raise DatasetError(f"{path}: unreadable rlcore metadata (not JSON: {_one_line(exc)})") from None
    if not isinstance(metadata, dict):
        raise DatasetError(f"{path}: unreadable rlcore metadata (a JSON object expected)")
    version = metadata.get("schema_version")
    if version != SCHEMA_VERSION:
        raise DatasetError(f"{path}: dataset schema version {version!r}; this rlcore reads version {SCHEMA_VERSION}")
    env = metadata.get("env")
    if env is not None and not (isinstance(env, dict) and isinstance(env.get("id"), str | None)):
        raise DatasetError(f"{path}: unreadable rlcore metadata ('env' is not an object with a string 'id')")
    digest = metadata.get("rows_sha256")
    if digest is not None and not (isinstance(digest, str) and len(digest) == 64):
        raise DatasetError(f"{path}: unreadable rlcore metadata ('rows_sha256' is not a sha256 hex digest)")
    return metadata


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split())


def _open(path: Path) -> pq.ParquetFile:
    """The Parquet file at ``path``, every page's checksum verified as it is read (pages without one: unchecked)."""
    path = Path(path)
    problem = file_problem(path, "dataset")
    if problem is not None:
        raise DatasetError(f"{path}: {problem}")
    try:
        return pq.ParquetFile(path, page_checksum_verification=True)
    except (pa.ArrowException, OSError) as exc:
        raise DatasetError(f"{path}: not a readable Parquet file (truncated or corrupt?): {_one_line(exc)}") from None


def _open_checked(
    path: Path, observation_space: gym.Space, action_space: spaces.Space, env_id: str
) -> tuple[pq.ParquetFile, dict[str, Any]]:
    """The file and its metadata, after the checks that need no row: metadata, env, columns, some rows."""
    parquet = _open(path)
    metadata = _metadata(path, parquet)
    recorded = (metadata.get("env") or {}).get("id")
    if recorded is not None and recorded.rsplit(":", 1)[-1] != env_id.rsplit(":", 1)[-1]:
        raise DatasetError(
            f"{path}: collected on {recorded} (its rlcore metadata), but params train {env_id} (env.id); "
            f"point dataset.path at a {env_id} dataset or set env.id to {recorded}"
        )
    _check_columns(path, parquet.schema_arrow, ObservationFormat.of(observation_space), action_space, env_id)
    if parquet.metadata.num_rows == 0:
        raise DatasetError(f"{path}: no transitions (the file has the dataset's columns but no rows)")
    return parquet, metadata


def load_dataset(path: Path, observation_space: gym.Space, action_space: spaces.Space, env_id: str) -> OfflineData:
    """Read and validate a whole dataset against the env it will be trained for.

    Row groups are decoded one at a time straight into preallocated arrays, so memory peaks at the result plus
    one row group. Every problem is one :class:`DatasetError` line naming the file: unreadable or non-finite
    metadata, metadata naming another env, a missing, mistyped or null column, shapes that do not fit ``env_id``,
    no rows, non-finite values, actions out of range, rows not grouped by episode in step order (duplicated or
    reordered rows), an episode without a final terminated/truncated row, an unknown schema version, a truncated
    or damaged file (page checksums), rows that are not those the metadata's ``rows_sha256`` describes. The
    checks are :func:`iter_dataset`'s, in the same order: a file gets the same message either way.
    """
    path = Path(path)
    parquet, metadata = _open_checked(path, observation_space, action_space, env_id)
    sizes = [parquet.metadata.row_group(group).num_rows for group in range(parquet.num_row_groups)]
    arrays = _allocate(sum(sizes), ObservationFormat.of(observation_space), action_space)
    checks = _Checks(path, action_space, env_id, metadata)
    start = 0
    for group, size in enumerate(sizes):
        rows = {name: values[start : start + size] for name, values in arrays.items()}
        _decode_group(path, parquet, group, rows)
        checks.add(rows, group)
        start += size
    checks.finish()
    return _as_data(arrays, observation_space, action_space, metadata)


def iter_dataset(
    path: Path, observation_space: gym.Space, action_space: spaces.Space, env_id: str
) -> Iterator[OfflineData]:
    """A dataset too large for memory, one validated row group at a time, in file order (row groups without rows
    too, so the n-th chunk is row group n).

    The same checks as :func:`load_dataset`, in the same order; an episode may continue into the next chunk. The
    checks that need the whole file (the last episode ends, each episode id once, ``rows_sha256``) raise once the
    last chunk has been yielded: consume the iterator to the end before trusting any chunk.
    """
    path = Path(path)
    parquet, metadata = _open_checked(path, observation_space, action_space, env_id)
    observation = ObservationFormat.of(observation_space)
    checks = _Checks(path, action_space, env_id, metadata)
    for group in range(parquet.num_row_groups):
        arrays = _allocate(parquet.metadata.row_group(group).num_rows, observation, action_space)
        _decode_group(path, parquet, group, arrays)
        checks.add(arrays, group)
        yield _as_data(arrays, observation_space, action_space, metadata)
    checks.finish()


def transition_count(path: Path) -> int:
    """Rows (transitions) in the dataset at ``path``, from the Parquet footer."""
    return int(_open(path).metadata.num_rows)


def read_row_group(
    path: Path, group: int, observation_space: gym.Space, action_space: spaces.Space, metadata: dict[str, Any]
) -> OfflineData:
    """Row group ``group`` of a dataset that :func:`iter_dataset` has already validated (page checksums only)."""
    parquet = _open(path)
    rows = parquet.metadata.row_group(group).num_rows
    arrays = _allocate(rows, ObservationFormat.of(observation_space), action_space)
    _decode_group(Path(path), parquet, group, arrays)
    return _as_data(arrays, observation_space, action_space, metadata)


def _allocate(rows: int, observation: ObservationFormat, action_space: spaces.Space) -> dict[str, np.ndarray]:
    """Empty arrays for ``rows`` decoded rows, in the dtypes training reads (and :class:`RowsDigest` hashes)."""
    action_shape, _ = action_layout(action_space)
    return {
        "episode_id": np.empty(rows, np.int64),
        "step": np.empty(rows, np.int64),
        "observation": np.empty((rows, observation.size), observation.dtype),
        "action": np.empty((rows, *action_shape), _numpy_action_dtype(action_space)),
        "reward": np.empty(rows, np.float32),
        "next_observation": np.empty((rows, observation.size), observation.dtype),
        "terminated": np.empty(rows, bool),
        "truncated": np.empty(rows, bool),
    }


def _numpy_action_dtype(action_space: spaces.Space) -> type[np.generic]:
    """int64 (Discrete, MultiDiscrete, MultiBinary) or float32 (Box): how actions are stored."""
    return np.int64 if action_layout(action_space)[1] == torch.int64 else np.float32


def _read_row_group(path: Path, parquet: pq.ParquetFile, group: int, columns: list[str] | None = None) -> pa.Table:
    """Row group ``group`` (its pages' checksums verified), or a one-line :class:`DatasetError`."""
    try:
        return parquet.read_row_group(group, columns=columns)
    except (pa.ArrowException, OSError) as exc:
        message = _one_line(exc)
        if "checksum" in message.lower():
            raise DatasetError(
                f"{path}: corrupt (page checksum mismatch in row group {group}): its bytes changed after it was "
                "written; restore the file or collect it again"
            ) from None
        raise DatasetError(
            f"{path}: not a readable Parquet file (truncated or corrupt?): row group {group}: {message}"
        ) from None


def _decode_group(path: Path, parquet: pq.ParquetFile, group: int, arrays: dict[str, np.ndarray]) -> None:
    """Row group ``group`` decoded into ``arrays`` (views of the right length: no copy beyond one row group)."""
    batch = _read_row_group(path, parquet, group, list(arrays))
    rows = len(arrays["reward"])
    if batch.num_rows != rows:
        raise DatasetError(
            f"{path}: not a readable Parquet file (truncated or corrupt?): row group {group} holds "
            f"{batch.num_rows} rows, its footer says {rows}"
        )
    for name, target in arrays.items():
        column = batch.column(name)
        if column.null_count:  # nulls would corrupt the arrays; only log_prob may be unknown
            raise DatasetError(
                f"{path}: column {name!r} has {column.null_count} null values in row group {group} "
                "(only 'log_prob' may be null)"
            )
        if pa.types.is_fixed_size_binary(column.type):  # raw bytes of values in the target's dtype
            target.reshape(-1).view(np.uint8)[:] = _binary_bytes(column.combine_chunks())
        elif pa.types.is_fixed_size_list(column.type):
            flat = column.combine_chunks().flatten().to_numpy(zero_copy_only=False)
            target[:] = flat.reshape(target.shape)
        else:
            target[:] = column.to_numpy()


def _as_data(
    arrays: dict[str, np.ndarray], observation_space: gym.Space, action_space: spaces.Space, metadata: dict[str, Any]
) -> OfflineData:
    discrete = isinstance(action_space, spaces.Discrete)
    obs_shape = tuple(observation_space.shape or ())
    rows = len(arrays["reward"])
    return OfflineData(
        obs=arrays["observation"].reshape(rows, *obs_shape),
        actions=arrays["action"] if discrete else arrays["action"].reshape(rows, -1),  # flat, as policies act
        rewards=arrays["reward"],
        next_obs=arrays["next_observation"].reshape(rows, *obs_shape),
        terminated=arrays["terminated"],
        truncated=arrays["truncated"],
        episode_id=arrays["episode_id"],
        metadata=metadata,
    )


def _check_columns(
    path: Path, schema: pa.Schema, observation: ObservationFormat, action_space: spaces.Space, env_id: str
) -> None:
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
        if observation.binary:
            if kind != observation.arrow_type:
                raise DatasetError(
                    f"{path}: column {name!r} has type {kind}, but {env_id} observations are {observation.size} "
                    f"{observation.dtype.name} values, stored as {observation.arrow_type} (their raw bytes)"
                )
            continue
        if not pa.types.is_fixed_size_list(kind) or not pa.types.is_floating(kind.value_type):
            raise DatasetError(f"{path}: column {name!r} has type {kind}, expected fixed_size_list<float32>")
        if kind.list_size != observation.size:
            raise DatasetError(
                f"{path}: column {name!r} holds {kind.list_size} values per row, but {env_id} "
                f"observations have {observation.size}"
            )
    kind = schema.field("action").type
    sizes = sub_action_sizes(action_space)
    if isinstance(action_space, spaces.Discrete):
        if not pa.types.is_integer(kind):
            raise DatasetError(f"{path}: column 'action' has type {kind}, but {env_id} has discrete actions (int64)")
    elif sizes is not None:
        if not (
            pa.types.is_fixed_size_list(kind) and pa.types.is_integer(kind.value_type) and kind.list_size == len(sizes)
        ):
            raise DatasetError(
                f"{path}: column 'action' has type {kind}, but {env_id} has {type(action_space).__name__} actions "
                f"(fixed_size_list<int64>[{len(sizes)}])"
            )
    else:
        assert action_space.shape is not None
        size = int(np.prod(action_space.shape))
        if not pa.types.is_fixed_size_list(kind) or kind.list_size != size:
            raise DatasetError(
                f"{path}: column 'action' has type {kind}, but {env_id} actions are fixed_size_list<float32>[{size}]"
            )


class _Checks:
    """Every check of a dataset's rows, fed one row group after another in file order, then finished: values
    (finite, discrete actions in range), layout (rows grouped by episode, steps 0, 1, 2, ... in order, each
    episode once and ending with a terminated or truncated row) and the metadata's ``rows_sha256``.

    :func:`load_dataset` and :func:`iter_dataset` both use it, so a file is refused with the same message
    however it is read. Memory besides the rows given: one int64 per episode (to find an episode id used twice).
    """

    def __init__(self, path: Path, action_space: spaces.Space, env_id: str, metadata: dict[str, Any]) -> None:
        self.path, self.action_space, self.env_id = path, action_space, env_id
        self.rows = 0  # rows checked so far: the file row number of the next one
        self.last: tuple[int, int, bool] | None = None  # (episode_id, step, ended) of the last row checked
        self.episode_ids: list[np.ndarray] = []  # the id of each episode (run of rows), in file order
        self.ascending = True  # the ids so far increase: none can repeat
        self.recorded: str | None = metadata.get("rows_sha256")
        self.digest = RowsDigest() if self.recorded is not None else None

    def add(self, arrays: dict[str, np.ndarray], group: int) -> None:
        """The rows of row group ``group``, decoded (:func:`_allocate`'s keys)."""
        if len(arrays["reward"]) == 0:
            return
        self._values(arrays, group)
        self._layout(arrays)
        if self.digest is not None:
            self.digest.update(arrays)
        self.rows += len(arrays["reward"])

    def finish(self) -> None:
        """The checks that need every row: the last episode ends, each episode id once, ``rows_sha256``."""
        path = self.path
        if self.last is None:
            raise DatasetError(f"{path}: no transitions")
        episode, _, ended = self.last
        if not ended:
            raise DatasetError(
                f"{path}: episode {episode} does not end with a terminated or truncated row "
                f"(its last row is the file's last, row {self.rows - 1})"
            )
        if not self.ascending:
            ids = np.concatenate(self.episode_ids)
            order = np.argsort(ids, kind="stable")  # equal ids keep file order: the later ones are repeats
            repeats = order[1:][ids[order[1:]] == ids[order[:-1]]]
            if len(repeats):
                raise DatasetError(
                    f"{path}: episode {int(ids[repeats.min()])} appears in two separate runs of rows (duplicated "
                    "or reordered rows?): rows must be grouped by episode in step order, each episode once"
                )
        if self.digest is not None and self.digest.hexdigest() != self.recorded:
            raise DatasetError(
                f"{path}: its rows are not those its rlcore metadata describes (rows_sha256 differs): the file "
                "changed after it was written; restore it or collect it again (to train on edited rows, write "
                "them without the 'rlcore' metadata key)"
            )

    def _values(self, arrays: dict[str, np.ndarray], group: int) -> None:
        path = self.path
        for name in ("reward", "observation", "next_observation", "action"):
            values = arrays[name]
            if not np.issubdtype(values.dtype, np.floating) or np.isfinite(values).all():  # cheap; rows only if bad
                continue
            finite = np.isfinite(values).reshape(len(values), -1).all(axis=1)
            first = int(np.flatnonzero(~finite)[0])
            raise DatasetError(
                f"{path}: {int((~finite).sum())} rows with a NaN or infinite {name} (first at row "
                f"{self.rows + first}) in row group {group}"
            )
        if isinstance(self.action_space, spaces.Discrete):
            actions = arrays["action"]
            bad = (actions < 0) | (actions >= self.action_space.n)
            if bad.any():
                row = int(np.flatnonzero(bad)[0])
                raise DatasetError(
                    f"{path}: action {int(actions[row])} is outside {self.env_id}'s "
                    f"{int(self.action_space.n)} discrete actions (row {self.rows + row})"
                )
        sizes = sub_action_sizes(self.action_space)
        if sizes is not None:
            actions, limit = arrays["action"], np.asarray(sizes)
            bad = ((actions < 0) | (actions >= limit)).any(axis=1)
            if bad.any():
                row = int(np.flatnonzero(bad)[0])
                sub = int(np.flatnonzero((actions[row] < 0) | (actions[row] >= limit))[0])
                raise DatasetError(
                    f"{path}: action {actions[row].tolist()} has sub-action {sub} = {int(actions[row, sub])}, outside "
                    f"0..{sizes[sub] - 1} of {self.env_id}'s {type(self.action_space).__name__} (row {self.rows + row})"
                )

    def _layout(self, arrays: dict[str, np.ndarray]) -> None:
        ids, steps = arrays["episode_id"], arrays["step"]
        ended = arrays["terminated"] | arrays["truncated"]
        same = ids[1:] == ids[:-1]
        in_order = np.where(same, steps[1:] == steps[:-1] + 1, steps[1:] == 0)
        if self.last is None:
            first_same, first_in_order, previous_ended = False, bool(steps[0] == 0), True
        else:
            previous_id, previous_step, previous_ended = self.last
            first_same = bool(ids[0] == previous_id)
            first_in_order = bool(steps[0] == previous_step + 1) if first_same else bool(steps[0] == 0)
        # the first row out of order, and the first row that starts an episode before the previous one ended
        disorder = 0 if not first_in_order else None if in_order.all() else 1 + int(np.argmin(in_order))
        starts = np.flatnonzero(~same) + 1
        cut = starts[~ended[starts - 1]]
        unended = 0 if not (first_same or previous_ended) else int(cut[0]) if len(cut) else None
        if disorder is not None and (unended is None or disorder <= unended):
            raise DatasetError(self._disorder(arrays, disorder))
        if unended is not None:
            episode = int(ids[unended - 1]) if unended else self.last[0] if self.last else 0
            raise DatasetError(
                f"{self.path}: episode {episode} does not end with a terminated or truncated row (row "
                f"{self.rows + unended - 1} is followed by episode {int(ids[unended])} step {int(steps[unended])})"
            )
        new = ids[starts] if first_same else np.concatenate([ids[:1], ids[starts]])
        if len(new):
            if self.ascending:
                after = self.episode_ids[-1][-1] if self.episode_ids else None
                self.ascending = bool(np.all(new[1:] > new[:-1])) and (after is None or bool(new[0] > after))
            self.episode_ids.append(new)
        self.last = (int(ids[-1]), int(steps[-1]), bool(ended[-1]))

    def _disorder(self, arrays: dict[str, np.ndarray], index: int) -> str:
        episode, step, row = int(arrays["episode_id"][index]), int(arrays["step"][index]), self.rows + index
        rule = "rows must be grouped by episode in step order (steps 0, 1, 2, ...)"
        if index:
            previous: tuple[int, int] | None = (int(arrays["episode_id"][index - 1]), int(arrays["step"][index - 1]))
        else:
            previous = self.last[:2] if self.last else None
        if previous is None:
            return f"{self.path}: row 0 is episode {episode} step {step}, not an episode's first step (0): {rule}"
        if previous == (episode, step):
            return f"{self.path}: row {row} repeats episode {episode} step {step} (duplicated rows): {rule}"
        return (
            f"{self.path}: row {row} is episode {episode} step {step}, after episode {previous[0]} step "
            f"{previous[1]} (duplicated, missing or reordered rows?): {rule}"
        )
