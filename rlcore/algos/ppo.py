"""Proximal Policy Optimization (Schulman et al., 2017), clipped-surrogate variant.

For each rollout (collected by the on-policy trainer, advantages from GAE, the family's default):
    (normalize_rewards: rewards divided by the running std of the discounted return before GAE)
    for epoch in 1..K:
        for each minibatch:
            r = pi(a|s) / pi_old(a|s)
            L_clip = -E[min(r * A, clip(r, 1 - eps, 1 + eps) * A)]
                     (dual_clip c: for A < 0, max(min(...), c * A) instead; Ye et al., 2020)
            L_value = E[(V(s) - R)^2]      (optionally clipped around the old value; the critic's own loss for
                                            transformed or categorical value heads)
            loss = L_clip + c_v * L_value - c_e * H[pi(.|s)]
            stop early once the approximate KL to pi_old exceeds 1.5 * target_kl
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal, cast

import torch
from gymnasium import spaces
from pydantic import Field, model_validator

from rlcore.algos.base import OnPolicyAlgorithm, OnPolicyConfig, accumulation_groups
from rlcore.algos.fused_adam import FusedAdam
from rlcore.algos.members import MemberBatch, Members, OneMember, padded_groups, shares
from rlcore.config.sections import PolicyConfig
from rlcore.data.rollouts import RolloutBuffer
from rlcore.nets.policies import ActorCritic
from rlcore.nets.recurrent import actor_critic
from rlcore.objectives.bc_regularizer import BCRegularizer
from rlcore.objectives.returns import explained_variance, gae
from rlcore.objectives.reward_scaling import RewardScaler
from rlcore.objectives.schedules import ScheduleName, scheduled


class PPOConfig(OnPolicyConfig):
    name: Literal["ppo"] = "ppo"
    lr: float = Field(3e-4, gt=0)
    """Adam learning rate at the start of training."""
    lr_schedule: ScheduleName = "linear"
    """``linear`` anneals the learning rate to 0 at ``train.max_steps``."""
    batch_size: int = Field(256, ge=1)
    """Transitions per minibatch. The valid steps of a rollout rarely divide evenly: a remainder of at least half
    a batch is a minibatch of its own, a smaller one is spread over the others (``RolloutBuffer.minibatches``)."""
    n_epochs: int = Field(10, ge=1)
    """Passes over each rollout."""
    clip_range: float = Field(0.2, gt=0)
    """epsilon of the clipped surrogate: the probability ratio pi/pi_old is clipped to [1 - epsilon, 1 + epsilon]."""
    clip_range_schedule: ScheduleName = "constant"
    """``linear`` anneals ``clip_range`` to 0 at ``train.max_steps``; ``constant`` keeps it."""
    clip_range_vf: float | None = Field(None, gt=0)
    """Clip value predictions to within this of the rollout's values; null for no value clipping."""
    normalize_advantage: bool = True
    """Standardize the advantages (zero mean, unit std) over each minibatch (over each group of ``grad_accumulation``
    minibatches)."""
    ent_coef: float = Field(0.0, ge=0)
    """Weight of the entropy bonus: the loss subtracts ``ent_coef * H[pi(.|s)]`` (c_e); 0: no bonus."""
    vf_coef: float = Field(0.5, ge=0)
    """c_v: weight of the value loss in the loss."""
    max_grad_norm: float | None = Field(0.5, gt=0)
    """The gradient's global norm is clipped to this before each optimizer step; null: no clipping."""
    target_kl: float | None = Field(None, gt=0)
    """Stop the update's epochs early once the approximate KL exceeds 1.5 x this; null to never stop."""
    adam_eps: float = Field(1e-5, gt=0)
    """Adam's epsilon (1e-5 as SB3 and CleanRL; PyTorch's default is 1e-8)."""
    dual_clip: float | None = Field(None, gt=1)
    """Dual-clip PPO (Ye et al., 2020): for negative advantages the clipped objective is also bounded below by
    ``dual_clip * A``, so a ratio far above 1 + clip_range cannot make one bad sample dominate the loss. Must be
    > 1 (the paper uses 3); null: off."""
    normalize_rewards: bool = False
    """Divide rewards by the running standard deviation of the discounted return before GAE (SB3's VecNormalize
    reward scaling; ``rlcore.objectives.reward_scaling``). The statistics are saved in checkpoints, not in the
    policy."""
    reward_clip: float | None = Field(10.0, gt=0)
    """With normalize_rewards: clip scaled rewards to [-reward_clip, reward_clip]; null: no clipping."""

    @model_validator(mode="after")
    def _batch_fits(self) -> PPOConfig:
        if self.normalize_advantage and self.batch_size < 2:
            raise ValueError("algo.batch_size: must be >= 2 when algo.normalize_advantage is true")
        return self


class PPO(OnPolicyAlgorithm[PPOConfig, ActorCritic]):
    name = "ppo"
    Config = PPOConfig
    action_spaces = (spaces.Discrete, spaces.MultiDiscrete, spaces.MultiBinary, spaces.Box)
    capabilities = frozenset({"memory", "precision", "cuda", "action_mask", "multiagent"})

    def __init__(self, policy: ActorCritic, config: PPOConfig) -> None:
        super().__init__(policy, config)
        self.optimizer = FusedAdam(policy.parameters(), lr=config.lr, eps=config.adam_eps)  # torch's fused Adam
        self.reward_scaler = RewardScaler(config.gamma, config.reward_clip) if config.normalize_rewards else None
        self.behavioral_cloning = BCRegularizer.of(policy, config)  # algo.behavioral_cloning, or None

    @staticmethod
    def make_policy(
        observation_space: spaces.Space, action_space: spaces.Space, config: PolicyConfig, algo: PPOConfig
    ) -> ActorCritic:
        return actor_critic(observation_space, action_space, config, algo.value_head)

    @torch.no_grad()
    def advantages(self, rollout: RolloutBuffer) -> tuple[torch.Tensor, torch.Tensor]:
        """GAE, on scaled rewards with normalize_rewards (which updates the scaler's statistics: once per rollout).
        The rollout's rewards stay the env's."""
        if self.reward_scaler is None:
            return super().advantages(rollout)
        cfg = self.config
        rewards = self.reward_scaler.scale(rollout.rewards, rollout.episode_end, rollout.valid)
        return gae(
            rewards,
            rollout.values,
            rollout.next_values,
            rollout.terminated,
            rollout.episode_end,
            cfg.gamma,
            cfg.gae_lambda,
        )

    def update(self, rollout: RolloutBuffer, progress: float, generator: torch.Generator) -> dict[str, float]:
        """K epochs of minibatch updates on one rollout. ``progress`` in [0, 1] drives the schedules."""
        return self.update_members(OneMember(self, rollout), [progress], [generator])[0]

    @staticmethod
    def update_members(
        members: Members, progress: Sequence[float], generators: Sequence[torch.Generator]
    ) -> list[dict[str, float]]:
        """One update of every member (``rlcore.algos.members``: one policy, or N seeds stacked) on its rollout;
        member k's schedules follow ``progress[k]``, its minibatches are drawn from ``generators[k]``, its counters
        are its algorithm's. Returns each member's metrics."""
        cfg = cast(PPOConfig, members.algorithms[0].config)
        count = members.count
        lrs = [scheduled(cfg.lr, cfg.lr_schedule, p) for p in progress]
        clips = [scheduled(cfg.clip_range, cfg.clip_range_schedule, p) for p in progress]
        members.set_learning_rates(lrs)
        clip: float | torch.Tensor = clips[0] if len(set(clips)) == 1 else torch.tensor(clips).unsqueeze(1)

        records: list[torch.Tensor] = []  # per minibatch (M, 4): policy loss, value loss, entropy, clip fraction
        took: list[list[bool]] = []  # per minibatch: the members that took it
        approx_kl = torch.zeros(count)
        running, epochs = [True] * count, [0] * count
        for _ in range(cfg.n_epochs):
            orders = members.orders([cfg.batch_size] * count, generators, running)
            # algo.grad_accumulation minibatches make one optimizer step: each loss weighted by its share of the
            # group's samples, advantages normalized over the group, so the step is the one of their union.
            groups = [list(accumulation_groups(order, cfg.grad_accumulation)) for order in orders]
            for j in range(max(len(member) for member in groups)):
                # A member stopped by its target KL this epoch draws no more minibatches, nor takes steps.
                group = [
                    member[j] if j < len(member) and run else [] for member, run in zip(groups, running, strict=True)
                ]
                taking = [bool(parts) for parts in group]
                pooled = MemberBatch([torch.cat(parts) if parts else None for parts in group])
                stats = pooled.standardizer(members.take("advantages", pooled)) if cfg.normalize_advantage else None
                single = all(len(parts) <= 1 for parts in group)
                members.zero_grad()
                for batch in padded_groups(group):
                    now = [take and run for take, run in zip(batch.taking, running, strict=True)]
                    present = batch.present if all(now) and count == 1 else torch.tensor(now)
                    with members.autocast():
                        log_probs, entropy, value_loss = members.losses(batch, cfg.clip_range_vf)
                        log_ratio = log_probs - members.take("log_probs", batch)
                        ratio = log_ratio.exp()
                        with torch.no_grad():
                            kl = batch.mean((ratio - 1) - log_ratio)  # Schulman's low-variance estimator
                            approx_kl = kl if count == 1 else torch.where(present, kl, approx_kl)
                        if cfg.target_kl is not None:  # one host sync per minibatch, only with a target
                            over = (present & (kl > 1.5 * cfg.target_kl)).tolist()
                            if any(over):
                                running = [run and not stop for run, stop in zip(running, over, strict=True)]
                                taking = [take and not stop for take, stop in zip(taking, over, strict=True)]
                                now = [take and not stop for take, stop in zip(now, over, strict=True)]
                                present = torch.tensor(now)
                                if not any(running):
                                    break

                        adv = members.take("advantages", batch)
                        if stats is not None:
                            adv = stats(adv)
                        policy_loss = -batch.mean(clipped_surrogate(ratio, adv, clip, cfg.dual_clip))
                        entropy = batch.mean(entropy)
                        loss = policy_loss + cfg.vf_coef * value_loss - cfg.ent_coef * entropy
                        extra = members.extra_losses(generators)
                        if extra is not None:
                            loss = loss + extra
                    shared = loss if single else loss * shares(batch, pooled)  # each one's share of the group
                    members.backward(shared, present)
                    with torch.no_grad():
                        clipped = batch.mean(((ratio - 1).abs() > clip).float())
                        records.append(torch.stack([policy_loss, value_loss, entropy, clipped], dim=-1))
                        took.append(now)
                if not any(running):
                    break
                members.step(cfg.max_grad_norm, taking)
            if not any(running):
                break
            epochs = [done + run for done, run in zip(epochs, running, strict=True)]

        if records:  # summed in order in float64, as Python sums the floats of the minibatches
            stacked, taken = torch.stack(records).double().reshape(len(records), count, 4), torch.tensor(took)
            totals = torch.where(taken.unsqueeze(2), stacked, 0.0).cumsum(0)[-1]
            means = (totals / taken.sum(0).clamp(min=1).unsqueeze(1)).tolist()
        else:
            means = [[0.0] * 4 for _ in range(count)]
        kls = approx_kl.reshape(count).tolist()
        values, returns = members.field("values"), members.field("returns")
        metrics = []
        for k, valid in enumerate(members.valid_indices()):
            metrics.append(
                {
                    "policy_loss": means[k][0],
                    "value_loss": means[k][1],
                    "entropy": means[k][2],
                    "clip_fraction": means[k][3],
                    "approx_kl": kls[k],
                    "explained_variance": explained_variance(values[k][valid], returns[k][valid]),
                    "learning_rate": lrs[k],
                    "clip_range": clips[k],
                    "epochs": float(epochs[k]),
                }
            )
            regularizer = getattr(members.algorithms[k], "behavioral_cloning", None)
            if regularizer is not None:
                metrics[k].update(regularizer.end_update(members.env_steps()))
        return metrics


def clipped_surrogate(
    ratio: torch.Tensor, advantages: torch.Tensor, clip: float | torch.Tensor, dual_clip: float | None
) -> torch.Tensor:
    """PPO's per-sample objective (to maximize), (M, B) from ratios pi/pi_old and advantages, each (M, B) (any
    shape), with ``clip`` a float or each member's, (M, 1).

    min(r * A, clip(r, 1 - clip, 1 + clip) * A); with ``dual_clip`` c > 1, where A < 0 it is bounded below by
    c * A: max(min(r * A, clip(r) * A), c * A) (Ye et al., 2020), e.g. r = 5, A = -1, c = 3 gives -3, not -5.
    """
    clamped = ratio.clamp(1 - clip, 1 + clip) if isinstance(clip, float) else torch.clamp(ratio, 1 - clip, 1 + clip)
    surrogate = torch.min(ratio * advantages, clamped * advantages)
    if dual_clip is None:
        return surrogate
    return torch.where(advantages < 0, torch.max(surrogate, dual_clip * advantages), surrogate)
