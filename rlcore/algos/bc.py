"""Behavioural cloning: supervised learning of the dataset's actions (Pomerleau, 1991).

For each gradient step on a dataset batch (s, a):
    Discrete actions:  L = cross-entropy(logits(s), a)
    Box actions:       L = -log N(a; mu(s), sigma)   (``loss: nll``)   or   ||mu(s) - a||^2   (``loss: mse``)
Validation (held-out episodes): the same loss, and action accuracy (discrete) or mean absolute error (Box).

The loss (:func:`bc_loss`) is written on the policy's action scores with every mean over the samples' axis, so the
same arithmetic serves one seed and N seeds stacked along a leading axis (``BC.update_members``).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Literal, cast

import torch
import torch.nn.functional as F
from gymnasium import spaces
from pydantic import Field
from torch.distributions import Normal

from rlcore.algos.base import OfflineAlgorithm, OfflineConfig
from rlcore.algos.value_members import Networks, OneNetwork
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


def bc_loss(
    scores: torch.Tensor, actions: torch.Tensor, log_std: torch.Tensor | None, loss: Literal["nll", "mse"]
) -> tuple[torch.Tensor, torch.Tensor]:
    """(loss, quality) of the action scores of one seed or of N seeds at once: each (*S,), a mean over the B samples.

    ``scores``: (*S, B, action_dim), the logits (Discrete actions; ``log_std`` None) or the Gaussian means (Box);
    ``actions``: (*S, B) int64 or (*S, B, *action_shape); ``log_std``: the Gaussian's, broadcastable against
    ``scores`` ((action_dim,) for one seed, (N, 1, action_dim) for N). ``*S`` is () for one seed, (N,) for N.
    Quality: accuracy (Discrete), mean absolute error of the mean (Box)."""
    if log_std is None:
        per_sample = F.cross_entropy(scores.flatten(0, -2), actions.flatten(), reduction="none")
        return per_sample.view(actions.shape).mean(-1), (scores.argmax(-1) == actions).float().mean(-1)
    target = actions.reshape(scores.shape)
    error = (scores.detach() - target).abs().mean((-2, -1))
    if loss == "mse":
        return (scores - target).square().mean((-2, -1)), error
    normal = Normal(scores, log_std.exp().expand_as(scores), validate_args=False)
    return -normal.log_prob(target).sum(-1).mean(-1), error


def bc_optimizer(parameters: Iterable[torch.Tensor], config: BCConfig) -> torch.optim.AdamW:
    """BC's optimizer over one policy's ``parameters`` (N seeds stacked step a ``StackedAdam`` with AdamW's weight
    decay, loaded from theirs: ``rlcore.algos.value_members.NetworkStack``)."""
    return torch.optim.AdamW(parameters, lr=config.lr, weight_decay=config.weight_decay, fused=True)


class BC(OfflineAlgorithm[BCConfig, Policy]):
    name = "bc"
    capabilities = frozenset({"action_mask", "multiagent"})
    Config = BCConfig
    action_spaces = (spaces.Discrete, spaces.Box)
    batch_fields = ("obs", "actions")

    def __init__(self, policy: Policy, config: BCConfig) -> None:
        super().__init__(policy, config)
        self.optimizer = bc_optimizer(policy.parameters(), config)

    @staticmethod
    def make_policy(
        observation_space: spaces.Space, action_space: spaces.Space, config: PolicyConfig, algo: BCConfig
    ) -> Policy:
        return stochastic_actor(observation_space, action_space, config)

    def loss(self, obs: torch.Tensor, actions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(loss, quality) of ``obs`` (B, *obs_shape) and ``actions``: quality is accuracy for discrete actions, mean
        absolute error for Box actions."""
        log_std = None if self.policy.discrete else self.policy.log_std
        assert log_std is None or isinstance(log_std, torch.Tensor)  # GaussianActor's parameter
        return bc_loss(self.policy.act_scores(obs), actions, log_std, self.config.loss)

    def update(self, batch: dict[str, torch.Tensor], progress: float) -> dict[str, float]:
        return self.update_members(OneNetwork(self, batch), [progress])[0]

    @staticmethod
    def update_members(members: Networks, progress: Sequence[float]) -> list[dict[str, float]]:
        """One gradient step of every member (``rlcore.algos.value_members``: one policy, or N seeds stacked) on its
        batch. Returns each member's metrics."""
        cfg = cast(BCConfig, members.algorithms[0].config)
        loss, quality = bc_loss(members.scores("online", "obs"), members.batch["actions"], members.log_std(), cfg.loss)
        members.step(loss, None)
        name = "mean_abs_error" if members.log_std() is not None else "accuracy"
        return [
            {"loss": member_loss, name: value}
            for member_loss, value in zip(members.values(loss), members.values(quality), strict=True)
        ]

    @torch.no_grad()
    def validate(self, held_out: dict[str, torch.Tensor]) -> dict[str, float]:
        """Loss and accuracy (or mean absolute error) on held-out episodes."""
        loss, quality = self.loss(held_out["obs"], held_out["actions"])
        return {"loss": loss.item(), "accuracy" if self.policy.discrete else "mean_abs_error": quality.item()}
