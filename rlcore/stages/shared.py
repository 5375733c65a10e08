"""What several stages share: the env-id check of a loaded checkpoint, its step counts and how log lines name it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rlcore.common.checkpoints import Checkpoint
from rlcore.common.errors import RLCoreError


def check_trained_on(checkpoint: Checkpoint, env_id: str) -> None:
    """Refuse a checkpoint trained on another env than ``env.id`` (evaluation, test scoring, collection)."""
    trained_on = checkpoint.meta["params"]["env"]["id"]
    if trained_on != env_id:
        raise RLCoreError(f"{checkpoint.path}: trained on {trained_on}, params say env.id {env_id}")


STEP_KEYS = ("step", "step_unit", "env_steps", "gradient_steps")
"""How far a checkpoint was trained: ``step`` in the run's ``step_unit``, and both true counts."""


def step_counts(checkpoint: Checkpoint) -> dict[str, Any]:
    return {
        "step": checkpoint.step,
        "step_unit": checkpoint.step_unit,
        "env_steps": checkpoint.meta.get("env_steps", 0),
        "gradient_steps": checkpoint.meta.get("gradient_steps", 0),
    }


def checkpoint_words(path: Path, seed: int | None) -> str:
    """A checkpoint as log lines name it: its file name, after its seed's in a run of several seeds."""
    return f"seed {seed} {path.name}" if seed is not None else path.name
