"""The members a SAC update trains (``SAC.update_members``), with a leading member dimension.

:class:`OneSAC`: M = 1, every network kind the single path serves, in its own shapes; :class:`StackedSAC`: M = N
seeds' actors, twin critics, targets, log alphas and optimizers stacked, the twin critics' ensemble axis folded into
the member axis, (M * 2, in, out). Design: ``docs/members-design.md``. Batches (M, B, ...), losses (M,), Q-values
(M, 2, B[, n]); a member absent from a step, or whose loss or gradient norm is not finite, sits out that optimizer's
step (counted on its algorithm); Box actions' standard normal draws come per member from its own generator.
"""

from __future__ import annotations

import contextlib
from abc import ABC, abstractmethod
from collections.abc import Iterable, Iterator, Sequence
from typing import Any, Protocol

import torch
from torch import nn
from torch.distributions import TanhTransform

from rlcore.algos.members import MemberSet
from rlcore.nets.blocks import EnsembleLinear, TwinQ, polyak_update
from rlcore.nets.distributions import masked_logits, sample_categorical
from rlcore.nets.policies import CategoricalActor, SquashedGaussianActor, squashed_gaussian, squashed_sample
from rlcore.nets.policy import Policy
from rlcore.nets.stacked import StackedModules, StackedPolicies, each_member, unstackable


class SACAlgorithm(Protocol):
    """What the members read and count of ``rlcore.algos.sac.SAC`` (which imports this module, so it is named here by
    its attributes)."""

    gradient_steps: int
    skipped_steps: int
    consecutive_skips: int
    config: Any  # SACConfig
    policy: Policy
    critic: TwinQ
    critic_target: TwinQ
    log_alpha: torch.Tensor
    discrete: bool
    target_entropy: float

    @property
    def actor_optimizer(self) -> torch.optim.Optimizer: ...

    @property
    def critic_optimizer(self) -> torch.optim.Optimizer: ...

    @property
    def alpha_optimizer(self) -> torch.optim.Optimizer | None: ...

    def optimizer_step(
        self,
        optimizer: torch.optim.Optimizer,
        loss: torch.Tensor,
        parameters: Iterable[nn.Parameter] | None = None,
        max_grad_norm: float | None = None,
    ) -> bool: ...


PARTS = ("critic", "actor", "alpha")
"""The optimizers of one SAC gradient step, in the order they step."""


class SACMembers(MemberSet[SACAlgorithm], ABC):
    """M members' SAC networks, optimizers and counters, and each member's replay batch of the current step."""

    def __init__(self, algorithms: Sequence[SACAlgorithm]) -> None:
        super().__init__(algorithms)
        first = self.algorithms[0]
        self.config = first.config
        """The members' ``SACConfig`` (one configuration)."""
        self.discrete, self.target_entropy = first.discrete, first.target_entropy

    @property
    @abstractmethod
    def log_alpha(self) -> torch.Tensor:
        """The log entropy coefficients, () or (M,), with a gradient when tuned."""

    @abstractmethod
    def field(self, key: str) -> torch.Tensor:
        """The batch's ``key`` (rewards, discounts), (M, B) ((B,) for one member)."""

    @abstractmethod
    def features(self, key: str, target: bool = False) -> torch.Tensor:
        """The critics' (``target``: the target critics') features of the batch's normalized ``key`` observations."""

    @abstractmethod
    def q(self, features: torch.Tensor, unit_actions: torch.Tensor | None, target: bool = False) -> torch.Tensor:
        """Twin Q-values, (M, 2, B, n_actions) for discrete actions, (M, 2, B) for Box actions in [-1, 1]."""

    @abstractmethod
    def taken(self, features: torch.Tensor) -> torch.Tensor:
        """Q-values of the batch's actions, (M, 2, B)."""

    @abstractmethod
    def logits(self, key: str) -> torch.Tensor:
        """Discrete actions: the actors' masked logits at the batch's ``key`` observations, (M, B, n)."""

    @abstractmethod
    def sample(self, key: str, draw: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Box actions: one reparameterized squashed sample in [-1, 1] at the batch's ``key`` observations (M, B, A)
        and its log-probability (M, B); ``draw`` 0 is the step's first draw (s'), 1 its second (s)."""

    @abstractmethod
    def critics_frozen(self) -> contextlib.AbstractContextManager[None]:
        """The context of the actor's loss: dQ/da flows, the critics' weights get no gradient."""

    @abstractmethod
    def step(self, part: str, losses: torch.Tensor) -> None:
        """One step of the ``part`` optimizer (:data:`PARTS`) on each member's loss, (M,); a member whose loss or
        clipped gradient norm is not finite skips it (counted on its algorithm)."""

    @abstractmethod
    def end_step(self) -> None:
        """Count the gradient step on every member and update the targets where due."""


class OneSAC(SACMembers):
    """One SAC and its replay batch, M = 1 in its own shapes (:class:`rlcore.algos.members.MemberSet`)."""

    def __init__(self, algorithm: SACAlgorithm, batch: dict[str, torch.Tensor]) -> None:
        super().__init__([algorithm])
        self.algorithm, self.policy, self.batch = algorithm, algorithm.policy, batch

    @property
    def log_alpha(self) -> torch.Tensor:
        return self.algorithm.log_alpha

    def field(self, key: str) -> torch.Tensor:
        return self.batch[key]

    def features(self, key: str, target: bool = False) -> torch.Tensor:
        critic = self.algorithm.critic_target if target else self.algorithm.critic
        return critic.encode(self.policy.obs_normalizer(self.batch[key]))

    def q(self, features: torch.Tensor, unit_actions: torch.Tensor | None, target: bool = False) -> torch.Tensor:
        critic = self.algorithm.critic_target if target else self.algorithm.critic
        if self.discrete:
            return critic(features)
        assert unit_actions is not None
        return critic(features, unit_actions)

    def taken(self, features: torch.Tensor) -> torch.Tensor:
        if self.discrete:
            return self.algorithm.critic.taken(features, self.batch["actions"])
        assert isinstance(self.policy, SquashedGaussianActor)
        return self.q(features, self.policy.to_unit(self.batch["actions"]))

    def logits(self, key: str) -> torch.Tensor:
        return self.policy.act_scores(self.batch[key])

    def sample(self, key: str, draw: int) -> tuple[torch.Tensor, torch.Tensor]:
        assert isinstance(self.policy, SquashedGaussianActor)
        dist = self.policy.squashed_distribution(self.batch[key])
        actions = dist.rsample()  # torch's global generator, as the run has always drawn it
        return actions, dist.log_prob(actions)

    @contextlib.contextmanager
    def critics_frozen(self) -> Iterator[None]:
        self.algorithm.critic.requires_grad_(False)
        try:
            yield
        finally:
            self.algorithm.critic.requires_grad_(True)

    def step(self, part: str, losses: torch.Tensor) -> None:
        algorithm, clip = self.algorithm, self.config.max_grad_norm
        if part == "critic":
            algorithm.optimizer_step(algorithm.critic_optimizer, losses, algorithm.critic.parameters(), clip)
        elif part == "actor":
            algorithm.optimizer_step(algorithm.actor_optimizer, losses, self.policy.parameters(), clip)
        else:
            assert algorithm.alpha_optimizer is not None
            algorithm.optimizer_step(algorithm.alpha_optimizer, losses)

    def end_step(self) -> None:
        algorithm = self.algorithm
        algorithm.gradient_steps += 1
        if algorithm.gradient_steps % self.config.target_update_interval == 0:
            polyak_update(algorithm.critic_target, algorithm.critic, self.config.tau)


class StackedSAC(SACMembers):
    """N seeds' SAC (one configuration) stacked: parts ``"actor"``, ``"critic"``, ``"target"``, the tensor
    ``"log_alpha"`` and an optimizer per :data:`PARTS`, kept over many gradient steps (:meth:`load` gives each step's
    batches); :meth:`write_back` puts everything back into the seeds' own modules and optimizers."""

    def __init__(self, algorithms: Sequence[SACAlgorithm]) -> None:
        super().__init__(algorithms)
        own = [own_optimizers(algorithm) for algorithm in self.algorithms]  # each in PARTS' order
        steps = {"critic": ["critic"], "actor": ["actor"], "alpha": ["log_alpha"]}  # what each optimizer steps
        self.stack = StackedModules(
            {
                "actor": [algorithm.policy for algorithm in self.algorithms],
                "critic": [algorithm.critic for algorithm in self.algorithms],
                "target": [algorithm.critic_target for algorithm in self.algorithms],
            },
            {part: ([mine[i] for mine in own], steps[part]) for i, part in enumerate(PARTS[: len(own[0])])},
            {"log_alpha": [algorithm.log_alpha for algorithm in self.algorithms]},
        )
        self.critic, self.target = self.stack.parts["critic"], self.stack.parts["target"]
        self.fields: dict[str, torch.Tensor] = {}
        """This step's batches, (M, B, ...) per field."""
        self.noise: torch.Tensor | None = None
        self.present = [True] * self.count

    @staticmethod
    def stacks(algorithm: SACAlgorithm) -> bool:
        """Whether N seeds' SAC stack (``unstackable``: the actor's and the critics' encoders hold no
        weights)."""
        actor = unstackable(algorithm.policy, (CategoricalActor, SquashedGaussianActor), {})
        return actor is None and unstackable(algorithm.critic, (TwinQ,), {}) is None

    def load(
        self,
        batches: dict[str, torch.Tensor],
        noise: torch.Tensor | None,
        present: Sequence[bool] | None = None,
    ) -> None:
        """The next gradient step's replay batches, stacked: (M, B, ...) per field (``rlcore.data.replay_stack``
        gathers them so; ``rlcore.algos.value_members.stack_batches`` stacks per-member ones); ``noise``: Box
        actions' standard normal draws (M, 2, B, action_dim), [:, 0] for s' and [:, 1] for s, each member's from
        its own generator; None for discrete actions. ``present``: the members taking this step (None: every one);
        an absent member's batch is any batch of the right shapes, its losses masked out, its counters and targets
        untouched."""
        self.fields = batches
        self.noise = noise
        self.present = [True] * self.count if present is None else list(present)

    @property
    def log_alpha(self) -> torch.Tensor:
        return self.stack.tensors["log_alpha"]

    def field(self, key: str) -> torch.Tensor:
        return self.fields[key]

    @torch.no_grad()
    def features(self, key: str, target: bool = False) -> torch.Tensor:  # the encoders and normalizers hold no weights
        functions = [
            lambda x, a=a: (a.critic_target if target else a.critic).encode(a.policy.obs_normalizer(x))
            for a in self.algorithms
        ]
        return each_member(functions, self.fields[key], self.stack.same_features)

    def _twin(self, stacked: StackedPolicies[Any], x: torch.Tensor) -> torch.Tensor:
        """Every member's twin critics on its own inputs: ``x`` (M, B, in) -> (M, 2, B, out), each ensemble layer one
        ``torch.baddbmm`` over the (M * 2) stacked networks (as ``EnsembleLinear`` does over its 2)."""
        count, batch = x.shape[0], x.shape[1]
        x = x.unsqueeze(1).expand(count, 2, *x.shape[1:]).reshape(count * 2, batch, -1)
        for index, layer in enumerate(stacked.template.layers):
            if isinstance(layer, EnsembleLinear):
                weight = stacked.params[f"layers.{index}.weight"].flatten(0, 1)  # (M * 2, in, out)
                bias = stacked.params[f"layers.{index}.bias"].flatten(0, 1)  # (M * 2, 1, out)
                x = torch.baddbmm(bias, x, weight)
            else:
                x = layer(x)  # an activation
        return x.view(count, 2, batch, -1)

    def q(self, features: torch.Tensor, unit_actions: torch.Tensor | None, target: bool = False) -> torch.Tensor:
        stacked = self.target if target else self.critic
        if self.discrete:
            return self._twin(stacked, features)
        assert unit_actions is not None
        return self._twin(stacked, torch.cat([features, unit_actions], dim=-1)).squeeze(-1)

    def taken(self, features: torch.Tensor) -> torch.Tensor:
        actions = self.field("actions")
        if self.discrete:
            index = actions.view(self.count, 1, -1, 1).expand(-1, 2, -1, 1)
            return self.q(features, None).gather(3, index).squeeze(-1)
        policy = self.algorithms[0].policy
        assert isinstance(policy, SquashedGaussianActor)  # the bounds are the env's, every member's the same
        return self.q(features, policy.to_unit(actions))

    def logits(self, key: str) -> torch.Tensor:
        logits = self.stack.head("actor", "logits", self.fields[key])
        masks = [a.policy.action_mask(self.fields[key][k]) for k, a in enumerate(self.algorithms)]
        return masked_logits(logits, None if masks[0] is None else torch.stack(masks))  # type: ignore[arg-type]

    def sample(self, key: str, draw: int) -> tuple[torch.Tensor, torch.Tensor]:
        assert self.noise is not None
        trunk = self.stack.head("actor", "trunk", self.fields[key])
        mean, log_std = SquashedGaussianActor.mean_log_std(trunk)
        return squashed_sample(squashed_gaussian(mean, log_std, [TanhTransform(cache_size=1)]), self.noise[:, draw])

    @torch.no_grad()
    def explore(self, obs: Sequence[torch.Tensor], generators: Sequence[torch.Generator]) -> list[torch.Tensor]:
        """Every seed's exploration actions for its observations ``obs[k]`` (B, ...) from the stacked actors: one
        forward pass for all of them, then each seed's draw from its own generator, the draws its one-seed run makes
        (``SquashedGaussianActor.sample_of``: its Gaussian noise and squashing; discrete: ``sample_categorical``)."""
        policies = [algorithm.policy for algorithm in self.algorithms]
        if self.discrete:
            logits = self.stack.head("actor", "logits", obs)
            return [
                sample_categorical(masked_logits(logits[k], policy.action_mask(obs[k])), generators[k])
                for k, policy in enumerate(policies)
            ]
        mean, log_std = SquashedGaussianActor.mean_log_std(self.stack.head("actor", "trunk", obs))
        actions = []
        for k, policy in enumerate(policies):
            assert isinstance(policy, SquashedGaussianActor)
            actions.append(policy.sample_of(mean[k], log_std[k], generators[k]))
        return actions

    @contextlib.contextmanager
    def critics_frozen(self) -> Iterator[None]:
        for param in self.critic.parameters():
            param.requires_grad_(False)
        try:
            yield
        finally:
            for param in self.critic.parameters():
                param.requires_grad_(True)

    def step(self, part: str, losses: torch.Tensor) -> None:
        clip = self.config.max_grad_norm if part != "alpha" else None
        self.stack.step(part, losses, self.present, clip, self.algorithms)

    def end_step(self) -> None:
        for algorithm, present in zip(self.algorithms, self.present, strict=True):
            algorithm.gradient_steps += present
        interval = self.config.target_update_interval
        due = [self.present[k] and a.gradient_steps % interval == 0 for k, a in enumerate(self.algorithms)]
        self.stack.update_target("target", "critic", due, self.config.tau)

    def write_back(self) -> None:
        """Every member's actor, critics, targets, log alpha and Adam states into its own ``SAC``."""
        for k in range(self.count):
            self.stack.write_weights(k)
            self.stack.write_optimizers(k)


def own_optimizers(algorithm: SACAlgorithm) -> list[torch.optim.Optimizer]:
    """SAC's optimizers in the order of :data:`PARTS` (the alpha optimizer only with ``ent_coef: auto``)."""
    own = [algorithm.critic_optimizer, algorithm.actor_optimizer, algorithm.alpha_optimizer]
    return [optimizer for optimizer in own if optimizer is not None]
