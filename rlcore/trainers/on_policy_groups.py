"""The on-policy loop for groups of agents (``policy.groups``): each group's policy acts for its agents' rows, and
each group's algorithm (PPO, A2C) learns from its rows only, with its own optimizer.

Per iteration, as ``rlcore.trainers.on_policy``'s loop: ``algo.n_steps`` vector steps over every agent of every env
copy; at each step each group's member reads its columns of its rows (``rlcore.envs.agent_groups``) and samples
their actions, and its rollout (``n_steps`` x its rows) records them. Then, group by group in ``policy.groups``
order: its advantages (GAE over its own rows), its reward signals, its update. Metrics are logged per group
(``train/<group>/policy_loss``). Evaluation, checkpoints, logging and stop conditions are the session's.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from rlcore.algos.base import OnPolicyAlgorithm
from rlcore.algos.grouped import GroupedAlgorithm
from rlcore.config.sections import Params
from rlcore.data.rollouts import RolloutBuffer
from rlcore.envs.actions import action_layout
from rlcore.envs.observations import obs_tensor
from rlcore.nets.grouped import GroupedActorCritic
from rlcore.nets.policies import ActorCritic
from rlcore.nets.precision import copy_weights
from rlcore.trainers.critic_rows import CriticRows
from rlcore.trainers.session import TrainingSession
from rlcore.trainers.sources import EnvSource
from rlcore.trainers.stopping import EvaluationCallback


@dataclass
class GroupRollout:
    """One group's side of a rollout: its member policy (acting) and algorithm (learning), its rows of the
    vector env, its columns of a row, and its rollout buffer (``n_steps`` x its rows)."""

    name: str
    policy: ActorCritic
    algorithm: OnPolicyAlgorithm[Any, Any]
    rows: torch.Tensor
    """(R,) int64: the group's rows of the vector env."""
    index: int
    rollout: RolloutBuffer

    def obs(self, policy: GroupedActorCritic, obs: torch.Tensor, critic: torch.Tensor | None) -> torch.Tensor:
        """The group's training rows from the env rows ``obs`` (N, width): (R, group width), followed by the rows'
        centralized critic inputs ``critic`` (N, critic width) when given."""
        mine = policy.member_obs(obs, self.index, self.rows)
        return mine if critic is None else torch.cat([mine, critic[self.rows].to(mine.dtype)], dim=1)


def _group_rollouts(
    session: TrainingSession[EnvSource], n_steps: int, num_envs: int, critic_rows: CriticRows | None
) -> list[GroupRollout]:
    policy, algorithm = session.policy, session.algorithm
    assert isinstance(policy, GroupedActorCritic) and isinstance(algorithm, GroupedAlgorithm)
    action_shape, action_dtype = action_layout(session.action_space)
    all_rows = policy.group_rows(num_envs)
    groups = []
    for index, group in enumerate(policy.layout.groups):
        member = policy.members[group.name]
        assert isinstance(member, ActorCritic)
        rows = all_rows[index]
        shape = tuple(group.observation_space.shape)
        if critic_rows is not None:
            shape = critic_rows.shape(shape)
        buffer = RolloutBuffer(n_steps, int(rows.numel()), shape, action_shape, action_dtype)
        groups.append(GroupRollout(group.name, member, algorithm.members[group.name], rows, index, buffer))
    return groups


def train_on_policy_groups(
    params: Params,
    run_dir: Path,
    on_evaluation: EvaluationCallback | None = None,
    resume_from: Path | None = None,
    *,
    keep_finished: bool = False,
) -> dict[str, Any]:
    """Train ``params.algo`` (PPO, A2C) with one policy per ``policy.groups`` group into ``run_dir``; returns the
    train summary. ``keep_finished``: as ``rlcore.trainers.on_policy.train_on_policy``'s."""
    with TrainingSession(
        params, run_dir, on_evaluation, resume_from, lambda p, *_: EnvSource(p), keep_finished=keep_finished
    ) as session:
        policy, algorithm, source = session.policy, session.algorithm, session.source
        assert isinstance(policy, GroupedActorCritic) and isinstance(algorithm, GroupedAlgorithm)
        n_steps, num_envs = params.algo.n_steps, params.env.rows(params.env.num_envs)  # type: ignore[attr-defined]
        critic_rows = CriticRows.of(policy, source)  # policy.critic: centralized
        groups = _group_rollouts(session, n_steps, num_envs, critic_rows)
        obs = obs_tensor(source.reset(session.state.env_steps))
        for group in groups:
            group.policy.obs_normalizer.update(group.obs(policy, obs, None))
        action_shape, action_dtype = action_layout(session.action_space)
        stop_reason = session.stops.budget(session.state)
        while stop_reason is None:
            with torch.no_grad():
                for t in range(n_steps):
                    obs_t = obs_tensor(source.stepper.obs)
                    critic = None if critic_rows is None else critic_rows.inputs()
                    actions = torch.zeros((num_envs, *action_shape), dtype=action_dtype)
                    for group in groups:
                        rollout, member_obs = group.rollout, group.obs(policy, obs_t, critic)
                        features, _ = group.policy.step_features(member_obs, None)
                        dist = group.policy.distribution_of(features, group.policy.action_mask(member_obs))
                        action = dist.sample()
                        rollout.obs[t] = member_obs
                        rollout.actions[t] = action
                        rollout.log_probs[t] = dist.log_prob(action)
                        rollout.values[t] = group.policy.value_of(features)
                        actions[group.rows] = action
                    step = source.stepper.step(actions.numpy())
                    for group in groups:
                        rows = group.rows.numpy()
                        group.rollout.rewards[t] = torch.as_tensor(step.rewards[rows], dtype=torch.float32)
                        group.rollout.terminated[t] = torch.as_tensor(step.terminated[rows])
                        group.rollout.episode_end[t] = torch.as_tensor(step.ended[rows])
                        group.rollout.valid[t] = torch.as_tensor(step.valid[rows])
                    session.episodes.step(step.rewards, step.valid, step.ended)
                last_obs = obs_tensor(source.stepper.obs)
                last_critic = None if critic_rows is None else critic_rows.inputs()
                for group in groups:  # V(s_{t+1}): the next step's V(s_t), the last from the observation after
                    rollout = group.rollout
                    rollout.next_values[:-1] = rollout.values[1:]
                    last_features, _ = group.policy.step_features(group.obs(policy, last_obs, last_critic), None)
                    rollout.next_values[-1] = group.policy.value_of(last_features)
            metrics: dict[str, float] = {}
            for group in groups:
                metrics.update(_learn(session, group, group.obs(policy, last_obs, last_critic), critic_rows))
            algorithm.count()
            session.after_update(metrics)
            session.after_env_steps(n_steps * num_envs)
            stop_reason = session.checkpoint_due_or_stop()
        return session.finish(stop_reason)


def _learn(
    session: TrainingSession[EnvSource], group: GroupRollout, last_obs: torch.Tensor, critic_rows: CriticRows | None
) -> dict[str, float]:
    """One group's advantages, reward signals and update on its rollout; its metrics as ``<group>/<key>``."""
    rollout, algorithm, learner = group.rollout, group.algorithm, group.algorithm.policy
    rollout.advantages, rollout.returns = algorithm.advantages(rollout)
    metrics: dict[str, float] = {}
    if algorithm.reward_signals is not None:
        rollout.advantages, metrics = algorithm.reward_signals.learn(
            rollout, last_obs, rollout.advantages, session.generator
        )
    copy_weights(group.policy.obs_normalizer, learner.obs_normalizer)
    metrics.update(algorithm.update(rollout.to(session.device), session.progress_fraction, session.generator))
    copy_weights(learner, group.policy)
    if group.policy.obs_normalizer.enabled:
        seen = rollout.flat("obs")[rollout.flat_valid_indices()]
        group.policy.obs_normalizer.update(seen if critic_rows is None else critic_rows.actor_part(seen))
    return {f"{group.name}/{key}": value for key, value in metrics.items()}
