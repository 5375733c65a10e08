"""The members an on-policy update trains (PPO's and A2C's ``update_members``), with a leading member dimension.

:class:`OneMember`: M = 1, every policy the single path serves, in its own shapes; :class:`StackedMembers`: M = N
seeds' MLP actor-critics stacked (``rlcore.nets.stacked_actor_critic``). Design: ``docs/members-design.md``.
Samples (M, B, ...) of :class:`MemberBatch`, each member's reductions over its own samples (:meth:`MemberBatch.mean`);
a member absent from a step, or whose loss or gradient norm is not finite, sits it out (counted on its algorithm).
"""

from __future__ import annotations

import contextlib
from abc import ABC, abstractmethod
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any, Generic, Protocol, TypeVar, cast

import torch

from rlcore.algos.base import OnPolicyAlgorithm
from rlcore.data.rollouts import RolloutBuffer
from rlcore.nets.policies import ActorCritic
from rlcore.nets.stacked import count_skips, masked_backward, masked_optimizer_step
from rlcore.nets.stacked_actor_critic import StackedActorCritic

OnPolicy = OnPolicyAlgorithm[Any, ActorCritic]
AlgorithmT = TypeVar("AlgorithmT")


class MemberBatch:
    """One step's samples of every member. ``parts[k]``: member k's flat rollout indices (None: it has none at this
    step); ``index`` (M, B) those indices padded to the longest by repeating the member's first (so a padded sample
    holds nothing its real ones do not: no NaN reaches a gradient through it); ``mask`` (M, B) bool of the real
    ones, None when every member has B; ``counts`` (M,) float32 real samples (1 for an absent member, 0 for a present
    one without samples: its mean is NaN, as the single update's mean of nothing is); ``present`` (M,) bool."""

    def __init__(self, parts: Sequence[torch.Tensor | None]) -> None:
        self.parts = list(parts)
        self.sizes = [None if part is None else int(part.numel()) for part in parts]
        self.mask: torch.Tensor | None = None
        if all(size is not None and size == self.sizes[0] for size in self.sizes):
            return
        width = max((size for size in self.sizes if size is not None), default=0)
        self.mask = torch.zeros(len(parts), width, dtype=torch.bool)
        for k, part in enumerate(parts):
            if part is not None:
                self.mask[k, : part.numel()] = True

    @cached_property
    def index(self) -> torch.Tensor:
        if self.mask is None:
            return torch.stack(cast(list[torch.Tensor], self.parts))
        index = torch.zeros(self.mask.shape, dtype=torch.int64)
        for k, part in enumerate(self.parts):
            if part is not None:
                index[k, : part.numel()] = part
                index[k, part.numel() :] = part[0] if part.numel() else 0
        return index

    @cached_property
    def counts(self) -> torch.Tensor:
        return torch.tensor([1.0 if size is None else float(size) for size in self.sizes])

    @property
    def taking(self) -> list[bool]:
        """The members with samples at this step."""
        return [size is not None for size in self.sizes]

    @cached_property
    def present(self) -> torch.Tensor:
        return torch.tensor(self.taking)

    def mean(self, x: torch.Tensor) -> torch.Tensor:
        """Each member's mean of ``x`` (M, B) over its own samples: (M,)."""
        if self.mask is None:
            return x.mean(-1)
        return torch.where(self.mask, x, 0.0).sum(-1) / self.counts

    def standardizer(self, x: torch.Tensor) -> Standardizer:
        """Each member's mean and sample std (n - 1) of ``x`` (M, B)."""
        if self.mask is None:
            mean, std = x.mean(-1, keepdim=True), x.std(-1, keepdim=True)
        else:
            mean = self.mean(x).unsqueeze(1)
            spread = torch.where(self.mask, (x - mean).square(), 0.0).sum(-1) / (self.counts - 1).clamp(min=1)
            std = spread.sqrt().unsqueeze(1)
        return Standardizer(mean, std, [size is not None and size > 1 for size in self.sizes])


@dataclass
class Standardizer:
    """Members' means and standard deviations (M, 1); ``usable[k]`` False where member k has fewer than two samples
    (the std of one sample is NaN: its values are left as they are)."""

    mean: torch.Tensor
    std: torch.Tensor
    usable: list[bool]

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        """``x`` (M, B) standardized."""
        if not any(self.usable):  # also one member in its policy's own shapes, (B,): no broadcast to (1, B)
            return x
        standard = (x - self.mean) / (self.std + 1e-8)
        return standard if all(self.usable) else torch.where(torch.tensor(self.usable).unsqueeze(1), standard, x)


class MemberSet(Generic[AlgorithmT]):
    """M members' algorithms, as an update written over members reads them (on-policy, value, SAC).

    One member (M = 1, the single-seed run: ``OneMember``, ``OneNetwork``, ``OneSAC``) answers in its plain modules'
    own shapes, (B, ...) for (M, B, ...) and scalars for (M,): the member dimension of one broadcasts away and no
    reshape enters the backward pass (measured ~5% of a PPO CartPole update when it did), so one seed's arithmetic is
    the single path's, bitwise. Its optimizer steps are its algorithm's own."""

    def __init__(self, algorithms: Sequence[AlgorithmT]) -> None:
        self.algorithms = list(algorithms)
        self.count = len(self.algorithms)
        """M."""

    def values(self, x: torch.Tensor) -> list[float]:
        """A per-member tensor (() or (M,)) as each member's float (one host sync)."""
        return x.detach().reshape(self.count).tolist()


class Members(MemberSet[OnPolicy], ABC):
    """M members' networks, rollouts (of one shape), optimizer and counters, as an on-policy update reads them."""

    def __init__(
        self, algorithms: Sequence[OnPolicy], rollouts: Sequence[RolloutBuffer], optimizer: torch.optim.Optimizer
    ) -> None:
        super().__init__(algorithms)
        self.rollouts, self.optimizer = list(rollouts), optimizer

    @abstractmethod
    def field(self, name: str) -> torch.Tensor:
        """A stored rollout field, each member's flat steps: (M, T * E, ...)."""

    def env_steps(self) -> int:
        """Env steps in each member's rollout (autoreset steps included)."""
        return int(self.rollouts[0].rewards.numel())

    def valid_indices(self) -> list[torch.Tensor]:
        """Each member's trained-on flat steps."""
        return [rollout.flat_valid_indices() for rollout in self.rollouts]

    def orders(
        self, batch_sizes: Sequence[int], generators: Sequence[torch.Generator], running: Sequence[bool]
    ) -> list[list[torch.Tensor]]:
        """Each running member's shuffled minibatches of its valid steps, drawn from its own generator (a member not
        running draws nothing: [])."""
        return [
            list(rollout.minibatches(size, generator)) if run else []
            for rollout, size, generator, run in zip(self.rollouts, batch_sizes, generators, running, strict=True)
        ]

    @abstractmethod
    def losses(
        self, batch: MemberBatch, clip_range_vf: float | None
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(log-probabilities of the stored actions (M, B), entropies (M, B), value loss (M,)) of ``batch``'s samples
        under the current weights (the value loss is the critic's own: ``ValueHead.losses_of``). One member may
        answer without the member dimension ((B,), ()): an update reduces over the last axis only and stacks on it."""

    @abstractmethod
    def extra_losses(self, generators: Sequence[torch.Generator]) -> torch.Tensor | None:
        """(M,) auxiliary losses (``algo.behavioral_cloning``), or None."""

    def autocast(self) -> contextlib.AbstractContextManager[None]:
        """The context the losses' forward passes run in (``train.precision``)."""
        return contextlib.nullcontext()

    def set_learning_rates(self, rates: Sequence[float]) -> None:
        """Each member's learning rate (one float while they agree, else a float64 tensor (M,))."""
        rate: float | torch.Tensor = rates[0] if len(set(rates)) == 1 else torch.tensor(rates, dtype=torch.float64)
        for group in self.optimizer.param_groups:
            group["lr"] = rate

    def zero_grad(self) -> None:
        self.optimizer.zero_grad(set_to_none=True)

    @abstractmethod
    def backward(self, losses: torch.Tensor, present: torch.Tensor) -> None:
        """Accumulate the gradients of ``losses`` (M,) of the members ``present`` (M,) bool."""

    @abstractmethod
    def step(self, max_grad_norm: float | None, taking: Sequence[bool]) -> None:
        """One optimizer step on the accumulated gradients for the members ``taking`` it (each counts a gradient
        step); a member whose loss or clipped gradient norm was not finite skips it (counted)."""

    def take(self, name: str, batch: MemberBatch) -> torch.Tensor:
        """``field(name)`` at ``batch``'s samples: (M, B, ...) ((B, ...) for one member, as :meth:`losses`)."""
        return self.field(name)[torch.arange(self.count).unsqueeze(1), batch.index]


class MemberUpdate(Protocol):
    """An algorithm whose update is written over members (PPO, A2C): its ``update`` is ``update_members`` with M = 1,
    and the batched seeds trainer calls ``update_members`` with M = N."""

    @staticmethod
    def update_members(
        members: Members, progress: Sequence[float], generators: Sequence[torch.Generator]
    ) -> list[dict[str, float]]: ...


class OneMember(Members):
    """One algorithm's policy and rollout, M = 1 in its own shapes (:class:`MemberSet`); only :meth:`field` gives the
    leading dim of 1."""

    def __init__(self, algorithm: OnPolicy, rollout: RolloutBuffer) -> None:
        super().__init__([algorithm], [rollout], getattr(algorithm, "optimizer"))  # noqa: B009 (PPO's, A2C's)
        self.algorithm, self.policy, self.rollout = algorithm, algorithm.policy, rollout
        self._flat: dict[str, torch.Tensor] = {}

    def _flat_field(self, name: str) -> torch.Tensor:
        if name not in self._flat:
            self._flat[name] = self.rollout.flat(name)
        return self._flat[name]

    def field(self, name: str) -> torch.Tensor:
        return self._flat_field(name).unsqueeze(0)

    def take(self, name: str, batch: MemberBatch) -> torch.Tensor:
        return self._flat_field(name)[batch.parts[0]]

    def losses(
        self, batch: MemberBatch, clip_range_vf: float | None
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        idx = cast(torch.Tensor, batch.parts[0])
        features = self.rollout.features(self.policy, idx)  # encoded once for both heads
        dist = self.policy.distribution_of(features, self.rollout.action_mask(self.policy, idx))
        log_probs = dist.log_prob(self._flat_field("actions")[idx])
        value_loss = self.policy.value_loss_of(
            features, self._flat_field("returns")[idx], self._flat_field("values")[idx], clip_range_vf
        )
        return log_probs, dist.entropy(), value_loss

    def extra_losses(self, generators: Sequence[torch.Generator]) -> torch.Tensor | None:
        regularizer = getattr(self.algorithm, "behavioral_cloning", None)
        return None if regularizer is None else regularizer.loss(self.policy, generators[0])

    def autocast(self) -> contextlib.AbstractContextManager[None]:
        return self.algorithm.precision.autocast()

    def backward(self, losses: torch.Tensor, present: torch.Tensor) -> None:
        self.algorithm.accumulate(losses)  # a non-finite loss is not back-propagated: the step is skipped

    def step(self, max_grad_norm: float | None, taking: Sequence[bool]) -> None:
        if not taking[0]:
            self.algorithm.abandon_step(self.optimizer)  # a stopped member's step is not taken, nor counted
            return
        self.algorithm.apply_gradients(self.optimizer, self.policy.parameters(), max_grad_norm)
        self.algorithm.gradient_steps += 1


class StackedMembers(Members):
    """N seeds' actor-critics and optimizers stacked (``stacked``, M = N), each with its rollout (of one shape)."""

    def __init__(
        self, algorithms: Sequence[OnPolicy], stacked: StackedActorCritic, rollouts: Sequence[RolloutBuffer]
    ) -> None:
        super().__init__(algorithms, rollouts, stacked.optimizers["optimizer"])
        if any(getattr(a, "behavioral_cloning", None) is not None for a in algorithms):
            raise ValueError("algorithms: the BC regularizer runs one member at a time (OneMember)")
        self.stacked: StackedActorCritic = stacked
        self.critic = self.algorithms[0].policy.critic  # the value head's arithmetic (its weights: the stacked ones)
        self._finite = torch.ones(self.count, dtype=torch.bool)
        self._fields: dict[str, torch.Tensor] = {}

    def field(self, name: str) -> torch.Tensor:
        if name not in self._fields:  # each member's flat order is its one-member update's
            self._fields[name] = torch.stack([rollout.flat(name) for rollout in self.rollouts])
        return self._fields[name]

    def losses(
        self, batch: MemberBatch, clip_range_vf: float | None
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        stacked = self.stacked
        features = stacked.features(self.take("obs", batch))
        dist = stacked.distribution(stacked.scores(features))
        log_probs = dist.log_prob(self.take("actions", batch))
        out = stacked.parts["policy"].mlp("critic.net", features)
        per_sample = self.critic.losses_of(out, self.take("returns", batch), self.take("values", batch), clip_range_vf)
        return log_probs, dist.entropy(), batch.mean(per_sample)

    def extra_losses(self, generators: Sequence[torch.Generator]) -> torch.Tensor | None:
        return None

    def backward(self, losses: torch.Tensor, present: torch.Tensor) -> None:
        self._finite &= masked_backward(losses, present) | ~present

    def step(self, max_grad_norm: float | None, taking: Sequence[bool]) -> None:
        applied = masked_optimizer_step(
            self.stacked.optimizers["optimizer"], torch.tensor(list(taking)) & self._finite, max_grad_norm
        )
        count_skips(self.algorithms, applied, taking)
        for algorithm, took in zip(self.algorithms, taking, strict=True):
            algorithm.gradient_steps += took
        self._finite = torch.ones(self.count, dtype=torch.bool)


def padded_groups(groups: Sequence[Sequence[torch.Tensor]]) -> Iterator[MemberBatch]:
    """The i-th minibatch of each member's group, for i up to the longest group (a member whose group is shorter is
    absent from the rest)."""
    for i in range(max((len(group) for group in groups), default=0)):
        yield MemberBatch([group[i] if i < len(group) else None for group in groups])


def shares(batch: MemberBatch, whole: MemberBatch) -> float | torch.Tensor:
    """Each member's share of the samples of ``whole`` that ``batch`` holds (gradient accumulation's loss weights):
    a float for one member (as Python divides the counts), else (M,)."""
    if len(batch.sizes) == 1:
        return (batch.sizes[0] or 0) / max(whole.sizes[0] or 0, 1)
    return batch.counts / whole.counts
