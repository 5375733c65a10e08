"""Behavioural cloning: supervised learning of the dataset's actions (Pomerleau, 1991).

For each gradient step on a dataset batch (s, a):
    Discrete actions:  L = cross-entropy(logits(s), a)
    Box actions:       L = -log N(a; mu(s), sigma)   (``loss: nll``)   or   ||mu(s) - a||^2   (``loss: mse``)
Validation (held-out episodes): the same loss, and action accuracy (discrete) or mean absolute error (Box).
"""

from __future__ import annotations

from typing import Literal

import torch
import torch.nn.functional as F
from gymnasium import spaces
from pydantic import Field

from rlcore.algos.base import OfflineAlgorithm, OfflineConfig
from rlcore.config.sections import PolicyConfig
from rlcore.nets.policies import stochastic_actor
from rlcore.nets.policy import Policy


class BCConfig(OfflineConfig):
    name: Literal["bc"] = "bc"
    lr: float = Field(1e-3, gt=0)
    """AdamW learning rate (constant)."""
    loss: Literal["nll", "mse"] = "nll"
    """Box actions: Gaussian negative log-likelihood or mean squared error (discrete actions: cross-entropy)."""
    weight_decay: float = Field(0.0, ge=0)
    """AdamW's decoupled weight decay; 0: plain Adam."""


class BC(OfflineAlgorithm[BCConfig, Policy]):
    name = "bc"
    capabilities = frozenset({"action_mask"})
    Config = BCConfig
    action_spaces = (spaces.Discrete, spaces.Box)

    def __init__(self, policy: Policy, config: BCConfig) -> None:
        super().__init__(policy, config)
        self.optimizer = torch.optim.AdamW(
            policy.parameters(), lr=config.lr, weight_decay=config.weight_decay, fused=True
        )

    @staticmethod
    def make_policy(
        observation_space: spaces.Space, action_space: spaces.Space, config: PolicyConfig, algo: BCConfig
    ) -> Policy:
        return stochastic_actor(observation_space, action_space, config)

    def loss(self, obs: torch.Tensor, actions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(loss, quality): quality is accuracy for discrete actions, mean absolute error for Box actions."""
        if self.policy.discrete:
            logits = self.policy.act_scores(obs)
            return F.cross_entropy(logits, actions), (logits.argmax(-1) == actions).float().mean()
        dist = self.policy.distribution(obs)
        mean = dist.mean
        target = actions.reshape(mean.shape)
        error = (mean.detach() - target).abs().mean()
        if self.config.loss == "mse":
            return F.mse_loss(mean, target), error
        return -dist.log_prob(target).mean(), error

    def update(self, batch: dict[str, torch.Tensor], progress: float) -> dict[str, float]:
        loss, quality = self.loss(batch["obs"], batch["actions"])
        self.optimizer_step(self.optimizer, loss)
        self.gradient_steps += 1
        return {"loss": loss.item(), "accuracy" if self.policy.discrete else "mean_abs_error": quality.item()}

    @torch.no_grad()
    def validate(self, held_out: dict[str, torch.Tensor]) -> dict[str, float]:
        """Loss and accuracy (or mean absolute error) on held-out episodes."""
        loss, quality = self.loss(held_out["obs"], held_out["actions"])
        return {"loss": loss.item(), "accuracy" if self.policy.discrete else "mean_abs_error": quality.item()}
