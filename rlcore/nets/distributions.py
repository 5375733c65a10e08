"""Action distributions torch lacks and the heads that read them: independent sub-actions of MultiDiscrete
(:class:`MultiCategorical`) and MultiBinary (:class:`MultiBernoulli`) spaces, read from one score vector
(:class:`SubActions`), the one way a categorical action is sampled with a given generator
(:func:`sample_categorical`), acting's draws of an action with its log-probability from torch's global generator as
torch's ``Categorical`` and ``Normal`` draw them (:func:`categorical_draw`, :func:`gaussian_draw`), and the one way an
action mask is applied to a categorical's logits (:func:`masked_logits`)."""

from __future__ import annotations

import math
from typing import ClassVar

import torch
from gymnasium import spaces
from torch.distributions import Bernoulli, Categorical, Distribution, Independent
from torch.distributions.constraints import Constraint

from rlcore.envs.actions import sub_action_sizes


def masked_logits(logits: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    """``logits`` (B, n) with the actions ``mask`` (B, n) bool marks illegal (False) set to the dtype's lowest finite
    value, as CleanRL's invalid-action masking and sb3-contrib's MaskablePPO do; None: ``logits`` unchanged.

    Their probabilities are then exactly 0 (``exp(min - max)`` underflows), so sampling and the argmax never choose
    them, their log-probability terms carry no gradient, and a ``Categorical``'s entropy is the sum over the legal
    actions only (torch clamps logits at the dtype's min and multiplies by probability 0). A finite value, not
    ``-inf``: a row whose mask is all False gives a uniform distribution rather than NaN.
    """
    if mask is None:
        return logits
    return logits.masked_fill(~mask, torch.finfo(logits.dtype).min)


def masked_categorical(logits: torch.Tensor, mask: torch.Tensor | None) -> Categorical:
    """A ``Categorical`` over ``logits`` (B, n) restricted to the actions ``mask`` (B, n) allows
    (:func:`masked_logits`)."""
    return Categorical(logits=masked_logits(logits, mask), validate_args=False)


def sample_categorical(logits: torch.Tensor, generator: torch.Generator | None) -> torch.Tensor:
    return torch.multinomial(torch.softmax(logits, dim=-1), 1, generator=generator).squeeze(-1)


def categorical_draw(logits: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(actions (B,) int64, their log-probabilities (B,)) drawn from torch's global generator for the categorical
    over ``logits`` (B, n): the same arithmetic and the same draw as ``Categorical(logits=logits)``'s ``sample()``
    and ``log_prob`` (bitwise), without building the distribution, whose construction and checks cost more than
    the arithmetic at every step of acting on a few rows."""
    log_pmf = logits - logits.logsumexp(dim=-1, keepdim=True)
    actions = torch.multinomial(torch.softmax(log_pmf, dim=-1), 1, True)  # (B, 1)
    return actions.squeeze(-1), log_pmf.gather(-1, actions).squeeze(-1)


def gaussian_draw(mean: torch.Tensor, std: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(actions (B, d), their log-probabilities (B,)) drawn from torch's global generator for the diagonal Gaussian
    of ``mean`` (B, d) and ``std`` (B, d): the draw and arithmetic of ``Independent(Normal(mean, std), 1)``'s
    ``sample()`` and ``log_prob`` (bitwise), without building the distribution (see :func:`categorical_draw`)."""
    actions = torch.normal(mean, std)
    log_density = -((actions - mean) ** 2) / (2 * std**2) - std.log() - math.log(math.sqrt(2 * math.pi))
    return actions, log_density.sum(-1)


_SampleShape = torch.Size | list[int] | tuple[int, ...]


class MultiCategorical(Distribution):
    """Independent categoricals, one per sub-action, the i-th over ``nvec[i]`` choices (MultiDiscrete actions).

    torch.distributions has no batched categorical over rows of different sizes, so the logits (B, sum(nvec)) are
    split by ``nvec`` into one :class:`Categorical` each. The sub-actions are independent: ``log_prob`` and
    ``entropy`` are sums over them, (B,); samples and the ``mode`` (each sub-action's argmax) are (B, k) int64.
    """

    arg_constraints: ClassVar[dict[str, Constraint]] = {}  # none of its own: each Categorical has its logits

    def __init__(self, logits: torch.Tensor, nvec: tuple[int, ...]) -> None:
        self.nvec = nvec
        self.parts = [Categorical(logits=chunk, validate_args=False) for chunk in logits.split(nvec, dim=-1)]
        super().__init__(logits.shape[:-1], torch.Size([len(nvec)]), validate_args=False)

    def sample(self, sample_shape: _SampleShape = torch.Size()) -> torch.Tensor:  # noqa: B008 (torch's signature)
        return torch.stack([part.sample(sample_shape) for part in self.parts], dim=-1)

    def log_prob(self, value: torch.Tensor) -> torch.Tensor:
        """``value``: (..., k) int64 sub-actions -> (...,) summed log-probabilities."""
        return torch.stack(
            [part.log_prob(v) for part, v in zip(self.parts, value.unbind(-1), strict=True)], dim=-1
        ).sum(-1)

    def entropy(self) -> torch.Tensor:
        return torch.stack([part.entropy() for part in self.parts], dim=-1).sum(-1)

    @property
    def mode(self) -> torch.Tensor:
        return torch.stack([part.logits.argmax(dim=-1) for part in self.parts], dim=-1)


class MultiBernoulli(Independent):
    """Independent Bernoullis over logits (B, n), one per bit (MultiBinary actions): ``Independent(Bernoulli, 1)``
    with actions as int64 0/1, like every other integer action (``rlcore.envs.actions``), and ``mode`` = logits > 0."""

    def __init__(self, logits: torch.Tensor) -> None:
        self.logits = logits
        super().__init__(Bernoulli(logits=logits, validate_args=False), 1, validate_args=False)

    def sample(self, sample_shape: _SampleShape = torch.Size()) -> torch.Tensor:  # noqa: B008 (torch's signature)
        return super().sample(sample_shape).long()

    def log_prob(self, value: torch.Tensor) -> torch.Tensor:
        """``value``: (..., n) 0/1 (int64 or float) -> (...,) summed log-probabilities."""
        return super().log_prob(value.to(self.logits.dtype))

    @property
    def mode(self) -> torch.Tensor:
        return (self.logits > 0).long()


class SubActions:
    """Independent sub-actions read from one score vector (MultiDiscrete, MultiBinary): what an actor does with
    its scores (B, action_dim) to get a distribution, the greedy action and a sample (B, k) int64."""

    def distribution(self, scores: torch.Tensor) -> Distribution:
        raise NotImplementedError

    def greedy(self, scores: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def sample(self, scores: torch.Tensor, generator: torch.Generator | None) -> torch.Tensor:
        raise NotImplementedError


class CategoricalSubActions(SubActions):
    """A categorical per sub-action: the scores are the sub-actions' logits side by side, (B, sum(nvec))."""

    def __init__(self, nvec: tuple[int, ...]) -> None:
        self.nvec = nvec

    def distribution(self, scores: torch.Tensor) -> Distribution:
        return MultiCategorical(scores, self.nvec)

    def greedy(self, scores: torch.Tensor) -> torch.Tensor:
        return torch.stack([chunk.argmax(dim=-1) for chunk in scores.split(self.nvec, dim=-1)], dim=-1)

    def sample(self, scores: torch.Tensor, generator: torch.Generator | None) -> torch.Tensor:
        chunks = scores.split(self.nvec, dim=-1)
        return torch.stack([sample_categorical(chunk, generator) for chunk in chunks], dim=-1)


class BernoulliSubActions(SubActions):
    """A Bernoulli per bit: the scores are the bits' logits, (B, n); greedy is logit > 0."""

    def distribution(self, scores: torch.Tensor) -> Distribution:
        return MultiBernoulli(scores)

    def greedy(self, scores: torch.Tensor) -> torch.Tensor:
        return (scores > 0).long()

    def sample(self, scores: torch.Tensor, generator: torch.Generator | None) -> torch.Tensor:
        return (torch.rand(scores.shape, generator=generator) < torch.sigmoid(scores)).long()


def sub_actions(action_space: spaces.Space) -> SubActions | None:
    """The sub-action head of a MultiDiscrete or MultiBinary space; None for Discrete and Box."""
    if isinstance(action_space, spaces.MultiBinary):
        return BernoulliSubActions()
    sizes = sub_action_sizes(action_space)
    return None if sizes is None else CategoricalSubActions(sizes)
