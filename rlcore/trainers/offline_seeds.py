"""Several seeds of behavioural cloning (``train.seeds``) trained as one batched program: each seed keeps its own
session, the gradient step is one for all of them.

Seed k is the run with ``seed: k`` in everything but the arithmetic of its gradient step: its :class:`TrainingSession`
is built as that run's is (its held-out episodes, the NumPy generator its minibatches are drawn with, its periodic
evaluations, checkpoints and stop conditions, its folder ``runs/<name>/seed_<k>/``). Per gradient step:

    for every seed k: its minibatch (obs_k, a_k) from its own source        (B, *obs_shape), (B, ...)
    features (N, B, F): each seed's parameter-free encoder and fixed normalizer on its observations
    scores (N, B, action_dim): the stacked policies' head, each linear layer one ``torch.baddbmm``
        (``StackedPolicies.mlp``: ~1.4x faster than ``vmap`` of the per-seed loss at N = 8, measured)
    losses (N,): BC's loss (``rlcore.algos.bc.bc_loss``), each a mean over that seed's samples
    sum(losses).backward(); one fused AdamW over the stacked parameters

AdamW is elementwise, so one AdamW over the stacked tensors steps every seed bitwise as its own AdamW would, as long
as the seeds have taken equally many optimizer steps (AdamW keeps one step count per tensor). The seeds that have
are a *cohort* (:class:`_Cohort`): all of them, unless a seed resumed from another checkpoint than the others or
skipped a step. The results differ from the unbatched run's by the summation order of the batched matrix products
only (float32 ulps; ``tests/test_seeds_batched_offline.py`` measures it).

The weights live in the stacked tensors while training; a seed's are copied back into its session's policy (and its
optimizer's moments into its own AdamW) before each of its evaluations and checkpoints, so those run the unbatched
code unchanged. A seed that stops (its budget, target return or wall-clock limit) finishes its run there and leaves
the stack, which is rebuilt from the others; a step where a seed's loss is not finite is taken one seed at a time by
each seed's own ``BC.update`` (which skips it, as the unbatched run does), and the cohorts are regrouped.

In scope: BC with its own policies (a categorical or Gaussian head on an encoder without weights: vector or
discrete observations). Anything else (image observations) trains the opened seeds one after another, said in one
log line. BC trains on the CPU in fp32 only (no ``cuda`` or ``precision`` capability), so that is never in question.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

import torch
from torch import nn

from rlcore.algos.bc import BC, BCConfig, bc_loss, bc_optimizer
from rlcore.nets.distributions import masked_logits
from rlcore.nets.policies import CategoricalActor, GaussianActor
from rlcore.nets.stacked import StackedPolicies
from rlcore.trainers.offline import run_offline
from rlcore.trainers.seed_sessions import (
    BatchedFamily,
    SeedRun,
    SeedSession,
    optimizer_steps,
    stack_optimizer_states,
    stacked_masks,
    train_family_seeds,
    unstack_optimizer_state,
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
    """Seeds whose optimizers have taken equally many steps, trained as one program: their policies' parameters
    stacked (N, *shape), one fused AdamW over them. While training, the stacked tensors hold the seeds' weights and
    moments; :meth:`write_back` copies a seed's into its session."""

    def __init__(self, seeds: list[SeedSession[DatasetSource]]) -> None:
        self.seeds = seeds
        first = seeds[0].session
        self.config: BCConfig = first.params.algo  # type: ignore[assignment]
        self.discrete = first.policy.discrete
        self.head = "logits" if self.discrete else "mean"
        self.quality = "accuracy" if self.discrete else "mean_abs_error"
        self.stepped_apart = False
        """Whether the last step was taken seed by seed (a loss was not finite): the sessions hold the seeds' state,
        and the seeds are regrouped by their step counts."""
        self._stack()

    def _stack(self) -> None:
        """The stacked parameters and optimizer state, read from the seeds' sessions."""
        self.stacked: StackedPolicies[nn.Module] = StackedPolicies([seed.session.policy for seed in self.seeds])
        self.optimizer = bc_optimizer(self.stacked.parameters(), self.config)
        stack_optimizer_states(self.optimizer, [_algorithm(seed).optimizer for seed in self.seeds])

    def update(self, batches: list[dict[str, torch.Tensor]]) -> list[dict[str, float]]:
        """One gradient step of every seed on its minibatch; each seed's update metrics, as ``BC.update`` returns
        them. A step where some seed's loss is not finite is taken seed by seed (``BC.update`` skips it)."""
        with torch.no_grad():  # the encoder and the normalizer hold no weights
            features = torch.stack(
                [seed.session.policy.features(batch["obs"]) for seed, batch in zip(self.seeds, batches, strict=True)]
            )
        actions = torch.stack([batch["actions"] for batch in batches])
        scores = self.stacked.mlp(self.head, features)
        if self.discrete:  # illegal actions' logits at the lowest value, as CategoricalActor.act_scores does
            scores = masked_logits(scores, stacked_masks([seed.session.policy for seed in self.seeds], batches, "obs"))
        log_std = None if self.discrete else self.stacked.params["log_std"].unsqueeze(1)
        losses, quality = bc_loss(scores, actions, log_std, self.config.loss)
        if not bool(torch.isfinite(losses).all()):  # the seeds' optimizer step counts may differ from here on
            return self._one_at_a_time(batches)
        self.optimizer.zero_grad(set_to_none=True)
        losses.sum().backward()
        self.optimizer.step()
        for seed in self.seeds:
            _algorithm(seed).gradient_steps += 1
            _algorithm(seed).consecutive_skips = 0
        return [
            {"loss": loss, self.quality: value}
            for loss, value in zip(losses.tolist(), quality.detach().tolist(), strict=True)
        ]

    def _one_at_a_time(self, batches: list[dict[str, torch.Tensor]]) -> list[dict[str, float]]:
        for index in range(len(self.seeds)):
            self.write_back(index)
        self.stepped_apart = True
        return [
            _algorithm(seed).update(batch, seed.session.progress_fraction)
            for seed, batch in zip(self.seeds, batches, strict=True)
        ]

    @torch.no_grad()
    def write_back(self, index: int) -> None:
        """Seed ``index``'s weights into its session's policy, its moments and step count into its own AdamW (after a
        step taken seed by seed, the sessions hold them already: the cohort is stale until regrouped)."""
        if self.stepped_apart:
            return
        session = self.seeds[index].session
        for name, param in session.policy.named_parameters():
            param.copy_(self.stacked.params[name][index])
        unstack_optimizer_state(self.optimizer, index, _algorithm(self.seeds[index]).optimizer)


def _cohorts(seeds: list[SeedSession[DatasetSource]]) -> list[_Cohort]:
    """The unfinished seeds grouped by their optimizers' step counts (one cohort unless some seed resumed from
    another checkpoint than the others, or skipped a step)."""
    groups: dict[int, list[SeedSession[DatasetSource]]] = {}
    for seed in seeds:
        if not seed.finished:
            groups.setdefault(optimizer_steps(_algorithm(seed).optimizer), []).append(seed)
    return [_Cohort(group) for group in groups.values()]


def _train_batched(seeds: list[SeedSession[DatasetSource]]) -> None:
    for seed in seeds:  # resumed at the end of its budget: finished before any step
        reason = seed.session.stops.budget(seed.session.state)
        if reason is not None:
            seed.finish(reason)
    cohorts = _cohorts(seeds)
    log.info(
        "train.seeds: %d seeds trained as one batched program (%s)",
        sum(len(cohort.seeds) for cohort in cohorts),
        ", ".join(f"seed {seed.seed}" for cohort in cohorts for seed in cohort.seeds),
    )
    while cohorts:
        regroup = False
        for cohort in cohorts:
            metrics = cohort.update([_batch(seed) for seed in cohort.seeds])
            regroup |= cohort.stepped_apart
            for index, seed_metrics in enumerate(metrics):
                regroup |= _after_update(cohort, index, seed_metrics)
        if regroup:
            for cohort in cohorts:
                for index, seed in enumerate(cohort.seeds):
                    if not seed.finished:
                        cohort.write_back(index)
            cohorts = _cohorts(seeds)


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
