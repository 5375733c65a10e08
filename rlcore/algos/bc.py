"""Behavioural cloning: supervised learning of the dataset's actions (Pomerleau, 1991).

For each gradient step on a dataset batch (s, a):
    Discrete actions:  L = cross-entropy(logits(s), a)
    Box actions:       L = -log N(a; mu(s), sigma)   (``loss: nll``)   or   ||mu(s) - a||^2   (``loss: mse``)
Validation (held-out episodes): the same loss, and action accuracy (discrete) or mean absolute error (Box).
"""

from __future__ import annotations

from typing import Any, Literal

import torch
import torch.nn.functional as F
from gymnasium import spaces
from pydantic import Field
from torch.distributions import Normal

from rlcore.algos import register
from rlcore.config import AlgoConfig, PolicyConfig
from rlcore.policies import CategoricalActor, GaussianActor, Policy


class BCConfig(AlgoConfig):
    name: Literal["bc"] = "bc"
    lr: float = Field(1e-3, gt=0)
    batch_size: int = Field(256, ge=1)
    loss: Literal["nll", "mse"] = "nll"
    """Box actions: Gaussian negative log-likelihood or mean squared error (discrete actions: cross-entropy)."""
    weight_decay: float = Field(0.0, ge=0)


@register
class BC:
    name = "bc"
    kind = "offline"
    Config = BCConfig
    action_spaces = (spaces.Discrete, spaces.Box)

    def __init__(
        self, policy: Policy, config: BCConfig, observation_space: spaces.Box, action_space: spaces.Space
    ) -> None:
        self.policy = policy
        self.config = config
        self.optimizer = torch.optim.AdamW(
            policy.parameters(), lr=config.lr, weight_decay=config.weight_decay, fused=True
        )

    @staticmethod
    def make_policy(
        observation_space: spaces.Box, action_space: spaces.Space, config: PolicyConfig, algo: BCConfig
    ) -> Policy:
        if isinstance(action_space, spaces.Discrete):
            return CategoricalActor(observation_space, action_space, config)
        return GaussianActor(observation_space, action_space, config)

    def loss(self, obs: torch.Tensor, actions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(loss, quality): quality is accuracy for discrete actions, mean absolute error for Box actions."""
        if self.policy.discrete:
            logits = self.policy.act_scores(obs)
            return F.cross_entropy(logits, actions), (logits.argmax(-1) == actions).float().mean()
        assert isinstance(self.policy, GaussianActor)
        mean = self.policy.act_scores(obs)
        target = actions.reshape(mean.shape)
        error = (mean.detach() - target).abs().mean()
        if self.config.loss == "mse":
            return F.mse_loss(mean, target), error
        log_prob = Normal(mean, self.policy.log_std.exp(), validate_args=False).log_prob(target).sum(-1)
        return -log_prob.mean(), error

    def update(self, batch: dict[str, torch.Tensor], progress: float) -> dict[str, float]:
        loss, quality = self.loss(batch["obs"], batch["actions"])
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        self.optimizer.step()
        return {"loss": loss.item(), "accuracy" if self.policy.discrete else "mean_abs_error": quality.item()}

    @torch.no_grad()
    def validate(self, data: dict[str, torch.Tensor]) -> dict[str, float]:
        """Loss and accuracy (or mean absolute error) on held-out episodes."""
        loss, quality = self.loss(data["obs"], data["actions"])
        return {"loss": loss.item(), "accuracy" if self.policy.discrete else "mean_abs_error": quality.item()}

    def state_dict(self) -> dict[str, Any]:
        return {"optimizer": self.optimizer.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.optimizer.load_state_dict(state["optimizer"])
