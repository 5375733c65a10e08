"""The on-policy loop: collect a rollout -> advantages -> algorithm update -> evaluate and checkpoint.

Per iteration: ``algo.n_steps`` vector steps over ``env.num_envs`` envs, then GAE, then the
algorithm's ``update``. Every ``train.eval_every`` env steps the policy is evaluated and a
checkpoint is written; the stop conditions are checked after each evaluation and each update.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

from rlcore.algos import algorithm_class
from rlcore.buffers import RolloutBuffer
from rlcore.config import Params
from rlcore.envs import describe_space, make_vector_env
from rlcore.evaluation import Evaluator, to_env_actions
from rlcore.returns import gae
from rlcore.trainers.run import (
    EvaluationCallback,
    MetricsLog,
    Progress,
    RunDirectory,
    RunState,
    StopConditions,
    log,
    restore_rng,
    rng_state,
    seed_everything,
)

TRAINING_EVAL_SEED_OFFSET = 1_000_003
"""Periodic evaluations use ``seed + offset``: apart from training envs and from the evaluate stage."""


class EpisodeStats:
    """Undiscounted returns and lengths of the training episodes that end during a rollout."""

    def __init__(self, num_envs: int) -> None:
        self.running_return = np.zeros(num_envs)
        self.running_length = np.zeros(num_envs, dtype=np.int64)
        self.returns: list[float] = []
        self.lengths: list[int] = []

    def step(self, rewards: np.ndarray, valid: np.ndarray, ended: np.ndarray) -> None:
        self.running_return += rewards * valid
        self.running_length += valid
        if ended.any():
            self.returns += self.running_return[ended].tolist()
            self.lengths += self.running_length[ended].tolist()
            self.running_return[ended] = 0.0
            self.running_length[ended] = 0

    def drain(self) -> dict[str, float]:
        if not self.returns:
            return {}
        metrics = {
            "train/episode_return": float(np.mean(self.returns)),
            "train/episode_length": float(np.mean(self.lengths)),
        }
        self.returns, self.lengths = [], []
        return metrics


def train_on_policy(
    params: Params, run_dir: Path, on_evaluation: EvaluationCallback | None = None, resume_from: Path | None = None
) -> dict[str, Any]:
    """Train ``params.algo`` (an on-policy algorithm) into ``run_dir``; returns the train summary."""
    cfg = params.algo
    seed_everything(params.seed, params.torch_threads)
    run = RunDirectory(run_dir)
    # The env first: env.kwargs it refuses must fail before prepare() wipes the previous run's checkpoints.
    env = make_vector_env(params.env.id, params.env.num_envs, params.env.kwargs, params.env.vectorization)
    try:
        checkpoint = run.prepare(params, resume_from)
    except BaseException:
        env.close()
        raise

    obs_space, action_space = env.single_observation_space, env.single_action_space
    spaces = {"observation": describe_space(obs_space), "action": describe_space(action_space)}
    algo_cls = algorithm_class(cfg.name)
    policy = algo_cls.make_policy(obs_space, action_space, params.policy)
    algorithm = algo_cls(policy, cfg)
    evaluator = Evaluator(
        params.env.id,
        params.env.kwargs,
        params.train.eval_episodes,
        seed=params.seed + TRAINING_EVAL_SEED_OFFSET,
        vectorization=params.env.vectorization,
    )
    minibatch_generator = torch.Generator().manual_seed(params.seed)

    state = RunState(next_eval=params.train.eval_every)
    if checkpoint is not None:
        policy.load_state_dict(checkpoint.tensors["policy"])
        algorithm.load_state_dict(checkpoint.tensors["algorithm"])
        restore_rng(checkpoint.tensors["rng"], minibatch_generator)
        meta = checkpoint.meta
        state = RunState(
            checkpoint.env_steps, meta["updates"], meta["wall_seconds"], meta["next_eval"], meta["evaluations"]
        )
        log.info("resuming %s from %s at env step %d", run.root, checkpoint.path.name, state.env_steps)

    # On resume the envs restart their episodes: seeded from the step count, so a resumed run is reproducible.
    obs, _ = env.reset(seed=params.seed + state.env_steps)
    policy.obs_normalizer.update(torch.as_tensor(obs, dtype=torch.float32))
    n_steps, num_envs = cfg.n_steps, params.env.num_envs
    discrete = policy.discrete
    rollout = RolloutBuffer(
        n_steps,
        num_envs,
        tuple(obs_space.shape),
        () if discrete else tuple(action_space.shape),
        torch.int64 if discrete else torch.float32,
    )
    prev_ended = np.zeros(num_envs, dtype=bool)
    episodes = EpisodeStats(num_envs)
    stops = StopConditions(params, on_evaluation)
    progress = Progress(params.train.progress_bar, params.train.max_steps, state.env_steps)
    metrics_log = MetricsLog(run.live, checkpoint is not None, params.train.log_every, state.env_steps)
    stop_reason = stops.budget(state)
    started = time.perf_counter() - state.wall_seconds
    last_checkpoint_step = state.env_steps if checkpoint is not None else -1

    def evaluate_and_checkpoint() -> str | None:
        nonlocal last_checkpoint_step
        result = evaluator.evaluate(policy)
        state.wall_seconds = time.perf_counter() - started
        state.evaluations.append(
            {
                "env_steps": state.env_steps,
                "wall_seconds": round(state.wall_seconds, 3),
                "mean_return": result.mean_return,
                "std_return": result.std_return,
            }
        )
        tensors = {
            "policy": policy.state_dict(),
            "algorithm": algorithm.state_dict(),
            "rng": rng_state(minibatch_generator),
        }
        run.save(params, state, tensors, spaces, result)
        last_checkpoint_step = state.env_steps
        metrics_log.log(state.env_steps, {"eval/mean_return": result.mean_return, "eval/std_return": result.std_return})
        progress.evaluation(state.env_steps, result, state.env_steps / max(state.wall_seconds, 1e-9))
        return stops.after_evaluation(state, result)

    try:
        while stop_reason is None:
            next_obs = obs
            with torch.no_grad():
                for t in range(n_steps):
                    obs_t = torch.as_tensor(next_obs, dtype=torch.float32)
                    dist = policy.distribution(obs_t)
                    action = dist.sample()
                    rollout.obs[t] = obs_t
                    rollout.actions[t] = action
                    rollout.log_probs[t] = dist.log_prob(action)
                    rollout.values[t] = policy.value(obs_t)
                    next_obs, reward, terminated, truncated, _ = env.step(to_env_actions(action, action_space))
                    ended = np.logical_or(terminated, truncated)
                    valid = ~prev_ended  # a step right after an episode end only resets that env
                    rollout.rewards[t] = torch.as_tensor(reward, dtype=torch.float32)
                    rollout.terminated[t] = torch.as_tensor(terminated)
                    rollout.episode_end[t] = torch.as_tensor(ended)
                    rollout.valid[t] = torch.as_tensor(valid)
                    episodes.step(np.asarray(reward, dtype=np.float64), valid, ended)
                    prev_ended = ended
                last_value = policy.value(torch.as_tensor(next_obs, dtype=torch.float32))
                rollout.next_values[:-1] = rollout.values[1:]
                rollout.next_values[-1] = last_value
                rollout.advantages, rollout.returns = gae(
                    rollout.rewards,
                    rollout.values,
                    rollout.next_values,
                    rollout.terminated,
                    rollout.episode_end,
                    cfg.gamma,
                    cfg.gae_lambda,
                )
            obs = next_obs

            update_metrics = algorithm.update(rollout, state.env_steps / params.train.max_steps, minibatch_generator)
            policy.obs_normalizer.update(rollout.flat("obs")[rollout.flat_valid_indices()])
            state.env_steps += n_steps * num_envs
            state.updates += 1
            state.wall_seconds = time.perf_counter() - started
            metrics_log.add({f"train/{key}": value for key, value in update_metrics.items()})
            if metrics_log.due(state.env_steps):
                speed = {"train/env_steps_per_second": state.env_steps / max(state.wall_seconds, 1e-9)}
                metrics_log.flush(state.env_steps, {**episodes.drain(), **speed})
            progress.advance(state.env_steps)

            if state.env_steps >= state.next_eval:
                state.next_eval += params.train.eval_every * (
                    1 + (state.env_steps - state.next_eval) // params.train.eval_every
                )
                stop_reason = evaluate_and_checkpoint()
            else:
                stop_reason = stops.budget(state)
        if last_checkpoint_step != state.env_steps:
            evaluate_and_checkpoint()
    finally:
        progress.close()
        metrics_log.close()
        env.close()
        evaluator.close()

    summary = run.finish(state, stop_reason)
    log.info("training stopped: %s after %d env steps (%.1f s)", stop_reason, state.env_steps, state.wall_seconds)
    return summary
