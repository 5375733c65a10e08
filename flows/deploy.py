"""Prefect deployments of the project's flows, with schedules and parameters from params.yaml's ``deploy``.

``rlcore deploy serve`` serves them from one long-running process (Prefect's ``serve``): it registers
``training_pipeline/<name>`` and ``collect/<name>`` on the server at PREFECT_API_URL, creates their
scheduled runs, and runs each scheduled or triggered run in a subprocess. ``prefect.yaml`` registers the
same flows on a work pool for process workers instead (``prefect deploy --all``).
"""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Any

from prefect import serve
from prefect.deployments.runner import EntrypointType, RunnerDeployment
from prefect.schedules import Cron, Interval, Schedule

from flows.collect import collect_flow
from flows.pipeline import training_pipeline
from rlcore.config import ScheduleConfig, load_params


def schedules(cfg: ScheduleConfig) -> list[Schedule]:
    """The Prefect schedule of one ``deploy`` entry: a cron line, an interval, or none (on demand)."""
    if cfg.cron is not None:
        return [Cron(cfg.cron, timezone=cfg.timezone)]
    if cfg.interval_seconds is not None:
        return [Interval(timedelta(seconds=cfg.interval_seconds), timezone=cfg.timezone)]
    return []


def build_deployments(params_path: str, overrides: list[str], root: str) -> list[RunnerDeployment]:
    """``training_pipeline/<name>`` and ``collect/<name>``, each run with the params file and overrides given."""
    params = load_params(params_path, overrides)
    root = str(Path(root).resolve())
    params_file = str(Path(root, params_path).resolve())
    deployments = []
    for flow, cfg in ((training_pipeline, params.deploy.pipeline), (collect_flow, params.deploy.collect)):
        parameters: dict[str, Any] = {
            "params_path": params_file,
            "overrides": [*overrides, *cfg.overrides],
            "root": root,
        }
        deployments.append(
            flow.to_deployment(
                name=params.name,
                schedules=schedules(cfg),
                parameters=parameters,
                tags=["rlcore"],
                description=f"{flow.name} of {params_file} (run `{params.name}`)",
                # Imported by module name in the run's subprocess: works from any working directory.
                entrypoint_type=EntrypointType.MODULE_PATH,
            )
        )
    return deployments


def serve_deployments(params_path: str, overrides: list[str], root: str) -> None:
    """Register the deployments and run their flow runs until interrupted (Ctrl-C pauses the schedules)."""
    params = load_params(params_path, overrides)
    serve(*build_deployments(params_path, overrides, root), limit=params.deploy.limit)
