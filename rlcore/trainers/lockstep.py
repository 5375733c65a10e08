"""The members of one lockstep loop (the off-policy and the offline trainer): one seed's run, or ``train.seeds``' N
seeds trained as one program (:class:`Lockstep`: their sessions' bookkeeping), and their gradient steps
(:class:`MemberSteps`).

:func:`member_steps` picks the form by the members' network kind, never "one seed after another":

- :class:`StackedValue` (DQN, BC) and :class:`StackedSACSteps`: the seeds' MLP heads on encoders without weights
  stacked (``rlcore.algos.value_members.NetworkStack``, ``rlcore.algos.sac_members.StackedSAC``: one ``baddbmm``
  per layer), one update (``DQN.update_members``, ``BC.update_members``, ``SAC.update_members``) for all of them;
- :class:`EachOwn`: each member's own network updated in turn by its own ``update`` (the same update over one
  member: ``OneNetwork``, ``OneSAC``), inside the same loop. Every other kind takes it: CNN and Dict encoders, DQN's
  dueling head, TD3+BC and IQL; and one member (the one-seed run, bitwise what it was), since a stack of one costs
  its copies and saves nothing. Measured here (torch 2.13 CPU, one thread, 4 members): a Python loop over the
  members' own modules beats ``torch.func.vmap`` over ``functional_call`` (CNN 64x4x10x10: 4.9 ms against 6.2 ms).

A member absent from a gradient step (its update phase is shorter) is given no batch: the stacked forms mask it out
of the step (``rlcore.nets.stacked.masked_step``), its counters and targets untouched. The stacked forms hold the
truth while training: the stacked forms also act for every member from them (:meth:`MemberSteps.explore`: one
stacked forward pass per vector step, then each member's exploration draw from its own generator, the draws of its
one-seed run), and :meth:`MemberSteps.write_back` puts everything into the sessions before an evaluation, a
checkpoint or the end.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, cast

import torch

from rlcore.algos.base import OfflineAlgorithm, OffPolicyAlgorithm
from rlcore.algos.bc import BC
from rlcore.algos.dqn import DQN
from rlcore.algos.sac import SAC
from rlcore.algos.sac_members import StackedSAC
from rlcore.algos.value_members import NetworkStack, StackedNetworks, stack_batches
from rlcore.data.replay import FIELDS
from rlcore.trainers.seed_sessions import SeedSession, log_program

Batch = dict[str, torch.Tensor]
Metrics = dict[str, float]


@dataclass
class StackedBatch:
    """Every live member's batch of one gradient step gathered at once (``rlcore.data.replay_stack``): ``fields``
    (M, B, ...) per key, ``present`` (M,) the members taking the step (an absent member's rows are any finite ones)."""

    fields: Batch
    present: list[bool]


MemberBatches = Sequence[Batch | None] | StackedBatch
"""One gradient step's batches: one per member (None: absent), or (stacked forms only) all of them stacked."""


class MemberSteps(ABC):
    """The members' gradient steps, in one of the forms of the module docstring."""

    form: ClassVar[str]
    """How the members step, for the log line."""
    stacked: ClassVar[bool] = True
    """Whether the members' state lives in stacked tensors while training (else in their sessions' own modules)."""

    def __init__(self, seeds: Sequence[SeedSession[Any]]) -> None:
        self.seeds = list(seeds)

    @abstractmethod
    def step(self, batches: MemberBatches) -> list[Metrics | None]:
        """One gradient step of each member given a batch (None: absent from this step); its update metrics."""

    def explore(self, obs: Sequence[torch.Tensor]) -> list[torch.Tensor] | None:
        """Every member's exploration actions for its observations ``obs[k]`` (B, ...), as its algorithm's
        ``explore`` draws them from its session's generator at its progress; None: each member explores through its
        own algorithm (the members' own networks are current)."""
        return None

    @abstractmethod
    def write_back(self) -> None:
        """Every member's networks, targets and optimizer states in its session (evaluations, checkpoints, ends)."""


class EachOwn(MemberSteps):
    """Each member's own ``update`` in turn, under its own state of torch's global generator; the members' modules
    are their sessions' own, so nothing is written back."""

    form = "each its own network"
    stacked = False

    def write_back(self) -> None:
        pass

    def step(self, batches: MemberBatches) -> list[Metrics | None]:
        assert not isinstance(batches, StackedBatch)  # given to the stacked forms only
        metrics: list[Metrics | None] = []
        for seed, batch in zip(self.seeds, batches, strict=True):
            if batch is None:
                metrics.append(None)
                continue
            session = seed.session
            algorithm = cast(OffPolicyAlgorithm[Any, Any] | OfflineAlgorithm[Any, Any], session.algorithm)
            with seed.own_rng():  # SAC's and TD3+BC's noise: the seed's state of torch's global generator
                metrics.append(algorithm.update(batch, session.progress_fraction))
        return metrics


def _stacked(batches: MemberBatches, keys: Sequence[str]) -> StackedBatch:
    """The members' batches stacked (fields ``keys``), an absent member's rows a present one's (masked out of the
    step)."""
    if isinstance(batches, StackedBatch):
        return batches
    filler = next(batch for batch in batches if batch is not None)
    filled = [filler if batch is None else batch for batch in batches]
    return StackedBatch(stack_batches(filled, keys), [batch is not None for batch in batches])


class StackedValue(MemberSteps):
    """DQN's or BC's members stacked (``NetworkStack``), each step their one ``update_members``."""

    form = "stacked"

    def __init__(self, seeds: Sequence[SeedSession[Any]]) -> None:
        super().__init__(seeds)
        algorithms = [cast(DQN | BC, seed.session.algorithm) for seed in self.seeds]
        self.stack = NetworkStack(algorithms)
        self.update = type(algorithms[0]).update_members

    def step(self, batches: MemberBatches) -> list[Metrics | None]:
        stacked = _stacked(batches, self.stack.batch_keys)
        present = stacked.present
        members = StackedNetworks(self.stack, stacked.fields, present)
        metrics = self.update(members, [seed.session.progress_fraction for seed in self.seeds])
        return [member if taking else None for member, taking in zip(metrics, present, strict=True)]

    def explore(self, obs: Sequence[torch.Tensor]) -> list[torch.Tensor] | None:
        if not isinstance(self.stack.algorithms[0], DQN):
            return None  # BC's members do not explore
        epsilons = [cast(DQN, seed.session.algorithm).epsilon(seed.session.progress_fraction) for seed in self.seeds]
        return self.stack.explore(obs, epsilons, [seed.session.generator for seed in self.seeds])

    def write_back(self) -> None:
        for k in range(len(self.seeds)):
            self.stack.write_back(k)


class StackedSACSteps(MemberSteps):
    """SAC's members stacked (``StackedSAC``), each step ``SAC.update_members``; Box actions' reparameterization noise
    drawn per member from its own state of torch's global generator, as ``SAC.update`` draws it."""

    form = "stacked"

    def __init__(self, seeds: Sequence[SeedSession[Any]]) -> None:
        super().__init__(seeds)
        self.members = StackedSAC([cast(SAC, seed.session.algorithm) for seed in self.seeds])

    def step(self, batches: MemberBatches) -> list[Metrics | None]:
        stacked = _stacked(batches, FIELDS)
        present = stacked.present
        self.members.load(stacked.fields, self._noise(int(stacked.fields["obs"].shape[1]), present), present)
        metrics = SAC.update_members(self.members)
        return [member if taking else None for member, taking in zip(metrics, present, strict=True)]

    def _noise(self, batch_size: int, present: Sequence[bool]) -> torch.Tensor | None:
        """Box actions: each present member's two standard normal draws of one ``SAC.update`` from its own generator,
        as ``Normal.rsample`` draws them ((M, 2, B, action_dim); zeros for an absent member); discrete: None."""
        if self.members.discrete:
            return None
        shape = (batch_size, self.members.algorithms[0].policy.action_dim)
        noise = torch.zeros(len(self.seeds), 2, *shape)
        for k, seed in enumerate(self.seeds):
            if present[k]:
                with seed.own_rng():
                    noise[k] = torch.stack([torch.empty(shape).normal_() for _ in range(2)])
        return noise

    def explore(self, obs: Sequence[torch.Tensor]) -> list[torch.Tensor] | None:
        return self.members.explore(obs, [seed.session.generator for seed in self.seeds])

    def write_back(self) -> None:
        self.members.write_back()


def member_steps(seeds: Sequence[SeedSession[Any]]) -> MemberSteps:
    """The form the members step in (the module docstring): stacked for two or more members whose kind stacks, each
    its own network otherwise."""
    algorithm = seeds[0].session.algorithm if seeds else None
    if len(seeds) < 2:
        return EachOwn(seeds)
    if isinstance(algorithm, DQN | BC) and NetworkStack.stacks(algorithm.policy):
        return StackedValue(seeds)
    if isinstance(algorithm, SAC) and StackedSAC.stacks(algorithm):
        return StackedSACSteps(seeds)
    return EachOwn(seeds)


class Lockstep:
    """The open sessions of one lockstep loop: each gradient step of the members (:meth:`step`) and each round of
    their evaluations, checkpoints and stop conditions (:meth:`checkpoints`). A member that stops finishes its run
    there and leaves; the others step on (restacked without it). ``live``: the unfinished members."""

    def __init__(self, seeds: Sequence[SeedSession[Any]]) -> None:
        for seed in seeds:  # resumed at the end of its budget: finished before any step
            reason = seed.session.stops.budget(seed.session.state)
            if reason is not None:
                seed.finish(reason)
        self.live = [seed for seed in seeds if not seed.finished]
        self.steps = member_steps(self.live)
        log_program(self.live, self.steps.form)

    def step(self, batches: MemberBatches) -> None:
        """One gradient step of each live member given a batch (None: absent), and its session's bookkeeping."""
        for seed, metrics in zip(self.live, self.steps.step(batches), strict=True):
            if metrics is not None:
                seed.session.after_update(metrics)

    def checkpoints(self) -> None:
        """Each member's metrics row, evaluation and checkpoint when due, and its stop conditions (under its own
        state of torch's global generator); a member that stops finishes its run."""
        if self.steps.stacked and any(
            seed.session.evaluation_due or seed.session.stops.budget(seed.session.state) for seed in self.live
        ):  # an evaluation, a checkpoint or the end reads the members' own modules
            self.steps.write_back()
        for seed in self.live:
            with seed.own_rng():
                reason = seed.session.checkpoint_due_or_stop()
            if reason is not None:
                seed.finish(reason)
        if any(seed.finished for seed in self.live):
            self.live = [seed for seed in self.live if not seed.finished]
            self.steps = member_steps(self.live)
