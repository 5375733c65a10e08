"""Implicit Q-Learning (Kostrikov, Nair & Levine, 2021): offline RL that never queries actions outside the data.

For each gradient step on a dataset batch (s, a, r, s', terminated), twin critics Q1, Q2 and a value net V:
    L_V  = E[ |expectile - 1(u < 0)| * u^2 ],  u = min_i Q_target_i(s, a) - V(s)     (expectile regression)
    L_Q  = sum_i E[(r + gamma * (1 - terminated) * V(s') - Q_i(s, a))^2]
    L_pi = -E[ min(exp(beta * (min_i Q_target_i(s, a) - V(s))), max_weight) * log pi(a|s) ]   (advantage-weighted)
    Q_target <- tau * Q + (1 - tau) * Q_target
Discrete actions: Q(s, .) over all actions and a categorical policy; Box actions: Q(s, a) and a Gaussian policy.
"""

from __future__ import annotations

import copy
from typing import Any, Literal

import torch
from gymnasium import spaces
from pydantic import Field
from torch.distributions import Normal

from rlcore.algos import register
from rlcore.config import AlgoConfig, PolicyConfig
from rlcore.nets import EnsembleMLP, mlp, polyak_update
from rlcore.policies import CategoricalActor, GaussianActor, Policy


class IQLConfig(AlgoConfig):
    name: Literal["iql"] = "iql"
    lr: float = Field(3e-4, gt=0)
    batch_size: int = Field(256, ge=1)
    gamma: float = Field(0.99, gt=0, le=1)
    tau: float = Field(0.005, gt=0, le=1)
    expectile: float = Field(0.7, gt=0, lt=1)
    """Expectile of V's regression onto Q: 0.5 is the mean (SARSA-like), toward 1 the best actions in the data."""
    beta: float = Field(3.0, gt=0)
    """Inverse temperature of the advantage weights: larger imitates the best actions more greedily."""
    max_weight: float = Field(100.0, gt=0)


@register
class IQL:
    name = "iql"
    kind = "offline"
    Config = IQLConfig
    action_spaces = (spaces.Discrete, spaces.Box)

    def __init__(
        self, policy: Policy, config: IQLConfig, observation_space: spaces.Box, action_space: spaces.Space
    ) -> None:
        self.policy = policy
        self.config = config
        net = policy.config
        n = policy.action_dim
        in_features = policy.obs_dim if policy.discrete else policy.obs_dim + n
        self.critic = EnsembleMLP(2, in_features, net.hidden_sizes, n if policy.discrete else 1, net.activation)
        self.critic_target = copy.deepcopy(self.critic).requires_grad_(False)
        self.value = mlp(policy.obs_dim, net.hidden_sizes, 1, net.activation, out_gain=1.0)
        self.actor_optimizer = torch.optim.Adam(policy.parameters(), lr=config.lr, fused=True)
        self.critic_optimizer = torch.optim.Adam(self.critic.parameters(), lr=config.lr, fused=True)
        self.value_optimizer = torch.optim.Adam(self.value.parameters(), lr=config.lr, fused=True)

    @staticmethod
    def make_policy(
        observation_space: spaces.Box, action_space: spaces.Space, config: PolicyConfig, algo: IQLConfig
    ) -> Policy:
        if isinstance(action_space, spaces.Discrete):
            return CategoricalActor(observation_space, action_space, config)
        return GaussianActor(observation_space, action_space, config)

    def _q(self, critic: EnsembleMLP, features: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
        """Twin Q-values of the taken actions: (2, B)."""
        if self.policy.discrete:
            return critic(features).gather(2, actions.view(1, -1, 1).expand(2, -1, 1)).squeeze(-1)
        return critic(torch.cat([features, actions.reshape(len(features), -1)], dim=-1)).squeeze(-1)

    def _log_prob(self, obs: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
        scores = self.policy.act_scores(obs)
        if self.policy.discrete:
            return scores.log_softmax(-1).gather(1, actions.unsqueeze(1)).squeeze(1)
        assert isinstance(self.policy, GaussianActor)
        std = self.policy.log_std.exp()
        return Normal(scores, std, validate_args=False).log_prob(actions.reshape(scores.shape)).sum(-1)

    def update(self, batch: dict[str, torch.Tensor], progress: float) -> dict[str, float]:
        cfg = self.config
        obs, actions = batch["obs"], batch["actions"]
        with torch.no_grad():
            features = self.policy.features(obs)
            next_features = self.policy.features(batch["next_obs"])
            target_q = self._q(self.critic_target, features, actions).min(dim=0).values
            next_v = self.value(next_features).squeeze(-1)
            td_target = batch["rewards"] + cfg.gamma * (~batch["terminated"]).float() * next_v

        v = self.value(features).squeeze(-1)
        diff = target_q - v
        value_loss = (torch.abs(cfg.expectile - (diff < 0).float()) * diff.square()).mean()
        self.value_optimizer.zero_grad(set_to_none=True)
        value_loss.backward()
        self.value_optimizer.step()

        q = self._q(self.critic, features, actions)
        critic_loss = (q - td_target).square().mean(dim=1).sum()
        self.critic_optimizer.zero_grad(set_to_none=True)
        critic_loss.backward()
        self.critic_optimizer.step()

        weights = torch.exp(cfg.beta * diff.detach()).clamp(max=cfg.max_weight)
        actor_loss = -(weights * self._log_prob(obs, actions)).mean()
        self.actor_optimizer.zero_grad(set_to_none=True)
        actor_loss.backward()
        self.actor_optimizer.step()

        polyak_update(self.critic_target, self.critic, cfg.tau)
        return {
            "value_loss": value_loss.item(),
            "critic_loss": critic_loss.item(),
            "actor_loss": actor_loss.item(),
            "advantage_mean": diff.mean().item(),
        }

    def state_dict(self) -> dict[str, Any]:
        return {
            "critic": self.critic.state_dict(),
            "critic_target": self.critic_target.state_dict(),
            "value": self.value.state_dict(),
            "actor_optimizer": self.actor_optimizer.state_dict(),
            "critic_optimizer": self.critic_optimizer.state_dict(),
            "value_optimizer": self.value_optimizer.state_dict(),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.critic.load_state_dict(state["critic"])
        self.critic_target.load_state_dict(state["critic_target"])
        self.value.load_state_dict(state["value"])
        self.actor_optimizer.load_state_dict(state["actor_optimizer"])
        self.critic_optimizer.load_state_dict(state["critic_optimizer"])
        self.value_optimizer.load_state_dict(state["value_optimizer"])
