"""Minari datasets (Farama's offline-RL format, D4RL's successor) -> rlcore's Parquet schema v1.

Minari stores an episode as T+1 observations and T actions, rewards, terminations and truncations;
rlcore stores T rows of (observation, action, reward, next observation, terminated, truncated), so
the conversion pairs each observation with the next one. Episodes are streamed one at a time into a
:class:`DatasetWriter`, so memory holds one episode plus one row group. Needs ``minari`` (the ``minari``
extra: ``pip install -e ".[minari]"``); downloading from Minari's remote is Minari's job
(``minari download ID``).
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import numpy as np
from gymnasium import spaces

from rlcore.common.errors import RLCoreError
from rlcore.data.schema import DatasetError
from rlcore.data.writer import DatasetWriter, check_dataset_target
from rlcore.envs.vector import describe_space

log = logging.getLogger("rlcore")


def import_minari(source: str, output: Path, row_group_size: int = 65_536) -> dict[str, Any]:
    """Convert the Minari dataset ``source`` (a dataset id in MINARI_DATASETS_PATH, or its folder) to ``output``.

    Returns the written file's metadata. Observation spaces must be Box (flattened); action spaces Box or
    Discrete. Every problem is one :class:`DatasetError` line naming the dataset; ``output`` is untouched then.
    """
    output = check_dataset_target(output, "--output")
    dataset = _open(source)
    observation_space, action_space = dataset.observation_space, dataset.action_space
    if not isinstance(observation_space, spaces.Box):
        raise DatasetError(f"{source}: observation space {observation_space} is not a Box; rlcore datasets need one")
    if not isinstance(action_space, (spaces.Box, spaces.Discrete)):
        raise DatasetError(f"{source}: action space {action_space} is neither Box nor Discrete")
    env_spec = dataset.env_spec
    spec = dataset.spec
    metadata = {
        "env": {"id": getattr(env_spec, "id", None), "kwargs": dict(getattr(env_spec, "kwargs", None) or {})},
        "observation_space": describe_space(observation_space),
        "action_space": describe_space(action_space),
        "policy": {
            "kind": "minari",
            "dataset_id": spec.dataset_id,
            "algorithm": getattr(spec, "algorithm_name", None),
            "minari_version": getattr(spec, "minari_version", None),
            "author": _plain(getattr(spec, "author", None)),
            "code_permalink": getattr(spec, "code_permalink", None),
        },
    }
    writer = DatasetWriter(output, observation_space, action_space, metadata, row_group_size)
    try:
        for episode in dataset.iterate_episodes():
            if len(episode.rewards):  # Minari allows empty episodes (a reset only): nothing to learn from
                writer.add_episode(*_rows(source, episode, observation_space, action_space))
    except BaseException:
        writer.abort()
        raise
    if writer.episodes == 0:
        writer.abort()
        raise DatasetError(f"{source}: the Minari dataset has no episodes")
    written = writer.close()
    log.info(
        "imported %d transitions in %d episodes of Minari dataset %s (env %s) -> %s",
        written["transitions"],
        written["episodes"],
        spec.dataset_id,
        metadata["env"]["id"],
        output,
    )
    return written


def _open(source: str) -> Any:
    try:
        import minari
    except ImportError:
        raise RLCoreError('import-minari needs Minari: pip install -e ".[minari]" (or "minari[arrow]")') from None
    folder = Path(source)
    try:
        if folder.is_dir():  # a dataset's folder (or its data/ folder), e.g. from another machine
            return minari.MinariDataset(folder / "data" if (folder / "data").is_dir() else folder)
        return minari.load_dataset(source)
    except (FileNotFoundError, ValueError, KeyError, OSError) as exc:
        where = (
            "a Minari dataset folder" if folder.is_dir() else "a local Minari dataset id (`minari download ID` first)"
        )
        raise DatasetError(f"{source}: not {where}: {exc}") from None


def _rows(
    source: str, episode: Any, observation_space: spaces.Box, action_space: spaces.Space
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, None]:
    """One Minari episode as rlcore's columns: obs, actions, rewards, next_obs, terminated, truncated, None.

    Minari stores the env's actions; rlcore stores the policy's (``rlcore.envs.actions``): a ``Discrete(n, start)``
    action ``a`` is the index ``a - start``."""
    observations = np.asarray(episode.observations, dtype=np.float32).reshape(len(episode.observations), -1)
    length = len(episode.rewards)
    if len(observations) != length + 1:
        raise DatasetError(
            f"{source}: episode {episode.id} has {len(observations)} observations for {length} steps "
            f"(Minari stores steps + 1)"
        )
    terminated = np.asarray(episode.terminations, dtype=bool)
    truncated = np.asarray(episode.truncations, dtype=bool).copy()
    if length and not (terminated[-1] or truncated[-1]):
        truncated[-1] = True  # an episode cut by the end of recording: bootstrap from its last observation
    actions = np.asarray(episode.actions)
    if isinstance(action_space, spaces.Discrete):
        actions = actions.astype(np.int64) - int(action_space.start)
    return (
        observations[:-1],
        actions,
        np.asarray(episode.rewards, dtype=np.float32),
        observations[1:],
        terminated,
        truncated,
        None,
    )


def _plain(value: Any) -> Any:
    """Minari keeps some fields as sets; JSON wants lists."""
    return sorted(value) if isinstance(value, set) else value
