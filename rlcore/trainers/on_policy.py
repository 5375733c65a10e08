"""The on-policy loop: collect a rollout -> advantages -> the algorithm's update, repeated.

Per iteration: ``algo.n_steps`` vector steps over ``env.num_envs`` envs (of a PettingZoo env: over each agent of
each copy, ``rlcore.envs.multiagent``), then the algorithm's advantage
estimator (GAE by default), with ``algo.reward_signals`` the strength-weighted sum of its advantages and each
signal's (``rlcore.reward_signals``, which then trains its own networks on the rollout), then ``algorithm.update``.
Evaluation, checkpoints, logging and stop conditions are the session's.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, cast

import torch

from rlcore.algos.base import OnPolicyAlgorithm, OnPolicyConfig
from rlcore.config.sections import Params
from rlcore.data.sequences import SequenceRollout, make_rollout
from rlcore.envs.actions import action_layout
from rlcore.envs.observations import obs_tensor
from rlcore.nets.policies import ActorCritic
from rlcore.nets.policy import reset_state
from rlcore.nets.precision import copy_weights
from rlcore.trainers.critic_rows import CriticRows
from rlcore.trainers.on_policy_groups import train_on_policy_groups
from rlcore.trainers.self_play import attach_self_play
from rlcore.trainers.session import TrainingSession
from rlcore.trainers.sources import EnvSource
from rlcore.trainers.stopping import EvaluationCallback


def train_on_policy(
    params: Params,
    run_dir: Path,
    on_evaluation: EvaluationCallback | None = None,
    resume_from: Path | None = None,
    *,
    keep_finished: bool = False,
) -> dict[str, Any]:
    """Train ``params.algo`` (an on-policy algorithm) into ``run_dir``; returns the train summary. With
    ``policy.groups``: one policy per group (``rlcore.trainers.on_policy_groups``).
    ``keep_finished``: a finished run in ``run_dir`` with these train params is kept (:class:`RunFinishedError`).
    """
    if params.policy.groups is not None:
        return train_on_policy_groups(params, run_dir, on_evaluation, resume_from, keep_finished=keep_finished)
    with TrainingSession(
        params, run_dir, on_evaluation, resume_from, lambda p, *_: EnvSource(p), keep_finished=keep_finished
    ) as session:
        cfg = params.algo
        assert isinstance(cfg, OnPolicyConfig) and isinstance(session.algorithm, OnPolicyAlgorithm)
        # On-policy policies are actor-critics (value() below); session.policy is typed as the base Policy.
        policy, algorithm, source = cast(ActorCritic, session.policy), session.algorithm, session.source
        n_steps, num_envs = cfg.n_steps, params.env.rows(params.env.num_envs)  # a multi-agent env: agents x copies
        self_play = attach_self_play(session)  # env.self_play: the opponents are this policy's snapshots
        obs = obs_tensor(source.reset(session.state.env_steps))
        policy.obs_normalizer.update(obs)
        action_shape, action_dtype = action_layout(session.action_space)  # Box actions of any shape are flat
        obs_dtype = obs.dtype  # the storage dtype: uint8 frames stay uint8 (rlcore.envs.observations)
        obs_shape = tuple(session.observation_space.shape or ())
        critic_rows = CriticRows.of(policy, source)  # policy.critic: centralized; None: the rows are the observations
        if critic_rows is not None:
            obs_shape = critic_rows.shape(obs_shape)
        rollout = make_rollout(policy, n_steps, num_envs, obs_shape, action_shape, action_dtype, obs_dtype)
        learner = algorithm.policy  # policy itself, or its copy on train.device (rlcore.nets.precision)
        state = policy.initial_state(num_envs)  # a recurrent policy's memory (None: feed-forward); episodes restart
        stop_reason = session.stops.budget(session.state)
        while stop_reason is None:
            with torch.no_grad():
                for t in range(n_steps):
                    obs_t = obs_tensor(source.stepper.obs)
                    if critic_rows is not None:
                        obs_t = critic_rows.widen(obs_t)
                    if state is not None:
                        cast(SequenceRollout, rollout).keep_state(t, state)
                    features, next_state = policy.step_features(obs_t, state)  # encoded once for both heads
                    dist = policy.distribution_of(features, policy.action_mask(obs_t))
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
                    if self_play is not None:
                        self_play.step(step.rewards, step.valid, step.ended)
                    state = reset_state(policy, next_state, ~step.valid)  # the step after a reset step starts anew
                # V(s_{t+1}) is the next step's V(s_t); at an episode end that is the value of its last
                # observation (next-step autoreset), which is what a truncated episode bootstraps from.
                rollout.next_values[:-1] = rollout.values[1:]
                last_obs = obs_tensor(source.stepper.obs)
                last_features, _ = policy.step_features(
                    last_obs if critic_rows is None else critic_rows.widen(last_obs), state
                )
                rollout.next_values[-1] = policy.value_of(last_features)
            rollout.advantages, rollout.returns = algorithm.advantages(rollout)
            signal_metrics: dict[str, float] = {}
            if algorithm.reward_signals is not None:  # the observation after the last step is s_{T} of step T - 1
                rollout.advantages, signal_metrics = algorithm.reward_signals.learn(
                    rollout, obs_tensor(source.stepper.obs), rollout.advantages, session.generator
                )
            copy_weights(policy.obs_normalizer, learner.obs_normalizer)  # updated on the acting policy below
            metrics = algorithm.update(rollout.to(session.device), session.progress_fraction, session.generator)
            copy_weights(learner, policy)  # act with the new weights
            session.after_update({**metrics, **signal_metrics, **(self_play.metrics() if self_play else {})})
            # Statistics change only between updates, so each rollout's log-probabilities stay consistent.
            if policy.obs_normalizer.enabled:
                seen = rollout.flat("obs")[rollout.flat_valid_indices()]
                policy.obs_normalizer.update(seen if critic_rows is None else critic_rows.actor_part(seen))
            session.after_env_steps(n_steps * num_envs)
            stop_reason = session.checkpoint_due_or_stop()
        return session.finish(stop_reason)
