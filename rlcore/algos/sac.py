"""Soft Actor-Critic (Haarnoja et al., 2018), with automatic entropy tuning, and its discrete-action
variant (Christodoulou, 2019): the action space picks which.

For each gradient step on a replay batch (s, a, R, s', discount), with twin critics Q1, Q2:
    y = scale * R + discount * E_{a'~pi(s')}[min_i Q_target_i(s', a') - alpha * log pi(a'|s')]
    L_Q  = sum_i (Q_i(s, a) - y)^2
    L_pi = E_{a~pi(s)}[alpha * log pi(a|s) - min_i Q_i(s, a)]
    L_alpha = -log(alpha) * (target_entropy - H[pi(.|s)])      (when ent_coef is "auto")
    Q_target <- tau * Q + (1 - tau) * Q_target
Box actions: a tanh-squashed Gaussian, expectations by one reparameterized sample; log pi and the entropy
are those of the squashed action u = tanh(x) in [-1, 1], before the affine map to the env's bounds (as in the
authors' code and SB3), so the automatic target -action_dim means the same whatever the bounds, and the critics
see u. Discrete actions: a categorical, expectations computed exactly over the actions.
"""

from __future__ import annotations

import copy
import math
from typing import Annotated, Literal

import torch
from gymnasium import spaces
from pydantic import Field

from rlcore.algos.base import OffPolicyAlgorithm, OffPolicyConfig
from rlcore.config.sections import PolicyConfig
from rlcore.nets.blocks import TwinQ, polyak_update
from rlcore.nets.policies import CategoricalActor, SquashedGaussianActor, require_bounded
from rlcore.nets.policy import Policy


class SACConfig(OffPolicyConfig):
    name: Literal["sac"] = "sac"
    lr: float = Field(3e-4, gt=0)
    """Adam learning rate of the critics and the entropy coefficient (and of the actor unless ``actor_lr``)."""
    actor_lr: float | None = Field(None, gt=0)
    """The actor's learning rate; null: ``lr``. A slower actor steadies discrete SAC."""
    ent_coef: Annotated[float, Field(gt=0)] | Literal["auto"] = "auto"
    """The entropy coefficient alpha (> 0), or ``auto`` to tune it toward ``target_entropy``."""
    init_ent_coef: float = Field(1.0, gt=0)
    """With ``ent_coef: auto``: alpha at the start of training (log alpha is then tuned by Adam at ``lr``); unused with
    a fixed ``ent_coef``."""
    target_entropy: float | Literal["auto"] = "auto"
    """``auto``: -action_dim for Box actions (entropy of the squashed action in [-1, 1]^action_dim, whatever the
    bounds), ``target_entropy_scale * log(n)`` for n discrete actions."""
    target_entropy_scale: float = Field(0.5, gt=0, le=1)
    """With ``target_entropy: auto`` and n discrete actions: the target entropy is this times log(n), the uniform
    policy's entropy; unused for Box actions."""
    reward_scale: float = Field(1.0, gt=0)
    """Rewards are multiplied by this in the critics' TD target (the paper's reward scale); 1: the env's rewards."""
    tau: float = Field(0.005, gt=0, le=1)
    """Polyak weight of the critics' target update, Q_target <- tau * Q + (1 - tau) * Q_target, every
    ``target_update_interval`` gradient steps (the paper: 0.005)."""
    max_grad_norm: float | None = Field(None, gt=0)
    """Clips the gradient norm of the critics' step and of the actor's step, each on its own; null: no clipping (as the
    paper)."""

    @property
    def auto_alpha(self) -> bool:
        return self.ent_coef == "auto"


class SAC(OffPolicyAlgorithm[SACConfig, Policy]):
    name = "sac"
    Config = SACConfig
    action_spaces = (spaces.Box, spaces.Discrete)

    def __init__(self, policy: Policy, config: SACConfig) -> None:
        super().__init__(policy, config)
        self.discrete = policy.discrete
        n = policy.action_dim
        # Critics have the actor's torso shape and read the actor's normalized observations through an encoder of
        # their own (``TwinQ``): for pixels, the critics' loss trains their CNN and the actor's loss the actor's.
        net, encoder = policy.config, policy.new_encoder()
        self.critic = TwinQ(encoder.out_features, n, self.discrete, net.hidden_sizes, net.activation, encoder)
        self.critic_target = copy.deepcopy(self.critic).requires_grad_(False)
        if config.target_entropy == "auto":
            self.target_entropy = config.target_entropy_scale * math.log(n) if self.discrete else -float(n)
        else:
            self.target_entropy = float(config.target_entropy)
        initial = config.init_ent_coef if config.auto_alpha else float(config.ent_coef)
        self.log_alpha = torch.tensor(math.log(initial), requires_grad=config.auto_alpha)
        self.actor_optimizer = torch.optim.Adam(policy.parameters(), lr=config.actor_lr or config.lr, fused=True)
        self.critic_optimizer = torch.optim.Adam(self.critic.parameters(), lr=config.lr, fused=True)
        self.alpha_optimizer = torch.optim.Adam([self.log_alpha], lr=config.lr) if config.auto_alpha else None

    @staticmethod
    def make_policy(
        observation_space: spaces.Space, action_space: spaces.Space, config: PolicyConfig, algo: SACConfig
    ) -> Policy:
        if isinstance(action_space, spaces.Discrete):
            return CategoricalActor(observation_space, action_space, config)
        assert isinstance(action_space, spaces.Box)  # the only other kind in action_spaces
        require_bounded(action_space, SAC.name)
        return SquashedGaussianActor(observation_space, action_space, config)

    def _q(self, critic: TwinQ, features: torch.Tensor, unit_actions: torch.Tensor | None) -> torch.Tensor:
        """Twin Q-values: (2, B, n_actions) for discrete actions, (2, B) for Box actions given in the squashed
        [-1, 1] space (``SquashedGaussianActor.to_unit`` of env units)."""
        if self.discrete:
            return critic(features)
        assert unit_actions is not None
        return critic(features, unit_actions)

    def update(self, batch: dict[str, torch.Tensor], progress: float) -> dict[str, float]:
        cfg = self.config
        alpha = self.log_alpha.exp().detach()
        obs, next_obs = batch["obs"], batch["next_obs"]
        normalize = self.policy.obs_normalizer
        with torch.no_grad():
            next_features = self.critic_target.encode(normalize(next_obs))
            if self.discrete:
                next_logits = self.policy.act_scores(next_obs)
                next_probs, next_log_probs = next_logits.softmax(-1), next_logits.log_softmax(-1)
                next_q = self._q(self.critic_target, next_features, None).min(dim=0).values
                next_value = (next_probs * (next_q - alpha * next_log_probs)).sum(-1)
            else:
                assert isinstance(self.policy, SquashedGaussianActor)
                next_dist = self.policy.squashed_distribution(next_obs)
                next_actions = next_dist.rsample()
                next_q = self._q(self.critic_target, next_features, next_actions).min(dim=0).values
                next_value = next_q - alpha * next_dist.log_prob(next_actions)
            target = cfg.reward_scale * batch["rewards"] + batch["discounts"] * next_value

        features = self.critic.encode(normalize(obs))
        if self.discrete:
            q = self.critic.taken(features, batch["actions"])
        else:
            assert isinstance(self.policy, SquashedGaussianActor)
            q = self._q(self.critic, features, self.policy.to_unit(batch["actions"]))
        critic_loss = (q - target).square().mean(dim=1).sum()
        self.optimizer_step(self.critic_optimizer, critic_loss, self.critic.parameters(), cfg.max_grad_norm)

        self.critic.requires_grad_(False)  # the actor's loss needs dQ/da, not gradients of the critics' weights
        features = features.detach()
        if self.discrete:
            logits = self.policy.act_scores(obs)
            probs, log_probs = logits.softmax(-1), logits.log_softmax(-1)
            q_pi = self._q(self.critic, features, None).min(dim=0).values.detach()
            actor_loss = (probs * (alpha * log_probs - q_pi)).sum(-1).mean()
            entropy = -(probs * log_probs).sum(-1).mean()
        else:
            assert isinstance(self.policy, SquashedGaussianActor)
            dist = self.policy.squashed_distribution(obs)
            actions = dist.rsample()  # in [-1, 1]: log_prob and the entropy are measured there
            log_prob = dist.log_prob(actions)
            q_pi = self._q(self.critic, features, actions).min(dim=0).values
            actor_loss = (alpha * log_prob - q_pi).mean()
            entropy = -log_prob.mean()
        self.optimizer_step(self.actor_optimizer, actor_loss, self.policy.parameters(), cfg.max_grad_norm)
        self.critic.requires_grad_(True)

        if self.alpha_optimizer is not None:
            alpha_loss = -(self.log_alpha * (self.target_entropy - entropy.detach()))
            self.optimizer_step(self.alpha_optimizer, alpha_loss)

        self.gradient_steps += 1
        if self.gradient_steps % cfg.target_update_interval == 0:
            polyak_update(self.critic_target, self.critic, cfg.tau)
        return {
            "critic_loss": critic_loss.item(),
            "actor_loss": actor_loss.item(),
            "alpha": alpha.item(),
            "entropy": entropy.item(),
            "q_mean": q.mean().item(),
        }
