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
from typing import Any, Literal

import torch
import torch.nn.functional as F
from gymnasium import spaces
from pydantic import Field

from rlcore.algos import register
from rlcore.config import AlgoConfig, PolicyConfig
from rlcore.nets import EnsembleMLP, polyak_update
from rlcore.policies import DeterministicActor


class TD3BCConfig(AlgoConfig):
    name: Literal["td3bc"] = "td3bc"
    lr: float = Field(3e-4, gt=0)
    batch_size: int = Field(256, ge=1)
    gamma: float = Field(0.99, gt=0, le=1)
    tau: float = Field(0.005, gt=0, le=1)
    alpha: float = Field(2.5, gt=0)
    """Weight of the Q term against the BC term (larger: more RL, less imitation)."""
    policy_noise: float = Field(0.2, ge=0)
    noise_clip: float = Field(0.5, ge=0)
    policy_delay: int = Field(2, ge=1)


@register
class TD3BC:
    name = "td3bc"
    kind = "offline"
    Config = TD3BCConfig
    action_spaces = (spaces.Box,)

    def __init__(
        self, policy: DeterministicActor, config: TD3BCConfig, observation_space: spaces.Box, action_space: spaces.Space
    ) -> None:
        self.policy = policy
        self.config = config
        net = policy.config
        self.critic = EnsembleMLP(2, policy.obs_dim + policy.action_dim, net.hidden_sizes, 1, net.activation)
        self.critic_target = copy.deepcopy(self.critic).requires_grad_(False)
        self.actor_target = copy.deepcopy(policy).requires_grad_(False)
        self.actor_optimizer = torch.optim.Adam(policy.parameters(), lr=config.lr, fused=True)
        self.critic_optimizer = torch.optim.Adam(self.critic.parameters(), lr=config.lr, fused=True)
        self.gradient_steps = 0
        self.last_actor_loss = 0.0

    @staticmethod
    def make_policy(
        observation_space: spaces.Box, action_space: spaces.Space, config: PolicyConfig, algo: TD3BCConfig
    ) -> DeterministicActor:
        return DeterministicActor(observation_space, action_space, config)

    def _q(self, critic: EnsembleMLP, features: torch.Tensor, unit_actions: torch.Tensor) -> torch.Tensor:
        """Twin Q-values (2, B) of actions in [-1, 1]."""
        return critic(torch.cat([features, unit_actions], dim=-1)).squeeze(-1)

    def update(self, batch: dict[str, torch.Tensor], progress: float) -> dict[str, float]:
        cfg = self.config
        policy = self.policy
        actions = ((batch["actions"] - policy.action_loc) / policy.action_scale).reshape(-1, policy.action_dim)
        with torch.no_grad():
            features = policy.features(batch["obs"])
            next_features = policy.features(batch["next_obs"])
            noise = (torch.randn_like(actions) * cfg.policy_noise).clamp(-cfg.noise_clip, cfg.noise_clip)
            next_actions = (self.actor_target.unit_action(batch["next_obs"]) + noise).clamp(-1.0, 1.0)
            next_q = self._q(self.critic_target, next_features, next_actions).min(dim=0).values
            target = batch["rewards"] + cfg.gamma * (~batch["terminated"]).float() * next_q
        q = self._q(self.critic, features, actions)
        critic_loss = (q - target).square().mean(dim=1).sum()
        self.critic_optimizer.zero_grad(set_to_none=True)
        critic_loss.backward()
        self.critic_optimizer.step()

        self.gradient_steps += 1
        if self.gradient_steps % cfg.policy_delay == 0:
            self.critic.requires_grad_(False)
            pi = policy.unit_action(batch["obs"])
            q_pi = self._q(self.critic, features, pi)[0]
            lam = cfg.alpha / q_pi.abs().mean().detach().clamp(min=1e-6)
            actor_loss = -lam * q_pi.mean() + F.mse_loss(pi, actions)
            self.actor_optimizer.zero_grad(set_to_none=True)
            actor_loss.backward()
            self.actor_optimizer.step()
            self.critic.requires_grad_(True)
            polyak_update(self.critic_target, self.critic, cfg.tau)
            polyak_update(self.actor_target, policy, cfg.tau)
            self.last_actor_loss = actor_loss.item()
        return {"critic_loss": critic_loss.item(), "actor_loss": self.last_actor_loss, "q_mean": q.mean().item()}

    def state_dict(self) -> dict[str, Any]:
        return {
            "critic": self.critic.state_dict(),
            "critic_target": self.critic_target.state_dict(),
            "actor_target": self.actor_target.state_dict(),
            "actor_optimizer": self.actor_optimizer.state_dict(),
            "critic_optimizer": self.critic_optimizer.state_dict(),
            "gradient_steps": self.gradient_steps,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.critic.load_state_dict(state["critic"])
        self.critic_target.load_state_dict(state["critic_target"])
        self.actor_target.load_state_dict(state["actor_target"])
        self.actor_optimizer.load_state_dict(state["actor_optimizer"])
        self.critic_optimizer.load_state_dict(state["critic_optimizer"])
        self.gradient_steps = int(state["gradient_steps"])
