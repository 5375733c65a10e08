"""IMPALA (Espeholt et al., 2018): an actor-critic learner on trajectories from lagging actors, V-trace corrected.

Actors act with a copy of the policy mu that lags the learner's pi by a few updates (the actor-learner
trainer runs them: in-process, subprocesses, or Dask tasks). For each batch of trajectories:

    V(s_0..s_T) <- the learner's critic on every observation (s_T: after the last step, for the bootstrap)
    log rho_t   <- log pi(a_t|s_t) - log mu(a_t|s_t)            (mu's log-probs travel with the trajectory)
    v_s, A_t    <- V-trace(log rho, r, V, rho_bar, c_bar)      (rlcore.objectives.returns.vtrace: value targets
                                                                and policy-gradient advantages)
    loss        =  -E[log pi(a_t|s_t) A_t] + c_v * L_value(V(s_t), v_s) / 2 - c_e * H[pi(.|s_t)]

(L_value: the squared error, or the critic's own loss for transformed or categorical value heads), the means over the
valid (non-reset) steps; one gradient step per batch.

With ``policy.memory`` the learner unrolls its recurrent core over each trajectory from the state the actor had
at its first step (``initial_state``, carried by the trajectory), resetting after the autoreset steps as the actor
did: features, values and the bootstrap value all come from that one unroll (R2D2's "stored state", no burn-in).
"""

from __future__ import annotations

import math
from typing import Literal

import torch
from gymnasium import spaces
from pydantic import Field

from rlcore.algos.base import ActorLearnerAlgorithm, ActorLearnerConfig
from rlcore.algos.ppo import PPO
from rlcore.config.sections import PolicyConfig
from rlcore.data.rollouts import TrajectoryBatch
from rlcore.nets.policies import ActorCritic
from rlcore.nets.recurrent import RecurrentActorCritic, actor_critic
from rlcore.objectives.returns import explained_variance, log_importance_weights, vtrace
from rlcore.objectives.schedules import ScheduleName, scheduled


class IMPALAConfig(ActorLearnerConfig):
    name: Literal["impala"] = "impala"
    lr: float = Field(6e-4, gt=0)
    """The optimizer's learning rate at the start of training."""
    lr_schedule: ScheduleName = "linear"
    """``linear`` anneals the learning rate to 0 at ``train.max_steps``."""
    optimizer: Literal["rmsprop", "adam"] = "rmsprop"
    """RMSprop as in the paper (decay 0.99, eps 0.01 there; ``optimizer_eps`` here) or Adam."""
    optimizer_eps: float = Field(1e-5, gt=0)
    """The optimizer's epsilon (the paper's RMSprop: 0.01)."""
    rho_clip: float = Field(1.0, gt=0)
    """rho_bar: truncates the importance weights of the TD errors and the policy gradient; .inf: no clip."""
    c_clip: float = Field(1.0, gt=0)
    """c_bar: truncates the trace coefficients; .inf: no clip."""
    vf_coef: float = Field(0.5, ge=0)
    """c_v: weight of the value loss, itself half the squared error to the V-trace targets."""
    ent_coef: float = Field(0.01, ge=0)
    """Weight of the entropy bonus: the loss subtracts ``ent_coef * H[pi(.|s)]`` (c_e); 0: no bonus."""
    max_grad_norm: float | None = Field(40.0, gt=0)
    """The gradient's global norm is clipped to this before each optimizer step; null: no clipping. The paper: 40."""
    normalize_advantage: bool = False
    """Standardize the V-trace policy-gradient advantages over the batch's valid steps."""


class IMPALA(ActorLearnerAlgorithm[IMPALAConfig, ActorCritic]):
    name = "impala"
    Config = IMPALAConfig
    action_spaces = PPO.action_spaces
    capabilities = frozenset({"memory"})

    def __init__(self, policy: ActorCritic, config: IMPALAConfig) -> None:
        super().__init__(policy, config)
        self.optimizer: torch.optim.Optimizer
        if config.optimizer == "adam":
            self.optimizer = torch.optim.Adam(policy.parameters(), lr=config.lr, eps=config.optimizer_eps)
        else:
            self.optimizer = torch.optim.RMSprop(
                policy.parameters(), lr=config.lr, alpha=0.99, eps=config.optimizer_eps, foreach=True
            )  # foreach: as A2C's (rlcore.algos.a2c.make_optimizer)

    @staticmethod
    def make_policy(
        observation_space: spaces.Space, action_space: spaces.Space, config: PolicyConfig, algo: IMPALAConfig
    ) -> ActorCritic:
        return actor_critic(observation_space, action_space, config, algo.value_head)

    def update(self, batch: TrajectoryBatch, progress: float) -> dict[str, float]:
        cfg = self.config
        lr = scheduled(cfg.lr, cfg.lr_schedule, progress)
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        steps, envs = batch.rewards.shape
        if isinstance(self.policy, RecurrentActorCritic):
            assert batch.initial_state is not None, "a recurrent policy's trajectories carry their initial state"
            reset_after = torch.cat([~batch.valid, torch.zeros(1, envs, dtype=torch.bool)])  # (T + 1, N)
            unrolled, _ = self.policy.sequence_features(batch.obs, batch.initial_state, reset_after)
            unrolled = unrolled.reshape((steps + 1) * envs, -1)
            with torch.no_grad():  # V-trace's inputs; the critic learns through its own loss below
                all_values = self.policy.value_of(unrolled.detach())
            features = unrolled[: steps * envs]
        else:
            obs = batch.obs[:-1].reshape(steps * envs, *batch.obs.shape[2:])
            with torch.no_grad():  # V-trace's inputs; the critic learns through its own loss below
                all_values = self.policy.value(batch.obs.reshape((steps + 1) * envs, *batch.obs.shape[2:]))
            features = self.policy.features(obs)  # encoded once for both heads
        all_values = all_values.reshape(steps + 1, envs)
        values = all_values[:-1]
        acted_on = batch.obs[:-1].reshape(steps * envs, *batch.obs.shape[2:])
        dist = self.policy.distribution_of(features, self.policy.action_mask(acted_on))
        actions = batch.actions.reshape(steps * envs, *batch.actions.shape[2:])
        log_probs = dist.log_prob(actions).reshape(steps, envs)
        log_rhos = log_importance_weights(dist, batch.behaviour_log_probs.reshape(-1), actions).reshape(steps, envs)
        targets = vtrace(
            log_rhos,
            batch.rewards,
            values,
            all_values[1:],
            batch.terminated,
            batch.episode_end,
            cfg.gamma,
            rho_clip=cfg.rho_clip,
            c_clip=cfg.c_clip,
        )
        valid = batch.valid
        advantages = targets.pg_advantages[valid]
        if cfg.normalize_advantage and advantages.numel() > 1:
            advantages = (advantages - advantages.mean()) / (advantages.std() + 1e-8)
        policy_loss = -(log_probs[valid] * advantages).mean()
        value_loss = 0.5 * self.policy.value_loss_of(features[valid.reshape(-1)], targets.vs[valid])
        entropy = dist.entropy().reshape(steps, envs)[valid].mean()
        loss = policy_loss + cfg.vf_coef * value_loss - cfg.ent_coef * entropy
        self.optimizer_step(self.optimizer, loss, self.policy.parameters(), cfg.max_grad_norm)
        self.gradient_steps += 1
        rhos = log_rhos.detach()[valid].exp()
        return {
            "policy_loss": policy_loss.item(),
            "value_loss": value_loss.item(),
            "entropy": entropy.item(),
            "explained_variance": explained_variance(values[valid], targets.vs[valid]),
            "mean_rho": rhos.mean().item(),
            "clipped_rho_fraction": (rhos > cfg.rho_clip).float().mean().item() if math.isfinite(cfg.rho_clip) else 0.0,
            "learning_rate": lr,
        }
