"""Run a sweep: plan it (every check before any trial), keep ``sweep.workers`` trials running, tell Optuna.

The driver is plain Python; ``flows/sweep.py`` runs the same driver inside a Prefect flow with a task
run per trial (``submit``). Trials compute in this process when ``sweep.workers`` is 1, else in a pool
of spawned worker processes (one trial each at a time), each opening the shared storage itself.

The study counts as done when it has ``sweep.n_trials`` finished (complete or pruned) trials; several
``rlcore sweep`` processes (or machines, with an RDB storage) may work on one study at once.
"""

from __future__ import annotations

import copy
import logging
import math
import shlex
import subprocess
import sys
import time
import warnings
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, ThreadPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from multiprocessing import get_context
from pathlib import Path
from typing import Any

import optuna
from optuna.distributions import BaseDistribution
from optuna.trial import TrialState

from flows.sweep_study import (
    Heartbeat,
    check_options,
    create_study,
    decode,
    distributions,
    fail_and_retry,
    make_sampler,
    recover_stale_trials,
    storage_spec,
    study_lock,
    tell,
)
from flows.sweep_trial import TrialJob, plan_runs, reproduce_command, run_overrides, run_trial
from rlcore.config import apply_overrides, read_yaml_mapping, validate_params
from rlcore.errors import RLCoreError
from rlcore.sweep_config import SweepConfig, check_space

log = logging.getLogger("rlcore.sweep")

Execute = Callable[[], dict[str, Any]]
Submit = Callable[[TrialJob, Execute], "Future[dict[str, Any]]"]
"""``(job, execute) -> future``: how the driver starts a trial (Prefect submits ``execute`` as a task run)."""


@dataclass(frozen=True)
class SweepPlan:
    """A checked sweep: what to search, where the study lives, where trials and reports go."""

    root: Path
    params_file: str
    overrides: list[str]
    tree: dict[str, Any]
    sweep: SweepConfig
    n_trials: int | None
    storage: str
    study_name: str
    command: str
    git_revision: str | None

    @property
    def folder(self) -> Path:
        """Trials write under ``runs/sweeps/<study>/trial_<number>/``."""
        return self.root / "runs" / "sweeps" / self.study_name

    @property
    def reports(self) -> Path:
        return self.root / "reports" / "sweep"

    @property
    def distributions(self) -> dict[str, BaseDistribution]:
        return distributions(self.sweep)


def plan_sweep(params_file: str, overrides: list[str], root: Path) -> SweepPlan:
    """Load and check everything a sweep needs; raises a one-line :class:`ConfigError` before any trial."""
    path = Path(params_file) if Path(params_file).is_absolute() else root / params_file
    tree = apply_overrides(read_yaml_mapping(path), list(overrides))
    params = validate_params(copy.deepcopy(tree), params_file)
    sweep = params.sweep
    check_space(tree, sweep, params_file)
    check_options(sweep, params_file)
    n_trials = sweep.n_trials
    if sweep.sampler == "grid":  # every point once, no more
        size = math.prod(len(values) for values in sweep.grid().values())
        n_trials = size if n_trials is None else min(n_trials, size)
    name = sweep.study_name or f"{params.name}-sweep-{sweep.fingerprint(params.to_dict())}"
    return SweepPlan(
        root=root.resolve(),
        params_file=params_file,
        overrides=list(overrides),
        tree=tree,
        sweep=sweep,
        n_trials=n_trials,
        storage=storage_spec(sweep, root),
        study_name=name,
        command=shlex.join([Path(sys.argv[0]).name, *sys.argv[1:]]),
        git_revision=git_revision(root),
    )


def git_revision(root: Path) -> str | None:
    """``HEAD``'s commit, with ``+dirty`` when tracked files changed; None outside a git repository."""
    try:
        head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True, timeout=10)
        if head.returncode != 0:
            return None
        status = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"], cwd=root, capture_output=True, text=True
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return head.stdout.strip() + ("+dirty" if status.stdout.strip() else "")


class Workers:
    """Where trials compute: this process (one worker), or a pool of spawned processes (several)."""

    def __init__(self, count: int) -> None:
        self.pool = None
        if count > 1:
            self.pool = ProcessPoolExecutor(count, mp_context=get_context("spawn"), initializer=_warm_up)

    def run(self, job: TrialJob) -> dict[str, Any]:
        if self.pool is None:
            return run_trial(job)
        return self.pool.submit(run_trial, job).result()

    def close(self) -> None:
        if self.pool is not None:
            self.pool.shutdown(wait=True, cancel_futures=True)


def _warm_up() -> None:
    """Import the heavy modules (torch, gymnasium) when a worker process starts, not in its first trial."""
    import flows.sweep_trial  # noqa: F401


def next_trial(plan: SweepPlan, study: optuna.Study, heartbeat: Heartbeat) -> TrialJob | None:
    """Ask Optuna for the next trial (a queued retry first), or None when the study has enough trials."""
    with study_lock(plan.storage, plan.study_name):
        for number in recover_stale_trials(study, plan.sweep):
            log.warning("trial %d was left running by a stopped process: failed, its params are queued again", number)
        trials = study.get_trials(deepcopy=False)
        finished = sum(t.state in (TrialState.COMPLETE, TrialState.PRUNED) for t in trials)
        running = sum(t.state == TrialState.RUNNING for t in trials)
        if plan.n_trials is not None and finished + running >= plan.n_trials:
            return None
        study.sampler = make_sampler(plan.sweep, len(trials))
        with warnings.catch_warnings():  # RDB heartbeats: this process records them itself (Heartbeat)
            warnings.filterwarnings("ignore", message="Heartbeat of storage is supposed to be used")
            trial = study.ask(plan.distributions)
        heartbeat.claim(trial._trial_id)
    values = decode(plan.sweep, trial.params)
    job = TrialJob(
        storage=plan.storage,
        study_name=plan.study_name,
        trial_id=trial._trial_id,
        number=trial.number,
        tree=plan.tree,
        values=values,
        folder=str(plan.folder / f"trial_{trial.number:04d}"),
        params_file=plan.params_file,
        base_overrides=plan.overrides,
    )
    first = plan_runs(validate_params(copy.deepcopy(plan.tree), plan.params_file))[0]
    resolved = validate_params(apply_overrides(copy.deepcopy(plan.tree), run_overrides(values, first)))
    trial.set_user_attr("command", reproduce_command(job, first))
    trial.set_user_attr("sweep_command", plan.command)
    trial.set_user_attr("git_revision", plan.git_revision)
    trial.set_user_attr("params", resolved.to_dict())
    trial.set_user_attr("folder", Path(job.folder).relative_to(plan.root).as_posix())
    return job


Outcome = Callable[[], dict[str, Any]]
Dispatch = Callable[[TrialJob], Outcome]
"""``job -> outcome``: starts the trial's computation (here, or elsewhere at once) and returns a function
that waits for its outcome. ``flows/sweep.py`` dispatches trials to Dask workers as Prefect task runs."""


def execute_and_tell(
    study: optuna.Study, sweep: SweepConfig, job: TrialJob, outcome_of: Outcome, heartbeat: Heartbeat
) -> dict[str, Any]:
    """Wait for ``job``'s outcome (computed here, in a worker process or on Dask) and tell Optuna."""
    try:
        outcome = outcome_of()
    except (KeyboardInterrupt, BrokenProcessPool) as exc:
        why = "interrupted" if isinstance(exc, KeyboardInterrupt) else "its worker process died (killed?)"
        fail_and_retry(study, job.trial_id, why, sweep.max_retries)
        if isinstance(exc, KeyboardInterrupt):
            raise
        raise RLCoreError(f"trial {job.number}: {why}; its params are queued again: re-run to continue") from None
    except BaseException as exc:
        fail_and_retry(study, job.trial_id, f"{type(exc).__name__}: {exc}", 0)
        raise
    finally:
        heartbeat.release(job.trial_id)
    values = ", ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in job.values.items())
    if outcome["state"] == "complete":
        tell(study, job.number, outcome["value"])
        log.info("trial %d complete: %s %.4g (%s)", job.number, sweep.metric, outcome["value"], values)
    elif outcome["state"] == "pruned":
        tell(study, job.number, state=TrialState.PRUNED)
        log.info("trial %d pruned at step %d (%s)", job.number, outcome["step"], values)
    else:
        tell(study, job.number, state=TrialState.FAIL)
        log.warning("trial %d failed: %s", job.number, outcome["error"])
    return {"number": job.number, **outcome}


Start = Callable[[TrialJob], "Future[dict[str, Any]]"]


def drive(plan: SweepPlan, study: optuna.Study, start: Start, heartbeat: Heartbeat) -> None:
    """Keep up to ``sweep.workers`` trials running until the study has enough trials or time is up."""
    timeout = plan.sweep.timeout_seconds
    deadline = time.monotonic() + timeout if timeout is not None else None
    pending: dict[Future[dict[str, Any]], TrialJob] = {}
    try:
        while True:
            while len(pending) < plan.sweep.workers and (deadline is None or time.monotonic() < deadline):
                job = next_trial(plan, study, heartbeat)
                if job is None:
                    break
                pending[start(job)] = job
            if not pending:
                return
            done, _ = wait(pending, return_when=FIRST_COMPLETED)
            for future in done:
                pending.pop(future)
                future.result()
    except BaseException:
        if not isinstance(sys.exc_info()[1], KeyboardInterrupt):
            wait(pending)  # let the other running trials finish and be told
        raise


def run_sweep(plan: SweepPlan, submit: Submit | None = None, dispatch: Dispatch | None = None) -> dict[str, Any]:
    """Run the planned study to its end and write ``reports/sweep/``; returns a short summary.

    ``submit`` wraps each trial's wait-and-tell (Prefect: a task run per trial); ``dispatch`` computes trials
    somewhere other than this process or its worker pool (Prefect: task runs on Dask workers), up to
    ``sweep.workers`` at once, while this process keeps the heartbeats and tells Optuna.
    """
    from flows.sweep_report import write_reports

    study = create_study(plan.storage, plan.study_name, plan.sweep)
    resolved = validate_params(copy.deepcopy(plan.tree), plan.params_file)
    for key, value in {
        "command": plan.command,
        "git_revision": plan.git_revision,
        "params": resolved.to_dict(),
        "sweep": plan.sweep.model_dump(mode="json"),
    }.items():
        study.set_user_attr(key, value)
    log.info("study %s (%s): %s trials, %d worker(s)", plan.study_name, plan.storage, plan.n_trials, plan.sweep.workers)
    workers = Workers(1 if dispatch is not None else plan.sweep.workers)
    threads = ThreadPoolExecutor(plan.sweep.workers, thread_name_prefix="trial")
    try:
        with Heartbeat(study, plan.sweep.heartbeat_seconds) as heartbeat:

            def start(job: TrialJob) -> Future[dict[str, Any]]:
                outcome_of = dispatch(job) if dispatch is not None else lambda: workers.run(job)

                def execute() -> dict[str, Any]:
                    return execute_and_tell(study, plan.sweep, job, outcome_of, heartbeat)

                if submit is not None:
                    return submit(job, execute)
                if workers.pool is None and dispatch is None:  # one worker: run the trial right here
                    future: Future[dict[str, Any]] = Future()
                    future.set_result(execute())
                    return future
                return threads.submit(execute)

            drive(plan, study, start, heartbeat)
    finally:
        threads.shutdown(wait=True)
        workers.close()
    summary = write_reports(study, plan)
    log.info("%s", summary["line"])
    return summary
