"""``rlcore sweep``: a hyperparameter study as one Prefect flow run, with a task run per trial.

The flow runs the plain driver of ``flows/sweep/driver.py`` with a task run per trial, named
``trial-<number>`` (Optuna's trial number; ``flows/sweep/task_runs.py``). With ``sweep.workers`` > 1 the
task runs wait in the flow's threads while their trials compute in spawned worker processes that never
import Prefect, so no worker starts a Prefect server of its own. With ``deploy.task_runner: dask`` each
trial's task run computes on a Dask worker instead (those need PREFECT_API_URL). At the end the summary
and the trials table become artifacts.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from prefect import flow, get_run_logger
from prefect.artifacts import create_markdown_artifact, create_table_artifact

from flows.sweep.driver import run_sweep
from flows.sweep.executors import default_executor
from flows.sweep.plan import SweepPlan, plan_sweep
from flows.sweep.storage import is_journal
from flows.sweep.task_runs import DaskExecutor, TaskRunExecutor
from flows.task_runners import dask_task_runner
from rlcore.common.project import use_project_folder
from rlcore.params import validate_params


@flow(name="sweep", log_prints=True)
def sweep_flow(params_path: str = "params.yaml", overrides: list[str] | None = None, root: str = ".") -> dict[str, Any]:
    """Run the study declared in ``sweep`` of ``params_path`` (plus ``overrides``) on the project in ``root``.

    With ``deploy.task_runner: dask`` the trials run as task runs on Dask workers (``sweep.workers`` at once),
    in a subflow on the DaskTaskRunner; else in this process or ``sweep.workers`` worker processes.
    """
    overrides = list(overrides or [])
    root = str(use_project_folder(root))  # the user's modules (an env of their own) import from it
    plan = plan_sweep(params_path, overrides, Path(root))
    deploy = validate_params(plan.tree, params_path).deploy
    if deploy.task_runner == "dask":
        if deploy.dask_address and is_journal(plan.storage):
            get_run_logger().warning(
                "sweep.storage is the journal file %s: workers of the Dask cluster at %s on other machines need it "
                "on a shared file system (or set sweep.storage to a PostgreSQL URL)",
                plan.storage,
                deploy.dask_address,
            )
        on_dask = sweep_trials.with_options(task_runner=dask_task_runner(deploy))
        summary = on_dask(params_path, overrides, str(plan.root))
    else:
        summary = run_sweep(plan, TaskRunExecutor(default_executor(plan.sweep.workers)))
    _publish(plan, summary)
    return {k: v for k, v in summary.items() if k != "rows"}


@flow(name="sweep_trials")
def sweep_trials(
    params_path: str = "params.yaml", overrides: list[str] | None = None, root: str = "."
) -> dict[str, Any]:
    """The study's trials as task runs on this flow's task runner; this process asks and tells Optuna."""
    plan = plan_sweep(params_path, list(overrides or []), Path(root))
    return run_sweep(plan, DaskExecutor())


def _publish(plan: SweepPlan, summary: dict[str, Any]) -> None:
    key = re.sub(r"[^a-z0-9-]", "-", f"sweep-{plan.study_name}".lower())
    create_markdown_artifact(
        key=key, markdown=(plan.reports / "summary.md").read_text(), description="The study and its best trial"
    )
    if summary["rows"]:
        create_table_artifact(key=f"{key}-trials", table=summary["rows"], description="Every trial of the study")
