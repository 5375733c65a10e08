"""Where trials compute, behind one interface: :class:`TrialExecutor`.

The driver (``flows/sweep/driver.py``) asks Optuna for a trial, hands its :class:`TrialJob` to an executor,
and tells Optuna the :class:`TrialResult` when the future resolves; it never knows where the trial ran.

| executor | where a trial computes |
|---|---|
| :class:`InProcessExecutor` | in the calling thread, before ``submit`` returns (``sweep.workers: 1``) |
| :class:`WorkerProcessExecutor` | in a pool of spawned worker processes, one trial each at a time |
| ``flows.sweep.task_runs.DaskExecutor`` | in Prefect task runs on the flow's DaskTaskRunner (Dask workers) |

``flows.sweep.task_runs.TaskRunExecutor`` wraps either of the first two so that each trial is a task run
of the sweep's flow. This module imports no Prefect: worker processes import it (and ``trial.py``) only.
"""

from __future__ import annotations

from concurrent.futures import Future, ProcessPoolExecutor
from multiprocessing import get_context
from typing import Protocol

from flows.sweep.trial import TrialJob, TrialResult, run_trial


class TrialExecutor(Protocol):
    """Computes trials: ``submit`` starts one and returns the future of its result; ``close`` frees the workers.

    A future raises what the trial's computation raised (a trial that fails with an ``RLCoreError`` is not an
    exception but a result with ``state="fail"``). The driver keeps at most ``sweep.workers`` trials submitted.
    """

    def submit(self, job: TrialJob) -> Future[TrialResult]: ...

    def close(self) -> None: ...


class InProcessExecutor:
    """Runs each trial in the calling thread; ``submit`` returns a future that is already resolved."""

    def submit(self, job: TrialJob) -> Future[TrialResult]:
        future: Future[TrialResult] = Future()
        try:
            future.set_result(run_trial(job))
        except BaseException as exc:  # KeyboardInterrupt too: the driver fails the trial and re-raises
            future.set_exception(exc)
        return future

    def close(self) -> None:
        pass


class WorkerProcessExecutor:
    """Runs trials in ``count`` spawned worker processes that import Optuna and rlcore but never Prefect."""

    def __init__(self, count: int) -> None:
        self.pool = ProcessPoolExecutor(count, mp_context=get_context("spawn"), initializer=_warm_up)

    def submit(self, job: TrialJob) -> Future[TrialResult]:
        return self.pool.submit(run_trial, job)

    def close(self) -> None:
        self.pool.shutdown(wait=True, cancel_futures=True)


def _warm_up() -> None:
    """Import the heavy modules (torch, gymnasium) when a worker process starts, not in its first trial."""
    import flows.sweep.trial  # noqa: F401


def default_executor(workers: int) -> TrialExecutor:
    """This process for one worker, else a pool of ``workers`` worker processes."""
    return InProcessExecutor() if workers == 1 else WorkerProcessExecutor(workers)
