"""The on-policy loop: collect a rollout -> advantages -> the algorithm's update, repeated.

Per iteration: ``algo.n_steps`` vector steps over ``env.num_envs`` envs, then the algorithm's advantage
estimator (GAE by default), then ``algorithm.update``. Evaluation, checkpoints, logging and stop conditions
are the session's.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, cast

import torch

from rlcore.actions import action_layout
from rlcore.algos.base import OnPolicyAlgorithm, OnPolicyConfig
from rlcore.buffers import RolloutBuffer
from rlcore.config import Params
from rlcore.observations import obs_tensor
from rlcore.policies import ActorCritic
from rlcore.trainers.session import TrainingSession
from rlcore.trainers.sources import EnvSource
from rlcore.trainers.stopping import EvaluationCallback


def train_on_policy(
    params: Params, run_dir: Path, on_evaluation: EvaluationCallback | None = None, resume_from: Path | None = None
) -> dict[str, Any]:
    """Train ``params.algo`` (an on-policy algorithm) into ``run_dir``; returns the train summary."""
    with TrainingSession(params, run_dir, on_evaluation, resume_from, lambda p, *_: EnvSource(p)) as session:
        cfg = params.algo
        assert isinstance(cfg, OnPolicyConfig) and isinstance(session.algorithm, OnPolicyAlgorithm)
        # On-policy policies are actor-critics (value() below); session.policy is typed as the base Policy.
        policy, algorithm, source = cast(ActorCritic, session.policy), session.algorithm, session.source
        n_steps, num_envs = cfg.n_steps, params.env.num_envs
        obs = obs_tensor(source.reset(session.state.env_steps))
        policy.obs_normalizer.update(obs)
        action_shape, action_dtype = action_layout(session.action_space)  # Box actions of any shape are flat
        obs_dtype = obs.dtype  # the storage dtype: uint8 frames stay uint8 (rlcore.observations)
        rollout = RolloutBuffer(
            n_steps, num_envs, tuple(session.observation_space.shape or ()), action_shape, action_dtype, obs_dtype
        )
        stop_reason = session.stops.budget(session.state)
        while stop_reason is None:
            with torch.no_grad():
                for t in range(n_steps):
                    obs_t = obs_tensor(source.stepper.obs)
                    features = policy.features(obs_t)  # encoded once for both heads
                    dist = policy.distribution_of(features)
                    action = dist.sample()
                    rollout.obs[t] = obs_t
                    rollout.actions[t] = action
                    rollout.log_probs[t] = dist.log_prob(action)
                    rollout.values[t] = policy.value_of(features)
                    step = source.stepper.step(action.numpy())
                    rollout.rewards[t] = torch.as_tensor(step.rewards, dtype=torch.float32)
                    rollout.terminated[t] = torch.as_tensor(step.terminated)
                    rollout.episode_end[t] = torch.as_tensor(step.ended)
                    rollout.valid[t] = torch.as_tensor(step.valid)
                    session.episodes.step(step.rewards, step.valid, step.ended)
                # V(s_{t+1}) is the next step's V(s_t); at an episode end that is the value of its last
                # observation (next-step autoreset), which is what a truncated episode bootstraps from.
                rollout.next_values[:-1] = rollout.values[1:]
                rollout.next_values[-1] = policy.value(obs_tensor(source.stepper.obs))
            rollout.advantages, rollout.returns = algorithm.advantages(rollout)
            session.after_update(algorithm.update(rollout, session.progress_fraction, session.generator))
            # Statistics change only between updates, so each rollout's log-probabilities stay consistent.
            if policy.obs_normalizer.enabled:
                policy.obs_normalizer.update(rollout.flat("obs")[rollout.flat_valid_indices()])
            session.after_env_steps(n_steps * num_envs)
            stop_reason = session.checkpoint_due_or_stop()
        return session.finish(stop_reason)
