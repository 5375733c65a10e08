"""The members an update on replay or dataset batches trains (DQN's and BC's ``update_members``), with a leading
member dimension.

:class:`OneNetwork`: M = 1, every network kind the single path serves, in its own shapes; :class:`StackedNetworks`:
M = N seeds' MLP heads on encoders without weights stacked in a :class:`NetworkStack`. Design:
``docs/members-design.md``. Batches (M, B, ...), losses (M,); a member absent from a step, or whose loss or gradient
norm is not finite, sits it out (counted on its algorithm); each member's target network on its own schedule.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import Any

import torch

from rlcore.algos.base import Algorithm
from rlcore.algos.members import MemberSet
from rlcore.nets.blocks import polyak_update
from rlcore.nets.distributions import masked_logits
from rlcore.nets.policies import CategoricalActor, GaussianActor, QPolicy
from rlcore.nets.policy import Policy
from rlcore.nets.stacked import StackedModules, unstackable

Batch = dict[str, torch.Tensor]


class Networks(MemberSet[Algorithm[Any, Any]], ABC):
    """M members' networks, optimizers and counters and this step's batches, as DQN's and BC's updates read them.
    ``batch``: the members' batch tensors, (B, ...) for one member, (M, B, ...) for M."""

    def __init__(self, algorithms: Sequence[Algorithm[Any, Any]], batch: Batch) -> None:
        super().__init__(algorithms)
        self.batch = batch

    @abstractmethod
    def scores(self, network: str, key: str) -> torch.Tensor:
        """``act_scores`` of the ``network`` ("online" or "target") on ``batch[key]``: (B, n) or (M, B, n)."""

    @abstractmethod
    def log_std(self) -> torch.Tensor | None:
        """The Gaussian actors' log std, broadcastable against :meth:`scores` (None: discrete actions)."""

    @abstractmethod
    def step(self, losses: torch.Tensor, max_grad_norm: float | None) -> None:
        """One optimizer step of every member on its loss (() or (M,)), its gradient clipped to ``max_grad_norm``;
        a member whose loss or clipped gradient norm is not finite skips it (counted). Every member counts a
        gradient step."""

    @abstractmethod
    def update_targets(self, interval: int, tau: float) -> None:
        """``polyak_update`` of the target network of each member whose gradient steps are a multiple of
        ``interval``."""


class OneNetwork(Networks):
    """One algorithm's policy (its ``target`` network, if it has one) and batch, M = 1 in its own shapes
    (:class:`rlcore.algos.members.MemberSet`)."""

    def __init__(self, algorithm: Algorithm[Any, Any], batch: Batch) -> None:
        super().__init__([algorithm], batch)
        self.algorithm, self.policy = algorithm, algorithm.policy
        self.optimizer: torch.optim.Optimizer = getattr(algorithm, "optimizer")  # noqa: B009 (DQN's, BC's)

    def scores(self, network: str, key: str) -> torch.Tensor:
        module = self.policy if network == "online" else getattr(self.algorithm, network)
        scores: torch.Tensor = module.act_scores(self.batch[key])
        return scores

    def log_std(self) -> torch.Tensor | None:
        log_std = None if self.policy.discrete else self.policy.log_std
        assert log_std is None or isinstance(log_std, torch.Tensor)  # GaussianActor's parameter
        return log_std

    def step(self, losses: torch.Tensor, max_grad_norm: float | None) -> None:
        # The optimizer's list is the policy's parameters (``dqn_optimizer``, ``bc_optimizer``), without walking the
        # policy's modules at every step.
        parameters = None
        if max_grad_norm is not None:
            parameters = [param for group in self.optimizer.param_groups for param in group["params"]]
        self.algorithm.optimizer_step(self.optimizer, losses, parameters, max_grad_norm)
        self.algorithm.gradient_steps += 1

    def update_targets(self, interval: int, tau: float) -> None:
        if self.algorithm.gradient_steps % interval == 0:
            polyak_update(getattr(self.algorithm, "target"), self.policy, tau)  # noqa: B009 (DQN's)


HEADS = {QPolicy: "q", CategoricalActor: "logits", GaussianActor: "mean"}
"""The policies :class:`NetworkStack` stacks, and the name of the MLP each has on its encoder's features."""
REFUSED = {"a dueling head": lambda policy: getattr(policy, "dueling", False)}
"""What a value member leaves to each seed's own network beyond the rule of ``unstackable``."""


class NetworkStack(StackedModules):
    """N seeds' policies (part ``"online"``), target networks (``"target"``, DQN's) and optimizers stacked, kept
    from step to step while these seeds train together. The policies are of a kind :meth:`stacks`."""

    def __init__(self, algorithms: Sequence[Algorithm[Any, Any]]) -> None:
        self.algorithms = list(algorithms)
        self.policies: list[Policy] = [algorithm.policy for algorithm in self.algorithms]
        targets = [getattr(algorithm, "target", None) for algorithm in self.algorithms]
        self.targets: list[Policy] = [target for target in targets if target is not None]
        own = [getattr(algorithm, "optimizer") for algorithm in self.algorithms]  # noqa: B009 (DQN's, BC's)
        parts = {"online": self.policies, **({"target": self.targets} if self.targets else {})}
        super().__init__(parts, {"optimizer": (own, ["online"])})
        self.mlp_name = HEADS[type(self.policies[0])]
        self.online, self.target = self.parts["online"], self.parts.get("target")
        self.batch_keys = ("obs", "actions", *(("next_obs", "rewards", "discounts") if self.targets else ()))
        """The batch fields the members' update reads (DQN's; BC's)."""

    @staticmethod
    def stacks(policy: Policy) -> bool:
        """Whether N seeds' ``policy`` stack (``unstackable``: an MLP head of :data:`HEADS` on an encoder
        without weights, not DQN's dueling head). Other kinds train each member's own network in turn."""
        return unstackable(policy, HEADS, REFUSED) is None

    @torch.no_grad()
    def explore(
        self, obs: Sequence[torch.Tensor], epsilons: Sequence[float], generators: Sequence[torch.Generator]
    ) -> list[torch.Tensor]:
        """Every seed's epsilon-greedy actions for its observations ``obs[k]`` (B, ...): one forward pass of the
        stacked Q-networks, then each seed's draw (``QPolicy.sample_of``) with its ``epsilons[k]`` from its own
        generator, the draws its one-seed run makes."""
        scores = self.head_of("online", obs)
        actions = []
        for k, policy in enumerate(self.policies):
            assert isinstance(policy, QPolicy)  # DQN's members (BC's do not act here)
            mask = policy.action_mask(obs[k])
            actions.append(policy.sample_of(masked_logits(scores[k], mask), mask, generators[k], epsilons[k]))
        return actions

    def head_of(self, network: str, inputs: Sequence[torch.Tensor] | torch.Tensor) -> torch.Tensor:
        """The ``network``'s ("online", "target") head on each member's ``inputs[k]`` (B, ...; or all of them stacked,
        (N, B, ...)): (N, B, n)."""
        return self.head(network, self.mlp_name, inputs)

    def write_back(self, k: int) -> None:
        """Seed ``k``'s weights, target weights and optimizer state into its own modules and optimizer."""
        self.write_weights(k)
        self.write_optimizers(k)


def stack_batches(batches: Sequence[Batch], keys: Sequence[str]) -> Batch:
    """The members' batches (one per member, fields (B, ...)) as one batch of fields ``keys``, (M, B, ...) each."""
    return {key: torch.stack([batch[key] for batch in batches]) for key in keys}


class StackedNetworks(Networks):
    """A :class:`NetworkStack` on this step's batches, stacked: (M, B, ...) per field (``rlcore.data.replay_stack``
    gathers them so; :func:`stack_batches` stacks per-member ones). ``present``: each member's taking this step
    (None: every one); an absent member's batch is any batch of the right shapes (its loss is masked out, its
    counters and target untouched)."""

    def __init__(self, stack: NetworkStack, batches: Batch, present: Sequence[bool] | None = None) -> None:
        super().__init__(stack.algorithms, batches)
        self.stack = stack
        self.present = [True] * self.count if present is None else list(present)

    def scores(self, network: str, key: str) -> torch.Tensor:
        stack = self.stack
        inputs = self.batch[key]
        scores = stack.head_of(network, inputs)
        if stack.mlp_name == "mean":
            return scores
        masks = [policy.action_mask(inputs[k]) for k, policy in enumerate(stack.policies)]
        # act_scores: illegal actions' scores at the lowest value (the masks of the observations)
        return scores if masks[0] is None else masked_logits(scores, torch.stack(masks))  # type: ignore[arg-type]

    def log_std(self) -> torch.Tensor | None:
        return self.stack.online.params["log_std"].unsqueeze(1) if self.stack.mlp_name == "mean" else None

    def step(self, losses: torch.Tensor, max_grad_norm: float | None) -> None:
        self.stack.step("optimizer", losses, self.present, max_grad_norm, self.algorithms)
        for algorithm, took_part in zip(self.algorithms, self.present, strict=True):
            algorithm.gradient_steps += took_part

    def update_targets(self, interval: int, tau: float) -> None:
        due = [self.present[k] and a.gradient_steps % interval == 0 for k, a in enumerate(self.algorithms)]
        self.stack.update_target("target", "online", due, tau)
