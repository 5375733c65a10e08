"""Network building blocks: the observation normalizer, MLPs, ensembles of MLPs evaluated in one call, twin critics."""

from __future__ import annotations

import math

import numpy as np
import torch
from torch import nn

ACTIVATIONS: dict[str, type[nn.Module]] = {"tanh": nn.Tanh, "relu": nn.ReLU, "elu": nn.ELU}


class ObsNormalizer(nn.Module):
    """Running mean and variance of observations (parallel Welford), applied as ``clip((x - mu) / sigma)``.

    Statistics are buffers, so they are saved with the weights and exported with the graph. ``mask`` (the
    observation's shape, bool) limits normalization to some elements (the float vector keys of a packed ``Dict``;
    ``rlcore.nets.encoders.float_mask``), the others pass through unchanged; None: every element. A mask with no
    element set disables normalization (images and discrete values are never normalized).
    """

    mean: torch.Tensor
    var: torch.Tensor
    count: torch.Tensor
    mask: torch.Tensor | None

    def __init__(
        self,
        shape: tuple[int, ...],
        clip: float,
        enabled: bool,
        epsilon: float = 1e-8,
        mask: np.ndarray | None = None,
    ) -> None:
        super().__init__()
        self.enabled = enabled and (mask is None or bool(mask.any()))
        self.clip = clip
        self.epsilon = epsilon
        self.register_buffer("mean", torch.zeros(shape, dtype=torch.float64))
        self.register_buffer("var", torch.ones(shape, dtype=torch.float64))
        self.register_buffer("count", torch.tensor(epsilon, dtype=torch.float64))
        partial = mask is not None and self.enabled and not bool(mask.all())
        # Not persistent: the mask follows from the space, so checkpoints keep the keys they always had.
        self.register_buffer("mask", torch.as_tensor(mask) if partial else None, persistent=False)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        if not self.enabled:
            return obs
        std = torch.sqrt(self.var + self.epsilon).to(obs.dtype)
        normalized = torch.clamp((obs - self.mean.to(obs.dtype)) / std, -self.clip, self.clip)
        return normalized if self.mask is None else torch.where(self.mask, normalized, obs)

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


_ACTIVATION_FUNCTIONS = {nn.Tanh: torch.tanh, nn.ReLU: torch.relu, nn.ELU: nn.functional.elu}
"""Each of :data:`ACTIVATIONS`' modules as the function it applies (their defaults: ELU's alpha 1)."""


class MLP(nn.Sequential):
    """Linear layers and activations in sequence: ``nn.Sequential``'s modules, parameters and state-dict keys, with a
    forward that applies each layer's function to its current weights instead of calling the layer as a module. On
    the few rows of an acting or evaluation step the module calls cost about as much as the arithmetic (a [64, 64]
    tanh MLP on 16 rows: ~30 -> ~25 us here); the results are the same (the same ops on the same tensors)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self._modules.values():
            if type(layer) is nn.Linear:
                x = nn.functional.linear(x, layer.weight, layer.bias)
            else:
                function = _ACTIVATION_FUNCTIONS.get(type(layer))
                x = function(x) if function is not None else layer(x)
        return x


def mlp(in_features: int, hidden_sizes: list[int], out_features: int, activation: str, out_gain: float) -> MLP:
    """An MLP (:class:`MLP`) with orthogonal init (gain sqrt(2) inside, ``out_gain`` on the last layer), zero
    biases."""
    layers: list[nn.Module] = []
    width = in_features
    for size in hidden_sizes:
        layers += [_orthogonal(nn.Linear(width, size), math.sqrt(2)), ACTIVATIONS[activation]()]
        width = size
    layers.append(_orthogonal(nn.Linear(width, out_features), out_gain))
    return MLP(*layers)


def _orthogonal(layer: nn.Linear, gain: float) -> nn.Linear:
    nn.init.orthogonal_(layer.weight, gain)
    nn.init.zeros_(layer.bias)
    return layer


class EnsembleLinear(nn.Module):
    """``members`` independent linear layers applied in one batched matmul: (E, B, in) -> (E, B, out)."""

    def __init__(self, members: int, in_features: int, out_features: int, gain: float) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.empty(members, in_features, out_features))
        self.bias = nn.Parameter(torch.zeros(members, 1, out_features))
        for member in range(members):
            nn.init.orthogonal_(self.weight.data[member].T, gain)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.baddbmm(self.bias, x, self.weight)


class EnsembleMLP(nn.Module):
    """``members`` MLPs of the same shape (e.g. SAC's twin critics) evaluated together.

    Input (B, in) is shared by every member, or (E, B, in) gives each its own; output is (E, B, out).
    """

    def __init__(
        self, members: int, in_features: int, hidden_sizes: list[int], out_features: int, activation: str
    ) -> None:
        super().__init__()
        self.members = members
        layers: list[nn.Module] = []
        width = in_features
        for size in hidden_sizes:
            layers += [EnsembleLinear(members, width, size, math.sqrt(2)), ACTIVATIONS[activation]()]
            width = size
        layers.append(EnsembleLinear(members, width, out_features, 1.0))
        self.layers = nn.Sequential(*layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.dim() == 2:
            x = x.unsqueeze(0).expand(self.members, *x.shape)
        return self.layers(x)


class TwinQ(EnsembleMLP):
    """Two Q-networks evaluated together, as SAC, TD3 and IQL use them (min over the pair against
    overestimation), on features from their own ``encoder`` (:meth:`encode`; ``rlcore.nets.encoders``) of the policy's
    normalized observations. The encoder is the critics', not the actor's: trained by the critics' loss and
    copied with them into a target network (SB3's default for off-policy algorithms). For vector observations it
    is a flatten with no weights, so the critics read exactly the actor's input.

    Discrete actions: Q(s, .) for every action, (2, B, n_actions). Box actions: Q(s, a) with ``a``
    concatenated to the features, (2, B); each algorithm decides the units of ``a`` it feeds.
    """

    def __init__(
        self,
        obs_features: int,
        action_dim: int,
        discrete: bool,
        hidden_sizes: list[int],
        activation: str,
        encoder: nn.Module | None = None,
    ) -> None:
        """``encoder`` maps observations to ``obs_features`` features; None: they are features already."""
        in_features = obs_features if discrete else obs_features + action_dim
        super().__init__(2, in_features, hidden_sizes, action_dim if discrete else 1, activation)
        self.discrete = discrete
        self.encoder = encoder if encoder is not None else nn.Flatten()

    def encode(self, obs: torch.Tensor) -> torch.Tensor:
        """Normalized observations (B, *obs_shape) -> the critics' features (B, obs_features)."""
        return self.encoder(obs)

    def forward(self, features: torch.Tensor, actions: torch.Tensor | None = None) -> torch.Tensor:
        """``features``: (B, obs_features); ``actions``: (B, action_dim) for Box actions, unused for discrete."""
        if self.discrete:
            return super().forward(features)
        assert actions is not None
        return super().forward(torch.cat([features, actions.reshape(len(features), -1)], dim=-1)).squeeze(-1)

    def taken(self, features: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
        """Q-values of the actions taken, (2, B): gathered for discrete actions (``actions``: (B,) int64)."""
        if not self.discrete:
            return self(features, actions)
        return self(features).gather(2, actions.view(1, -1, 1).expand(2, -1, 1)).squeeze(-1)


@torch.no_grad()
def polyak_update(target: nn.Module, source: nn.Module, tau: float) -> None:
    """target <- (1 - tau) * target + tau * source for parameters; buffers (e.g. normalizer statistics) are copied."""
    target_params: list[torch.Tensor] = list(target.parameters())
    source_params: list[torch.Tensor] = list(source.parameters())
    if tau >= 1.0:
        torch._foreach_copy_(target_params, source_params)
    else:
        torch._foreach_lerp_(target_params, source_params, tau)
    for target_buffer, source_buffer in zip(target.buffers(), source.buffers(), strict=True):
        target_buffer.copy_(source_buffer)
