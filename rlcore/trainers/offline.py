"""The offline loop: gradient steps on minibatches of a fixed dataset; no training env is built.

An offline run counts *gradient steps*: ``train.max_steps``, ``train.eval_every`` and ``train.log_every``
are in gradient steps, and checkpoints are named after them. Evaluation (the only use of an env),
checkpoints, logging and stop conditions are the session's; the dataset, its identity in every checkpoint
and the validation metrics on held-out episodes (BC) are the source's.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rlcore.algos.base import OfflineAlgorithm, OfflineConfig
from rlcore.config.sections import Params
from rlcore.trainers.session import TrainingSession
from rlcore.trainers.sources import DatasetSource
from rlcore.trainers.stopping import EvaluationCallback


def train_offline(
    params: Params,
    run_dir: Path,
    on_evaluation: EvaluationCallback | None = None,
    resume_from: Path | None = None,
    *,
    keep_finished: bool = False,
) -> dict[str, Any]:
    """Train ``params.algo`` (an offline algorithm) on ``params.dataset`` into ``run_dir``.
    ``keep_finished``: a finished run in ``run_dir`` with these train params is kept (:class:`RunFinishedError`).
    """
    with TrainingSession(
        params, run_dir, on_evaluation, resume_from, DatasetSource, keep_finished=keep_finished
    ) as session:
        return run_offline(session)


def run_offline(session: TrainingSession[DatasetSource]) -> dict[str, Any]:
    """The loop of an open session, to its end: gradient steps on the source's minibatches, evaluations and
    checkpoints when due, until a stop condition. Returns the train summary."""
    cfg = session.params.algo
    assert isinstance(cfg, OfflineConfig) and isinstance(session.algorithm, OfflineAlgorithm)
    algorithm, state, source = session.algorithm, session.state, session.source
    stop_reason = session.stops.budget(state)
    while stop_reason is None:
        batch = source.batch(state.gradient_steps, session.rng, cfg.batch_size)
        session.after_update(algorithm.update(batch, session.progress_fraction))
        stop_reason = session.checkpoint_due_or_stop()
    return session.finish(stop_reason)
