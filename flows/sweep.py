"""``rlcore sweep``: a hyperparameter study as one Prefect flow run, with a task run per trial.

The flow runs the plain driver of ``flows/sweep_run.py`` and submits each trial as a task run named
``trial-<number>`` (Optuna's trial number). With ``sweep.workers`` > 1 the task runs wait in the flow's
threads while their trials compute in spawned worker processes that never import Prefect, so no worker
starts a Prefect server of its own. At the end the summary and the trials table become artifacts.
"""

from __future__ import annotations

import re
from concurrent.futures import Future
from pathlib import Path
from typing import Any

from prefect import flow, task
from prefect.artifacts import create_markdown_artifact, create_table_artifact
from prefect.cache_policies import NO_CACHE
from prefect.futures import PrefectFuture

from flows.sweep_run import Execute, plan_sweep, run_sweep
from flows.sweep_trial import TrialJob


@task(name="trial", task_run_name="trial-{number}", cache_policy=NO_CACHE)
def trial_task(number: int, execute: Execute) -> dict[str, Any]:
    """Run trial ``number`` to its end and tell Optuna; returns its state and value."""
    return execute()


def _submit(job: TrialJob, execute: Execute) -> Future[dict[str, Any]]:
    future: Future[dict[str, Any]] = Future()

    def done(prefect_future: PrefectFuture[dict[str, Any]]) -> None:
        try:
            future.set_result(prefect_future.result())
        except BaseException as exc:
            future.set_exception(exc)

    trial_task.submit(job.number, execute).add_done_callback(done)
    return future


@flow(name="sweep", log_prints=True)
def sweep_flow(params_path: str = "params.yaml", overrides: list[str] | None = None, root: str = ".") -> dict[str, Any]:
    """Run the study declared in ``sweep`` of ``params_path`` (plus ``overrides``) on the project in ``root``."""
    plan = plan_sweep(params_path, list(overrides or []), Path(root))
    summary = run_sweep(plan, _submit)
    key = re.sub(r"[^a-z0-9-]", "-", f"sweep-{plan.study_name}".lower())
    create_markdown_artifact(
        key=key, markdown=(plan.reports / "summary.md").read_text(), description="The study and its best trial"
    )
    if summary["rows"]:
        create_table_artifact(key=f"{key}-trials", table=summary["rows"], description="Every trial of the study")
    return {k: v for k, v in summary.items() if k != "rows"}
