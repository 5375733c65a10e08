"""A training session: what every trainer does around its own loop.

Set-up (seeds, spaces, policy, the data source, resume, algorithm), then bookkeeping the loop calls
into: counting steps, logging update metrics, periodic evaluation + checkpoint, stop conditions, and
the summary. A trainer owns only its loop: how it gets experience and when it calls ``algorithm.update``.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from types import TracebackType
from typing import Any, Generic, TypeVar

import numpy as np
import torch
from gymnasium import spaces

from rlcore.algos.base import Algorithm
from rlcore.config import Params
from rlcore.envs import describe_space
from rlcore.evaluation import Evaluator
from rlcore.registry import algorithm_class, check_action_space
from rlcore.trainers.metrics import EpisodeStats, MetricsLog
from rlcore.trainers.progress import Progress
from rlcore.trainers.run_directory import RunDirectory, RunState, log, train_fingerprint
from rlcore.trainers.sources import DataSource
from rlcore.trainers.stopping import EvaluationCallback, StopConditions

TRAINING_EVAL_SEED_OFFSET = 1_000_003
"""Periodic evaluations use ``seed + offset``: apart from training envs and from the evaluate stage."""

SourceT = TypeVar("SourceT", bound=DataSource)


def seed_everything(seed: int, threads: int) -> None:
    torch.manual_seed(seed)
    np.random.seed(seed % 2**32)
    torch.set_num_threads(threads)


class TrainingSession(Generic[SourceT]):
    """Everything around a trainer's loop. Use as a context manager; call :meth:`finish` at the end.

    Attributes a loop uses: ``source`` (its experience), ``policy``, ``algorithm``, ``state`` (counters),
    ``generator`` (torch, for minibatches and sampling), ``rng`` (NumPy, for replay sampling and random
    actions), ``episodes`` (training-episode statistics) and ``checkpoint`` (the one resumed from, or None).
    """

    def __init__(
        self,
        params: Params,
        run_dir: Path,
        on_evaluation: EvaluationCallback | None,
        resume_from: Path | None,
        make_source: Callable[[Params, spaces.Space, spaces.Space], SourceT],
    ) -> None:
        self.params = params
        seed_everything(params.seed, params.torch_threads)
        algo_cls = algorithm_class(params.algo.name)
        # Everything that can refuse the run comes first (env kwargs, algorithm/space fit, the policy, the
        # source: e.g. the dataset), so a refused run never replaces the previous one.
        self.evaluator = Evaluator(
            params.env,
            params.train.eval_episodes,
            seed=params.seed + TRAINING_EVAL_SEED_OFFSET,
        )
        self.observation_space = self.evaluator.env.single_observation_space
        self.action_space = self.evaluator.env.single_action_space
        self._closers: list[Callable[[], None]] = [self.evaluator.close]
        try:
            check_action_space(params.algo.name, params.env.id, self.action_space)
            self.policy = algo_cls.make_policy(self.observation_space, self.action_space, params.policy, params.algo)
            self.source = make_source(params, self.observation_space, self.action_space)
            self._closers.append(self.source.close)
            self.run = RunDirectory(run_dir, train_fingerprint(params, self.source.reads_dataset))
            self.checkpoint = self.run.prepare(params, resume_from)
        except BaseException:
            self._close_resources()
            raise
        self.spaces = {
            "observation": describe_space(self.observation_space),
            "action": describe_space(self.action_space),
        }
        self.algorithm: Algorithm[Any, Any] = algo_cls(self.policy, params.algo)
        self.generator = torch.Generator().manual_seed(params.seed)
        self.rng = np.random.default_rng(params.seed)
        self.state = RunState(self.source.unit, next_eval=params.train.eval_every)
        if self.checkpoint is not None:
            self._restore()
        self.source.start(self.checkpoint is None, self.policy.obs_normalizer)
        self.episodes = EpisodeStats(params.env.num_envs)
        self.stops = StopConditions(params.train, on_evaluation)
        self.progress = Progress(params.train.progress_bar, params.train.max_steps, self.state.steps, self.state.unit)
        self.metrics = MetricsLog(self.run.live, self.checkpoint is not None, params.train.log_every, self.state.steps)
        self._closers = [self.progress.close, self.metrics.close, *self._closers]
        self._started = time.perf_counter() - self.state.wall_seconds
        self._last_checkpoint = self.state.steps if self.checkpoint is not None else -1

    def _restore(self) -> None:
        checkpoint = self.checkpoint
        assert checkpoint is not None
        self.policy.load_state_dict(checkpoint.tensors["policy"])
        self.algorithm.load_state_dict(checkpoint.tensors["algorithm"])
        torch.set_rng_state(checkpoint.tensors["rng"]["torch"])
        self.generator.set_state(checkpoint.tensors["rng"]["generator"])
        self.rng.bit_generator.state = json.loads(checkpoint.meta["numpy_rng"])
        self.state = RunState.from_checkpoint(checkpoint)
        self.source.restore(self.run.root, checkpoint.step)
        unit = self.state.unit.removesuffix("s").replace("_", " ")  # "env step" / "gradient step"
        log.info("resuming %s from %s at %s %d", self.run.root, checkpoint.path.name, unit, checkpoint.step)

    @property
    def progress_fraction(self) -> float:
        """Share of the step budget used: drives schedules (0 at the start, 1 at ``train.max_steps``)."""
        return min(self.state.steps / self.params.train.max_steps, 1.0)

    def after_env_steps(self, count: int) -> None:
        self.state.env_steps += count
        self._tick()

    def after_update(self, metrics: dict[str, float]) -> None:
        self.state.updates += 1
        self.state.gradient_steps = self.algorithm.gradient_steps
        self.metrics.add({f"train/{key}": value for key, value in metrics.items()})
        if self.state.unit == "gradient_steps":
            self._tick()

    def _tick(self) -> None:
        self.state.wall_seconds = time.perf_counter() - self._started
        self.progress.advance(self.state.steps)

    def checkpoint_due_or_stop(self) -> str | None:
        """Write a metrics row, evaluate and checkpoint when due; the reason to stop, if any."""
        state = self.state
        if self.metrics.due(state.steps):
            speed = {f"train/{state.unit}_per_second": state.steps / max(state.wall_seconds, 1e-9)}
            self.metrics.flush(state.steps, {**self.episodes.drain(), **speed})
        if state.steps >= state.next_eval:
            every = self.params.train.eval_every
            state.next_eval += every * (1 + (state.steps - state.next_eval) // every)
            return self.evaluate_and_checkpoint()
        return self.stops.budget(state)

    def evaluate_and_checkpoint(self) -> str | None:
        state = self.state
        result = self.evaluator.evaluate(self.policy)
        validation = self.source.validate(self.algorithm)
        state.wall_seconds = time.perf_counter() - self._started
        state.evaluations.append(
            {
                state.unit: state.steps,
                "wall_seconds": round(state.wall_seconds, 3),
                "mean_return": result.mean_return,
                "std_return": result.std_return,
                **{f"validation_{k}": v for k, v in validation.items()},
            }
        )
        self.source.save(self.run.root, state.steps)
        tensors = {
            "policy": self.policy.state_dict(),
            "algorithm": self.algorithm.state_dict(),
            "rng": {"torch": torch.get_rng_state(), "generator": self.generator.get_state()},
        }
        extra = {
            "numpy_rng": json.dumps(self.rng.bit_generator.state),
            "validation": validation,
            **self.source.metadata(),
        }
        self.run.save(self.params, state, tensors, self.spaces, result, extra)
        self._last_checkpoint = state.steps
        curves = {"eval/mean_return": result.mean_return, "eval/std_return": result.std_return}
        self.metrics.log(state.steps, {**curves, **{f"validation/{k}": v for k, v in validation.items()}})
        self.progress.evaluation(state.steps, result, state.steps / max(state.wall_seconds, 1e-9))
        return self.stops.after_evaluation(state, result)

    def finish(self, stop_reason: str) -> dict[str, Any]:
        """Final evaluation + checkpoint if the last one is stale, then the summary (marks the run finished)."""
        if self._last_checkpoint != self.state.steps:
            self.evaluate_and_checkpoint()
        self.close()
        summary = self.run.finish(self.state, stop_reason)
        log.info(
            "training stopped: %s after %d %s (%.1f s)",
            stop_reason,
            self.state.steps,
            self.state.unit.replace("_", " "),
            self.state.wall_seconds,
        )
        return summary

    def _close_resources(self) -> None:
        for close in self._closers:
            close()
        self._closers = []

    def close(self) -> None:
        self._close_resources()

    def __enter__(self) -> TrainingSession[SourceT]:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, traceback: TracebackType | None
    ) -> None:
        if kind is not None:
            self.close()
