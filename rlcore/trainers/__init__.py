"""Training loops, one per regime; :func:`train` picks the one the algorithm declares."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rlcore.algos import algorithm_class
from rlcore.config import Params
from rlcore.trainers.run import EvaluationCallback


def train(
    params: Params, run_dir: Path, on_evaluation: EvaluationCallback | None = None, resume_from: Path | None = None
) -> dict[str, Any]:
    """Train ``params`` into ``run_dir`` (resuming an interrupted run there); returns the train summary."""
    kind = algorithm_class(params.algo.name).kind
    if kind == "on_policy":
        from rlcore.trainers.on_policy import train_on_policy

        return train_on_policy(params, run_dir, on_evaluation, resume_from)
    if kind == "off_policy":
        from rlcore.trainers.off_policy import train_off_policy

        return train_off_policy(params, run_dir, on_evaluation, resume_from)
    if kind == "offline":
        from rlcore.trainers.offline import train_offline

        return train_offline(params, run_dir, on_evaluation, resume_from)
    raise NotImplementedError(f"no trainer for algorithm kind {kind!r}")
