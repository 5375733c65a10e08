"""The population loop (ES, SVPG): publish the members' weights, run the algorithm's rollout tasks on a
runner, tell the algorithm the results, repeat.

    start the runner's workers (algo.runner: dev | local | dask)
    repeat:
        tasks   <- algorithm.ask(seed of (run seed, iteration), first env seed of the training range at env_steps)
        results <- runner.run(iteration, weights of algorithm.members(), tasks)    (in task order)
        algorithm.tell(tasks, results)
        count the results' env steps and episodes; evaluate and checkpoint when due (the session's)

Everything a task uses comes from the run's seed, the iteration and the task's index, so the same seed gives the
same run whatever the runner and the number of workers (ES exactly; SVPG on the ``dev`` runner). Logged beside
the algorithm's metrics: ``rollout_seconds`` (the iteration's wait for its tasks), ``worker_replacements`` and
``reissued_tasks`` (tasks run again after their worker was lost).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import numpy as np

from rlcore.algos.base import PopulationAlgorithm, PopulationConfig
from rlcore.common.seeds import training_seed
from rlcore.config.sections import Params
from rlcore.registry import algorithm_class
from rlcore.trainers.session import TrainingSession
from rlcore.trainers.sources import DataSource
from rlcore.trainers.stopping import EvaluationCallback
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
    algo_cls = algorithm_class(params.algo.name)
    assert issubclass(algo_cls, PopulationAlgorithm)
    algo_cls.check_params(params)
    with TrainingSession(
        params, run_dir, on_evaluation, resume_from, lambda *_: DataSource(), keep_finished=keep_finished
    ) as session:
        algorithm = session.algorithm
        assert isinstance(algorithm, PopulationAlgorithm)
        codec = WeightsCodec(algorithm.members()[0])
        with make_runner(params) as runner:
            stop_reason = session.stops.budget(session.state)
            while stop_reason is None:
                iteration = algorithm.iterations
                first_env_seed = training_seed(params.seed, session.state.env_steps)
                tasks = algorithm.ask(iteration_seed(params.seed, iteration), first_env_seed)
                weights = np.stack([codec.encode(member) for member in algorithm.members()])
                started = time.perf_counter()
                results = runner.run(iteration, weights, tasks)
                rollout_seconds = time.perf_counter() - started
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
                stop_reason = session.checkpoint_due_or_stop()
        return session.finish(stop_reason)
