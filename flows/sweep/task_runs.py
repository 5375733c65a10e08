"""Trials as Prefect task runs: the two trial executors of the sweep's flows.

| executor | task | where the trial computes |
|---|---|---|
| :class:`TaskRunExecutor` | ``sweep-trial`` | by the executor it wraps: in the task run's thread, or a worker process |
| :class:`DaskExecutor` | ``sweep-trial-on-dask`` | in the task run, on the flow's DaskTaskRunner (a Dask worker) |

Each task run is named ``trial-<number>`` (Optuna's trial number). The flow's own process asks and tells
Optuna either way (``flows/sweep/driver.py``); a task run returns the trial's :class:`TrialResult`.
"""

from __future__ import annotations

import threading
from concurrent.futures import Future

from prefect import task
from prefect.cache_policies import NO_CACHE
from prefect.futures import PrefectFuture

from flows.sweep.executors import TrialExecutor
from flows.sweep.trial import TrialJob, TrialResult, run_trial


@task(name="sweep-trial", task_run_name="trial-{number}", cache_policy=NO_CACHE)
def trial_task(number: int, job: TrialJob, executor: TrialExecutor) -> TrialResult:
    """Trial ``number`` as a task run of the sweep flow, while ``executor`` computes it."""
    return executor.submit(job).result()


@task(name="sweep-trial-on-dask", task_run_name="trial-{number}", cache_policy=NO_CACHE)
def compute_trial_task(number: int, job: TrialJob) -> TrialResult:
    """Compute trial ``number`` where the flow's task runner puts it (a Dask worker)."""
    return run_trial(job)


class TaskRunExecutor:
    """Each trial a task run of the calling flow (``sweep-trial``), computed by ``inner``."""

    def __init__(self, inner: TrialExecutor) -> None:
        self.inner = inner

    def submit(self, job: TrialJob) -> Future[TrialResult]:
        return _resolved_by(trial_task.submit(job.number, job, self.inner))

    def close(self) -> None:
        self.inner.close()


class DaskExecutor:
    """Each trial a task run (``sweep-trial-on-dask``) computed on the calling flow's task runner: a flow run on
    prefect-dask's DaskTaskRunner computes it on a Dask worker (which needs PREFECT_API_URL)."""

    def submit(self, job: TrialJob) -> Future[TrialResult]:
        return _resolved_by(compute_trial_task.submit(job.number, job))

    def close(self) -> None:
        pass


def _resolved_by(prefect_future: PrefectFuture[TrialResult]) -> Future[TrialResult]:
    """A plain future that a waiting thread resolves with the task run's result (or its exception)."""
    future: Future[TrialResult] = Future()

    def wait() -> None:
        try:
            future.set_result(prefect_future.result())
        except BaseException as exc:
            future.set_exception(exc)

    threading.Thread(target=wait, name=f"wait-{prefect_future.task_run_id}", daemon=True).start()
    return future
