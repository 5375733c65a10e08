"""Demonstrations for an online run's auxiliary losses (``algo.behavioral_cloning``, the ``gail`` reward signal):
a dataset in our Parquet schema (``rlcore.data.schema``) checked against the run's spaces and read into memory, with
every problem one line naming the params key that pointed at the file.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import gymnasium as gym

from rlcore.common.errors import ConfigError
from rlcore.common.files import shown_path
from rlcore.data.reader import OfflineData, load_dataset, read_metadata
from rlcore.data.schema import DatasetError
from rlcore.envs.vector import describe_space


def brief(description: dict[str, Any]) -> str:
    """A space's description (``rlcore.envs.vector.describe_space``) in a few words: ``box (4,) float32``, ``discrete
    2``."""
    kind = description.get("type")
    if "shape" in description and kind != "discrete":
        return f"{kind} {tuple(description['shape'])} {description.get('dtype', '')}".strip()
    return f"{kind} {description.get('n', '')}".strip()


def check_header(key: str, path: Path, observation_space: gym.Space, action_space: gym.Space) -> dict[str, Any]:
    """The dataset's metadata, after what can be refused without reading a row: a missing or unreadable file,
    recorded spaces other than this run's (one line naming ``key``, e.g. ``algo.behavioral_cloning.dataset``)."""
    try:
        metadata = read_metadata(path)
    except DatasetError as exc:
        raise ConfigError(f"{key}: {shown_path(path)}{str(exc).removeprefix(str(path))}") from None
    for kind, space in (("observation", observation_space), ("action", action_space)):
        recorded, own = metadata.get(f"{kind}_space"), describe_space(space)
        if recorded is not None and recorded != own:
            raise ConfigError(f"{key}: {shown_path(path)}: {kind} space {brief(recorded)}, this run's {brief(own)}")
    return metadata


def load_demonstrations(key: str, path: Path, observation_space: gym.Space, action_space: gym.Space) -> OfflineData:
    """Every transition of the dataset at ``path`` (checked as :func:`check_header`, then row by row)."""
    metadata = check_header(key, path, observation_space, action_space)
    env_id = str((metadata.get("env") or {}).get("id") or "this run's env")  # the spaces were checked above
    try:
        return load_dataset(path, observation_space, action_space, env_id)
    except DatasetError as exc:
        raise ConfigError(f"{key}: {shown_path(path)}{str(exc).removeprefix(str(path))}") from None
