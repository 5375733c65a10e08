"""Reading datasets of transitions (the schema: ``rlcore.data.schema``): their metadata, and their rows
validated against an env, whole or one row group at a time.

Every problem is one :class:`rlcore.data.schema.DatasetError` line naming the file; the checks of columns and rows
are ``rlcore.data.checks``'.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import torch
from gymnasium import spaces

from rlcore.common.errors import did_you_mean, file_problem
from rlcore.data.checks import _check_columns, _Checks
from rlcore.data.schema import (
    AGENT_COLUMN,
    GROUP_COLUMN,
    LABEL_COLUMNS,
    METADATA_KEY,
    SCHEMA_VERSION,
    DatasetError,
    ObservationFormat,
    _allocate,
    _binary_bytes,
    label_columns,
)


@dataclass
class OfflineData:
    """Transitions as NumPy arrays, rows in file order: obs/next_obs (N, *obs_shape) in their storage dtype
    (float32; uint8/bool frames and int64 Discrete values as they are),
    actions (N,) int64 (Discrete), (N, k) int64 (MultiDiscrete, MultiBinary) or (N, action_dim) float32 (Box),
    rewards (N,) float32, terminated/truncated (N,) bool, episode_id (N,) int64; agent (N,) object (``str``
    names) for a multi-agent dataset, else None; group (N,) object (``str`` names) for one collected with
    ``policy.groups``, else None."""

    obs: np.ndarray
    actions: np.ndarray
    rewards: np.ndarray
    next_obs: np.ndarray
    terminated: np.ndarray
    truncated: np.ndarray
    episode_id: np.ndarray
    metadata: dict[str, Any]
    agent: np.ndarray | None = None
    group: np.ndarray | None = None

    def __len__(self) -> int:
        return len(self.rewards)

    @classmethod
    def concat(cls, parts: list[OfflineData]) -> OfflineData:
        """``parts`` one after another (the first one's metadata)."""

        def labels(name: str) -> np.ndarray | None:  # a label column, where every part has it
            values = [getattr(part, name) for part in parts]
            return None if any(value is None for value in values) else np.concatenate(values)

        # mypy cannot match *args of unknown length against the dataclass fields (misc, arg-type)
        return cls(  # type: ignore[misc]
            *(np.concatenate([getattr(part, name) for part in parts]) for name in  # type: ignore[arg-type]
              ("obs", "actions", "rewards", "next_obs", "terminated", "truncated", "episode_id")),
            metadata=parts[0].metadata,
            agent=labels(AGENT_COLUMN),
            group=labels(GROUP_COLUMN),
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
            None if self.agent is None else self.agent[rows],
            None if self.group is None else self.group[rows],
        )

    def of_agents(self, agents: list[str] | None, path: Path) -> OfflineData:
        """The rows of ``agents`` (``dataset.agents``; None: every row); one-line :class:`DatasetError` when the
        dataset at ``path`` has no agent column or no row of one of them."""
        return self if agents is None else self.subset(np.flatnonzero(agent_rows(self.agent, agents, path)))

    def of_groups(self, groups: list[str] | None, path: Path) -> OfflineData:
        """The rows of ``groups`` (``dataset.groups``; None: every row); one-line :class:`DatasetError` when the
        dataset at ``path`` has no group column, or one of them is not among its groups or has no row."""
        if groups is None:
            return self
        return self.subset(np.flatnonzero(group_rows(self.group, groups, path, self.metadata)))

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


def agent_rows(agent: np.ndarray | None, agents: list[str], path: Path) -> np.ndarray:
    """(N,) bool: the rows of ``agent`` (a dataset's agent column, or None: it has none) that belong to ``agents``
    (``dataset.agents``); :class:`DatasetError` (one line) for a dataset without agents or an agent with no row."""
    return _labelled_rows(agent, agents, path, AGENT_COLUMN, "it was collected from a single-agent env", None)


def group_rows(group: np.ndarray | None, groups: list[str], path: Path, metadata: dict[str, Any]) -> np.ndarray:
    """(N,) bool: the rows of ``group`` (a dataset's group column, or None: it has none) that belong to ``groups``
    (``dataset.groups``); :class:`DatasetError` (one line) for a dataset without groups, a group its ``metadata``
    does not list (where it lists them) or a group with no row."""
    recorded = metadata.get("groups")
    known = list(recorded) if isinstance(recorded, dict) else None
    return _labelled_rows(group, groups, path, GROUP_COLUMN, "it was collected without policy.groups", known)


def _labelled_rows(
    values: np.ndarray | None, names: list[str], path: Path, column: str, why_none: str, known: list[str] | None
) -> np.ndarray:
    """(N,) bool: the rows whose ``column`` (``values``; None: the dataset has no such column) is one of ``names``
    (``dataset.<column>s``); ``known``: every name the metadata records, where it records them."""
    key = f"dataset.{column}s"
    if values is None:
        raise DatasetError(f"{key}: {path} has no {column} column ({why_none}); remove {key}")
    unknown = [name for name in names if known is not None and name not in known]
    if unknown:
        raise DatasetError(
            f"{key}: {path} has no {column} {unknown[0]!r} (its {column}s: {', '.join(known or [])})"
            + did_you_mean(unknown[0], known or [])
        )
    missing = [name for name in names if not (values == name).any()]
    if missing:
        present = ", ".join(sorted({str(name) for name in values}))
        raise DatasetError(f"{key}: {path} has no rows of {column} {missing[0]!r} (its {column}s: {present})")
    return np.isin(values, np.asarray(names, dtype=object))


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
    groups = metadata.get("groups")
    if groups is not None and not (
        isinstance(groups, dict)
        and all(isinstance(agents, list) and all(isinstance(a, str) for a in agents) for agents in groups.values())
    ):
        raise DatasetError(f"{path}: unreadable rlcore metadata ('groups' is not an object of group -> agent names)")
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
    labels = label_columns(parquet.schema_arrow.names)
    arrays = _allocate(sum(sizes), ObservationFormat.of(observation_space), action_space, labels)
    checks = _Checks(path, action_space, env_id, metadata, labels)
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
    labels = label_columns(parquet.schema_arrow.names)
    checks = _Checks(path, action_space, env_id, metadata, labels)
    for group in range(parquet.num_row_groups):
        arrays = _allocate(parquet.metadata.row_group(group).num_rows, observation, action_space, labels)
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
    labels = label_columns(parquet.schema_arrow.names)
    arrays = _allocate(rows, ObservationFormat.of(observation_space), action_space, labels)
    _decode_group(Path(path), parquet, group, arrays)
    return _as_data(arrays, observation_space, action_space, metadata)


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
        elif name in LABEL_COLUMNS:
            target[:] = column.to_pylist()
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
        agent=arrays.get(AGENT_COLUMN),
        group=arrays.get(GROUP_COLUMN),
    )
