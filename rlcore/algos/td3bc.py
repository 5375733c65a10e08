"""TD3+BC (Fujimoto & Gu, 2021): TD3 with a behavioural-cloning term, for offline RL with Box actions.

For each gradient step on a dataset batch (s, a, r, s', terminated), actions rescaled to [-1, 1]:
    a' = clip(pi_target(s') + clip(N(0, policy_noise), -noise_clip, noise_clip), -1, 1)
    y  = r + gamma * (1 - terminated) * min_i Q_target_i(s', a')
    L_Q = sum_i (Q_i(s, a) - y)^2
    every policy_delay steps:
        lambda = alpha / mean |Q_1(s, pi(s))|
        L_pi = -lambda * mean Q_1(s, pi(s)) + mean (pi(s) - a)^2
        targets <- tau * online + (1 - tau) * targets
States are normalized with the dataset's mean and std (``policy.normalize_obs: true``).
"""

from __future__ import annotations

import copy
from typing import Literal

import torch
import torch.nn.functional as F
from gymnasium import spaces
from pydantic import Field

from rlcore.algos.base import OfflineAlgorithm, OfflineConfig
from rlcore.config.sections import PolicyConfig
from rlcore.nets.blocks import TwinQ, polyak_update
from rlcore.nets.policies import DeterministicActor, require_bounded


class TD3BCConfig(OfflineConfig):
    name: Literal["td3bc"] = "td3bc"
    gamma: float = Field(0.99, gt=0, le=1)
    """Discount gamma of the critics' TD target."""
    tau: float = Field(0.005, gt=0, le=1)
    """Polyak weight of the actor's and the critics' target updates, made with each actor step."""
    alpha: float = Field(2.5, gt=0)
    """Weight of the Q term against the BC term (larger: more RL, less imitation)."""
    policy_noise: float = Field(0.2, ge=0)
    """Std of the Gaussian noise added to the target actor's action in the TD target (target policy smoothing), in
    actions rescaled to [-1, 1]."""
    noise_clip: float = Field(0.5, ge=0)
    """That noise is clipped to [-noise_clip, noise_clip] (same units)."""
    policy_delay: int = Field(2, ge=1)
    """d: critic gradient steps per actor step and target update (the paper: 2)."""


class TD3BC(OfflineAlgorithm[TD3BCConfig, DeterministicActor]):
    name = "td3bc"
    Config = TD3BCConfig
    action_spaces = (spaces.Box,)

    def __init__(self, policy: DeterministicActor, config: TD3BCConfig) -> None:
        super().__init__(policy, config)
        net, encoder = policy.config, policy.new_encoder()  # the critics' own encoder (see TwinQ)
        self.critic = TwinQ(encoder.out_features, policy.action_dim, False, net.hidden_sizes, net.activation, encoder)
        self.critic_target = copy.deepcopy(self.critic).requires_grad_(False)
        self.actor_target = copy.deepcopy(policy).requires_grad_(False)
        self.actor_optimizer = torch.optim.Adam(policy.parameters(), lr=config.lr, fused=True)
        self.critic_optimizer = torch.optim.Adam(self.critic.parameters(), lr=config.lr, fused=True)
        self.last_actor_loss = torch.zeros(())
        """Reported between actor updates; a tensor, so a checkpoint keeps it."""

    @staticmethod
    def make_policy(
        observation_space: spaces.Space, action_space: spaces.Space, config: PolicyConfig, algo: TD3BCConfig
    ) -> DeterministicActor:
        require_bounded(action_space, TD3BC.name)
        return DeterministicActor(observation_space, action_space, config)

    def update(self, batch: dict[str, torch.Tensor], progress: float) -> dict[str, float]:
        cfg = self.config
        policy = self.policy
        actions = ((batch["actions"] - policy.action_loc) / policy.action_scale).reshape(-1, policy.action_dim)
        with torch.no_grad():
            next_features = self.critic_target.encode(policy.obs_normalizer(batch["next_obs"]))
            noise = (torch.randn_like(actions) * cfg.policy_noise).clamp(-cfg.noise_clip, cfg.noise_clip)
            next_actions = (self.actor_target.unit_action(batch["next_obs"]) + noise).clamp(-1.0, 1.0)
            next_q = self.critic_target(next_features, next_actions).min(dim=0).values
            target = batch["rewards"] + cfg.gamma * (~batch["terminated"]).float() * next_q
        features = self.critic.encode(policy.obs_normalizer(batch["obs"]))
        q = self.critic(features, actions)
        critic_loss = (q - target).square().mean(dim=1).sum()
        self.optimizer_step(self.critic_optimizer, critic_loss)

        self.gradient_steps += 1
        if self.gradient_steps % cfg.policy_delay == 0:
            self.critic.requires_grad_(False)
            pi = policy.unit_action(batch["obs"])
            q_pi = self.critic(features.detach(), pi)[0]
            lam = cfg.alpha / q_pi.abs().mean().detach().clamp(min=1e-6)
            actor_loss = -lam * q_pi.mean() + F.mse_loss(pi, actions)
            self.optimizer_step(self.actor_optimizer, actor_loss)
            self.critic.requires_grad_(True)
            polyak_update(self.critic_target, self.critic, cfg.tau)
            polyak_update(self.actor_target, policy, cfg.tau)
            self.last_actor_loss.fill_(actor_loss.item())
        return {"critic_loss": critic_loss.item(), "actor_loss": self.last_actor_loss.item(), "q_mean": q.mean().item()}
