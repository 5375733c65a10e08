"""Several seeds of DQN or SAC (``train.seeds``) trained as one batched program: each seed acts in its own envs into
its own replay, with its own exploration; their gradient steps run as one.

Seed k is the run with ``seed: k`` in everything but the arithmetic of its gradient steps: its
:class:`TrainingSession` is built as that run's is, and its envs, exploration draws (its torch generator), random
warm-up actions and replay batches (its NumPy generator), evaluations, checkpoints and stop conditions are its own.
Per vector step, every seed steps its envs and stores the transitions (``rlcore.trainers.off_policy.Collector``, the
unbatched loop's own code); when an update phase is due, the seeds due for equally many gradient steps, that have
taken equally many (DQN: and whose optimizers have), take them together:

    stack the seeds' networks, target networks and Adam states (N, *shape)
    per gradient step: each seed's replay batch; each linear layer one ``torch.baddbmm`` over the stacked weights;
        the algorithm's losses per seed (DQN: ``DQN.update_members`` over ``rlcore.algos.value_members``; SAC:
        ``SAC.update_members`` over ``rlcore.algos.sac_members.StackedSAC``, its reparameterization noise drawn from
        each seed's own state of torch's global generator, as ``SAC.update`` draws it); one backward per loss; each
        seed's gradient clipped to its own norm; one fused Adam step per optimizer (elementwise: each seed's step is
        its own Adam's); the target networks updated on their schedule
    copy every seed's weights, targets, Adam states (and SAC's log alpha) back into its session

so acting, evaluation and checkpoints between phases run the unbatched code on the session's own policy (under the
seed's own generator state). SAC updates every env step or few, so its stacked state is kept from phase to phase
while the same seeds are due together, only the actors copied back for acting; everything is written back before a
seed's evaluation, checkpoint or end, or when the seeds stop stepping together. A seed whose loss or gradient norm
is not finite (its unbatched run skips that step) skips it while the others take theirs (DQN: its step; SAC: that
optimizer's step only; a step count per seed). The results differ from the unbatched run's by float32 summation
order only (measured: none for SAC).

In scope: DQN without the dueling head, and SAC (Box or Discrete actions), on encoders without weights (vector or
discrete observations; DQN's action masks included); anything else (pixels, ...) trains the opened seeds one after
another, said in one log line. Both train on the CPU in fp32 only.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

import torch
from torch import nn

from rlcore.algos.dqn import DQN
from rlcore.algos.sac import SAC
from rlcore.algos.sac_members import StackedSAC
from rlcore.algos.value_members import NetworkStack, StackedNetworks
from rlcore.nets.policies import QPolicy
from rlcore.trainers.off_policy import Collector, run_off_policy
from rlcore.trainers.seed_sessions import (
    BatchedFamily,
    SeedRun,
    SeedSession,
    optimizer_steps,
    train_family_seeds,
)
from rlcore.trainers.session import TrainingSession
from rlcore.trainers.sources import ReplaySource
from rlcore.trainers.stopping import EvaluationCallback

log = logging.getLogger("rlcore")

Seed = SeedSession[ReplaySource]


def _algorithm(seed: Seed) -> DQN:
    algorithm = seed.session.algorithm
    assert isinstance(algorithm, DQN)  # checked once by _not_batchable
    return algorithm


def train_off_policy_seeds(runs: Sequence[SeedRun], on_evaluation: EvaluationCallback | None) -> None:
    """Train the seeds' DQN or SAC runs (each into its ``run_dir``) as one batched program; a seed whose folder holds
    its finished run with the same train params is kept, an interrupted one resumes from its latest checkpoint."""
    train_family_seeds(BatchedFamily(ReplaySource, _not_batchable, run_off_policy, _train_batched), runs, on_evaluation)


def _not_batchable(session: TrainingSession[ReplaySource]) -> str | None:
    """Why these seeds cannot share their gradient steps, or None."""
    policy, algorithm = session.policy, session.algorithm
    if isinstance(algorithm, SAC):
        return sac_not_batchable(algorithm)
    if not isinstance(algorithm, DQN) or not isinstance(policy, QPolicy):
        return f"{session.params.algo.name} has no batched update"
    if policy.dueling:
        return "DQN's dueling head is not batched"
    if any(True for _ in policy.encoder.parameters()):
        return f"the observations' encoder ({type(policy.encoder).__name__}) has weights"
    if not _over(algorithm.optimizer, policy):
        return "DQN's optimizer is not over the policy's parameters"
    return None


def _over(optimizer: torch.optim.Optimizer, module: nn.Module) -> bool:
    """Whether ``optimizer`` is over exactly ``module``'s parameters, in their order, in one group."""
    groups = optimizer.param_groups
    return len(groups) == 1 and [id(p) for p in groups[0]["params"]] == [id(p) for p in module.parameters()]


def sac_not_batchable(algorithm: SAC) -> str | None:
    """Why SAC's seeds cannot share their gradient steps, or None."""
    encoders = (algorithm.policy.encoder, algorithm.critic.encoder)
    for encoder in encoders:
        if any(True for _ in encoder.parameters()):
            return f"the observations' encoder ({type(encoder).__name__}) has weights"
    if not (_over(algorithm.actor_optimizer, algorithm.policy) and _over(algorithm.critic_optimizer, algorithm.critic)):
        return "SAC's optimizers are not over the actor's and the critics' parameters"
    if any(True for _ in algorithm.critic.buffers()):
        return "SAC's critics hold buffers"
    return None


def _step_counts(seed: Seed) -> tuple[int, ...]:
    """What seeds must share to batch a phase: DQN's optimizer step count (Adam's bias correction is one per stacked
    tensor) and gradient steps (the targets' schedule); SAC's gradient steps only (``StackedSAC``'s Adam counts
    steps per seed, so a seed that skipped a step still batches with the others)."""
    algorithm = seed.session.algorithm
    if isinstance(algorithm, SAC):
        return (algorithm.gradient_steps,)
    return (optimizer_steps(_algorithm(seed).optimizer), algorithm.gradient_steps)


def _train_batched(seeds: list[Seed]) -> None:
    collectors: dict[int, Collector] = {}
    for seed in seeds:
        reason = seed.session.stops.budget(seed.session.state)
        if reason is not None:  # resumed at the end of its budget
            seed.finish(reason)
        else:
            collectors[seed.seed] = Collector(seed.session)
    live = [seed for seed in seeds if not seed.finished]
    log.info("train.seeds: %d seeds' gradient steps batched (%s)", len(live), ", ".join(f"seed {s.seed}" for s in live))
    open_phases: list[_SACPhase] = []  # SAC's stacked state, kept across phases while the same seeds step together
    try:
        while live:
            due = {seed.seed: collectors[seed.seed].step() for seed in live}
            kept = [phase for phase in open_phases if phase.due_together(due)]
            for phase in open_phases:
                if phase not in kept:
                    phase.close()
            open_phases = kept
            stacked = {seed.seed for phase in open_phases for seed in phase.seeds}
            phases: dict[tuple[int, ...], list[Seed]] = {}
            for seed in live:
                if due[seed.seed] and seed.seed not in stacked:
                    phases.setdefault((due[seed.seed], *_step_counts(seed)), []).append(seed)
            for phase in open_phases:
                phase.run(due[phase.seeds[0].seed])
            for (steps, *_), group in phases.items():
                group_collectors = [collectors[seed.seed] for seed in group]
                if isinstance(group[0].session.algorithm, SAC):
                    open_phases.append(_SACPhase(group, group_collectors))
                    open_phases[-1].run(steps)
                else:
                    _Phase(group, group_collectors).run(steps)
            open_phases = [phase for phase in open_phases if not phase.closed]
            for seed in live:
                session = seed.session
                if session.state.steps >= session.state.next_eval or session.stops.budget(session.state) is not None:
                    for phase in open_phases:  # a checkpoint or the end: the seed's state in its session
                        if any(member is seed for member in phase.seeds):
                            phase.close()
                    open_phases = [phase for phase in open_phases if not phase.closed]
                with seed.own_rng():  # evaluations and checkpoints: the seed's generator state
                    reason = session.checkpoint_due_or_stop()
                if reason is not None:
                    seed.finish(reason)
            live = [seed for seed in live if not seed.finished]
    except BaseException:
        for phase in open_phases:
            phase.close()
        raise


class _Phase:
    """One update phase of DQN seeds due for equally many gradient steps: their networks, targets and Adam states
    stacked for the phase (``rlcore.algos.value_members.NetworkStack``), each step ``DQN.update_members`` over them."""

    def __init__(self, seeds: list[Seed], collectors: list[Collector]) -> None:
        self.seeds, self.collectors = seeds, collectors
        self.stack = NetworkStack([_algorithm(seed) for seed in seeds])

    def run(self, steps: int) -> None:
        """``steps`` gradient steps of every seed (a seed whose loss or gradient norm is not finite skips its step,
        as its unbatched run does); the seeds' weights, targets and Adam states are in their sessions afterwards."""
        for _ in range(steps):
            members = StackedNetworks(self.stack, [collector.sample() for collector in self.collectors])
            metrics = DQN.update_members(members, [seed.session.progress_fraction for seed in self.seeds])
            for seed, seed_metrics in zip(self.seeds, metrics, strict=True):
                seed.session.after_update(seed_metrics)
        for k in range(len(self.seeds)):
            self.stack.write_back(k)


class _SACPhase:
    """SAC seeds due for equally many gradient steps, that have taken equally many: their networks,
    log alphas and Adam states stacked (``rlcore.algos.sac_members.StackedSAC``), and kept stacked over the following
    update phases while these seeds are due together (SAC updates every env step or few: stacking per phase would
    cost more than the steps). Between phases only the actors are copied back (the seeds act with them);
    :meth:`close` writes back everything."""

    def __init__(self, seeds: list[Seed], collectors: list[Collector]) -> None:
        self.seeds, self.collectors = seeds, collectors
        self.members = StackedSAC([_sac(seed) for seed in seeds])
        self.closed = False

    def due_together(self, due: dict[int, int]) -> bool:
        """Whether this phase's seeds are all due for the same number (> 0) of gradient steps now."""
        counts = {due.get(seed.seed, 0) for seed in self.seeds}
        return len(counts) == 1 and 0 not in counts

    def run(self, steps: int) -> None:
        """``steps`` gradient steps of every seed (``SAC.update_members``: a seed whose loss or gradient norm is not
        finite skips that step's part, as its unbatched run does); the seeds' actors and torch generator states are
        theirs afterwards as after their unbatched updates (the rest on :meth:`close`)."""
        for _ in range(steps):
            batches = [collector.sample() for collector in self.collectors]
            self.members.load(batches, self._noise(batches))
            for seed, seed_metrics in zip(self.seeds, SAC.update_members(self.members), strict=True):
                seed.session.after_update(seed_metrics)
        self.members.write_back(actors_only=True)

    def _noise(self, batches: list[dict[str, torch.Tensor]]) -> torch.Tensor | None:
        """Box actions: each seed's two standard normal draws of one ``SAC.update`` from its own generator, as
        ``Normal.rsample`` draws them ((N, 2, B, action_dim)); discrete actions draw nothing."""
        if self.members.discrete:
            return None
        noise = []
        for seed, batch in zip(self.seeds, batches, strict=True):
            shape = (2, len(batch["obs"]), seed.session.policy.action_dim)
            with seed.own_rng():
                noise.append(torch.stack([torch.empty(shape[1:]).normal_() for _ in range(2)]))
        return torch.stack(noise)

    def close(self) -> None:
        """Every seed's weights, targets, log alpha and Adam states into its session; the stacked state is dropped."""
        if self.closed:
            return
        self.members.write_back()
        self.closed = True


def _sac(seed: Seed) -> SAC:
    algorithm = seed.session.algorithm
    assert isinstance(algorithm, SAC)  # checked once by _not_batchable
    return algorithm
