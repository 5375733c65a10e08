"""Random network distillation (Burda et al., 2018, "Exploration by random network distillation").

    x       = clip((s_{t+1} - mu) / sigma, -5, 5)         the signal's running observation statistics, per element
    r_t     = mean_k (f_hat(x)_k - f(x)_k)^2              f: a fixed random network, f_hat: the predictor
    L_pred  = the same error, averaged over a random ``update_proportion`` of each minibatch

Frames are normalized too, per pixel (the paper: "essential" on Atari, where OpenAI's code and CleanRL's
``ppo_rnd_envpool.py`` normalize each pixel of the observation with running mean/std and clip to [-5, 5]), and the
networks' CNNs read the normalized values (no 1/255). The statistics are merged from every rollout's valid
observations before its rewards are computed, so the first rollout, from the untrained policy, sets them; the paper
(and those codes) instead first step a random policy for a number of rollouts that train nothing. They are buffers
of the signal, saved with it in every checkpoint.

The predictor's error is low on observations like those it was trained on and high on novel ones, so the reward
decays where the agent has been. Rewards are divided by the running std of the intrinsic return, which runs on
across episode ends (non-episodic) unless ``episodic`` is set.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import gymnasium as gym
import torch

from rlcore.nets.encoders import Encoder
from rlcore.reward_signals.config import RNDConfig
from rlcore.reward_signals.signal import RewardSignal, SignalBatch


def rnd_reward(predicted: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """(B,) the mean over output features of the squared prediction error, from (B, K) outputs."""
    return (predicted - target).square().mean(dim=-1)


class RND(RewardSignal):
    name = "rnd"

    def __init__(self, config: RNDConfig, observation_space: gym.Space, new_encoder: Callable[[], Encoder]) -> None:
        super().__init__(
            config, observation_space, new_encoder, config.obs_clip, normalize_reward=True, normalize_images=True
        )
        self.config: RNDConfig = config
        self.target = self.encoded_mlp(config.output_size, out_gain=math.sqrt(2))
        self.target.requires_grad_(False)  # fixed at its random initialization
        self.predictor = self.encoded_mlp(config.output_size, out_gain=math.sqrt(2))
        self.optimizer = self.make_optimizer()

    def prediction_error(self, obs: torch.Tensor) -> torch.Tensor:
        """(B,) :func:`rnd_reward` for raw observations (B, *obs_shape), normalized by this signal's statistics."""
        x = self.normalize(obs)
        with torch.no_grad():
            target = self.target(x)
        return rnd_reward(self.predictor(x), target)

    def rewards(self, batch: SignalBatch) -> torch.Tensor:
        return self.prediction_error(batch.flat("next_obs"))

    def model_loss(self, batch: SignalBatch, rows: torch.Tensor, generator: torch.Generator) -> dict[str, torch.Tensor]:
        errors = self.prediction_error(batch.flat("next_obs")[rows])
        if self.config.update_proportion < 1.0:
            kept = (torch.rand(errors.shape, generator=generator) < self.config.update_proportion).float()
            loss = (errors * kept).sum() / kept.sum().clamp(min=1.0)
        else:
            loss = errors.mean()
        return {"loss": loss, "predictor_loss": loss.detach()}
