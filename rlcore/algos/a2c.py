"""Advantage Actor-Critic (Mnih et al., 2016), synchronous: A3C's update with the envs stepped in lockstep.

For each rollout of n_steps vector steps over N envs (collected by the on-policy trainer):
    for each valid step t:                              (the paper's loop from t - 1 down to t_start)
        R_t = r_t + gamma * R_{t+1}, starting from V(s_end) after the rollout (0 after a terminal state)
              (advantage_estimator: n_step; or GAE's target A_t + V(s_t), the default)
        A_t = R_t - V(s_t)
    L_policy = -E_t[log pi(a_t|s_t) * A_t]
    L_value  = E_t[(V(s_t) - R_t)^2]
    loss = L_policy + c_v * L_value - c_e * H[pi(.|s_t)]
    one RMSprop (or Adam) step on loss, gradient norm clipped

One gradient step per rollout, on all of its valid steps: unlike PPO, no epochs, no minibatches, no ratio.
Stable-Baselines3's A2C uses GAE with gae_lambda = 1.0 by default: lambda = 1 sums the TD errors up to the
rollout's or the episode's end, which is the n-step return above (the ``n_step`` estimator gives the same
targets). rlcore's default is the family's gae_lambda (0.95).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Literal, cast

import torch
from gymnasium import spaces
from pydantic import Field
from torch import nn

from rlcore.algos.base import OnPolicyAlgorithm, OnPolicyConfig
from rlcore.algos.fused_adam import FusedAdam
from rlcore.algos.members import MemberBatch, Members, OneMember, padded_groups, shares
from rlcore.algos.ppo import PPO
from rlcore.config.sections import PolicyConfig
from rlcore.data.rollouts import RolloutBuffer
from rlcore.nets.policies import ActorCritic
from rlcore.nets.recurrent import actor_critic
from rlcore.objectives.bc_regularizer import BCRegularizer
from rlcore.objectives.returns import explained_variance, n_step_returns
from rlcore.objectives.schedules import ScheduleName, scheduled

RMSPROP_ALPHA = 0.99
"""RMSprop's squared-gradient averaging weight, as in the paper's shared RMSprop and SB3's A2C."""


class A2CConfig(OnPolicyConfig):
    name: Literal["a2c"] = "a2c"
    n_steps: int = Field(5, ge=1)
    """Vector steps per rollout (and per gradient step); SB3's default 5."""
    lr: float = Field(7e-4, gt=0)
    """Learning rate at the start of training."""
    lr_schedule: ScheduleName = "constant"
    """``linear`` anneals the learning rate to 0 at ``train.max_steps``."""
    optimizer: Literal["rmsprop", "adam"] = "rmsprop"
    """``rmsprop`` (alpha 0.99) as the paper and SB3; ``adam`` as PPO."""
    optimizer_eps: float = Field(1e-5, gt=0)
    """The optimizer's epsilon (SB3's ``rms_prop_eps``)."""
    advantage_estimator: Literal["gae", "n_step"] = "gae"
    """``gae``: GAE with ``gae_lambda`` (SB3's A2C: lambda 1.0); ``n_step``: the paper's n-step return with
    n = ``n_steps``, every step bootstrapping from the value after the rollout
    (``rlcore.objectives.returns.n_step_returns``)."""
    normalize_advantage: bool = False
    """Standardize the rollout's advantages (not in the paper; SB3's default is off too)."""
    ent_coef: float = Field(0.0, ge=0)
    """Weight of the entropy bonus: the loss subtracts ``ent_coef * H[pi(.|s)]`` (c_e); 0: no bonus."""
    vf_coef: float = Field(0.5, ge=0)
    """c_v: weight of the value loss in the loss."""
    max_grad_norm: float | None = Field(0.5, gt=0)
    """The gradient's global norm is clipped to this before each optimizer step; null: no clipping."""


def make_optimizer(parameters: Iterable[nn.Parameter], config: A2CConfig) -> torch.optim.Optimizer:
    if config.optimizer == "adam":
        return FusedAdam(parameters, lr=config.lr, eps=config.optimizer_eps)  # torch's fused Adam, stepped directly
    # foreach: the same elementwise arithmetic (bitwise) in one kernel per op over every tensor, not a Python loop
    # over them: ~210 -> ~100 us a step for the [64, 64] actor and critic (torch's default on CPU is the loop).
    return torch.optim.RMSprop(parameters, lr=config.lr, alpha=RMSPROP_ALPHA, eps=config.optimizer_eps, foreach=True)


class A2C(OnPolicyAlgorithm[A2CConfig, ActorCritic]):
    name = "a2c"
    Config = A2CConfig
    action_spaces = PPO.action_spaces  # the same actor-critic policies, so the same spaces
    capabilities = PPO.capabilities

    def __init__(self, policy: ActorCritic, config: A2CConfig) -> None:
        super().__init__(policy, config)
        self.optimizer = make_optimizer(policy.parameters(), config)
        self.behavioral_cloning = BCRegularizer.of(policy, config)  # algo.behavioral_cloning, or None

    @staticmethod
    def make_policy(
        observation_space: spaces.Space, action_space: spaces.Space, config: PolicyConfig, algo: A2CConfig
    ) -> ActorCritic:
        return actor_critic(observation_space, action_space, config, algo.value_head)

    @torch.no_grad()
    def advantages(self, rollout: RolloutBuffer) -> tuple[torch.Tensor, torch.Tensor]:
        """(advantages, value targets), each (T, N): GAE, or n-step returns with n = ``n_steps``."""
        cfg = self.config
        if cfg.advantage_estimator == "n_step":
            return n_step_returns(
                rollout.rewards,
                rollout.values,
                rollout.next_values,
                rollout.terminated,
                rollout.episode_end,
                cfg.gamma,
                cfg.n_steps,
            )
        return super().advantages(rollout)

    def update(self, rollout: RolloutBuffer, progress: float, generator: torch.Generator) -> dict[str, float]:
        """One gradient step on the rollout's valid steps. ``progress`` in [0, 1] drives the learning rate."""
        return self.update_members(OneMember(self, rollout), [progress], [generator])[0]

    @staticmethod
    def update_members(
        members: Members, progress: Sequence[float], generators: Sequence[torch.Generator]
    ) -> list[dict[str, float]]:
        """One step of every member (``rlcore.algos.members``: one policy, or N seeds stacked) on its rollout's valid
        steps; member k's learning rate follows ``progress[k]``. Returns each member's metrics."""
        cfg = cast(A2CConfig, members.algorithms[0].config)
        count = members.count
        lrs = [scheduled(cfg.lr, cfg.lr_schedule, p) for p in progress]
        members.set_learning_rates(lrs)

        valid = members.valid_indices()
        whole = MemberBatch(valid)
        stats = whole.standardizer(members.take("advantages", whole)) if cfg.normalize_advantage else None
        # algo.grad_accumulation: the batch in k parts (whole sequences for a recurrent policy), each loss weighted
        # by its share of the steps, summed into one step.
        k = cfg.grad_accumulation
        if k == 1:
            parts = [whole]
        else:
            sizes = [-(-int(steps.numel()) // k) for steps in valid]
            parts = list(padded_groups(members.orders(sizes, generators, [True] * count)))
        records = []  # per part (M, 3): policy loss, value loss, entropy, each weighted by the part's share
        members.zero_grad()
        for batch in parts:
            with members.autocast():
                log_probs, entropy, value_loss = members.losses(batch, None)
                adv = members.take("advantages", batch)
                if stats is not None:
                    adv = stats(adv)
                policy_loss = -batch.mean(log_probs * adv)
                entropy = batch.mean(entropy)
                loss = policy_loss + cfg.vf_coef * value_loss - cfg.ent_coef * entropy
                extra = members.extra_losses(generators)
                if extra is not None:
                    loss = loss + extra
            diagnostics = torch.stack([policy_loss, value_loss, entropy], dim=-1).detach().double().reshape(count, 3)
            if len(parts) > 1:
                loss = loss * shares(batch, whole)
                weights = (batch.counts.double() / whole.counts.double()).unsqueeze(1)  # as Python divides the counts
                diagnostics = torch.where(batch.present.unsqueeze(1), diagnostics * weights, 0.0)
            members.backward(loss, batch.present)
            records.append(diagnostics)
        members.step(cfg.max_grad_norm, [True] * count)
        totals = records[0] if len(records) == 1 else torch.stack(records).cumsum(0)[-1]  # in order, as Python sums

        values, returns, sums = members.field("values"), members.field("returns"), totals.tolist()
        metrics = []
        for k, steps in enumerate(valid):
            metrics.append(
                {
                    "policy_loss": sums[k][0],
                    "value_loss": sums[k][1],
                    "entropy": sums[k][2],
                    "explained_variance": explained_variance(values[k][steps], returns[k][steps]),
                    "learning_rate": lrs[k],
                }
            )
            regularizer = getattr(members.algorithms[k], "behavioral_cloning", None)
            if regularizer is not None:
                metrics[k].update(regularizer.end_update(members.env_steps()))
        return metrics
