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

from typing import Literal

import torch
from gymnasium import spaces
from pydantic import Field, model_validator

from rlcore.algos.base import OnPolicyAlgorithm, OnPolicyConfig, accumulation_groups
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
    capabilities = frozenset({"memory", "precision", "cuda", "action_mask", "batched_seeds", "multiagent"})

    def __init__(self, policy: ActorCritic, config: PPOConfig) -> None:
        super().__init__(policy, config)
        self.optimizer = torch.optim.Adam(policy.parameters(), lr=config.lr, eps=config.adam_eps, fused=True)
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
        cfg = self.config
        lr = scheduled(cfg.lr, cfg.lr_schedule, progress)
        clip = scheduled(cfg.clip_range, cfg.clip_range_schedule, progress)
        for group in self.optimizer.param_groups:
            group["lr"] = lr

        actions = rollout.flat("actions")
        old_log_probs, old_values = rollout.flat("log_probs"), rollout.flat("values")
        advantages, returns = rollout.flat("advantages"), rollout.flat("returns")

        totals: dict[str, float] = {"policy_loss": 0.0, "value_loss": 0.0, "entropy": 0.0, "clip_fraction": 0.0}
        approx_kl, minibatches, epochs_done, stopped_early = 0.0, 0, 0, False
        for _ in range(cfg.n_epochs):
            # algo.grad_accumulation minibatches make one optimizer step: each loss weighted by its share of the
            # group's samples, advantages normalized over the group, so the step is the one of their union.
            for batches in accumulation_groups(rollout.minibatches(cfg.batch_size, generator), cfg.grad_accumulation):
                samples = sum(int(idx.numel()) for idx in batches)
                pooled = advantages[torch.cat(batches)]
                self.optimizer.zero_grad(set_to_none=True)
                for idx in batches:
                    with self.precision.autocast():
                        features = rollout.features(self.policy, idx)  # encoded once for both heads
                        dist = self.policy.distribution_of(features, rollout.action_mask(self.policy, idx))
                        log_ratio = dist.log_prob(actions[idx]) - old_log_probs[idx]
                        ratio = log_ratio.exp()
                        with torch.no_grad():
                            approx_kl = ((ratio - 1) - log_ratio).mean().item()  # Schulman's low-variance estimator
                        if cfg.target_kl is not None and approx_kl > 1.5 * cfg.target_kl:
                            stopped_early = True
                            break

                        adv = advantages[idx]
                        if cfg.normalize_advantage and pooled.numel() > 1:  # the std of one sample is NaN
                            adv = (adv - pooled.mean()) / (pooled.std() + 1e-8)
                        policy_loss = -clipped_surrogate(ratio, adv, clip, cfg.dual_clip).mean()

                        value_loss = self.policy.value_loss_of(
                            features, returns[idx], old_values[idx], cfg.clip_range_vf
                        )
                        entropy = dist.entropy().mean()

                        loss = policy_loss + cfg.vf_coef * value_loss - cfg.ent_coef * entropy
                        if self.behavioral_cloning is not None:
                            loss = loss + self.behavioral_cloning.loss(self.policy, generator)
                    self.accumulate(loss if len(batches) == 1 else loss * (idx.numel() / samples))

                    minibatches += 1
                    totals["policy_loss"] += policy_loss.item()
                    totals["value_loss"] += value_loss.item()
                    totals["entropy"] += entropy.item()
                    totals["clip_fraction"] += ((ratio - 1).abs() > clip).float().mean().item()
                if stopped_early:
                    break
                self.apply_gradients(self.optimizer, self.policy.parameters(), cfg.max_grad_norm)
                self.gradient_steps += 1
            if stopped_early:
                break
            epochs_done += 1

        metrics = {key: value / max(minibatches, 1) for key, value in totals.items()}
        valid = rollout.flat_valid_indices()
        metrics.update(
            approx_kl=approx_kl,
            explained_variance=explained_variance(old_values[valid], returns[valid]),
            learning_rate=lr,
            clip_range=clip,
            epochs=float(epochs_done),
        )
        if self.behavioral_cloning is not None:
            metrics.update(self.behavioral_cloning.end_update(rollout.rewards.numel()))
        return metrics


def clipped_surrogate(
    ratio: torch.Tensor, advantages: torch.Tensor, clip: float | torch.Tensor, dual_clip: float | None
) -> torch.Tensor:
    """PPO's per-sample objective (to maximize), (B,) from ratios pi/pi_old and advantages, each (B,) (or (N, B) for
    N seeds, with ``clip`` a float or each seed's, (N, 1)).

    min(r * A, clip(r, 1 - clip, 1 + clip) * A); with ``dual_clip`` c > 1, where A < 0 it is bounded below by
    c * A: max(min(r * A, clip(r) * A), c * A) (Ye et al., 2020), e.g. r = 5, A = -1, c = 3 gives -3, not -5.
    """
    if isinstance(clip, torch.Tensor):  # per seed: the bounds computed in float64 as Python computes the float's
        clamped = ratio.clamp((1 - clip.double()).to(ratio.dtype), (1 + clip.double()).to(ratio.dtype))
    else:
        clamped = ratio.clamp(1 - clip, 1 + clip)
    surrogate = torch.min(ratio * advantages, clamped * advantages)
    if dual_clip is None:
        return surrogate
    return torch.where(advantages < 0, torch.max(surrogate, dual_clip * advantages), surrogate)
