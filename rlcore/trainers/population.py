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

With ``train.seeds`` (:func:`train_population_seeds`) the workers start once and serve every seed: each
iteration publishes every unfinished seed's members together and runs all their tasks as one batch (each a
:class:`~rlcore.algos.population_tasks.SeedTask`), then each seed's algorithm is told its own results in its own
session, under its own torch generator state. Seed k's run is then the one-seed run with ``seed: k``, exactly
wherever that one is reproducible; the timing metrics and the worker counts are the shared batch's.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from rlcore.algos.base import PopulationAlgorithm, PopulationConfig
from rlcore.algos.population_tasks import RolloutResult, RolloutTask, SeedTask
from rlcore.common.seeds import training_seed
from rlcore.config.sections import Params
from rlcore.registry import algorithm_class
from rlcore.trainers.seed_sessions import SeedRun, SeedSession, abandoned_on_error, open_seed_sessions
from rlcore.trainers.session import TrainingSession
from rlcore.trainers.sources import DataSource
from rlcore.trainers.stopping import EvaluationCallback
from rlcore.workers.population.runners import DevRunner, LocalRunner, PopulationRunner
from rlcore.workers.weights import WeightsCodec

log = logging.getLogger("rlcore")


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


def train_population(
    params: Params,
    run_dir: Path,
    on_evaluation: EvaluationCallback | None = None,
    resume_from: Path | None = None,
    *,
    keep_finished: bool = False,
) -> dict[str, Any]:
    """Train ``params.algo`` (a population algorithm) into ``run_dir``; returns the train summary.
    ``keep_finished``: a finished run in ``run_dir`` with these train params is kept (:class:`RunFinishedError`).
    """
    _algorithm_class(params).check_params(params)
    with TrainingSession(
        params, run_dir, on_evaluation, resume_from, lambda *_: DataSource(), keep_finished=keep_finished
    ) as session:
        return _serve([SeedSession(params.seed, session, torch.get_rng_state())])[params.seed]


def train_population_seeds(runs: list[SeedRun], on_evaluation: EvaluationCallback | None) -> None:
    """Train the seeds' runs (each into its ``run_dir``) on one runner whose workers serve every seed (see the
    module docstring). A seed whose folder holds its finished run with the same train params is kept; an
    interrupted one resumes from its latest checkpoint."""
    _algorithm_class(runs[0].params).check_params(runs[0].params)
    seeds = open_seed_sessions(runs, on_evaluation, lambda *_: DataSource())
    with abandoned_on_error(seeds):
        if seeds:
            log.info(
                "train.seeds: seeds %s share the %s runner's rollout workers",
                ", ".join(str(seed.seed) for seed in seeds),
                seeds[0].session.params.algo.runner,  # type: ignore[attr-defined]
            )
            _serve(seeds)


def _algorithm_class(params: Params) -> type[PopulationAlgorithm[Any, Any]]:
    algo_cls = algorithm_class(params.algo.name)
    assert issubclass(algo_cls, PopulationAlgorithm)
    return algo_cls


def _serve(seeds: Sequence[SeedSession[DataSource]]) -> dict[int, dict[str, Any]]:
    """Train the open sessions' runs on one runner until each stops; each seed's train summary by seed."""
    algorithms: dict[int, PopulationAlgorithm[Any, Any]] = {}
    for seed in seeds:
        algorithm = seed.session.algorithm
        assert isinstance(algorithm, PopulationAlgorithm)
        algorithms[seed.seed] = algorithm
    codec = WeightsCodec(algorithms[seeds[0].seed].members()[0])
    summaries: dict[int, dict[str, Any]] = {}
    with make_runner(seeds[0].session.params) as runner:  # the workers use no seed: any seed's params build them
        for seed in seeds:
            stop_reason = seed.session.stops.budget(seed.session.state)
            if stop_reason is not None:
                summaries[seed.seed] = _finish(seed, stop_reason)
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
                    summaries[seed.seed] = _finish(seed, stop_reason)
    return summaries


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


def _finish(seed: SeedSession[DataSource], stop_reason: str) -> dict[str, Any]:
    """The seed's final evaluation, checkpoint and summary, under its own torch generator state."""
    with seed.own_rng():
        summary = seed.session.finish(stop_reason)
    seed.finished = True
    return summary
