"""The driver of a sweep: keep ``sweep.workers`` trials running, ask Optuna for each, tell it each result.

The driver is plain Python and runs in one process, the study's owner: it asks for trials (under the study
lock, after recovering trials of stopped processes), keeps their heartbeats, and tells Optuna each
:class:`TrialResult`. Where a trial computes is the :class:`TrialExecutor`'s business (this process, worker
processes, or Prefect task runs on Dask: ``flows/sweep/executors.py``, ``flows/sweep/task_runs.py``).

The study counts as done when it has ``sweep.n_trials`` finished (complete or pruned) trials; several
``rlcore sweep`` processes (or machines, with an RDB storage) may work on one study at once.
"""

from __future__ import annotations

import contextlib
import logging
import time
import warnings
from concurrent.futures import FIRST_COMPLETED, Future, wait
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path
from typing import Any

from optuna.trial import TrialState

from flows.sweep.executors import TrialExecutor, default_executor
from flows.sweep.plan import SweepPlan
from flows.sweep.search import decode, make_sampler
from flows.sweep.storage import asks_are_locked, study_lock
from flows.sweep.study import Heartbeat, SweepStudy
from flows.sweep.trial import TrialJob, TrialResult, plan_runs, reproduce_command, run_params, seeds_line
from rlcore.common.errors import RLCoreError
from rlcore.params import validate_params

log = logging.getLogger("rlcore.sweep")


def next_trial(plan: SweepPlan, study: SweepStudy, heartbeat: Heartbeat) -> TrialJob | None:
    """Ask Optuna for the next trial (a queued retry first), or None when the study has enough trials."""
    with study_lock(plan.storage, plan.study_name):
        for number in study.recover_stale_trials(plan.sweep, asks_are_locked(plan.storage)):
            log.warning("trial %d was left running by a stopped process: failed, its params are queued again", number)
        trials = study.study.get_trials(deepcopy=False)
        finished = sum(t.state in (TrialState.COMPLETE, TrialState.PRUNED) for t in trials)
        running = sum(t.state == TrialState.RUNNING for t in trials)
        if plan.n_trials is not None and finished + running >= plan.n_trials:
            return None
        study.study.sampler = make_sampler(plan.sweep, len(trials))
        with warnings.catch_warnings():  # RDB heartbeats: this process records them itself (Heartbeat)
            warnings.filterwarnings("ignore", message="Heartbeat of storage is supposed to be used")
            trial = study.study.ask(plan.distributions)
        trial_id = study.trial_id(trial.number)
        heartbeat.claim(trial_id)
    job = TrialJob(
        storage=plan.storage,
        study_name=plan.study_name,
        trial_id=trial_id,
        number=trial.number,
        tree=plan.tree,
        values=decode(plan.sweep, trial.params),
        folder=str(plan.folder / f"trial_{trial.number:04d}"),
        params_file=plan.params_file,
        base_overrides=plan.overrides,
    )
    first = plan_runs(validate_params(plan.tree, plan.params_file))[0]
    trial.set_user_attr("command", reproduce_command(job, first))
    trial.set_user_attr("sweep_command", plan.command)
    trial.set_user_attr("git_revision", plan.git_revision)
    trial.set_user_attr("params", run_params(job, first).to_dict())
    trial.set_user_attr("folder", Path(job.folder).relative_to(plan.root).as_posix())
    return job


def settle(
    plan: SweepPlan, study: SweepStudy, job: TrialJob, future: Future[TrialResult], heartbeat: Heartbeat
) -> None:
    """Tell Optuna how ``job``'s trial ended; a trial whose computation raised is failed and queued again."""
    sweep = plan.sweep
    try:
        result = future.result()
    except (KeyboardInterrupt, BrokenProcessPool) as exc:
        why = "interrupted" if isinstance(exc, KeyboardInterrupt) else "its worker process died (killed?)"
        study.fail_and_retry(job.trial_id, why, sweep.max_retries)
        if isinstance(exc, KeyboardInterrupt):
            raise
        raise RLCoreError(f"trial {job.number}: {why}; its params are queued again: re-run to continue") from None
    except BaseException as exc:
        study.fail_and_retry(job.trial_id, f"{type(exc).__name__}: {exc}", 0)
        raise
    finally:
        heartbeat.release(job.trial_id)
    values = ", ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in job.values.items())
    if result.state == "complete":
        study.tell(job.number, result.value)
        log.info("trial %d complete: %s %.4g (%s)", job.number, sweep.metric, result.value, values)
    elif result.state == "pruned":
        study.tell(job.number, state=TrialState.PRUNED)
        log.info("trial %d pruned at step %d (%s)", job.number, result.pruned_at, values)
    else:
        study.tell(job.number, state=TrialState.FAIL)
        log.warning("trial %d failed: %s", job.number, result.error)


def drive(plan: SweepPlan, study: SweepStudy, executor: TrialExecutor, heartbeat: Heartbeat) -> None:
    """Keep up to ``sweep.workers`` trials running until the study has enough trials or time is up."""
    timeout = plan.sweep.timeout_seconds
    deadline = time.monotonic() + timeout if timeout is not None else None
    pending: dict[Future[TrialResult], TrialJob] = {}
    try:
        while True:
            while len(pending) < plan.sweep.workers and (deadline is None or time.monotonic() < deadline):
                job = next_trial(plan, study, heartbeat)
                if job is None:
                    break
                pending[executor.submit(job)] = job
            if not pending:
                return
            done, _ = wait(pending, return_when=FIRST_COMPLETED)
            for future in done:
                settle(plan, study, pending.pop(future), future, heartbeat)
    except BaseException:
        wait(pending)  # let the other running trials end and be told (an interrupt fails them: queued again)
        for future, job in pending.items():
            with contextlib.suppress(BaseException):  # the first error is the one raised
                settle(plan, study, job, future, heartbeat)
        raise


def run_sweep(plan: SweepPlan, executor: TrialExecutor | None = None) -> dict[str, Any]:
    """Run the planned study to its end and write ``reports/sweep/``; returns a short summary.

    ``executor`` computes the trials (default: this process for ``sweep.workers: 1``, else that many worker
    processes); it is closed when the sweep ends. This process keeps the heartbeats and tells Optuna.
    """
    from flows.sweep.report import write_reports

    executor = executor if executor is not None else default_executor(plan.sweep.workers)
    try:
        study = SweepStudy.create(plan.storage, plan.study_name, plan.sweep)
        resolved = validate_params(plan.tree, plan.params_file)
        for key, value in {
            "command": plan.command,
            "git_revision": plan.git_revision,
            "params": resolved.to_dict(),
            "sweep": plan.sweep.model_dump(mode="json"),
        }.items():
            study.study.set_user_attr(key, value)
        log.info(
            "study %s (%s): %s trials, %d worker(s)", plan.study_name, plan.storage, plan.n_trials, plan.sweep.workers
        )
        seeds = seeds_line(resolved)
        if seeds is not None:
            log.info("%s", seeds)
        with Heartbeat(study.storage, plan.sweep.heartbeat_seconds) as heartbeat:
            drive(plan, study, executor, heartbeat)
    finally:
        executor.close()
    summary = write_reports(study.study, plan)
    log.info("%s", summary["line"])
    return summary
