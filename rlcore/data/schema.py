"""The Parquet dataset schema: columns, Arrow and NumPy dtypes, metadata keys, the rows digest, DatasetError.

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
| ``agent`` | string | multi-agent datasets only: the agent whose transition the row is (a PettingZoo name) |
| ``group`` | string | datasets collected with ``policy.groups`` only: the group of the row's agent |

A dataset collected from a PettingZoo Parallel env (``rlcore.envs.multiagent``) has one row per agent step: each
agent's part of an episode is an episode of its own (its own ``episode_id``, steps from 0, ending at the agent's own
termination or truncation), its rows carry the agent's name in ``agent`` and its observations the agent's one-hot
where the env appends one (``env.agent_id``). Its metadata lists the agents (``agents``). Datasets from single-agent
envs have no ``agent`` column (the columns, the metadata and ``rows_sha256`` are what they were before it existed).
Collected with ``policy.groups`` (``rlcore.envs.agent_groups``: each agent in the one group whose ``fnmatch``
patterns match its name), a multi-agent dataset also has the ``group`` column, right after ``agent``, and its
metadata lists each group's agents (``groups``: group -> agent names, in ``policy.groups`` order); without
``policy.groups`` it has neither (the file is what it was before they existed). ``dataset.agents`` and
``dataset.groups`` train an offline algorithm on the rows of some agents or some groups.

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
``transitions``, ``episode_return`` statistics, ``agents`` (multi-agent datasets: the env's agents, in order),
``groups`` (collected with ``policy.groups``: group name -> its agents' names) and ``rows_sha256``
(:class:`RowsDigest`: the rows as read for training, the ``agent`` and ``group`` columns included where there are
any, so a reader can tell that the rows are still the ones the metadata describes). A file without it (your own
data) is read against the env named in params.

Written by ``rlcore.data.writer``; read by ``rlcore.data.reader``, which checks every file with
``rlcore.data.checks``.

Integrity: the writer stores a CRC32 checksum in every Parquet page header and every read verifies them, so
bytes damaged after writing are refused ("page checksum mismatch") instead of decoded; ``rows_sha256``, where
recorded, is verified after every other check of a read.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import gymnasium as gym
import numpy as np
import pyarrow as pa
import torch
from gymnasium import spaces

from rlcore.common.errors import RLCoreError
from rlcore.envs.actions import action_layout
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
"""The columns :class:`RowsDigest` covers: every one training reads (``log_prob`` is provenance only), and the
:data:`LABEL_COLUMNS` a dataset has."""
AGENT_COLUMN = "agent"
"""The optional column of multi-agent datasets, after :data:`COLUMNS`: the agent's name (string)."""
GROUP_COLUMN = "group"
"""The optional column of multi-agent datasets collected with ``policy.groups``, after :data:`AGENT_COLUMN`: the
agent's group (string)."""
LABEL_COLUMNS = (AGENT_COLUMN, GROUP_COLUMN)
"""The optional string columns that label each row, in the order they follow :data:`COLUMNS`."""


def label_columns(names: list[str] | tuple[str, ...]) -> tuple[str, ...]:
    """The :data:`LABEL_COLUMNS` among a schema's column ``names``, in their order."""
    return tuple(name for name in LABEL_COLUMNS if name in names)


class DatasetError(RLCoreError):
    """A dataset file is missing, unreadable, or does not fit the env; nothing is trained on it."""


class RowsDigest:
    """sha256 of a dataset's rows as training reads them: each of :data:`DIGEST_COLUMNS` in row order, in the
    dtype it is decoded to (int64 ids, steps and integer actions, float32 vectors flattened, bool flags), so
    the digest depends on the values and their order only, not on the row groups, encodings or integer widths
    of the file. Hashes one column per sha256, combined at the end."""

    def __init__(self, labels: tuple[str, ...] = ()) -> None:
        """``labels``: the :data:`LABEL_COLUMNS` the dataset has (:func:`label_columns`), hashed after the others."""
        self._columns = {name: hashlib.sha256() for name in (*DIGEST_COLUMNS, *labels)}

    def update(self, arrays: Mapping[str, np.ndarray]) -> None:
        """The next rows, decoded as :func:`_allocate` lays them out (a column's canonical dtype; agent and group
        names as their UTF-8 bytes, each followed by a NUL)."""
        for name, digest in self._columns.items():
            if name in LABEL_COLUMNS:
                digest.update(b"".join(f"{label}\0".encode() for label in arrays[name]))
                continue
            digest.update(np.ascontiguousarray(arrays[name]).reshape(-1).view(np.uint8).data)

    def update_table(self, table: pa.Table) -> None:
        """The next rows, as an Arrow table in the dataset schema (what the writer writes)."""
        self.update({name: _canonical(table.column(name)) for name in self._columns})

    def hexdigest(self) -> str:
        total = hashlib.sha256()
        for name, digest in self._columns.items():
            total.update(f"{name}:{digest.hexdigest()}\n".encode())
        return total.hexdigest()


def _canonical(column: pa.ChunkedArray) -> np.ndarray:
    """A column's values in the dtype a read decodes them to (:func:`_allocate`; vectors flattened; binary
    observations as their raw bytes, which is what a decoded array of their dtype hashes as)."""
    kind = column.type
    if pa.types.is_string(kind) or pa.types.is_large_string(kind):
        return np.asarray(column.to_pylist(), dtype=object)
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


def arrow_schema(observation: ObservationFormat, action_space: spaces.Space, labels: tuple[str, ...] = ()) -> pa.Schema:
    """The columns of a dataset (the module docstring's tables); ``labels``: the :data:`LABEL_COLUMNS` it has,
    last."""
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
            *(pa.field(name, pa.string(), nullable=False) for name in labels),
        ]
    )


def _allocate(
    rows: int, observation: ObservationFormat, action_space: spaces.Space, labels: tuple[str, ...] = ()
) -> dict[str, np.ndarray]:
    """Empty arrays for ``rows`` decoded rows, in the dtypes training reads (and :class:`RowsDigest` hashes);
    ``labels``: with those :data:`LABEL_COLUMNS` (object, the names as ``str``)."""
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
        **{name: np.empty(rows, object) for name in labels},
    }


def _numpy_action_dtype(action_space: spaces.Space) -> type[np.generic]:
    """int64 (Discrete, MultiDiscrete, MultiBinary) or float32 (Box): how actions are stored."""
    return np.int64 if action_layout(action_space)[1] == torch.int64 else np.float32
