"""Sweeps: hyperparameter studies over params keys, run with Optuna (``rlcore sweep``).

| module | holds |
|---|---|
| ``plan.py`` | every check before any trial (space vs. the params model, env ids, options); the study's name |
| ``driver.py`` | keeps ``sweep.workers`` trials running; asks Optuna for each, tells it each result |
| ``executors.py`` | where trials compute, behind :class:`TrialExecutor`: this process, or worker processes |
| ``trial.py`` | one trial: its runs (seeds x envs), the pruning callback, the score; :class:`TrialResult` |
| ``study.py`` | the Optuna study with its storage: telling outcomes, stale-trial recovery, heartbeats |
| ``storage.py`` | journal file or RDB, and the lock that serializes asking for trials |
| ``search.py`` | the space as Optuna distributions; samplers and pruners |
| ``report.py`` | ``reports/sweep/``: best params, the trials table (pandas), plots, summary |
| ``task_runs.py`` | Prefect: a task run per trial, computed by an executor above or on Dask |
| ``flow.py`` | Prefect: the ``sweep`` flow (and its ``sweep_trials`` subflow on Dask) |

Importing this package imports no Prefect (worker processes import it); the flow is ``flows.sweep.flow``.
"""

from flows.sweep.driver import run_sweep
from flows.sweep.executors import InProcessExecutor, TrialExecutor, WorkerProcessExecutor, default_executor
from flows.sweep.plan import SweepPlan, plan_sweep
from flows.sweep.trial import TrialJob, TrialResult, run_trial

__all__ = [
    "InProcessExecutor",
    "SweepPlan",
    "TrialExecutor",
    "TrialJob",
    "TrialResult",
    "WorkerProcessExecutor",
    "default_executor",
    "plan_sweep",
    "run_sweep",
    "run_trial",
]
