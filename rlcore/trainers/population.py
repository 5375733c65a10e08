"""The population loop (ES, SVPG): publish the members' weights, run the algorithm's rollout tasks on a
runner, tell the algorithm the results, repeat.

    start the runner's workers (algo.runner: dev | local | dask)
    repeat:
        tasks   <- algorithm.ask(seed of (run seed, iteration), first env seed of the training range at env_steps)
        results <- runner.run(version, weights of algorithm.members(), tasks)    (in task order)
        algorithm.tell(tasks, results)
        count the results' env steps and episodes; evaluate and checkpoint when due (the session's)

Everything a task uses comes from the run's seed, the iteration and the task's index, so the same seed gives the
same run whatever the runner and the number of workers (ES exactly; SVPG on the ``dev`` runner). Logged beside
the algorithm's metrics: ``rollout_seconds`` (the iteration's wait for its tasks), ``worker_replacements`` and
``reissued_tasks`` (tasks run again after their worker was lost).

With ``train.seeds`` (:func:`run_population` given every seed's session) the workers start once and serve every
seed: each iteration publishes every unfinished seed's members together and runs all their tasks as one batch (each a
:class:`~rlcore.algos.population_tasks.SeedTask`), then each seed's algorithm is told its own results in its own
session, under its own torch generator state. Seed k's run is then the one-seed run with ``seed: k``, exactly
wherever that one is reproducible; the timing metrics and the worker counts are the shared batch's.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import numpy as np

from rlcore.algos.base import PopulationAlgorithm, PopulationConfig
from rlcore.algos.population_tasks import RolloutResult, RolloutTask, SeedTask
from rlcore.common.seeds import training_seed
from rlcore.config.sections import Params
from rlcore.trainers.seed_sessions import SeedSession, log_program
from rlcore.trainers.session import TrainingSession
from rlcore.trainers.sources import DataSource
from rlcore.workers.population.runners import DevRunner, LocalRunner, PopulationRunner
from rlcore.workers.weights import WeightsCodec


def make_runner(params: Params) -> PopulationRunner:
    """The runner ``algo.runner`` names, its workers built from the run's params."""
    cfg = params.algo
    assert isinstance(cfg, PopulationConfig)
    tree = params.model_dump(mode="json")
    if cfg.runner == "dev":
        return DevRunner(tree)
    if cfg.runner == "local":
        return LocalRunner(tree, cfg.num_workers, cfg.worker_timeout_seconds)
    from rlcore.workers.population.dask_runner import DaskRunner

    return DaskRunner(tree, cfg.num_workers, params.deploy.dask_address)


def iteration_seed(seed: int, iteration: int) -> int:
    """The seed of iteration ``iteration``'s tasks: independent streams per iteration, the same after a resume."""
    return int(np.random.SeedSequence([seed, iteration]).generate_state(1, dtype=np.uint64)[0])


def run_population(seeds: Sequence[SeedSession[DataSource]]) -> None:
    """The open sessions' runs (one run's, or every seed's of ``train.seeds``) on one runner until each stops."""
    runner = seeds[0].session.params.algo.runner  # type: ignore[attr-defined]
    log_program(seeds, f"sharing the {runner} runner's rollout workers")
    algorithms: dict[int, PopulationAlgorithm[Any, Any]] = {}
    for seed in seeds:
        algorithm = seed.session.algorithm
        assert isinstance(algorithm, PopulationAlgorithm)
        algorithms[seed.seed] = algorithm
    codec = WeightsCodec(algorithms[seeds[0].seed].members()[0])
    with make_runner(seeds[0].session.params) as runner:  # the workers use no seed: any seed's params build them
        for seed in seeds:
            stop_reason = seed.session.stops.budget(seed.session.state)
            if stop_reason is not None:
                seed.finish(stop_reason)
        version = 0
        while active := [seed for seed in seeds if not seed.finished]:
            asked: list[list[SeedTask]] = []
            weights: list[np.ndarray] = []
            first_member = 0
            for seed in active:
                algorithm = algorithms[seed.seed]
                with seed.own_rng():
                    tasks = algorithm.ask(
                        iteration_seed(seed.seed, algorithm.iterations),
                        training_seed(seed.seed, seed.session.state.env_steps),
                    )
                asked.append([SeedTask(seed.seed, first_member, task) for task in tasks])
                weights += [codec.encode(member) for member in algorithm.members()]
                first_member += len(algorithm.members())
            started = time.perf_counter()
            results = runner.run(version, np.stack(weights), [task for tagged in asked for task in tagged])
            rollout_seconds = time.perf_counter() - started
            version += 1
            for seed, tagged in zip(active, asked, strict=True):
                own, results = results[: len(tagged)], results[len(tagged) :]
                with seed.own_rng():
                    stop_reason = _tell(seed.session, [task.task for task in tagged], own, rollout_seconds, runner)
                if stop_reason is not None:
                    seed.finish(stop_reason)


def _tell(
    session: TrainingSession[DataSource],
    tasks: list[RolloutTask],
    results: list[RolloutResult],
    rollout_seconds: float,
    runner: PopulationRunner,
) -> str | None:
    """One seed's iteration after its tasks ran: its algorithm told the results, its steps, episodes and metrics
    counted, an evaluation and checkpoint when due; the reason to stop, if any."""
    algorithm = session.algorithm
    assert isinstance(algorithm, PopulationAlgorithm)
    for result in results:
        session.episodes.add(result.episode_returns, result.episode_lengths)
    metrics = algorithm.tell(tasks, results, session.progress_fraction)
    metrics.update(
        rollout_seconds=rollout_seconds,
        worker_replacements=float(runner.replacements),
        reissued_tasks=float(runner.reissued),
    )
    session.after_update(metrics)
    session.after_env_steps(sum(result.env_steps for result in results))
    return session.checkpoint_due_or_stop()
