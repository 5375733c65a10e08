"""Value transforms (Pohlen et al., 2018) and a value head that regresses in transformed units, as a scalar or as a
categorical over a fixed support with two-hot targets (Schrittwieser et al., 2020, MuZero appendix F).

Returns of very different scales (a few units in CartPole, thousands in Atari) make one squared error a poor loss:
the transform h squashes them so one learning rate fits, and a categorical head turns the regression into a
cross-entropy whose gradient does not grow with the error. The head always answers in reward units.

    h(x)    = sign(x) * (sqrt(|x| + 1) - 1) + eps * x
    h^-1(y) = sign(y) * (((sqrt(1 + 4 eps (|y| + 1 + eps)) - 1) / (2 eps))^2 - 1)
"""

from __future__ import annotations

from typing import Literal

import torch
from pydantic import Field, ValidationInfo, field_validator
from torch import nn

from rlcore.common.strict_model import StrictModel
from rlcore.nets.blocks import mlp


def signed_sqrt(x: torch.Tensor, eps: float = 1e-3) -> torch.Tensor:
    """h(x) = sign(x) * (sqrt(|x| + 1) - 1) + eps * x, elementwise, in ``x``'s dtype.

    Written as x / (sqrt(|x| + 1) + 1) + eps * x (the same number): sqrt(|x| + 1) - 1 loses every digit of a
    small |x| to cancellation, the quotient none.
    """
    return x / (torch.sqrt(x.abs() + 1) + 1) + eps * x


def signed_sqrt_inverse(y: torch.Tensor, eps: float = 1e-3) -> torch.Tensor:
    """h^-1(y), the exact inverse of :func:`signed_sqrt` (the closed form in the module docstring), elementwise.

    The closed form as written subtracts numbers close to 1 twice, losing about 1e-7 / eps near zero in float32
    (and every digit of a tiny |y| even in float64). The same number without cancellation: with
    c = |y| + 1 + eps, s = sqrt(1 + 4 eps c) and a = (s - 1) / (2 eps), h^-1(y) = sign(y) (a - 1)(a + 1), where
    a - 1 = 4 |y| c / ((s + 1)(1 + 2 eps + 2 |y| + s)) (multiply out the conjugates). Every term is positive, so
    the result is accurate to a few float32 ulps over [-1e6, 1e6] in ``y``'s own dtype; no float64 is needed.
    """
    magnitude = y.abs()
    c = magnitude + 1 + eps
    s = torch.sqrt(1 + 4 * eps * c)
    a_minus_one = 4 * magnitude * c / ((s + 1) * (1 + 2 * eps + 2 * magnitude + s))
    return torch.sign(y) * a_minus_one * (a_minus_one + 2)


def scalar_to_two_hot(x: torch.Tensor, support: torch.Tensor) -> torch.Tensor:
    """Project scalars onto a support of atoms: (...,) -> (..., K) probabilities whose mean is ``x``.

    ``support``: (K,) increasing atoms, K >= 2 (evenly spaced in :class:`ValueHead`, not required here). Each
    scalar puts weight on the two atoms around it, in proportion to how close it is to each (one atom when it
    lies on one); scalars outside the support are clipped to its ends first. Computed in ``x``'s dtype.
    """
    if support.dim() != 1 or support.numel() < 2:
        raise ValueError(f"support: expected a 1-D tensor of at least 2 atoms, got shape {tuple(support.shape)}")
    atoms = support.to(x.dtype)
    clipped = x.clamp(atoms[0], atoms[-1])
    lower = (torch.searchsorted(atoms, clipped.contiguous(), right=True) - 1).clamp(0, atoms.numel() - 2)
    lower_atom, upper_atom = atoms[lower], atoms[lower + 1]
    upper_weight = (clipped - lower_atom) / (upper_atom - lower_atom)
    probs = torch.zeros(*x.shape, atoms.numel(), dtype=x.dtype, device=x.device)
    probs.scatter_(-1, lower.unsqueeze(-1), (1 - upper_weight).unsqueeze(-1))
    probs.scatter_add_(-1, (lower + 1).unsqueeze(-1), upper_weight.unsqueeze(-1))
    return probs


def two_hot_to_scalar(probs: torch.Tensor, support: torch.Tensor) -> torch.Tensor:
    """The mean of a distribution over the support: (..., K) probabilities -> (...,)."""
    return (probs * support.to(probs.dtype)).sum(dim=-1)


class ValueHeadConfig(StrictModel):
    """How a critic predicts values: a scalar or a categorical over a support, in reward or transformed units."""

    type: Literal["scalar", "categorical"] = "scalar"
    """``scalar``: one output regressed with a squared error; ``categorical``: ``bins`` logits over an evenly spaced
    support trained with a cross-entropy against two-hot targets, read out as the mean."""
    transform: Literal["none", "signed_sqrt"] = "none"
    """``signed_sqrt``: regress h(return) (Pohlen et al., 2018) and answer h^-1 of the output; ``none``: the return
    itself. The defaults (scalar, none) are the plain critic and its squared error, unchanged."""
    bins: int = Field(51, ge=2)
    """Atoms of the categorical support (categorical only)."""
    low: float = -300.0
    """The support's first atom, in transformed units (reward units when ``transform`` is none); targets below it
    are clipped to it (categorical only)."""
    high: float = 300.0
    """The support's last atom, in transformed units; must be > ``low``; targets above it are clipped to it
    (categorical only)."""
    epsilon: float = Field(1e-3, gt=0)
    """eps of h(x) = sign(x)(sqrt(|x| + 1) - 1) + eps x: the linear term that keeps h invertible (signed_sqrt only)."""

    @field_validator("high")
    @classmethod
    def _above_low(cls, high: float, info: ValidationInfo) -> float:
        low = info.data.get("low")
        if low is not None and not high > low:
            raise ValueError(f"must be > low ({low}), got {high}")
        return high


class ValueHead(nn.Module):
    """A critic MLP with the output ``config`` asks for; ``forward`` answers in reward units.

    Scalar heads output f(s) with one unit, categorical heads ``bins`` logits over the support
    ``linspace(low, high, bins)`` (a buffer that moves with the module). Values are h^-1(f(s)) or
    h^-1(sum_k softmax(logits)_k z_k), with h^-1 the identity when ``transform`` is none.
    """

    support: torch.Tensor

    def __init__(self, in_features: int, hidden_sizes: list[int], activation: str, config: ValueHeadConfig) -> None:
        super().__init__()
        self.config = config
        self.categorical = config.type == "categorical"
        self.net = mlp(in_features, hidden_sizes, config.bins if self.categorical else 1, activation, out_gain=1.0)
        # Not persistent: the config defines it, and a scalar head's state_dict stays the plain MLP's.
        self.register_buffer("support", torch.linspace(config.low, config.high, config.bins), persistent=False)

    def _transform(self, x: torch.Tensor) -> torch.Tensor:
        return signed_sqrt(x, self.config.epsilon) if self.config.transform == "signed_sqrt" else x

    def _inverse(self, y: torch.Tensor) -> torch.Tensor:
        return signed_sqrt_inverse(y, self.config.epsilon) if self.config.transform == "signed_sqrt" else y

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        """State values in reward units, (B,), for ``features`` (B, in_features)."""
        out = self.net(features)
        if self.categorical:
            return self._inverse(two_hot_to_scalar(torch.softmax(out, dim=-1), self.support))
        return self._inverse(out.squeeze(-1))

    def loss(
        self,
        features: torch.Tensor,
        targets: torch.Tensor,
        old_values: torch.Tensor | None = None,
        clip_range: float | None = None,
    ) -> torch.Tensor:
        """The mean critic loss against ``targets`` (B,) in reward units (returns, V-trace targets).

        Scalar: (h(target) - f)^2, the plain squared error without a transform. With ``clip_range`` and
        ``old_values`` (B,) (the values in reward units when the rollout was collected) the prediction is first
        held within ``clip_range`` of the old one, in transformed units: f_clip = h(old) + clamp(f - h(old), -c, c),
        loss (h(target) - f_clip)^2. That is PPO's value clipping as rlcore's PPO and Stable-Baselines3 compute it
        (not the max of the clipped and unclipped errors of the original code and CleanRL).
        Categorical: the cross-entropy -sum_k two_hot(h(target))_k log softmax(logits)_k; ``clip_range`` is ignored
        (each step's change of the predicted distribution is already bounded by the cross-entropy's gradient).
        """
        return self.losses_of(self.net(features), targets, old_values, clip_range).mean()

    def losses_of(
        self,
        out: torch.Tensor,
        targets: torch.Tensor,
        old_values: torch.Tensor | None = None,
        clip_range: float | None = None,
    ) -> torch.Tensor:
        """:meth:`loss` per sample, from the head network's outputs ``out`` (..., outputs) (``net(features)``, or
        members' stacked outputs (M, B, outputs)) and ``targets`` (...): (...). The one arithmetic of the critic's
        loss; a caller with padded samples (a batched update's members) takes its own masked mean."""
        if self.categorical:
            target_probs = scalar_to_two_hot(self._transform(targets.detach()), self.support)
            return -(target_probs * torch.log_softmax(out, dim=-1)).sum(dim=-1)
        values = out.squeeze(-1)
        if clip_range is not None:
            if old_values is None:
                raise ValueError("old_values: required when clip_range is given (the values the rollout stored)")
            old = self._transform(old_values)
            values = old + (values - old).clamp(-clip_range, clip_range)
        return (self._transform(targets) - values).square()
