"""What the signals' networks read: observations through an encoder of the policy's architecture, actions as
float features, and the inverse model's loss in each action space's own terms.

Actions arrive in the policy's convention (``rlcore.envs.actions``): (B,) int64 indices for ``Discrete(n)``, (B, k)
int64 for ``MultiDiscrete``/``MultiBinary``, (B, d) float32 for ``Box``.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from gymnasium import spaces
from torch import nn

from rlcore.envs.actions import sub_action_sizes
from rlcore.nets.blocks import mlp


def action_width(action_space: spaces.Space) -> int:
    """Width of :func:`action_features` (and of an inverse model's scores): n, sum(nvec), the bits, the flat size."""
    if isinstance(action_space, spaces.Discrete):
        return int(action_space.n)
    if isinstance(action_space, spaces.MultiDiscrete):
        return int(action_space.nvec.sum())
    assert action_space.shape is not None
    return int(torch.Size(action_space.shape).numel())


def action_features(actions: torch.Tensor, action_space: spaces.Space) -> torch.Tensor:
    """(B, :func:`action_width`) float32: one-hot indices (concatenated per sub-action), bits, or the Box values."""
    if isinstance(action_space, spaces.Discrete):
        return F.one_hot(actions.long(), int(action_space.n)).float()
    if isinstance(action_space, spaces.MultiDiscrete):
        sizes = sub_action_sizes(action_space)
        assert sizes is not None
        return torch.cat([F.one_hot(actions[:, k].long(), n).float() for k, n in enumerate(sizes)], dim=1)
    return actions.float().reshape(actions.shape[0], -1)


def inverse_loss(scores: torch.Tensor, actions: torch.Tensor, action_space: spaces.Space) -> torch.Tensor:
    """(B,) how badly ``scores`` (B, :func:`action_width`) predict ``actions``: the cross-entropy of the index
    (summed over sub-actions), the bits' binary cross-entropy (summed), or half the squared error of Box values
    (the negative log-likelihood of a unit Gaussian, up to a constant)."""
    if isinstance(action_space, spaces.Discrete):
        return F.cross_entropy(scores, actions.long(), reduction="none")
    if isinstance(action_space, spaces.MultiDiscrete):
        sizes = sub_action_sizes(action_space)
        assert sizes is not None
        parts = scores.split(list(sizes), dim=1)
        losses = [F.cross_entropy(part, actions[:, k].long(), reduction="none") for k, part in enumerate(parts)]
        return torch.stack(losses).sum(dim=0)
    if isinstance(action_space, spaces.MultiBinary):
        return F.binary_cross_entropy_with_logits(scores, actions.float(), reduction="none").sum(dim=1)
    return 0.5 * (scores - actions.float().reshape(scores.shape)).square().sum(dim=1)


class EncodedMLP(nn.Module):
    """An encoder (``Policy.new_encoder``: a flatten for vectors, a CNN for frames) then a ReLU MLP:
    (B, *obs_shape) -> (B, out_features), with ``extra`` features (B, extra) concatenated before the MLP."""

    def __init__(self, encoder: nn.Module, encoder_features: int, hidden_sizes: list[int], out_features: int,
                 extra: int = 0, out_gain: float = 1.0) -> None:  # fmt: skip
        super().__init__()
        self.encoder = encoder
        self.head = mlp(encoder_features + extra, hidden_sizes, out_features, "relu", out_gain)

    def forward(self, obs: torch.Tensor, extra: torch.Tensor | None = None) -> torch.Tensor:
        features = self.encoder(obs)
        if extra is not None:
            features = torch.cat([features, extra], dim=1)
        out: torch.Tensor = self.head(features)
        return out
