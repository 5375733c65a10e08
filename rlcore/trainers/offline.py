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

import torch

from rlcore.algos.base import OfflineAlgorithm, OfflineConfig
from rlcore.trainers.lockstep import Lockstep
from rlcore.trainers.seed_sessions import SeedSession
from rlcore.trainers.session import TrainingSession
from rlcore.trainers.sources import DatasetSource


def run_offline(seeds: Sequence[SeedSession[DatasetSource]]) -> None:
    """The loop of open sessions, each to its end: gradient steps on each one's minibatches, evaluations and
    checkpoints when due, until each one's stop condition."""
    members = Lockstep(seeds)
    while members.live:
        members.step([_batch(seed.session) for seed in members.live])
        members.checkpoints()


def _batch(session: TrainingSession[DatasetSource]) -> dict[str, torch.Tensor]:
    """The session's next minibatch, drawn with its own generator."""
    cfg, algorithm = session.params.algo, session.algorithm
    assert isinstance(cfg, OfflineConfig) and isinstance(algorithm, OfflineAlgorithm)
    return session.source.batch(session.state.gradient_steps, session.rng, cfg.batch_size, algorithm.batch_fields)
