"""A training session: what every trainer does around its own loop.

Set-up (seeds, env, policy, algorithm, resume), then bookkeeping the loop calls into: counting env
steps, logging update metrics, periodic evaluation + checkpoint, stop conditions, and the summary.
A trainer owns only its loop: how it collects experience and when it calls ``algorithm.update``.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from types import TracebackType
from typing import Any

import numpy as np
import torch

from rlcore.algos import algorithm_class, check_action_space
from rlcore.config import Params
from rlcore.envs import describe_space, make_vector_env
from rlcore.evaluation import Evaluator
from rlcore.trainers.run import (
    EvaluationCallback,
    MetricsLog,
    Progress,
    RunDirectory,
    RunState,
    StopConditions,
    log,
    seed_everything,
)

TRAINING_EVAL_SEED_OFFSET = 1_000_003
"""Periodic evaluations use ``seed + offset``: apart from training envs and from the evaluate stage."""


class EpisodeStats:
    """Undiscounted returns and lengths of the training episodes that end between two log rows."""

    def __init__(self, num_envs: int) -> None:
        self.running_return = np.zeros(num_envs)
        self.running_length = np.zeros(num_envs, dtype=np.int64)
        self.returns: list[float] = []
        self.lengths: list[int] = []

    def step(self, rewards: np.ndarray, valid: np.ndarray, ended: np.ndarray) -> None:
        """``valid`` is False for autoreset steps (they belong to no episode)."""
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


class TrainingSession:
    """Everything around a trainer's loop. Use as a context manager; call :meth:`finish` at the end.

    Attributes a loop uses: ``env``, ``policy``, ``algorithm``, ``state`` (counters), ``generator``
    (torch, for minibatches and sampling), ``rng`` (NumPy, for replay sampling and random actions),
    ``episodes`` and ``checkpoint`` (the one resumed from, or None).
    """

    def __init__(
        self,
        params: Params,
        run_dir: Path,
        on_evaluation: EvaluationCallback | None,
        resume_from: Path | None,
        before_prepare: Callable[[TrainingSession], None] | None = None,
    ) -> None:
        self.params = params
        seed_everything(params.seed, params.torch_threads)
        self.run = RunDirectory(run_dir)
        algo_cls = algorithm_class(params.algo.name)
        # Everything that can refuse the run comes first (env kwargs, algorithm/space fit, the policy,
        # ``before_prepare``: e.g. the dataset), so a refused run never replaces the previous one.
        self.env = make_vector_env(params.env.id, params.env.num_envs, params.env.kwargs, params.env.vectorization)
        self.observation_space = self.env.single_observation_space
        self.action_space = self.env.single_action_space
        self.dataset: Any = None
        """What ``before_prepare`` loaded (an offline run's train and validation data)."""
        try:
            check_action_space(params.algo.name, params.env.id, self.action_space)
            self.policy = algo_cls.make_policy(self.observation_space, self.action_space, params.policy, params.algo)
            if before_prepare is not None:
                before_prepare(self)
            self.checkpoint = self.run.prepare(params, resume_from)
        except BaseException:
            self.env.close()
            raise
        self.spaces = {
            "observation": describe_space(self.observation_space),
            "action": describe_space(self.action_space),
        }
        self.algorithm = algo_cls(self.policy, params.algo, self.observation_space, self.action_space)
        self.evaluator = Evaluator(
            params.env.id,
            params.env.kwargs,
            params.train.eval_episodes,
            seed=params.seed + TRAINING_EVAL_SEED_OFFSET,
            vectorization=params.env.vectorization,
        )
        self.generator = torch.Generator().manual_seed(params.seed)
        self.rng = np.random.default_rng(params.seed)
        self.state = RunState(next_eval=params.train.eval_every)
        if self.checkpoint is not None:
            self._restore()
        self.episodes = EpisodeStats(params.env.num_envs)
        self.stops = StopConditions(params, on_evaluation)
        self.progress = Progress(params.train.progress_bar, params.train.max_steps, self.state.env_steps)
        self.metrics = MetricsLog(
            self.run.live, self.checkpoint is not None, params.train.log_every, self.state.env_steps
        )
        self.validate: Callable[[], dict[str, float]] | None = None
        """Validation metrics (offline runs) computed at each checkpoint, stored in its metadata and logged."""
        self.extra_meta: dict[str, Any] = {}
        """More metadata for every checkpoint (an offline run records its dataset here)."""
        self.before_checkpoint: Callable[[int], None] | None = None
        """Called with the env step count before each checkpoint (an off-policy run saves its replay here)."""
        self._started = time.perf_counter() - self.state.wall_seconds
        self._last_checkpoint = self.state.env_steps if self.checkpoint is not None else -1

    def _restore(self) -> None:
        checkpoint = self.checkpoint
        assert checkpoint is not None
        self.policy.load_state_dict(checkpoint.tensors["policy"])
        self.algorithm.load_state_dict(checkpoint.tensors["algorithm"])
        torch.set_rng_state(checkpoint.tensors["rng"]["torch"])
        self.generator.set_state(checkpoint.tensors["rng"]["generator"])
        meta = checkpoint.meta
        self.rng.bit_generator.state = json.loads(meta["numpy_rng"])
        self.state = RunState(
            checkpoint.env_steps, meta["updates"], meta["wall_seconds"], meta["next_eval"], meta["evaluations"]
        )
        log.info("resuming %s from %s at env step %d", self.run.root, checkpoint.path.name, self.state.env_steps)

    def reset_envs(self) -> np.ndarray:
        """Reset every env; seeded from the step count, so a resumed run is itself reproducible."""
        obs, _ = self.env.reset(seed=self.params.seed + self.state.env_steps)
        return np.asarray(obs)

    @property
    def progress_fraction(self) -> float:
        """Share of the env-step budget used: drives schedules (0 at the start, 1 at ``train.max_steps``)."""
        return min(self.state.env_steps / self.params.train.max_steps, 1.0)

    def after_env_steps(self, count: int) -> None:
        self.state.env_steps += count
        self.state.wall_seconds = time.perf_counter() - self._started
        self.progress.advance(self.state.env_steps)

    def after_update(self, metrics: dict[str, float]) -> None:
        self.state.updates += 1
        self.metrics.add({f"train/{key}": value for key, value in metrics.items()})

    def checkpoint_due_or_stop(self) -> str | None:
        """Write a metrics row, evaluate and checkpoint when due; the reason to stop, if any."""
        state = self.state
        if self.metrics.due(state.env_steps):
            speed = {"train/env_steps_per_second": state.env_steps / max(state.wall_seconds, 1e-9)}
            self.metrics.flush(state.env_steps, {**self.episodes.drain(), **speed})
        if state.env_steps >= state.next_eval:
            every = self.params.train.eval_every
            state.next_eval += every * (1 + (state.env_steps - state.next_eval) // every)
            return self.evaluate_and_checkpoint()
        return self.stops.budget(state)

    def evaluate_and_checkpoint(self) -> str | None:
        state = self.state
        result = self.evaluator.evaluate(self.policy)
        validation = self.validate() if self.validate is not None else {}
        state.wall_seconds = time.perf_counter() - self._started
        state.evaluations.append(
            {
                "env_steps": state.env_steps,
                "wall_seconds": round(state.wall_seconds, 3),
                "mean_return": result.mean_return,
                "std_return": result.std_return,
                **{f"validation_{k}": v for k, v in validation.items()},
            }
        )
        if self.before_checkpoint is not None:
            self.before_checkpoint(state.env_steps)
        tensors = {
            "policy": self.policy.state_dict(),
            "algorithm": self.algorithm.state_dict(),
            "rng": {"torch": torch.get_rng_state(), "generator": self.generator.get_state()},
        }
        extra = {"numpy_rng": json.dumps(self.rng.bit_generator.state), "validation": validation, **self.extra_meta}
        self.run.save(self.params, state, tensors, self.spaces, result, extra)
        self._last_checkpoint = state.env_steps
        curves = {"eval/mean_return": result.mean_return, "eval/std_return": result.std_return}
        self.metrics.log(state.env_steps, {**curves, **{f"validation/{k}": v for k, v in validation.items()}})
        self.progress.evaluation(state.env_steps, result, state.env_steps / max(state.wall_seconds, 1e-9))
        return self.stops.after_evaluation(state, result)

    def finish(self, stop_reason: str) -> dict[str, Any]:
        """Final evaluation + checkpoint if the last one is stale, then the summary (marks the run finished)."""
        if self._last_checkpoint != self.state.env_steps:
            self.evaluate_and_checkpoint()
        self.close()
        summary = self.run.finish(self.state, stop_reason)
        log.info(
            "training stopped: %s after %d env steps (%.1f s)",
            stop_reason,
            self.state.env_steps,
            self.state.wall_seconds,
        )
        return summary

    def close(self) -> None:
        self.progress.close()
        self.metrics.close()
        self.env.close()
        self.evaluator.close()

    def __enter__(self) -> TrainingSession:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, traceback: TracebackType | None
    ) -> None:
        if kind is not None:
            self.close()
