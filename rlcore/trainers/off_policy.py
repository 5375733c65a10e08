"""The off-policy loop: act -> store in replay -> gradient steps on replay batches, repeated.

Per vector step: uniformly random actions during the first ``algo.learning_starts`` env steps, the
algorithm's exploration policy after; every ``algo.train_freq`` env steps, ``algo.gradient_steps_per_sample``
gradient steps per env step collected since the last phase (fractions carry over). Evaluation,
checkpoints, logging and stop conditions are the session's.

The replay buffer is saved beside each checkpoint (``runs/<name>/replay/step_<env_steps>.npz``, only the
latest kept), so a resumed run keeps its memory.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import torch
from gymnasium import spaces

from rlcore.config import Params
from rlcore.evaluation import to_env_actions
from rlcore.replay import ReplayBuffer
from rlcore.trainers.run import EvaluationCallback, log
from rlcore.trainers.session import TrainingSession


def replay_path(run_dir: Path, env_steps: int) -> Path:
    return Path(run_dir) / "replay" / f"step_{env_steps:010d}.npz"


def random_actions(action_space: spaces.Space, count: int, rng: np.random.Generator) -> np.ndarray:
    """Uniform actions in the policy's convention: indices from 0 (Discrete) or values in the bounds (Box)."""
    if isinstance(action_space, spaces.Discrete):
        return rng.integers(0, int(action_space.n), size=count)
    assert isinstance(action_space, spaces.Box)
    return rng.uniform(action_space.low, action_space.high, size=(count, *action_space.shape)).astype(np.float32)


def train_off_policy(
    params: Params, run_dir: Path, on_evaluation: EvaluationCallback | None = None, resume_from: Path | None = None
) -> dict[str, Any]:
    """Train ``params.algo`` (a replay-based algorithm) into ``run_dir``; returns the train summary."""
    with TrainingSession(params, run_dir, on_evaluation, resume_from) as session:
        cfg = params.algo
        policy, algorithm, env, state = session.policy, session.algorithm, session.env, session.state
        num_envs = params.env.num_envs
        discrete = isinstance(session.action_space, spaces.Discrete)
        replay = ReplayBuffer(
            cfg.buffer_size,
            tuple(session.observation_space.shape),
            () if discrete else tuple(session.action_space.shape),
            np.int64 if discrete else np.float32,
            num_envs,
            cfg.gamma,
            cfg.n_step,
        )
        if session.checkpoint is not None:
            _restore_replay(replay, session.run.root, state.env_steps)

        def save_replay(env_steps: int) -> None:
            path = replay_path(session.run.root, env_steps)
            replay.save(path, env_steps)
            for stale in path.parent.glob("step_*.npz"):
                if stale != path:
                    stale.unlink()

        session.before_checkpoint = save_replay
        obs = session.reset_envs()
        prev_ended = np.zeros(num_envs, dtype=bool)
        collected_since_update, gradient_credit = 0, 0.0
        stop_reason = session.stops.budget(state)
        while stop_reason is None:
            if state.env_steps < cfg.learning_starts:
                actions = random_actions(session.action_space, num_envs, session.rng)
            else:
                actions = algorithm.explore(
                    torch.as_tensor(obs, dtype=torch.float32), session.progress_fraction, session.generator
                ).numpy()
            next_obs, reward, terminated, truncated, _ = env.step(to_env_actions(actions, session.action_space))
            ended = np.logical_or(terminated, truncated)
            valid = ~prev_ended  # a step right after an episode end only resets that env
            replay.add(obs, actions, np.asarray(reward, dtype=np.float32), next_obs, terminated, truncated, valid)
            session.episodes.step(np.asarray(reward, dtype=np.float64), valid, ended)
            prev_ended, obs = ended, next_obs
            session.after_env_steps(num_envs)

            collected_since_update += num_envs
            if state.env_steps >= cfg.learning_starts and collected_since_update >= cfg.train_freq:
                gradient_credit += collected_since_update * cfg.gradient_steps_per_sample
                collected_since_update = 0
                if policy.obs_normalizer.enabled:
                    policy.obs_normalizer.update(torch.as_tensor(replay.sample(1024, session.rng)["obs"]))
                for _ in range(int(gradient_credit)):
                    batch = replay.sample(cfg.batch_size, session.rng)
                    session.after_update(algorithm.update(batch, session.progress_fraction))
                gradient_credit -= int(gradient_credit)
            stop_reason = session.checkpoint_due_or_stop()
        return session.finish(stop_reason)


def _restore_replay(replay: ReplayBuffer, run_dir: Path, env_steps: int) -> None:
    path = replay_path(run_dir, env_steps)
    if not path.is_file():
        log.warning("no replay buffer saved for env step %d (%s): resuming with an empty buffer", env_steps, path)
        return
    replay.load(path)
    log.info("restored %d replay transitions from %s", len(replay), path.name)
