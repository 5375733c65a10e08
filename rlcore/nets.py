"""Policy networks: observation normalizer, MLP torsos, and an actor-critic for Discrete and Box actions.

Every network takes *raw* observations: normalization is a module inside the policy, so a saved
or exported policy carries its statistics and nobody ships them beside it.
"""

from __future__ import annotations

import math

import numpy as np
import torch
from gymnasium import spaces
from torch import nn
from torch.distributions import Categorical, Distribution, Independent, Normal

from rlcore.config import PolicyConfig

ACTIVATIONS: dict[str, type[nn.Module]] = {"tanh": nn.Tanh, "relu": nn.ReLU, "elu": nn.ELU}


class ObsNormalizer(nn.Module):
    """Running mean and variance of observations (parallel Welford), applied as ``clip((x - mu) / sigma)``.

    Statistics are buffers, so they are saved with the weights and exported with the graph.
    """

    def __init__(self, shape: tuple[int, ...], clip: float, enabled: bool, epsilon: float = 1e-8) -> None:
        super().__init__()
        self.enabled = enabled
        self.clip = clip
        self.epsilon = epsilon
        self.register_buffer("mean", torch.zeros(shape, dtype=torch.float64))
        self.register_buffer("var", torch.ones(shape, dtype=torch.float64))
        self.register_buffer("count", torch.tensor(epsilon, dtype=torch.float64))

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        if not self.enabled:
            return obs
        std = torch.sqrt(self.var + self.epsilon).to(obs.dtype)
        return torch.clamp((obs - self.mean.to(obs.dtype)) / std, -self.clip, self.clip)

    @torch.no_grad()
    def update(self, batch: torch.Tensor) -> None:
        """Merge the statistics of ``batch``: (B, *obs_shape)."""
        if not self.enabled:
            return
        batch = batch.to(torch.float64)
        batch_mean = batch.mean(dim=0)
        batch_var = batch.var(dim=0, unbiased=False)
        batch_count = batch.shape[0]
        delta = batch_mean - self.mean
        total = self.count + batch_count
        self.mean += delta * batch_count / total
        m2 = self.var * self.count + batch_var * batch_count + delta.square() * self.count * batch_count / total
        self.var.copy_(m2 / total)
        self.count.copy_(total)


def mlp(
    in_features: int, hidden_sizes: list[int], out_features: int, activation: str, out_gain: float
) -> nn.Sequential:
    """An MLP with orthogonal init (gain sqrt(2) inside, ``out_gain`` on the last layer), zero biases."""
    layers: list[nn.Module] = []
    width = in_features
    for size in hidden_sizes:
        layers += [_orthogonal(nn.Linear(width, size), math.sqrt(2)), ACTIVATIONS[activation]()]
        width = size
    layers.append(_orthogonal(nn.Linear(width, out_features), out_gain))
    return nn.Sequential(*layers)


def _orthogonal(layer: nn.Linear, gain: float) -> nn.Linear:
    nn.init.orthogonal_(layer.weight, gain)
    nn.init.zeros_(layer.bias)
    return layer


class ActorCritic(nn.Module):
    """Separate actor and critic MLPs over normalized observations.

    Discrete actions: a categorical over logits. Box actions: a diagonal Gaussian with a learned,
    state-independent log standard deviation; sampled actions are clipped to the bounds only
    when sent to the env, so log-probabilities stay those of the sampled values.
    """

    def __init__(self, observation_space: spaces.Box, action_space: spaces.Space, config: PolicyConfig) -> None:
        super().__init__()
        obs_shape = tuple(observation_space.shape)
        obs_dim = int(np.prod(obs_shape))
        self.discrete = isinstance(action_space, spaces.Discrete)
        if self.discrete:
            action_dim = int(action_space.n)
        else:
            assert isinstance(action_space, spaces.Box)
            action_dim = int(np.prod(action_space.shape))
        self.obs_normalizer = ObsNormalizer(obs_shape, config.obs_clip, config.normalize_obs)
        self.actor = mlp(obs_dim, config.hidden_sizes, action_dim, config.activation, out_gain=0.01)
        self.critic = mlp(obs_dim, config.hidden_sizes, 1, config.activation, out_gain=1.0)
        if not self.discrete:
            self.log_std = nn.Parameter(torch.full((action_dim,), float(config.log_std_init)))

    def _features(self, obs: torch.Tensor) -> torch.Tensor:
        return self.obs_normalizer(obs).flatten(start_dim=1)

    def distribution(self, obs: torch.Tensor) -> Distribution:
        """The action distribution for ``obs``: (B, *obs_shape) raw observations."""
        scores = self.actor(self._features(obs))
        if self.discrete:
            return Categorical(logits=scores, validate_args=False)
        normal = Normal(scores, self.log_std.exp().expand_as(scores), validate_args=False)
        return Independent(normal, 1, validate_args=False)

    def value(self, obs: torch.Tensor) -> torch.Tensor:
        """State values, (B,)."""
        return self.critic(self._features(obs)).squeeze(-1)

    def act_scores(self, obs: torch.Tensor) -> torch.Tensor:
        """Logits (discrete) or Gaussian means (Box): (B, action_dim). Deterministic action = argmax or mean."""
        return self.actor(self._features(obs))

    def deterministic_action(self, obs: torch.Tensor) -> torch.Tensor:
        """Greedy action: (B,) int64 for Discrete, (B, action_dim) for Box (not yet clipped)."""
        scores = self.act_scores(obs)
        return scores.argmax(dim=-1) if self.discrete else scores
