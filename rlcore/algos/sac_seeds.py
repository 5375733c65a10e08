"""SAC's gradient step for N seeds at once (``train.seeds`` batched): :meth:`rlcore.algos.sac.SAC.update`'s
arithmetic on stacked weights, each seed's replay batch and reparameterization noise its own.

For one gradient step of every seed, as ``SAC.update`` does for one (the losses are ``rlcore.algos.sac``'s):
    the actors, twin critics, their targets (N, ...) stacked; alpha (N,) from each seed's log alpha
    y = scale * R + discount * soft value of s' under the targets    (N, B)
    L_Q per seed; one backward; each seed's gradient clipped to its own norm; one fused Adam step of the critics
    L_pi per seed (the critics frozen); one backward, per-seed clipping, one fused Adam step of the actors
    L_alpha per seed; one Adam step of the stacked log alphas
    every target_update_interval steps: Polyak update of every seed's targets
Each linear layer is one ``torch.baddbmm`` over the stacked weights (``StackedPolicies.mlp``; the twin critics'
ensemble layers with seed and member flattened). Box actions: the two standard normal draws of ``SAC.update``
(s' then s, each (B, action_dim)) are given per seed by the caller, drawn from the seed's own generator
(``rlcore.nets.policies.squashed_sample``). Adam is elementwise, so one optimizer over the stacked tensors steps each
seed as its own would while every seed steps together: a step where some seed's loss or gradient norm is not
finite is handed back (:class:`CriticStepped` when the critics' step is taken already) for the caller to finish
seed by seed with ``SAC``'s own code. Equal to the unbatched update up to float32 summation order.

In scope: encoders without weights (vector or discrete observations), fp32 on the CPU; the trainer checks the rest
(``rlcore.trainers.off_policy_seeds``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn
from torch.distributions import TanhTransform

from rlcore.algos.sac import (
    SAC,
    alpha_loss,
    box_actor_loss,
    box_soft_value,
    critic_td_loss,
    discrete_actor_loss,
    discrete_soft_value,
)
from rlcore.nets.blocks import EnsembleLinear, TwinQ
from rlcore.nets.distributions import masked_logits
from rlcore.nets.policies import SquashedGaussianActor, squashed_gaussian, squashed_sample
from rlcore.nets.stacked import StackedPolicies


@dataclass
class CriticStepped:
    """A step whose critics' part every seed took and whose actor part some seed's cannot batch: per seed what
    :meth:`SAC.actor_step` takes to finish it. ``features`` (N, B, obs_features), ``alpha`` (N,),
    ``critic_losses`` (N,), ``q`` (N, 2, B)."""

    features: torch.Tensor
    alpha: torch.Tensor
    critic_losses: torch.Tensor
    q: torch.Tensor

    def seed(self, k: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """Seed ``k``'s (features, alpha, critic loss, Q(s, a)): the arguments of ``SAC.actor_step`` after obs."""
        return self.features[k], self.alpha[k], self.critic_losses[k], self.q[k]


class StackedSAC:
    """N seeds' SAC (one configuration) stacked for an update phase: actors, critics, targets, log alphas and the
    optimizers over them. The caller loads the seeds' optimizer states into :attr:`optimizers` and writes everything
    back after the phase (:meth:`write_back` for the weights)."""

    def __init__(self, algorithms: Sequence[SAC]) -> None:
        self.algorithms = list(algorithms)
        first = self.algorithms[0]
        self.config, self.discrete, self.count = first.config, first.discrete, len(self.algorithms)
        self.actor: StackedPolicies[nn.Module] = StackedPolicies([algorithm.policy for algorithm in self.algorithms])
        self.critic: StackedPolicies[TwinQ] = StackedPolicies([algorithm.critic for algorithm in self.algorithms])
        self.target: StackedPolicies[TwinQ] = StackedPolicies([algorithm.critic_target for algorithm in algorithms])
        self.log_alpha = torch.stack([algorithm.log_alpha.detach() for algorithm in self.algorithms])
        cfg = self.config
        self.actor_optimizer = torch.optim.Adam(self.actor.parameters(), lr=cfg.actor_lr or cfg.lr, fused=True)
        self.critic_optimizer = torch.optim.Adam(self.critic.parameters(), lr=cfg.lr, fused=True)
        self.alpha_optimizer = None
        if cfg.auto_alpha:
            self.log_alpha.requires_grad_(True)
            self.alpha_optimizer = torch.optim.Adam([self.log_alpha], lr=cfg.lr)

    def optimizers(self) -> list[tuple[torch.optim.Optimizer, list[torch.optim.Optimizer]]]:
        """Each stacked optimizer with the seeds' own optimizers it stands for."""
        pairs: list[tuple[torch.optim.Optimizer, list[torch.optim.Optimizer]]] = [
            (self.critic_optimizer, [algorithm.critic_optimizer for algorithm in self.algorithms]),
            (self.actor_optimizer, [algorithm.actor_optimizer for algorithm in self.algorithms]),
        ]
        if self.alpha_optimizer is not None:
            own = [algorithm.alpha_optimizer for algorithm in self.algorithms]
            pairs.append((self.alpha_optimizer, [optimizer for optimizer in own if optimizer is not None]))
        return pairs

    def _twin(self, stacked: StackedPolicies[TwinQ], x: torch.Tensor) -> torch.Tensor:
        """Every seed's twin critics on its own inputs: ``x`` (N, B, in) -> (N, 2, B, out), each ensemble layer one
        ``torch.baddbmm`` over the (N * 2) stacked members (as ``EnsembleLinear`` does over its 2)."""
        n, batch = x.shape[0], x.shape[1]
        x = x.unsqueeze(1).expand(n, 2, *x.shape[1:]).reshape(n * 2, batch, -1)
        for index, layer in enumerate(stacked.template.layers):
            if isinstance(layer, EnsembleLinear):
                weight = stacked.params[f"layers.{index}.weight"].flatten(0, 1)  # (N * 2, in, out)
                bias = stacked.params[f"layers.{index}.bias"].flatten(0, 1)  # (N * 2, 1, out)
                x = torch.baddbmm(bias, x, weight)
            else:
                x = layer(x)  # an activation
        return x.view(n, 2, batch, -1)

    def _q(
        self, stacked: StackedPolicies[TwinQ], features: torch.Tensor, unit_actions: torch.Tensor | None
    ) -> torch.Tensor:
        """``SAC._q`` for every seed: (N, 2, B, n_actions) discrete, (N, 2, B) Box."""
        if self.discrete:
            return self._twin(stacked, features)
        assert unit_actions is not None
        return self._twin(stacked, torch.cat([features, unit_actions], dim=-1)).squeeze(-1)

    def _actor(
        self, features: torch.Tensor, obs: list[torch.Tensor], noise: torch.Tensor | None
    ) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
        """Discrete: the actors' logits (N, B, n), masked as ``CategoricalActor.act_scores`` masks them. Box: one
        squashed sample in [-1, 1] per seed from ``noise`` (N, B, action_dim) and its log-probability (N, B)."""
        if self.discrete:
            logits = self.actor.mlp("logits", features)
            masks = [algorithm.policy.action_mask(o) for algorithm, o in zip(self.algorithms, obs, strict=True)]
            return masked_logits(logits, None if masks[0] is None else torch.stack(masks))  # type: ignore[arg-type]
        assert noise is not None
        mean, log_std = SquashedGaussianActor.mean_log_std(self.actor.mlp("trunk", features))
        return squashed_sample(squashed_gaussian(mean, log_std, [TanhTransform(cache_size=1)]), noise)

    def update(
        self, batches: Sequence[dict[str, torch.Tensor]], noise: torch.Tensor | None
    ) -> list[dict[str, float]] | CriticStepped | None:
        """One gradient step of every seed on its replay batch. ``noise``: Box actions' standard normal draws
        (N, 2, B, action_dim), [:, 0] for s' and [:, 1] for s; None for discrete actions. Returns the seeds'
        metrics; None (nothing changed) when some seed's critic loss or gradient norm is not finite;
        :class:`CriticStepped` when the critics stepped and some seed's actor or alpha part is not finite."""
        cfg, algorithms = self.config, self.algorithms
        alpha = self.log_alpha.detach().exp()
        policies = [algorithm.policy for algorithm in algorithms]
        obs = [batch["obs"] for batch in batches]
        next_obs = [batch["next_obs"] for batch in batches]
        with torch.no_grad():  # the encoders and normalizers hold no weights
            actor_features = torch.stack([policy.features(o) for policy, o in zip(policies, obs, strict=True)])
            actor_next = torch.stack([policy.features(o) for policy, o in zip(policies, next_obs, strict=True)])
            features = torch.stack(
                [a.critic.encode(a.policy.obs_normalizer(o)) for a, o in zip(algorithms, obs, strict=True)]
            )
            next_features = torch.stack(
                [a.critic_target.encode(a.policy.obs_normalizer(o)) for a, o in zip(algorithms, next_obs, strict=True)]
            )
            if self.discrete:
                next_logits = self._actor(actor_next, next_obs, None)
                assert isinstance(next_logits, torch.Tensor)
                next_value = discrete_soft_value(self._q(self.target, next_features, None), next_logits, alpha)
            else:
                assert noise is not None
                next_actions, next_log_prob = self._actor(actor_next, next_obs, noise[:, 0])
                next_q = self._q(self.target, next_features, next_actions)
                next_value = box_soft_value(next_q, next_log_prob, alpha)
            stacked = {
                key: torch.stack([batch[key] for batch in batches]) for key in ("actions", "rewards", "discounts")
            }
            target = cfg.reward_scale * stacked["rewards"] + stacked["discounts"] * next_value

        if self.discrete:
            q_all = self._q(self.critic, features, None)
            index = stacked["actions"].view(self.count, 1, -1, 1).expand(-1, 2, -1, 1)
            q = q_all.gather(3, index).squeeze(-1)
        else:
            policy = policies[0]
            assert isinstance(policy, SquashedGaussianActor)  # the bounds are the env's, every seed's the same
            q = self._q(self.critic, features, policy.to_unit(stacked["actions"]))
        critic_losses = critic_td_loss(q, target)
        if not self._step(self.critic, self.critic_optimizer, critic_losses):
            return None

        for param in self.critic.parameters():  # the actor's loss needs dQ/da, not the critics' weight gradients
            param.requires_grad_(False)
        try:
            if self.discrete:
                q_pi = self._q(self.critic, features, None).detach()
                logits = self._actor(actor_features, obs, None)
                assert isinstance(logits, torch.Tensor)
                actor_losses, entropy = discrete_actor_loss(q_pi, logits, alpha)
            else:
                assert noise is not None
                actions, log_prob = self._actor(actor_features, obs, noise[:, 1])
                actor_losses, entropy = box_actor_loss(self._q(self.critic, features, actions), log_prob, alpha)
            alpha_losses = alpha_loss(self.log_alpha, algorithms[0].target_entropy, entropy)
            stepped = CriticStepped(features, alpha, critic_losses.detach(), q.detach())
            if not bool(torch.isfinite(alpha_losses).all()) or not self._step(
                self.actor, self.actor_optimizer, actor_losses
            ):
                return stepped
        finally:
            for param in self.critic.parameters():
                param.requires_grad_(True)
        if self.alpha_optimizer is not None:
            self.alpha_optimizer.zero_grad(set_to_none=True)
            alpha_losses.sum().backward()
            self.alpha_optimizer.step()

        for algorithm in algorithms:
            algorithm.gradient_steps += 1
            algorithm.consecutive_skips = 0
        if algorithms[0].gradient_steps % cfg.target_update_interval == 0:
            with torch.no_grad():
                torch._foreach_lerp_(self.target.parameters(), self.critic.parameters(), cfg.tau)
        columns = zip(
            critic_losses.tolist(),
            actor_losses.tolist(),
            alpha.tolist(),
            entropy.tolist(),
            q.detach().flatten(1).mean(-1).tolist(),
            strict=True,
        )
        names = ("critic_loss", "actor_loss", "alpha", "entropy", "q_mean")
        return [dict(zip(names, values, strict=True)) for values in columns]

    def _step(self, stacked: StackedPolicies[Any], optimizer: torch.optim.Optimizer, losses: torch.Tensor) -> bool:
        """One step of ``optimizer`` on the seeds' ``losses`` (N,), each seed's gradient clipped to its own norm;
        False (nothing changed) when some seed's loss or norm is not finite."""
        if not bool(torch.isfinite(losses).all()):
            return False
        optimizer.zero_grad(set_to_none=True)
        losses.sum().backward()
        if self.config.max_grad_norm is not None:
            norms = clip_each_seed(stacked.parameters(), self.count, self.config.max_grad_norm)
            if not bool(torch.isfinite(norms).all()):
                optimizer.zero_grad(set_to_none=True)
                return False
        optimizer.step()
        return True

    @torch.no_grad()
    def write_back(self, actors_only: bool = False) -> None:
        """Every seed's actor, critics, targets and log alpha into its own ``SAC`` (the optimizers' states are the
        caller's); ``actors_only``: the actors only (what acting reads)."""
        for index, algorithm in enumerate(self.algorithms):
            parts: list[tuple[nn.Module, StackedPolicies[Any]]] = [(algorithm.policy, self.actor)]
            if not actors_only:
                parts += [(algorithm.critic, self.critic), (algorithm.critic_target, self.target)]
                algorithm.log_alpha.copy_(self.log_alpha[index])
            for module, stacked in parts:
                for name, param in module.named_parameters():
                    param.copy_(stacked.params[name][index])


@torch.no_grad()
def clip_each_seed(parameters: Sequence[torch.Tensor], count: int, max_norm: float) -> torch.Tensor:
    """Clip each seed's gradient (the slices [k] of the stacked ``parameters``' gradients, (N, *shape)) to the global
    2-norm ``max_norm`` with ``nn.utils.clip_grad_norm_``'s own arithmetic on that seed's slices (a norm per tensor
    by ``torch._foreach_norm``, their norm, ``max_norm / (norm + 1e-6)`` clamped to 1), so bitwise what the unbatched
    step clips: ``StackedPolicies.clip_grad_norms_`` reduces the stacked tensors at once, within ulps of it, and SAC's
    clipped runs amplify those ulps to 1e-2 in a few hundred steps. Returns the norms before clipping, (N,)."""
    grads = [param.grad for param in parameters if param.grad is not None]
    norms = []
    for k in range(count):
        slices = [grad[k] for grad in grads]
        norm = torch.linalg.vector_norm(torch.stack(torch._foreach_norm(slices, 2.0)), 2.0)
        torch._foreach_mul_(slices, torch.clamp(max_norm / (norm + 1e-6), max=1.0))
        norms.append(norm)
    return torch.stack(norms)
