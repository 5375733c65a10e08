"""Hyperparameter schedules over training progress (0 at the start, 1 at the env-step budget)."""

from __future__ import annotations

from typing import Literal

ScheduleName = Literal["constant", "linear"]


def scheduled(initial: float, schedule: ScheduleName, progress: float, final: float = 0.0) -> float:
    """``initial`` for ``constant``; linear interpolation from ``initial`` to ``final`` for ``linear``."""
    if schedule == "constant":
        return initial
    progress = min(max(progress, 0.0), 1.0)
    return initial + (final - initial) * progress
