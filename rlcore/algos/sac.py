"""Soft Actor-Critic (Haarnoja et al., 2018), with automatic entropy tuning, and its discrete-action
variant (Christodoulou, 2019): the action space picks which.

For each gradient step on a replay batch (s, a, R, s', discount), with twin critics Q1, Q2:
    y = scale * R + discount * E_{a'~pi(s')}[min_i Q_target_i(s', a') - alpha * log pi(a'|s')]
    L_Q  = sum_i (Q_i(s, a) - y)^2
    L_pi = E_{a~pi(s)}[alpha * log pi(a|s) - min_i Q_i(s, a)]
    L_alpha = -log(alpha) * (target_entropy - H[pi(.|s)])      (when ent_coef is "auto")
    Q_target <- tau * Q + (1 - tau) * Q_target
Box actions: a tanh-squashed Gaussian, expectations by one reparameterized sample; log pi and the entropy
are those of the squashed action u = tanh(x) in [-1, 1], before the affine map to the env's bounds (as in the
authors' code and SB3), so the automatic target -action_dim means the same whatever the bounds, and the critics
see u. Discrete actions: a categorical, expectations computed exactly over the actions.
"""

from __future__ import annotations

import copy
import math
from typing import Annotated, Literal

import torch
from gymnasium import spaces
from pydantic import Field

from rlcore.algos.base import OffPolicyAlgorithm, OffPolicyConfig
from rlcore.algos.fused_adam import FusedAdam
from rlcore.algos.sac_members import OneSAC, SACMembers
from rlcore.config.sections import PolicyConfig
from rlcore.nets.blocks import TwinQ
from rlcore.nets.policies import CategoricalActor, SquashedGaussianActor, require_bounded
from rlcore.nets.policy import Policy


class SACConfig(OffPolicyConfig):
    name: Literal["sac"] = "sac"
    lr: float = Field(3e-4, gt=0)
    """Adam learning rate of the critics and the entropy coefficient (and of the actor unless ``actor_lr``)."""
    actor_lr: float | None = Field(None, gt=0)
    """The actor's learning rate; null: ``lr``. A slower actor steadies discrete SAC."""
    ent_coef: Annotated[float, Field(gt=0)] | Literal["auto"] = "auto"
    """The entropy coefficient alpha (> 0), or ``auto`` to tune it toward ``target_entropy``."""
    init_ent_coef: float = Field(1.0, gt=0)
    """With ``ent_coef: auto``: alpha at the start of training (log alpha is then tuned by Adam at ``lr``); unused with
    a fixed ``ent_coef``."""
    target_entropy: float | Literal["auto"] = "auto"
    """``auto``: -action_dim for Box actions (entropy of the squashed action in [-1, 1]^action_dim, whatever the
    bounds), ``target_entropy_scale * log(n)`` for n discrete actions."""
    target_entropy_scale: float = Field(0.5, gt=0, le=1)
    """With ``target_entropy: auto`` and n discrete actions: the target entropy is this times log(n), the uniform
    policy's entropy; unused for Box actions."""
    reward_scale: float = Field(1.0, gt=0)
    """Rewards are multiplied by this in the critics' TD target (the paper's reward scale); 1: the env's rewards."""
    tau: float = Field(0.005, gt=0, le=1)
    """Polyak weight of the critics' target update, Q_target <- tau * Q + (1 - tau) * Q_target, every
    ``target_update_interval`` gradient steps (the paper: 0.005)."""
    max_grad_norm: float | None = Field(None, gt=0)
    """Clips the gradient norm of the critics' step and of the actor's step, each on its own; null: no clipping (as the
    paper)."""

    @property
    def auto_alpha(self) -> bool:
        return self.ent_coef == "auto"


class SAC(OffPolicyAlgorithm[SACConfig, Policy]):
    name = "sac"
    Config = SACConfig
    action_spaces = (spaces.Box, spaces.Discrete)

    def __init__(self, policy: Policy, config: SACConfig) -> None:
        super().__init__(policy, config)
        self.discrete = policy.discrete
        n = policy.action_dim
        # Critics have the actor's torso shape and read the actor's normalized observations through an encoder of
        # their own (``TwinQ``): for pixels, the critics' loss trains their CNN and the actor's loss the actor's.
        net, encoder = policy.config, policy.new_encoder()
        self.critic = TwinQ(encoder.out_features, n, self.discrete, net.hidden_sizes, net.activation, encoder)
        self.critic_target = copy.deepcopy(self.critic).requires_grad_(False)
        if config.target_entropy == "auto":
            self.target_entropy = config.target_entropy_scale * math.log(n) if self.discrete else -float(n)
        else:
            self.target_entropy = float(config.target_entropy)
        initial = config.init_ent_coef if config.auto_alpha else float(config.ent_coef)
        self.log_alpha = torch.tensor(math.log(initial), requires_grad=config.auto_alpha)
        self.actor_optimizer = FusedAdam(policy.parameters(), lr=config.actor_lr or config.lr)
        self.critic_optimizer = FusedAdam(self.critic.parameters(), lr=config.lr)
        self.alpha_optimizer = torch.optim.Adam([self.log_alpha], lr=config.lr) if config.auto_alpha else None

    @staticmethod
    def make_policy(
        observation_space: spaces.Space, action_space: spaces.Space, config: PolicyConfig, algo: SACConfig
    ) -> Policy:
        if isinstance(action_space, spaces.Discrete):
            return CategoricalActor(observation_space, action_space, config)
        assert isinstance(action_space, spaces.Box)  # the only other kind in action_spaces
        require_bounded(action_space, SAC.name)
        return SquashedGaussianActor(observation_space, action_space, config)

    def update(self, batch: dict[str, torch.Tensor], progress: float) -> dict[str, float]:
        return self.update_members(OneSAC(self, batch))[0]

    @staticmethod
    def update_members(members: SACMembers) -> list[dict[str, float]]:
        """One gradient step of every member (``rlcore.algos.sac_members``: one SAC, or N seeds stacked) on its
        replay batch: the critics' step, the actor's (the critics frozen), alpha's (with ``ent_coef: auto``), the
        targets' update when due. Each loss is (M,) over the member's own samples; a member whose loss or gradient
        norm is not finite skips that optimizer's step (counted on its algorithm). Box actions draw two
        reparameterized samples, (M, B, action_dim) each: at s', then at s. Returns each member's metrics."""
        cfg = members.config
        alpha = members.log_alpha.exp().detach()
        with torch.no_grad():
            next_features = members.features("next_obs", target=True)
            if members.discrete:
                next_q = members.q(next_features, None, target=True)
                next_value = discrete_soft_value(next_q, members.logits("next_obs"), alpha)
            else:
                next_actions, next_log_prob = members.sample("next_obs", 0)
                next_q = members.q(next_features, next_actions, target=True)
                next_value = box_soft_value(next_q, next_log_prob, alpha)
            target = cfg.reward_scale * members.field("rewards") + members.field("discounts") * next_value

        features = members.features("obs")
        q = members.taken(features)
        critic_loss = critic_td_loss(q, target)
        members.step("critic", critic_loss)

        with members.critics_frozen():  # the actor's loss needs dQ/da, not gradients of the critics' weights
            features = features.detach()
            if members.discrete:
                q_pi = members.q(features, None).detach()
                actor_loss, entropy = discrete_actor_loss(q_pi, members.logits("obs"), alpha)
            else:
                actions, log_prob = members.sample("obs", 1)  # in [-1, 1]: log_prob and the entropy are measured there
                actor_loss, entropy = box_actor_loss(members.q(features, actions), log_prob, alpha)
            members.step("actor", actor_loss)
        if cfg.auto_alpha:
            members.step("alpha", alpha_loss(members.log_alpha, members.target_entropy, entropy))
        members.end_step()

        with torch.no_grad():  # one read of every member's metrics
            q_mean = q.flatten(-2).mean(-1)
            table = torch.stack([critic_loss, actor_loss, alpha, entropy, q_mean], dim=-1).reshape(members.count, 5)
        names = ("critic_loss", "actor_loss", "alpha", "entropy", "q_mean")
        return [dict(zip(names, row, strict=True)) for row in table.tolist()]


# SAC's losses for one seed's batch or N seeds' at once: every tensor has a leading ``*S`` = () or (N,), ``alpha`` is
# (*S,) (``SAC.update_members`` passes one member's unstacked tensors, or N members' stacked).


def box_soft_value(next_q: torch.Tensor, next_log_prob: torch.Tensor, alpha: torch.Tensor) -> torch.Tensor:
    """min_i Q_target_i(s', a') - alpha * log pi(a'|s'), (*S, B), from ``next_q`` (*S, 2, B) and ``next_log_prob``
    (*S, B) of one sample a' ~ pi(s')."""
    return next_q.min(dim=-2).values - alpha.unsqueeze(-1) * next_log_prob


def discrete_soft_value(next_q: torch.Tensor, next_logits: torch.Tensor, alpha: torch.Tensor) -> torch.Tensor:
    """E_{a'~pi(s')}[min_i Q_target_i(s', a') - alpha * log pi(a'|s')], (*S, B), from ``next_q`` (*S, 2, B, n) and
    the actor's logits at s' (*S, B, n)."""
    next_probs, next_log_probs = next_logits.softmax(-1), next_logits.log_softmax(-1)
    next_min = next_q.min(dim=-3).values
    return (next_probs * (next_min - alpha[..., None, None] * next_log_probs)).sum(-1)


def critic_td_loss(q: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """sum_i mean_B (Q_i(s, a) - y)^2, (*S,), from ``q`` (*S, 2, B) and ``target`` y (*S, B)."""
    return (q - target.unsqueeze(-2)).square().mean(dim=-1).sum(-1)


def box_actor_loss(
    q_pi: torch.Tensor, log_prob: torch.Tensor, alpha: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """(mean_B [alpha * log pi(a|s) - min_i Q_i(s, a)], the entropy estimate -mean_B log pi(a|s)), each (*S,), from
    ``q_pi`` (*S, 2, B) and ``log_prob`` (*S, B) of one reparameterized sample a ~ pi(s)."""
    actor_loss = (alpha.unsqueeze(-1) * log_prob - q_pi.min(dim=-2).values).mean(-1)
    return actor_loss, -log_prob.mean(-1)


def discrete_actor_loss(
    q_pi: torch.Tensor, logits: torch.Tensor, alpha: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """(mean_B sum_a pi(a|s) [alpha * log pi(a|s) - min_i Q_i(s, a)], the entropy H[pi(.|s)] averaged over B), each
    (*S,), from ``q_pi`` (*S, 2, B, n; no gradient) and the actor's logits (*S, B, n)."""
    probs, log_probs = logits.softmax(-1), logits.log_softmax(-1)
    actor_loss = (probs * (alpha[..., None, None] * log_probs - q_pi.min(dim=-3).values)).sum(-1).mean(-1)
    return actor_loss, -(probs * log_probs).sum(-1).mean(-1)


def alpha_loss(log_alpha: torch.Tensor, target_entropy: float, entropy: torch.Tensor) -> torch.Tensor:
    """-log(alpha) * (target_entropy - H), (*S,), from ``log_alpha`` and the entropy estimate ``entropy`` (*S,)."""
    return -(log_alpha * (target_entropy - entropy.detach()))
