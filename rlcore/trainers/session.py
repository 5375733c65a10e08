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

from rlcore.algos.base import Algorithm, OffPolicyAlgorithm, OnPolicyAlgorithm
from rlcore.common.errors import ConfigError, RLCoreError
from rlcore.common.files import shown_path
from rlcore.common.seeds import periodic_seeds
from rlcore.config.sections import Params
from rlcore.envs.curriculum import Curriculum
from rlcore.envs.vector import describe_space, settings_for
from rlcore.evaluation.evaluator import EvalResult, Evaluator
from rlcore.nets.precision import Precision, check_precision_support, copy_weights, learner_copy, training_device
from rlcore.objectives.bc_regularizer import check_demonstrations
from rlcore.registry import algorithm_class, build_algorithm, build_policy, check_action_space
from rlcore.reward_signals import check_reward_signals
from rlcore.trainers.fingerprint import train_fingerprint
from rlcore.trainers.memory_estimate import check_resources
from rlcore.trainers.metrics import EpisodeStats, MetricsLog
from rlcore.trainers.progress import Progress
from rlcore.trainers.run_directory import RunDirectory, RunState, log
from rlcore.trainers.sources import DataSource, EnvSource
from rlcore.trainers.stopping import EvaluationCallback, StopConditions
from rlcore.trainers.warm_start import warm_start_of

SourceT = TypeVar("SourceT", bound=DataSource)
SourceFactory = Callable[[Params, spaces.Space, spaces.Space], SourceT]
"""Makes a session's experience source from its params and its env's observation and action spaces."""

MAX_CONSECUTIVE_SKIPS = 100
"""Updates in a row with a non-finite loss or gradient after which a run is stopped as diverged."""
ENTROPY_COLLAPSE = 1e-3
"""Entropy (nats) below which a discrete policy is warned about as collapsed."""


def entropies(metrics: dict[str, float]) -> dict[str, float]:
    """The policy entropies an update logged: ``""`` -> ``entropy`` (one policy), a group -> ``<group>/entropy``
    (``policy.groups``: ``rlcore.trainers.on_policy`` logs each group's metrics under its name)."""
    found = {"": metrics["entropy"]} if "entropy" in metrics else {}
    for key, value in metrics.items():
        group, _, name = key.partition("/")
        if name == "entropy":
            found[group] = value
    return found


class DivergenceError(RLCoreError):
    """Training produced only non-finite losses or gradients for too long."""


def seed_everything(seed: int, threads: int) -> None:
    torch.manual_seed(seed)
    np.random.seed(seed % 2**32)
    torch.set_num_threads(threads)


def check_curriculum_support(params: Params, algo_cls: type[Algorithm[Any, Any]]) -> None:
    """A curriculum changes the trainer's own envs: on-policy and off-policy runs have them; actor-learner and
    population runs step theirs in other processes, offline runs none (one-line ``ConfigError``)."""
    if params.env.curriculum and not issubclass(algo_cls, OnPolicyAlgorithm | OffPolicyAlgorithm):
        raise ConfigError(
            f"env.curriculum: {params.algo.name} does not train on the trainer's own envs (actor processes, "
            "population workers or a dataset); curricula work with on-policy and off-policy algorithms "
            "(env.parameters work with all)"
        )


def check_device_support(params: Params, algo_cls: type[Algorithm[Any, Any]], device: torch.device) -> None:
    """Only algorithms whose trainers feed a GPU learner train on one (``cuda`` in their capabilities; params
    files are refused at load already, this guards params built in Python)."""
    if device.type != "cpu" and "cuda" not in algo_cls.capabilities:
        raise ConfigError(f"train.device: {params.algo.name} trains on the CPU only; set train.device: auto")


class TrainingSession(Generic[SourceT]):
    """Everything around a trainer's loop. Use as a context manager; call :meth:`finish` at the end.

    Attributes a loop uses: ``source`` (its experience), ``policy``, ``algorithm``, ``state`` (counters),
    ``generator`` (torch, for minibatches and sampling), ``rng`` (NumPy, for replay sampling and random
    actions), ``episodes`` (training-episode statistics) and ``checkpoint`` (the one resumed from, or None).

    With ``env.curriculum`` the session also owns the :class:`Curriculum`: the training envs and the periodic
    evaluations run under the current lesson, which advances at periodic evaluations and is saved in checkpoints.
    """

    def __init__(
        self,
        params: Params,
        run_dir: Path,
        on_evaluation: EvaluationCallback | None,
        resume_from: Path | None,
        make_source: SourceFactory[SourceT],
        *,
        seeds_in_memory: int = 1,
        label: str | None = None,
        keep_finished: bool = False,
    ) -> None:
        """``seeds_in_memory``: runs this process holds at once (``train.seeds`` batched), for the memory check;
        ``label``: what progress lines and bars name the run by (``seed 3`` in a batched run), None: nothing;
        ``keep_finished``: a finished run in ``run_dir`` with the same train params is kept, raising
        :class:`~rlcore.trainers.finished_runs.RunFinishedError` before anything is written (``train.seeds``: a
        re-run trains the seeds not yet finished); false: it is replaced by a fresh run."""
        self.params = params
        self._label = label
        seed_everything(params.seed, params.torch_threads)
        algo_cls = algorithm_class(params.algo.name)
        # Everything that can refuse the run comes first (env kwargs, algorithm/space fit, the policy, the
        # source: e.g. the dataset), so a refused run never replaces the previous one.
        # Periodic evaluations: the run's own episodes, apart from training, validation and test (rlcore.common.seeds).
        seeds = periodic_seeds(params.seed, params.train.eval_episodes)
        self.evaluator = Evaluator(
            params.env,
            len(seeds),
            seeds.start,
            max_episode_steps=params.eval.max_episode_steps,
            label="periodic evaluation",
            return_reduction=params.eval.return_reduction,
            groups=params.policy.groups,
        )
        self.observation_space = self.evaluator.env.single_observation_space
        self.action_space = self.evaluator.env.single_action_space
        self._closers: list[Callable[[], None]] = [self.evaluator.close]
        try:
            self.device = training_device(params.train)  # cuda on a machine without a GPU is refused here
            check_device_support(params, algo_cls, self.device)
            check_precision_support(params.train, params.policy.memory, self.device)  # bf16 LSTM on some CPUs
            check_action_space(params.algo.name, params.env.id, self.action_space)
            check_curriculum_support(params, algo_cls)
            check_resources(params, self.observation_space, self.action_space, seeds_in_memory)  # too large sizes
            self.policy = build_policy(
                params.algo.name, self.observation_space, self.action_space, params.policy, params.algo, params.env
            )
            self.warm_start = warm_start_of(params, self.policy, self.observation_space, self.action_space, run_dir)
            self.source = make_source(params, self.observation_space, self.action_space)
            self._closers.append(self.source.close)
            learns_from = {**self.source.fingerprint(), **(self.warm_start.fingerprint() if self.warm_start else {})}
            learns_from.update(check_demonstrations(params.algo, self.policy))  # algo.behavioral_cloning's data
            learns_from.update(check_reward_signals(params.algo, self.policy))  # algo.reward_signals.gail's
            self.run = RunDirectory(run_dir, train_fingerprint(params, learns_from))
            self.checkpoint = self.run.prepare(params, resume_from, keep_finished=keep_finished)
        except BaseException:
            self._close_resources()
            raise
        try:
            self._start(params, on_evaluation)
        except BaseException:
            self._abandon()
            raise

    def _start(self, params: Params, on_evaluation: EvaluationCallback | None) -> None:
        self.spaces = {
            "observation": describe_space(self.observation_space),
            "action": describe_space(self.action_space),
        }
        if self.checkpoint is None and self.warm_start is not None:  # before the algorithm copies it (targets)
            self.warm_start.apply(self.policy)
        # train.device: the algorithm trains self.policy, or on a GPU a copy of it there (rlcore.nets.precision);
        # acting, evaluation and checkpoints use self.policy.
        learner = learner_copy(self.policy, self.device)
        self.algorithm: Algorithm[Any, Any] = build_algorithm(params.algo.name, learner, params.algo)
        self.algorithm.compute_in(Precision(params.train.precision, self.device))  # before a resume loads its scale
        self.generator = torch.Generator().manual_seed(params.seed)
        self.rng = np.random.default_rng(params.seed)
        self.state = RunState(self.source.unit, next_eval=params.train.eval_every, next_log=params.train.log_every)
        if self.checkpoint is not None:  # a resumed run keeps its own weights (and its record of init_from)
            self._restore()
        elif self.warm_start is not None:
            self.warm_start.check_kept(self.policy)
            self.state.initialized_from = self.warm_start.record()
        self.curriculum: Curriculum | None = None
        if params.env.curriculum:
            self.curriculum = Curriculum(params.env, params.train.max_steps)
            if self.state.curriculum is not None:  # resumed: the lesson the run was in
                self.curriculum.load_state_dict(self.state.curriculum)
                log.info("in lesson %r (started at step %d)", self.curriculum.lesson.name, self.curriculum.lesson_start)
            self.state.curriculum = self.curriculum.state_dict()
            self._use_lesson()
        self.source.start(self.checkpoint is None, self.policy.obs_normalizer)
        self.episodes = EpisodeStats(params.env.rows(params.env.num_envs))  # each agent's episodes, multi-agent
        self.stops = StopConditions(params.train, on_evaluation)
        train = params.train
        self.progress = Progress(train.progress_bar, train.max_steps, self.state.steps, self.state.unit, self._label)
        resume, every = self.checkpoint is not None, params.train.log_every
        self.run.begin()  # every check passed: the first change to the run folder
        self.metrics = MetricsLog(self.run.live, resume, every, self.state.next_log)
        self._closers = [self.progress.close, self.metrics.close, *self._closers]
        self._started = time.perf_counter() - self.state.wall_seconds
        self._last_checkpoint = self.state.steps if self.checkpoint is not None else -1
        self._warned_entropy: set[str] = set()
        """The policies warned about a collapsed entropy (``""``: the one policy, else a group's name)."""
        self.checkpoint_extras: dict[str, Callable[[], dict[str, Any]]] = {}
        """More state dicts every checkpoint keeps, by name (a loop's own, e.g. self-play's pool); a resumed loop
        reads its own back from ``checkpoint.tensors[name]``."""

    def _restore(self) -> None:
        checkpoint = self.checkpoint
        assert checkpoint is not None
        self.policy.load_state_dict(checkpoint.tensors["policy"])
        copy_weights(self.policy, self.algorithm.policy)
        self.algorithm.load_state_dict(checkpoint.tensors["algorithm"])
        torch.set_rng_state(checkpoint.tensors["rng"]["torch"])
        self.generator.set_state(checkpoint.tensors["rng"]["generator"])
        self.rng.bit_generator.state = json.loads(checkpoint.meta["numpy_rng"])
        self.state = RunState.from_checkpoint(checkpoint)
        self.source.restore(self.run.root, checkpoint.step)
        unit = self.state.unit.removesuffix("s").replace("_", " ")  # "env step" / "gradient step"
        log.info("resuming %s from %s at %s %d", self.run.root, checkpoint.path.name, unit, checkpoint.step)

    def _use_lesson(self) -> None:
        """The training envs and the periodic evaluations run under the current lesson from their next reset."""
        assert self.curriculum is not None and isinstance(self.source, EnvSource)
        settings = settings_for(self.params.env, self.curriculum.parameters())
        self.source.use_settings(settings)
        self.evaluator.use_settings(settings)

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
        self._watch_health(metrics)
        self.metrics.add({f"train/{key}": value for key, value in metrics.items()})
        if self.state.unit == "gradient_steps":
            self._tick()

    def _watch_health(self, metrics: dict[str, float]) -> None:
        """Stop a diverged run with a clear error (its checkpoints so far are kept), and warn once when a
        discrete policy's entropy collapses (it then stops exploring: often a too high learning rate)."""
        algorithm, state = self.algorithm, self.state
        if algorithm.consecutive_skips >= MAX_CONSECUTIVE_SKIPS:
            last = (
                f"{self.run.checkpoints.name}/step_{self._last_checkpoint:010d}.pt"
                if self._last_checkpoint >= 0
                else None
            )
            raise DivergenceError(
                f"training diverged: {algorithm.consecutive_skips} updates in a row had a non-finite loss or gradient "
                f"(at {state.unit.replace('_', ' ')} {state.steps}); "
                + (f"the last good checkpoint is {self.run.root / last}" if last else "no checkpoint was written")
                + " (lower algo.lr?)"
            )
        if not self.policy.discrete:
            return
        for group, entropy in entropies(metrics).items():
            if entropy >= ENTROPY_COLLAPSE or group in self._warned_entropy:
                continue
            self._warned_entropy.add(group)
            whose = f"group {group}'s policy" if group else "policy"
            warning = (
                f"{whose} entropy collapsed to {entropy:.2g} nats at {state.unit.replace('_', ' ')} {state.steps}: "
                "the policy stopped exploring (learning rate too high?)"
            )
            log.warning("%s", warning)
            state.warnings.append(warning)

    def _tick(self) -> None:
        self.state.wall_seconds = time.perf_counter() - self._started
        self.progress.advance(self.state.steps)

    @property
    def evaluation_due(self) -> bool:
        """Whether :meth:`checkpoint_due_or_stop` evaluates now."""
        return self.state.steps >= self.state.next_eval

    @property
    def final_evaluation_due(self) -> bool:
        """Whether :meth:`finish` evaluates (the last checkpoint is stale)."""
        return self._last_checkpoint != self.state.steps

    def checkpoint_due_or_stop(self, result: EvalResult | None = None) -> str | None:
        """Write a metrics row, evaluate and checkpoint when due; the reason to stop, if any. ``result``: this
        evaluation's result when :attr:`evaluation_due` and the caller evaluated the policy already (the seeds of a
        batched run, together), None: the evaluator runs."""
        state = self.state
        if self.metrics.due(state.steps):
            speed = {f"train/{state.unit}_per_second": state.steps / max(state.wall_seconds, 1e-9)}
            speed["train/skipped_updates"] = float(self.algorithm.skipped_steps)
            self.metrics.flush(state.steps, {**self.episodes.drain(), **speed})
        if self.evaluation_due:
            every = self.params.train.eval_every
            state.next_eval += every * (1 + (state.steps - state.next_eval) // every)
            return self.evaluate_and_checkpoint(result)
        return self.stops.budget(state)

    def evaluate_and_checkpoint(self, result: EvalResult | None = None) -> str | None:
        """Evaluate (``result``: the evaluation already run, None: run the evaluator now), checkpoint; the reason to
        stop, if any."""
        state = self.state
        if result is None:
            result = self.evaluator.evaluate(self.policy)
        validation = self.source.validate(self.algorithm)
        state.wall_seconds = time.perf_counter() - self._started
        lesson: dict[str, Any] = {}
        lesson_curve: dict[str, float] = {}
        final_lesson = True
        if self.curriculum is not None:  # the lesson this evaluation ran under; the next one may start now
            lesson, final_lesson = {"lesson": self.curriculum.lesson.name}, self.curriculum.final
            lesson_curve = {"curriculum/lesson": float(self.curriculum.index)}
            advanced = self.curriculum.observe(state.steps, result.mean_return)
            state.curriculum = self.curriculum.state_dict()
            if advanced is not None:
                log.info("%s", advanced)
                self._use_lesson()
        state.evaluations.append(
            {
                state.unit: state.steps,
                "wall_seconds": round(state.wall_seconds, 3),
                "mean_return": result.mean_return,
                "std_return": result.std_return,
                **lesson,
                **{f"validation_{k}": v for k, v in validation.items()},
            }
        )
        # The curve's row first: a kill before the checkpoint is written resumes from the previous one, and
        # the rows after that are cut (RunDirectory), so the row is logged again, never lost or doubled.
        curves = {"eval/mean_return": result.mean_return, "eval/std_return": result.std_return, **lesson_curve}
        self.metrics.log(state.steps, {**curves, **{f"validation/{k}": v for k, v in validation.items()}})
        state.next_log = self.metrics.next_row
        self.source.save(self.run.root, state.steps)
        tensors = {
            "policy": self.policy.state_dict(),
            "algorithm": self.algorithm.state_dict(),
            "rng": {"torch": torch.get_rng_state(), "generator": self.generator.get_state()},
            **{name: state_dict() for name, state_dict in self.checkpoint_extras.items()},
        }
        extra = {
            "numpy_rng": json.dumps(self.rng.bit_generator.state),
            "validation": validation,
            **self.source.metadata(),
        }
        self.run.save(self.params, state, tensors, self.spaces, result, extra)
        self.source.after_checkpoint(self.run.root, state.steps)
        self._last_checkpoint = state.steps
        self.progress.evaluation(state.steps, result, state.steps / max(state.wall_seconds, 1e-9))
        return self.stops.after_evaluation(state, result, final_lesson)

    def finish(self, stop_reason: str, result: EvalResult | None = None) -> dict[str, Any]:
        """Final evaluation + checkpoint if the last one is stale (:attr:`final_evaluation_due`; ``result``: that
        evaluation already run, None: run it now), then the summary (marks the run finished)."""
        if self.final_evaluation_due:
            self.evaluate_and_checkpoint(result)
        self.close()
        summary = self.run.finish(self.state, stop_reason)
        self.run.close()
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
            if isinstance(error, KeyboardInterrupt):
                error.add_note(self._resume_words())
            self._abandon()

    def _resume_words(self) -> str:
        """What re-running the same command does after an interruption now (``rlcore train`` prints it): resume
        from the newest checkpoint this run wrote or resumed from, or start over when there is none."""
        run = shown_path(self.run.home)
        if getattr(self, "_last_checkpoint", -1) < 0:  # interrupted while starting, or before the first checkpoint
            return f"{run}: no checkpoint was written yet, so a re-run of the same command starts over"
        unit = self.state.unit.replace("_", " ")
        return (
            f"{run}: its checkpoint at {self._last_checkpoint:,} {unit} is kept; re-run the same command to resume "
            "from it"
        )

    def _abandon(self) -> None:
        """After an error: close everything, drop a fresh replacement that wrote no checkpoint (the run it would
        have replaced never moved), and unlock the folder."""
        self.close()
        self.run.abandon()
        self.run.close()
