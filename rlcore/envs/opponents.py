"""Fixed opponents for two-player turn-based games (``env.opponent``, ``rlcore.envs.turn_based``): functions
``(observation, rng) -> action`` of a seat's PettingZoo classic observation (a Dict with ``"action_mask"``)."""

from __future__ import annotations

from typing import Any

import numpy as np


def random_legal(observation: dict[str, Any], rng: np.random.Generator) -> int:
    """A uniformly random legal move: one of the actions where ``observation["action_mask"]`` (n,) is 1."""
    legal = np.flatnonzero(np.asarray(observation["action_mask"]))
    return int(legal[rng.integers(len(legal))])
