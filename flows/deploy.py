"""Prefect deployments of the project's flows, with schedules and parameters from params.yaml's ``deploy``.

``rlcore deploy serve`` serves them from one long-running process (Prefect's ``serve``): it registers
``training_pipeline/<name>``, ``collect/<name>``, ``sweep/<name>`` and ``retrain_offline/<name>``
(collect, then the offline branch of ``deploy.offline_params``) on the server at PREFECT_API_URL, creates their
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
from flows.retrain import retrain_offline
from flows.sweep.flow import sweep_flow
from rlcore.config.sections import ScheduleConfig
from rlcore.params import load_params


def schedules(cfg: ScheduleConfig) -> list[Schedule]:
    """The Prefect schedule of one ``deploy`` entry: a cron line, an interval, or none (on demand)."""
    if cfg.cron is not None:
        return [Cron(cfg.cron, timezone=cfg.timezone)]
    if cfg.interval_seconds is not None:
        return [Interval(timedelta(seconds=cfg.interval_seconds), timezone=cfg.timezone)]
    return []


def build_deployments(params_path: str, overrides: list[str], root: str) -> list[RunnerDeployment]:
    """One deployment per flow, each run with its params file and overrides (retrain: the offline params file)."""
    params = load_params(params_path, overrides)
    root = str(Path(root).resolve())
    params_file = str(Path(root, params_path).resolve())
    deployments = []
    # (flow, schedule, params file, overrides): the command line's overrides are for params_path only.
    flows: list[tuple[Any, ScheduleConfig, str, list[str]]] = [
        (training_pipeline, params.deploy.pipeline, params_file, overrides),
        (collect_flow, params.deploy.collect, params_file, overrides),
        (sweep_flow, params.deploy.sweep, params_file, overrides),
    ]
    offline_file = Path(root, params.deploy.offline_params)
    if offline_file.is_file():
        flows.append((retrain_offline, params.deploy.retrain, str(offline_file), []))
    for flow, cfg, flow_params, flow_overrides in flows:
        parameters: dict[str, Any] = {
            "params_path": flow_params,
            "overrides": [*flow_overrides, *cfg.overrides],
            "root": root,
        }
        deployments.append(
            flow.to_deployment(
                name=params.name,
                schedules=schedules(cfg),
                parameters=parameters,
                tags=["rlcore"],
                description=f"{flow.name} of {flow_params} (run `{params.name}`)",
                # Imported by module name in the run's subprocess: works from any working directory.
                entrypoint_type=EntrypointType.MODULE_PATH,
            )
        )
    return deployments


def serve_deployments(params_path: str, overrides: list[str], root: str) -> None:
    """Register the deployments and run their flow runs until interrupted (Ctrl-C pauses the schedules)."""
    params = load_params(params_path, overrides)
    serve(*build_deployments(params_path, overrides, root), limit=params.deploy.limit)
