"""Implicit Q-Learning (Kostrikov, Nair & Levine, ICLR 2022), as the authors' code (ikostrikov/implicit_q_learning)
and CORL's single-file ``algorithms/offline/iql.py`` implement it: offline RL that never queries actions outside the
data.

For each gradient step on a dataset batch (s, a, r, s', terminated), twin critics Q1, Q2 and a value net V:
    L_V  = E[ |expectile - 1(u < 0)| * u^2 ],  u = min_i Q_target_i(s, a) - V(s)     (expectile regression)
    L_Q  = sum_i E[(c * r + gamma * (1 - terminated) * V(s') - Q_i(s, a))^2]        (c: ``reward_scale``)
    L_pi = -E[ min(exp(beta * (min_i Q_target_i(s, a) - V(s))), max_weight) * log pi(a|s) ]   (advantage-weighted)
    Q_target <- tau * Q + (1 - tau) * Q_target
The actor's learning rate decays from ``lr`` to 0 on a cosine over ``train.max_steps`` (the paper's and CORL's
schedule); the critics and V keep ``lr``. The paper's defaults: expectile 0.7, beta 3, weights clipped at 100,
tau 0.005. Its preprocessing for locomotion scales rewards by 1000 / (max return - min return) of the dataset's
episodes (CORL: ``max_episode_steps`` / (max - min)); here that is ``reward_scale``, which
:func:`returns_reward_scale` computes for a dataset (the same T / (max - min) with T its longest episode), so that
beta weighs advantages on the scale the paper tuned it for. Where the two references differ, this follows CORL: V(s')
and the advantages come from V before its step (the authors' code uses V after it).
Discrete actions: Q(s, .) over all actions and a categorical policy; Box actions: Q(s, a) and a Gaussian policy with
a state-independent standard deviation (the references squash its mean with tanh; here it is unbounded and the env
clips).
"""

from __future__ import annotations

import copy
import math
from typing import Literal

import numpy as np
import torch
from gymnasium import spaces
from pydantic import Field

from rlcore.algos.base import OfflineAlgorithm, OfflineConfig
from rlcore.config.sections import PolicyConfig
from rlcore.data.reader import OfflineData
from rlcore.nets.blocks import TwinQ, mlp, polyak_update
from rlcore.nets.policies import stochastic_actor
from rlcore.nets.policy import Policy


class IQLConfig(OfflineConfig):
    name: Literal["iql"] = "iql"
    gamma: float = Field(0.99, gt=0, le=1)
    """Discount gamma of the critics' target ``reward_scale * r + gamma * (1 - terminated) * V(s')``."""
    tau: float = Field(0.005, gt=0, le=1)
    """Polyak weight of the twin critics' target update after every gradient step (the paper: 0.005)."""
    expectile: float = Field(0.7, gt=0, lt=1)
    """Expectile of V's regression onto Q: 0.5 is the mean (SARSA-like), toward 1 the best actions in the data."""
    beta: float = Field(3.0, gt=0)
    """Inverse temperature of the advantage weights: larger imitates the best actions more greedily."""
    max_weight: float = Field(100.0, gt=0)
    """Upper clip of the actor's advantage weights exp(beta * (Q - V)) (the paper: 100)."""
    actor_lr_schedule: Literal["cosine", "constant"] = "cosine"
    """The actor's learning rate over ``train.max_steps``: cosine decay to 0 (the paper's, CORL's
    ``CosineAnnealingLR``) or constant. The critics' and V's stay at ``lr``."""
    reward_scale: float = Field(1.0, gt=0)
    """Rewards are multiplied by this in the TD target: the paper's reward normalization is
    :func:`returns_reward_scale` of the dataset (episode length / (max return - min return))."""


def returns_reward_scale(data: OfflineData) -> float:
    """The paper's reward normalization for ``data``: T / (max return - min return) over its complete episodes
    (ended by ``terminated``, or as long as its longest episode T, the time limit; an episode cut short by the end
    of a collection is neither), so that returns span T. CORL's ``modify_reward`` with ``max_episode_steps`` = T."""
    _, starts, lengths = np.unique(data.episode_id, return_index=True, return_counts=True)
    returns = np.add.reduceat(data.rewards.astype(np.float64), np.sort(starts))
    lengths = lengths[np.argsort(starts)]
    ends = np.sort(starts) + lengths - 1
    complete = data.terminated[ends] | (lengths == lengths.max())
    spread = float(returns[complete].max() - returns[complete].min())
    if spread <= 0:
        raise ValueError("every complete episode of the dataset has the same return: no reward scale follows")
    return float(lengths.max()) / spread


class IQL(OfflineAlgorithm[IQLConfig, Policy]):
    name = "iql"
    Config = IQLConfig
    action_spaces = (spaces.Discrete, spaces.Box)

    def __init__(self, policy: Policy, config: IQLConfig) -> None:
        super().__init__(policy, config)
        net = policy.config
        # Box actions enter the critics in env units. The critics have an encoder of their own (see TwinQ), trained
        # by their loss; V reads the critics' features without training them.
        encoder = policy.new_encoder()
        self.critic = TwinQ(
            encoder.out_features, policy.action_dim, policy.discrete, net.hidden_sizes, net.activation, encoder
        )
        self.critic_target = copy.deepcopy(self.critic).requires_grad_(False)
        self.value = mlp(encoder.out_features, net.hidden_sizes, 1, net.activation, out_gain=1.0)
        self.actor_optimizer = torch.optim.Adam(policy.parameters(), lr=config.lr, fused=True)
        self.critic_optimizer = torch.optim.Adam(self.critic.parameters(), lr=config.lr, fused=True)
        self.value_optimizer = torch.optim.Adam(self.value.parameters(), lr=config.lr, fused=True)

    @staticmethod
    def make_policy(
        observation_space: spaces.Space, action_space: spaces.Space, config: PolicyConfig, algo: IQLConfig
    ) -> Policy:
        return stochastic_actor(observation_space, action_space, config)

    def _log_prob(self, obs: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
        """log pi(a|s) of the dataset's actions: (B,)."""
        if not self.policy.discrete:
            actions = actions.reshape(len(obs), self.policy.action_dim)
        return self.policy.distribution(obs).log_prob(actions)

    def update(self, batch: dict[str, torch.Tensor], progress: float) -> dict[str, float]:
        cfg = self.config
        if cfg.actor_lr_schedule == "cosine":
            for group in self.actor_optimizer.param_groups:
                group["lr"] = cfg.lr * 0.5 * (1.0 + math.cos(math.pi * progress))
        obs, actions = batch["obs"], batch["actions"]
        normalized = self.policy.obs_normalizer(obs)
        with torch.no_grad():
            target_q = self.critic_target.taken(self.critic_target.encode(normalized), actions).min(dim=0).values
            next_v = self.value(self.critic.encode(self.policy.obs_normalizer(batch["next_obs"]))).squeeze(-1)
            td_target = cfg.reward_scale * batch["rewards"] + cfg.gamma * (~batch["terminated"]).float() * next_v

        features = self.critic.encode(normalized)
        v = self.value(features.detach()).squeeze(-1)
        diff = target_q - v
        value_loss = (torch.abs(cfg.expectile - (diff < 0).float()) * diff.square()).mean()
        self.optimizer_step(self.value_optimizer, value_loss)

        q = self.critic.taken(features, actions)
        critic_loss = (q - td_target).square().mean(dim=1).sum()
        self.optimizer_step(self.critic_optimizer, critic_loss)

        weights = torch.exp(cfg.beta * diff.detach()).clamp(max=cfg.max_weight)
        actor_loss = -(weights * self._log_prob(obs, actions)).mean()
        self.optimizer_step(self.actor_optimizer, actor_loss)
        self.gradient_steps += 1

        polyak_update(self.critic_target, self.critic, cfg.tau)
        return {
            "value_loss": value_loss.item(),
            "critic_loss": critic_loss.item(),
            "actor_loss": actor_loss.item(),
            "advantage_mean": diff.mean().item(),
        }
