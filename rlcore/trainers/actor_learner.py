"""The actor-learner loop (IMPALA): actors roll out a lagging copy of the policy, one learner updates it.

    start the runner's actors with weights version 0
    repeat:
        trajectories <- batch_trajectories of them, made with versions >= version - max_policy_lag
        algorithm.update(trajectories)          (V-trace corrects for the lag)
        version += 1; publish the weights
        count their env steps; evaluate and checkpoint when due (the session's)

The learner logs the policy lag (versions between the weights a trajectory was made with and the learner's),
the trajectories dropped for too much lag, the actors replaced, and the share of wall time it spent
updating rather than waiting for trajectories. Only ``runner: dev`` is bitwise reproducible: with real
processes the order trajectories arrive in depends on timing.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import numpy as np

from rlcore.algos.base import ActorLearnerAlgorithm, ActorLearnerConfig
from rlcore.common.seeds import training_seed
from rlcore.config.sections import Params
from rlcore.data.rollouts import TrajectoryBatch
from rlcore.nets.policy import Policy
from rlcore.trainers.session import TrainingSession
from rlcore.trainers.sources import DataSource
from rlcore.trainers.stopping import EvaluationCallback
from rlcore.workers.actors.actor import ActorSpec
from rlcore.workers.actors.runners import DevRunner, LocalRunner, Runner
from rlcore.workers.weights import WeightsCodec


def make_runner(params: Params, policy: Policy, env_steps: int) -> Runner:
    """The runner ``algo.runner`` names, its actors' envs seeded from ``env_steps`` (the run's step count
    when they start: 0, or a checkpoint's step after a resume), in the training seed range."""
    cfg = params.algo
    assert isinstance(cfg, ActorLearnerConfig)
    tree = params.model_dump(mode="json")
    num_envs = params.env.num_envs

    def make_spec(actor_id: int, incarnation: int) -> ActorSpec:
        # A replacement actor starts new episodes on seeds of its own: offset by its incarnation.
        first = training_seed(params.seed, env_steps) + (incarnation * cfg.num_actors + actor_id) * num_envs
        sampling = int(np.random.SeedSequence([params.seed, env_steps, actor_id, incarnation]).generate_state(1)[0])
        return ActorSpec(tree, actor_id, first, sampling)

    if cfg.runner == "dev":
        return DevRunner(make_spec, cfg.num_actors)
    if cfg.runner == "local":
        size = WeightsCodec(policy).size
        return LocalRunner(make_spec, cfg.num_actors, size, cfg.queue_size, cfg.actor_timeout_seconds)
    from rlcore.workers.actors.dask_runner import DaskRunner

    return DaskRunner(make_spec, cfg.num_actors, cfg.queue_size, cfg.actor_timeout_seconds, params.deploy.dask_address)


def train_actor_learner(
    params: Params,
    run_dir: Path,
    on_evaluation: EvaluationCallback | None = None,
    resume_from: Path | None = None,
    *,
    keep_finished: bool = False,
) -> dict[str, Any]:
    """Train ``params.algo`` (an actor-learner algorithm) into ``run_dir``; returns the train summary.
    ``keep_finished``: a finished run in ``run_dir`` with these train params is kept (:class:`RunFinishedError`).
    """
    with TrainingSession(
        params, run_dir, on_evaluation, resume_from, lambda *_: DataSource(), keep_finished=keep_finished
    ) as session:
        cfg = params.algo
        assert isinstance(cfg, ActorLearnerConfig) and isinstance(session.algorithm, ActorLearnerAlgorithm)
        policy, algorithm = session.policy, session.algorithm
        codec = WeightsCodec(policy)
        version = 0
        with make_runner(params, policy, session.state.env_steps) as runner:
            runner.start(codec.encode(policy), version)
            stop_reason = session.stops.budget(session.state)
            started, updating = time.perf_counter(), 0.0
            while stop_reason is None:
                trajectories = runner.collect(cfg.batch_trajectories, version - cfg.max_policy_lag)
                for trajectory in trajectories:
                    session.episodes.add(trajectory["episode_returns"], trajectory["episode_lengths"])
                batch = TrajectoryBatch.stack(trajectories)
                lag = float((version - batch.versions).float().mean())
                if policy.obs_normalizer.enabled:
                    policy.obs_normalizer.update(batch.obs[:-1][batch.valid])
                update_started = time.perf_counter()
                metrics = algorithm.update(batch, session.progress_fraction)
                version += 1
                runner.publish(codec.encode(policy), version)
                updating += time.perf_counter() - update_started
                metrics.update(
                    policy_lag=lag,
                    dropped_trajectories=float(runner.dropped),
                    actor_replacements=float(runner.replacements),
                    learner_busy_fraction=updating / max(time.perf_counter() - started, 1e-9),
                )
                session.after_update(metrics)
                session.after_env_steps(batch.env_steps)
                stop_reason = session.checkpoint_due_or_stop()
        return session.finish(stop_reason)
