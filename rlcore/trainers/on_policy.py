"""The on-policy loop: collect a rollout -> advantages (GAE) -> the algorithm's update, repeated.

Per iteration: ``algo.n_steps`` vector steps over ``env.num_envs`` envs, then GAE, then
``algorithm.update``. Evaluation, checkpoints, logging and stop conditions are the session's.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import torch

from rlcore.buffers import RolloutBuffer
from rlcore.config import Params
from rlcore.evaluation import to_env_actions
from rlcore.returns import gae
from rlcore.trainers.run import EvaluationCallback
from rlcore.trainers.session import TrainingSession


def train_on_policy(
    params: Params, run_dir: Path, on_evaluation: EvaluationCallback | None = None, resume_from: Path | None = None
) -> dict[str, Any]:
    """Train ``params.algo`` (an on-policy algorithm) into ``run_dir``; returns the train summary."""
    with TrainingSession(params, run_dir, on_evaluation, resume_from) as session:
        cfg = params.algo
        policy, algorithm, env = session.policy, session.algorithm, session.env
        n_steps, num_envs = cfg.n_steps, params.env.num_envs
        obs = session.reset_envs()
        policy.obs_normalizer.update(torch.as_tensor(obs, dtype=torch.float32))
        rollout = RolloutBuffer(
            n_steps,
            num_envs,
            tuple(session.observation_space.shape),
            () if policy.discrete else tuple(session.action_space.shape),
            torch.int64 if policy.discrete else torch.float32,
        )
        prev_ended = np.zeros(num_envs, dtype=bool)
        stop_reason = session.stops.budget(session.state)
        while stop_reason is None:
            with torch.no_grad():
                for t in range(n_steps):
                    obs_t = torch.as_tensor(obs, dtype=torch.float32)
                    dist = policy.distribution(obs_t)
                    action = dist.sample()
                    rollout.obs[t] = obs_t
                    rollout.actions[t] = action
                    rollout.log_probs[t] = dist.log_prob(action)
                    rollout.values[t] = policy.value(obs_t)
                    obs, reward, terminated, truncated, _ = env.step(to_env_actions(action, session.action_space))
                    ended = np.logical_or(terminated, truncated)
                    valid = ~prev_ended  # a step right after an episode end only resets that env
                    rollout.rewards[t] = torch.as_tensor(reward, dtype=torch.float32)
                    rollout.terminated[t] = torch.as_tensor(terminated)
                    rollout.episode_end[t] = torch.as_tensor(ended)
                    rollout.valid[t] = torch.as_tensor(valid)
                    session.episodes.step(np.asarray(reward, dtype=np.float64), valid, ended)
                    prev_ended = ended
                # V(s_{t+1}) is the next step's V(s_t); at an episode end that is the value of its last
                # observation (next-step autoreset), which is what a truncated episode bootstraps from.
                rollout.next_values[:-1] = rollout.values[1:]
                rollout.next_values[-1] = policy.value(torch.as_tensor(obs, dtype=torch.float32))
                rollout.advantages, rollout.returns = gae(
                    rollout.rewards,
                    rollout.values,
                    rollout.next_values,
                    rollout.terminated,
                    rollout.episode_end,
                    cfg.gamma,
                    cfg.gae_lambda,
                )
            session.after_update(algorithm.update(rollout, session.progress_fraction, session.generator))
            # Statistics change only between updates, so each rollout's log-probabilities stay consistent.
            if policy.obs_normalizer.enabled:
                policy.obs_normalizer.update(rollout.flat("obs")[rollout.flat_valid_indices()])
            session.after_env_steps(n_steps * num_envs)
            stop_reason = session.checkpoint_due_or_stop()
        return session.finish(stop_reason)
