"""Several seeds of behavioural cloning (``train.seeds``) trained as one batched program: each seed keeps its own
session, the gradient step is one for all of them.

Seed k is the run with ``seed: k`` in everything but the arithmetic of its gradient step: its :class:`TrainingSession`
is built as that run's is (its held-out episodes, the NumPy generator its minibatches are drawn with, its periodic
evaluations, checkpoints and stop conditions, its folder ``runs/<name>/seed_<k>/``). Per gradient step:

    for every seed k: its minibatch (obs_k, a_k) from its own source        (B, *obs_shape), (B, ...)
    ``BC.update_members`` over the seeds stacked (``rlcore.algos.value_members.StackedNetworks``): each seed's
        parameter-free encoder and fixed normalizer on its observations, the stacked policies' head (each linear
        layer one ``torch.baddbmm``: ``StackedPolicies.mlp``), BC's loss per seed (N,), one backward, one fused
        AdamW step over the stacked parameters for the seeds whose loss is finite

AdamW is elementwise and the stacked AdamW keeps a step count per seed, so each seed's step is its own AdamW's, and
a seed whose loss is not finite skips its step (as its unbatched run does) while the others take theirs; seeds that
resumed from different checkpoints train together. The results differ from the unbatched run's by the summation
order of the batched matrix products only (float32 ulps; ``tests/test_seeds_batched_offline.py`` measures it).

The weights live in the stacked tensors while training; a seed's are copied back into its session's policy (and its
optimizer's moments into its own AdamW) before each of its evaluations and checkpoints, so those run the unbatched
code unchanged. A seed that stops (its budget, target return or wall-clock limit) finishes its run there and leaves
the stack, which is rebuilt from the others.

In scope: BC with its own policies (a categorical or Gaussian head on an encoder without weights: vector or
discrete observations). Anything else (image observations) trains the opened seeds one after another, said in one
log line. BC trains on the CPU in fp32 only (no ``cuda`` or ``precision`` capability), so that is never in question.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

import torch

from rlcore.algos.bc import BC
from rlcore.algos.value_members import NetworkStack, StackedNetworks
from rlcore.nets.policies import CategoricalActor, GaussianActor
from rlcore.trainers.offline import run_offline
from rlcore.trainers.seed_sessions import (
    BatchedFamily,
    SeedRun,
    SeedSession,
    train_family_seeds,
)
from rlcore.trainers.session import TrainingSession
from rlcore.trainers.sources import DatasetSource
from rlcore.trainers.stopping import EvaluationCallback

log = logging.getLogger("rlcore")


def _algorithm(seed: SeedSession[DatasetSource]) -> BC:
    algorithm = seed.session.algorithm
    assert isinstance(algorithm, BC)  # checked once by _not_batchable
    return algorithm


def _batch(seed: SeedSession[DatasetSource]) -> dict[str, torch.Tensor]:
    """The seed's next minibatch, drawn as its unbatched run draws it."""
    session = seed.session
    batch_size: int = session.params.algo.batch_size  # type: ignore[attr-defined]  # every offline config has one
    return session.source.batch(session.state.gradient_steps, session.rng, batch_size)


def train_offline_seeds(runs: Sequence[SeedRun], on_evaluation: EvaluationCallback | None) -> None:
    """Train the seeds' BC runs (each into its ``run_dir``) as one batched program; a seed whose folder holds its
    finished run with the same train params is kept, an interrupted one resumes from its latest checkpoint."""
    train_family_seeds(BatchedFamily(DatasetSource, _not_batchable, run_offline, _train_batched), runs, on_evaluation)


def _not_batchable(session: TrainingSession[DatasetSource]) -> str | None:
    """Why these seeds cannot share a gradient step, or None."""
    policy, algorithm = session.policy, session.algorithm
    if not isinstance(algorithm, BC):
        return f"{session.params.algo.name} has no batched update"
    if type(policy) not in (CategoricalActor, GaussianActor):
        return f"BC's policy is a {type(policy).__name__}"
    if any(True for _ in policy.encoder.parameters()):
        return f"the observations' encoder ({type(policy.encoder).__name__}) has weights"
    groups = algorithm.optimizer.param_groups
    if len(groups) != 1 or [id(p) for p in groups[0]["params"]] != [id(p) for p in policy.parameters()]:
        return "BC's optimizer is not over the policy's parameters"
    return None


class _Cohort:
    """The unfinished seeds trained as one program: their policies' parameters and AdamW states stacked
    (``rlcore.algos.value_members.NetworkStack``: a step count per seed, so seeds that resumed from different
    checkpoints or skipped steps train together), each step ``BC.update_members`` over them. While training, the
    stacked tensors hold the seeds' weights and moments; :meth:`write_back` copies a seed's into its session."""

    def __init__(self, seeds: list[SeedSession[DatasetSource]]) -> None:
        self.seeds = seeds
        self.stack = NetworkStack([_algorithm(seed) for seed in seeds])

    def update(self, batches: list[dict[str, torch.Tensor]]) -> list[dict[str, float]]:
        """One gradient step of every seed on its minibatch (a seed whose loss is not finite skips it, as its
        unbatched run does); each seed's update metrics, as ``BC.update`` returns them."""
        members = StackedNetworks(self.stack, batches)
        return BC.update_members(members, [seed.session.progress_fraction for seed in self.seeds])

    def write_back(self, index: int) -> None:
        """Seed ``index``'s weights into its session's policy, its moments and step count into its own AdamW."""
        self.stack.write_back(index)


def _train_batched(seeds: list[SeedSession[DatasetSource]]) -> None:
    for seed in seeds:  # resumed at the end of its budget: finished before any step
        reason = seed.session.stops.budget(seed.session.state)
        if reason is not None:
            seed.finish(reason)
    live = [seed for seed in seeds if not seed.finished]
    log.info(
        "train.seeds: %d seeds trained as one batched program (%s)",
        len(live),
        ", ".join(f"seed {seed.seed}" for seed in live),
    )
    cohort = _Cohort(live) if live else None
    while cohort is not None:
        finished = False
        for index, seed_metrics in enumerate(cohort.update([_batch(seed) for seed in cohort.seeds])):
            finished |= _after_update(cohort, index, seed_metrics)
        if finished:  # the others stacked anew, from their sessions
            for index, seed in enumerate(cohort.seeds):
                if not seed.finished:
                    cohort.write_back(index)
            live = [seed for seed in cohort.seeds if not seed.finished]
            cohort = _Cohort(live) if live else None


def _after_update(cohort: _Cohort, index: int, metrics: dict[str, Any]) -> bool:
    """The session's bookkeeping after a step (logging, evaluation and checkpoint when due, stop conditions);
    whether the seed finished."""
    seed = cohort.seeds[index]
    session = seed.session
    session.after_update(metrics)
    if session.state.steps >= session.state.next_eval:  # an evaluation and checkpoint are due: the seed's weights
        cohort.write_back(index)
        with seed.own_rng():
            reason = session.checkpoint_due_or_stop()
    else:
        reason = session.checkpoint_due_or_stop()
    if reason is None:
        return False
    cohort.write_back(index)
    seed.finish(reason)
    return True
