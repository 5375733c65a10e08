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

With ``train.seeds`` (:func:`run_actor_learner` given every seed's session) the actors start once and serve every
seed: seed k is lane k of the runner (its own weights and versions; each actor process holds an actor per seed, each
with its own envs seeded as the one-seed run's and its own sampling stream), and this one learner process holds every
seed's learner, updating each in turn on its own trajectories, in its own session, under its own torch generator state.
With ``runner: dev`` seed k's run is the one-seed run with ``seed: k``, bitwise; with processes each seed's
trajectories are those its one-seed run's actors would make from the same weights, env and sampling state, and
which of them make up a batch depends on timing, as in any run with processes. ``actor_replacements`` counts the
shared actors; ``learner_busy_fraction`` is the seed's own share of the wall time.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import numpy as np

from rlcore.algos.base import ActorLearnerAlgorithm, ActorLearnerConfig
from rlcore.common.seeds import training_seed
from rlcore.config.sections import Params
from rlcore.data.rollouts import TrajectoryBatch
from rlcore.trainers.seed_sessions import SeedSession, log_program
from rlcore.trainers.sources import DataSource
from rlcore.workers.actors.actor import ActorSpec, Streams
from rlcore.workers.actors.runners import DevRunner, LocalRunner, Runner, SpecFactory
from rlcore.workers.weights import WeightsCodec


def spec_factory(lanes: Sequence[tuple[Params, int]]) -> SpecFactory:
    """The actors' specs, one per ``(params, env_steps)`` lane (one per seed): each lane's actors' envs seeded from
    its ``env_steps`` (the run's step count when they start: 0, or a checkpoint's step after a resume), in its
    seed's training seed range."""
    params = lanes[0][0]
    cfg = params.algo
    assert isinstance(cfg, ActorLearnerConfig)
    trees = [(lane_params.model_dump(mode="json"), lane_params.seed, env_steps) for lane_params, env_steps in lanes]
    num_envs = params.env.num_envs

    def make_specs(actor_id: int, incarnation: int) -> list[ActorSpec]:
        # A replacement actor starts new episodes on seeds of its own: offset by its incarnation.
        offset = (incarnation * cfg.num_actors + actor_id) * num_envs
        return [
            ActorSpec(
                tree,
                actor_id,
                training_seed(seed, env_steps) + offset,
                int(np.random.SeedSequence([seed, env_steps, actor_id, incarnation]).generate_state(1)[0]),
            )
            for tree, seed, env_steps in trees
        ]

    return make_specs


def make_runner(lanes: Sequence[tuple[Params, int]], weights_size: int, streams: Streams | None = None) -> Runner:
    """The runner ``algo.runner`` names, with one lane per ``(params, env_steps)`` (:func:`spec_factory`);
    ``weights_size``: the flat weights' length; ``streams``: each lane's torch sampling stream for in-process actors
    (``runner: dev``; None: torch's generator as it is)."""
    params = lanes[0][0]
    cfg = params.algo
    assert isinstance(cfg, ActorLearnerConfig)
    make_specs = spec_factory(lanes)
    if cfg.runner == "dev":
        return DevRunner(make_specs, cfg.num_actors, len(lanes), streams)
    if cfg.runner == "local":
        return LocalRunner(
            make_specs, cfg.num_actors, weights_size, cfg.queue_size, cfg.actor_timeout_seconds, len(lanes)
        )
    from rlcore.workers.actors.dask_runner import DaskRunner

    return DaskRunner(
        make_specs, cfg.num_actors, cfg.queue_size, cfg.actor_timeout_seconds, params.deploy.dask_address, len(lanes)
    )


class _Learner:
    """One seed's learner in :func:`_learn`: its session, the version of its published weights, and the seconds it
    spent updating."""

    def __init__(self, seed: SeedSession[DataSource]) -> None:
        self.seed = seed
        self.session = seed.session
        cfg = self.session.params.algo
        assert isinstance(cfg, ActorLearnerConfig) and isinstance(self.session.algorithm, ActorLearnerAlgorithm)
        self.cfg, self.algorithm = cfg, self.session.algorithm
        self.codec = WeightsCodec(self.session.policy)
        self.version = 0
        self.updating_seconds = 0.0

    def collect(self, runner: Runner, lane: int) -> list[dict[str, Any]]:
        """A batch of this seed's trajectories (lane ``lane``), within the policy lag."""
        return runner.collect(self.cfg.batch_trajectories, self.version - self.cfg.max_policy_lag, lane)

    def step(self, runner: Runner, lane: int, trajectories: list[dict[str, Any]], started: float) -> str | None:
        """Update on the seed's ``trajectories``, publish the weights; count, evaluate and checkpoint when due. The
        reason to stop, if any. Call under the seed's own torch generator state."""
        session, policy = self.session, self.session.policy
        for trajectory in trajectories:
            session.episodes.add(trajectory["episode_returns"], trajectory["episode_lengths"])
        batch = TrajectoryBatch.stack(trajectories)
        lag = float((self.version - batch.versions).float().mean())
        if policy.obs_normalizer.enabled:
            policy.obs_normalizer.update(batch.obs[:-1][batch.valid])
        update_started = time.perf_counter()
        metrics = self.algorithm.update(batch, session.progress_fraction)
        self.version += 1
        runner.publish(self.codec.encode(policy), self.version, lane)
        self.updating_seconds += time.perf_counter() - update_started
        metrics.update(
            policy_lag=lag,
            dropped_trajectories=float(runner.dropped[lane]),
            actor_replacements=float(runner.replacements),
            learner_busy_fraction=self.updating_seconds / max(time.perf_counter() - started, 1e-9),
        )
        session.after_update(metrics)
        session.after_env_steps(batch.env_steps)
        return session.checkpoint_due_or_stop()


def run_actor_learner(seeds: Sequence[SeedSession[DataSource]]) -> None:
    """The open sessions' runs (one run's, or every seed's of ``train.seeds``) on one runner, each a lane, until each
    stops."""
    runner = seeds[0].session.params.algo.runner  # type: ignore[attr-defined]
    log_program(seeds, f"sharing the {runner} runner's actors and one learner process")
    learners = [_Learner(seed) for seed in seeds]
    lanes = [(learner.session.params, learner.session.state.env_steps) for learner in learners]
    streams = [learner.seed.own_rng for learner in learners]
    with make_runner(lanes, learners[0].codec.size, lambda lane: streams[lane]()) as runner:
        runner.start([learner.codec.encode(learner.session.policy) for learner in learners], 0)
        for lane, learner in enumerate(learners):
            stop_reason = learner.session.stops.budget(learner.session.state)
            if stop_reason is not None:
                learner.seed.finish(stop_reason)
                runner.retire(lane)
        started = time.perf_counter()
        while not all(learner.seed.finished for learner in learners):
            for lane, learner in enumerate(learners):
                if learner.seed.finished:
                    continue
                trajectories = learner.collect(runner, lane)  # runner: dev samples in the seed's own stream
                with learner.seed.own_rng():
                    stop_reason = learner.step(runner, lane, trajectories, started)
                if stop_reason is not None:
                    learner.seed.finish(stop_reason)
                    runner.retire(lane)
