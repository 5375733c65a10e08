"""The intrinsic curiosity module (Pathak et al., 2017, "Curiosity-driven exploration by self-supervised prediction").

    phi     = an encoder of the signal's normalized observations, trained by the inverse model only
    inverse: g(phi(s_t), phi(s_{t+1})) predicts a_t            L_inv = the action's negative log-likelihood
    forward: f(phi(s_t), a_t) predicts phi(s_{t+1})            L_fwd = 1/2 ||f(phi(s_t), a_t) - phi(s_{t+1})||^2
    r_t     = L_fwd of the transition (the paper's eta is ``strength``), normalized by the intrinsic return's std
    loss    = (1 - beta) * L_inv + beta * L_fwd

The forward model reads the encodings detached: the features are what the inverse model needs (what the agent's
actions change), as in Burda et al.'s inverse-dynamics features, and the forward loss cannot shrink its own
error by collapsing them.
"""

from __future__ import annotations

from collections.abc import Callable

import gymnasium as gym
import torch
from gymnasium import spaces

from rlcore.nets.blocks import mlp
from rlcore.nets.encoders import Encoder
from rlcore.reward_signals.config import CuriosityConfig
from rlcore.reward_signals.inputs import action_features, action_width, inverse_loss
from rlcore.reward_signals.signal import RewardSignal, SignalBatch


def forward_error(predicted: torch.Tensor, encoded_next: torch.Tensor) -> torch.Tensor:
    """(B,) 1/2 ||predicted - encoded_next||^2 over the encoding's features, from (B, K) each."""
    return 0.5 * (predicted - encoded_next).square().sum(dim=-1)


class Curiosity(RewardSignal):
    name = "curiosity"

    def __init__(
        self,
        config: CuriosityConfig,
        observation_space: gym.Space,
        action_space: spaces.Space,
        new_encoder: Callable[[], Encoder],
    ) -> None:
        super().__init__(config, observation_space, new_encoder, obs_clip=10.0, normalize_reward=config.normalize)
        self.config: CuriosityConfig = config
        self.action_space = action_space
        size, actions = config.encoding_size, action_width(action_space)
        self.encoder = self.encoded_mlp(size)
        self.inverse = mlp(2 * size, config.hidden_sizes, actions, "relu", out_gain=1.0)
        self.forward_model = mlp(size + actions, config.hidden_sizes, size, "relu", out_gain=1.0)
        self.optimizer = self.make_optimizer()

    def encode(self, obs: torch.Tensor) -> torch.Tensor:
        """(B, encoding_size) phi of raw observations (B, *obs_shape)."""
        out: torch.Tensor = self.encoder(self.normalize(obs))
        return out

    def _terms(self, obs: torch.Tensor, actions: torch.Tensor, next_obs: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """(forward error (B,), inverse loss (B,)) of the transitions."""
        phi, phi_next = self.encode(obs), self.encode(next_obs)
        inverse = inverse_loss(self.inverse(torch.cat([phi, phi_next], dim=1)), actions, self.action_space)
        features = torch.cat([phi.detach(), action_features(actions, self.action_space)], dim=1)
        return forward_error(self.forward_model(features), phi_next.detach()), inverse

    def rewards(self, batch: SignalBatch) -> torch.Tensor:
        return self._terms(batch.flat("obs"), batch.flat("actions"), batch.flat("next_obs"))[0]

    def model_loss(self, batch: SignalBatch, rows: torch.Tensor, generator: torch.Generator) -> dict[str, torch.Tensor]:
        obs, actions, next_obs = (batch.flat(name)[rows] for name in ("obs", "actions", "next_obs"))
        forward, inverse = self._terms(obs, actions, next_obs)
        beta = self.config.forward_weight
        forward_loss, inverse_loss_ = forward.mean(), inverse.mean()
        loss = (1 - beta) * inverse_loss_ + beta * forward_loss
        return {"loss": loss, "forward_loss": forward_loss.detach(), "inverse_loss": inverse_loss_.detach()}
