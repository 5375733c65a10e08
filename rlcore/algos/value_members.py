"""The members an off-policy or offline update on replay or dataset batches trains (DQN, BC), seen with a leading
member dimension (issue 39, ``docs/members-design.md``): one policy (M = 1, the single-seed run) or N seeds'
policies stacked (M = N, ``train.seeds`` batched).

``DQN.update_members`` and ``BC.update_members`` are written once over this interface; what differs between one
member and N lives here, as :mod:`rlcore.algos.members` holds it for the on-policy updates:

- :class:`OneNetwork` is the plain policy (every network kind the single path serves: dueling heads, CNN and Dict
  encoders, action masks) and its own optimizer, its batch's tensors (B, ...) and its losses scalars; its step is
  :meth:`rlcore.algos.base.Algorithm.optimizer_step`, its target update ``polyak_update``.
- :class:`StackedNetworks` runs N seeds' MLP heads on encoders without weights stacked (``StackedPolicies.mlp``:
  one ``baddbmm`` per layer; :meth:`NetworkStack.stacks` says which policies), their batches (M, B, ...), losses
  (M,); one masked step (:func:`rlcore.nets.stacked.masked_step`: each member's gradient clipped to its own norm, a
  member absent from this step or with a non-finite loss or gradient norm sits out while the others step), and each
  present member's target network updated on its own schedule.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import Any

import torch
from torch import nn

from rlcore.algos.base import Algorithm
from rlcore.nets.blocks import polyak_update
from rlcore.nets.distributions import masked_logits
from rlcore.nets.policies import CategoricalActor, GaussianActor, QPolicy
from rlcore.nets.policy import Policy
from rlcore.nets.stacked import StackedAdam, StackedPolicies, count_skips, each_member, masked_step

Batch = dict[str, torch.Tensor]


class Networks(ABC):
    """M members' networks, optimizers and counters and this step's batches, as DQN's and BC's updates read them.
    ``batch``: the members' batch tensors, (B, ...) for one member, (M, B, ...) for M."""

    def __init__(self, algorithms: Sequence[Algorithm[Any, Any]], batch: Batch) -> None:
        self.algorithms = list(algorithms)
        self.count = len(self.algorithms)
        """M."""
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

    def values(self, x: torch.Tensor) -> list[float]:
        """A per-member tensor (() or (M,)) as each member's float (one host sync)."""
        return x.detach().reshape(self.count).tolist()


class OneNetwork(Networks):
    """One algorithm's policy (its ``target`` network, if it has one) and batch, M = 1."""

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
        parameters = self.policy.parameters() if max_grad_norm is not None else None
        self.algorithm.optimizer_step(self.optimizer, losses, parameters, max_grad_norm)
        self.algorithm.gradient_steps += 1

    def update_targets(self, interval: int, tau: float) -> None:
        if self.algorithm.gradient_steps % interval == 0:
            polyak_update(getattr(self.algorithm, "target"), self.policy, tau)  # noqa: B009 (DQN's)


HEADS = {QPolicy: "q", CategoricalActor: "logits", GaussianActor: "mean"}
"""The policies :class:`NetworkStack` stacks, and the name of the MLP each has on its encoder's features."""


class NetworkStack:
    """N seeds' policies (and target networks) stacked with their optimizer state, kept from step to step while
    these seeds train together; :meth:`write_back` puts a seed's state into its own policy, target and optimizer
    (what its evaluations and checkpoints read). The policies are of a kind :meth:`stacks`."""

    def __init__(self, algorithms: Sequence[Algorithm[Any, Any]]) -> None:
        self.algorithms = list(algorithms)
        self.policies: list[Policy] = [algorithm.policy for algorithm in self.algorithms]
        self.head, self.count = HEADS[type(self.policies[0])], len(self.algorithms)
        self.online: StackedPolicies[nn.Module] = StackedPolicies(self.policies)
        targets = [getattr(algorithm, "target", None) for algorithm in self.algorithms]
        self.targets: list[Policy] = [target for target in targets if target is not None]
        self.target = StackedPolicies(self.targets) if self.targets else None
        own: torch.optim.Optimizer = getattr(self.algorithms[0], "optimizer")  # noqa: B009 (DQN's, BC's)
        group = own.param_groups[0]
        lr, betas, eps = float(group["lr"]), (float(group["betas"][0]), float(group["betas"][1])), float(group["eps"])
        decay = float(group["weight_decay"]) if isinstance(own, torch.optim.AdamW) else 0.0  # BC's decoupled decay
        self.optimizer = StackedAdam(self.online.parameters(), self.count, lr, betas, eps, weight_decay=decay)
        self.optimizer.load_seed_state_dicts([getattr(a, "optimizer").state_dict() for a in algorithms])  # noqa: B009
        self.same_features = not any(policy.obs_normalizer.enabled for policy in self.policies)
        """Whether every member's features are one function of its observations (no normalizer statistics)."""

    @staticmethod
    def stacks(policy: Policy) -> bool:
        """Whether N seeds' ``policy`` stack: an MLP head (:data:`HEADS`; not DQN's dueling head) on an encoder
        without weights (vector or discrete observations). Other kinds train each member's own network in turn."""
        if type(policy) not in HEADS or getattr(policy, "dueling", False):
            return False
        return not any(True for _ in policy.encoder.parameters())

    @torch.no_grad()
    def explore(
        self, obs: Sequence[torch.Tensor], epsilons: Sequence[float], generators: Sequence[torch.Generator]
    ) -> list[torch.Tensor]:
        """Every seed's epsilon-greedy actions for its observations ``obs[k]`` (B, ...) from the stacked online
        Q-networks: one forward pass for all of them, then each seed's draw (``QPolicy.sample_of``) with its own
        ``epsilons[k]`` from its own generator, the draws its one-seed run makes."""
        features = each_member([policy.features for policy in self.policies], obs, self.same_features)
        scores = self.online.mlp(self.head, features)
        actions = []
        for k, policy in enumerate(self.policies):
            assert isinstance(policy, QPolicy)  # DQN's members (BC's do not act here)
            mask = policy.action_mask(obs[k])
            actions.append(policy.sample_of(masked_logits(scores[k], mask), mask, generators[k], epsilons[k]))
        return actions

    @torch.no_grad()
    def write_back(self, k: int) -> None:
        """Seed ``k``'s weights, target weights and optimizer state into its own modules and optimizer."""
        algorithm = self.algorithms[k]
        stacks = [(self.policies[k], self.online)] + ([] if self.target is None else [(self.targets[k], self.target)])
        for module, stacked in stacks:
            for name, param in module.named_parameters():
                param.copy_(stacked.params[name][k])
        optimizer: torch.optim.Optimizer = getattr(algorithm, "optimizer")  # noqa: B009
        saved = self.optimizer.seed_state_dict(k)
        params = [param for group in optimizer.param_groups for param in group["params"]]
        for index, param in enumerate(params):
            if index in saved["state"]:
                optimizer.state[param] = saved["state"][index]


class StackedNetworks(Networks):
    """A :class:`NetworkStack` on this step's batches (one per member, stacked). ``present``: each member's taking
    this step (None: every one); an absent member's batch is any batch of the right shapes (its loss is masked out,
    its counters and target untouched)."""

    def __init__(self, stack: NetworkStack, batches: Sequence[Batch], present: Sequence[bool] | None = None) -> None:
        keys = ("actions", "rewards", "discounts") if stack.target is not None else ("actions",)
        super().__init__(stack.algorithms, {key: torch.stack([batch[key] for batch in batches]) for key in keys})
        self.stack, self.batches = stack, list(batches)
        self.present = [True] * self.count if present is None else list(present)

    def scores(self, network: str, key: str) -> torch.Tensor:
        stack = self.stack
        stacked, modules = (stack.online, stack.policies) if network == "online" else (stack.target, stack.targets)
        assert stacked is not None
        with torch.no_grad():  # the encoders and normalizers hold no weights (each network's own statistics)
            functions = [module.features for module in modules]
            features = each_member(functions, [batch[key] for batch in self.batches], self.stack.same_features)
        scores = stacked.mlp(stack.head, features)
        if stack.head == "mean":
            return scores
        masks = [policy.action_mask(batch[key]) for policy, batch in zip(stack.policies, self.batches, strict=True)]
        # act_scores: illegal actions' scores at the lowest value (the masks of the observations)
        return scores if masks[0] is None else masked_logits(scores, torch.stack(masks))  # type: ignore[arg-type]

    def log_std(self) -> torch.Tensor | None:
        return self.stack.online.params["log_std"].unsqueeze(1) if self.stack.head == "mean" else None

    def step(self, losses: torch.Tensor, max_grad_norm: float | None) -> None:
        present = None if all(self.present) else torch.tensor(self.present)
        applied = masked_step(self.stack.optimizer, losses, present, max_grad_norm)
        count_skips(self.algorithms, applied, self.present)
        for algorithm, took_part in zip(self.algorithms, self.present, strict=True):
            algorithm.gradient_steps += took_part

    @torch.no_grad()
    def update_targets(self, interval: int, tau: float) -> None:
        stack = self.stack
        assert stack.target is not None
        due = [k for k, a in enumerate(self.algorithms) if self.present[k] and a.gradient_steps % interval == 0]
        if not due:
            return
        targets, sources = list(stack.target.params.values()), list(stack.online.params.values())
        if len(due) < self.count:  # only the due members' slices
            targets = [tensor[k] for k in due for tensor in targets]
            sources = [tensor[k] for k in due for tensor in sources]
        if tau >= 1.0:
            torch._foreach_copy_(targets, sources)
        else:
            torch._foreach_lerp_(targets, sources, tau)
        for k in due:  # each member's buffers (normalizer statistics) into its target, as polyak_update copies them
            buffers = zip(stack.targets[k].buffers(), stack.policies[k].buffers(), strict=True)
            for target_buffer, source_buffer in buffers:
                target_buffer.copy_(source_buffer)
