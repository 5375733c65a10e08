"""Writing datasets of transitions (the schema: ``rlcore.data.schema``): a streaming writer of episodes and the
merge of a collection's shards into one file.

A file appears under its name only once complete (written under a temporary name, then renamed); every page carries
a CRC32 checksum and the metadata records ``rows_sha256`` (:class:`rlcore.data.schema.RowsDigest`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from gymnasium import spaces

from rlcore.common.files import AtomicTarget, atomic_path, check_target, shown_path
from rlcore.data.reader import _open, _read_row_group, read_metadata
from rlcore.data.schema import (
    AGENT_COLUMN,
    GROUP_COLUMN,
    LABEL_COLUMNS,
    METADATA_KEY,
    SCHEMA_VERSION,
    DatasetError,
    ObservationFormat,
    RowsDigest,
    _numpy_action_dtype,
    arrow_schema,
    label_columns,
)

PARQUET_MAGIC = b"PAR1"
"""The first bytes of every Parquet file."""


def check_dataset_target(path: Path | str, key: str) -> Path:
    """``path`` if a dataset may be written there: absent, empty, or a Parquet file (an earlier dataset), and never
    anything but a regular file (``rlcore.common.files.check_target``). Anything else there (a params file, a model) is
    refused in one line naming ``key``: a dataset writer replaces only a dataset."""
    target = check_target(path, key)
    if target.is_file() and target.stat().st_size > 0:
        with open(target, "rb") as handle:
            head = handle.read(len(PARQUET_MAGIC))
        if head != PARQUET_MAGIC:
            raise DatasetError(
                f"{key}: {shown_path(target)} is not a Parquet file (a dataset replaces only an earlier dataset); give "
                "another path, or delete the file first"
            )
    return target


class DatasetWriter:
    """Streams complete episodes into a Parquet file, one row group per ``row_group_size`` transitions.

    Memory holds at most one row group plus the episodes in progress. The file is written under a
    temporary name and renamed into place by :meth:`close`, with the metadata (statistics included).
    ``agents`` (a multi-agent env's names): every episode is one agent's, named in the ``agent`` column, and the
    metadata lists them as ``agents``; None (a single-agent env): no such column, no such key. ``groups`` (group ->
    its agents' names, every agent in exactly one: ``rlcore.envs.agent_groups.GroupLayout.members``, for a
    collection with ``policy.groups``): each row's agent's group in the ``group`` column, and the metadata records
    them as ``groups``; None: no such column, no such key.
    """

    def __init__(
        self,
        path: Path,
        observation_space: gym.Space,
        action_space: spaces.Space,
        metadata: dict[str, Any],
        row_group_size: int = 65_536,
        agents: tuple[str, ...] | None = None,
        groups: Mapping[str, Sequence[str]] | None = None,
    ) -> None:
        self.path = Path(path)
        self.observation = ObservationFormat.of(observation_space)
        self.action_dtype = _numpy_action_dtype(action_space)
        members = [agent for group in (groups or {}).values() for agent in group]
        if groups is not None and (agents is None or sorted(members) != sorted(agents)):
            raise ValueError(f"{self.path}: every agent belongs to exactly one group, got {dict(groups)} for {agents}")
        self._group_of = {agent: name for name, group in (groups or {}).items() for agent in group}
        labels = () if agents is None else (AGENT_COLUMN,) if groups is None else (AGENT_COLUMN, GROUP_COLUMN)
        self.schema = arrow_schema(self.observation, action_space, labels)
        self.metadata = dict(metadata) | ({"agents": list(agents)} if agents is not None else {})
        if groups is not None:
            self.metadata["groups"] = {name: list(group) for name, group in groups.items()}
        self.agents = agents
        self.row_group_size = row_group_size
        self._atomic = AtomicTarget(self.path)
        try:
            self._writer = _RowGroupWriter(self._atomic.tmp, self.schema, row_group_size)
        except BaseException:
            self._atomic.discard()  # the temporary file exists from here on: none is left behind
            raise
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
        agent: str | None = None,
    ) -> None:
        """One complete episode, T transitions: obs/next_obs (T, *obs_shape), actions (T,) or (T, k); ``agent``:
        whose it is (required by, and only for, a writer of a multi-agent dataset)."""
        length = len(rewards)
        if (agent is None) != (AGENT_COLUMN not in self.schema.names):
            raise ValueError(f"{self.path}: an episode's agent is given exactly when the dataset has agents")
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
                AGENT_COLUMN: agent,
                GROUP_COLUMN: self._group_of.get(agent) if agent is not None else None,
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
        for name in self.schema.names:
            parts = [episode[name] for episode in self._pending]
            field = self.schema.field(name)
            if name in LABEL_COLUMNS:
                names = [part for part, e in zip(parts, self._pending, strict=True) for _ in range(len(e["reward"]))]
                columns[name] = pa.array(names, type=pa.string())
            elif name == "log_prob":  # unknown log-probabilities (None or NaN) are stored as nulls
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
    carries a CRC32 checksum (verified by every read, :func:`rlcore.data.reader._open`), and the close records the
    rows' sha256 (:class:`RowsDigest`) in the metadata."""

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
        self.digest = RowsDigest(label_columns(schema.names))
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
