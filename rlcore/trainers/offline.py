"""The offline loop: gradient steps on minibatches of a fixed dataset; no training env is built.

An offline run counts *gradient steps*: ``train.max_steps``, ``train.eval_every`` and ``train.log_every``
are in gradient steps, and checkpoints are named after them. Evaluation (the only use of an env),
checkpoints, logging and stop conditions are the session's; the dataset, its identity in every checkpoint
and the validation metrics on held-out episodes (BC) are the source's.

One loop serves one seed's run and ``train.seeds``' N seeds trained as one program (:func:`run_offline` over their
open sessions, ``rlcore.trainers.lockstep``): per gradient step every seed draws its own minibatch (its held-out
episodes and NumPy generator are its own) and the seeds step together, stacked where their networks' kind stacks
(BC's MLP heads on vector observations) and each seed's own network in turn otherwise (image BC, TD3+BC, IQL). Seed
k is the run with ``seed: k`` up to the float32 summation order of the stacked products (each its own network:
bitwise).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from rlcore.algos.base import OfflineConfig
from rlcore.config.sections import Params
from rlcore.trainers.lockstep import Lockstep
from rlcore.trainers.seed_sessions import SeedRun, SeedSession, run_alone, run_together
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
        return run_alone(run_offline, session)


def train_offline_seeds(runs: Sequence[SeedRun], on_evaluation: EvaluationCallback | None) -> None:
    """Train the seeds' runs (each into its ``run_dir``) as one program; a seed whose folder holds its finished run
    with the same train params is kept, an interrupted one resumes from its latest checkpoint."""
    run_together(run_offline, runs, on_evaluation, DatasetSource)


def run_offline(seeds: Sequence[SeedSession[DatasetSource]]) -> None:
    """The loop of open sessions, each to its end: gradient steps on each one's minibatches, evaluations and
    checkpoints when due, until each one's stop condition."""
    members = Lockstep(seeds)
    while members.live:
        members.step([_batch(seed.session) for seed in members.live])
        members.checkpoints()


def _batch(session: TrainingSession[DatasetSource]) -> dict[str, torch.Tensor]:
    """The session's next minibatch, drawn with its own generator."""
    cfg = session.params.algo
    assert isinstance(cfg, OfflineConfig)
    return session.source.batch(session.state.gradient_steps, session.rng, cfg.batch_size)
