"""Prefect's own scheduling and workers, as a user runs them (README, "Running on a Prefect server").

One real ``prefect server start`` for the module, and real subprocesses for everything else:

* path (b): ``prefect work-pool create`` + ``prefect deploy --all`` (prefect.yaml) + ``prefect worker start``
  in a copy of the project, then ``prefect deployment run`` of a quick training run that a process worker
  executes to the end;
* a schedule that really fires: ``rlcore deploy serve`` with a short ``deploy.collect.interval_seconds``,
  and no manual trigger, until the server's scheduler has created a run that the serving process completes
  (the kind of thing a broken scheduler, e.g. with sqlalchemy 2.1, silently stops doing).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import time
from collections.abc import Callable, Iterator
from datetime import UTC
from pathlib import Path
from typing import Any

import pytest
import yaml
from conftest import PROJECT, QUICK, RLCORE, outputs, sets
from prefect_server import PREFECT, group_alive, pointed_at, prefect_server, stop

pytestmark = pytest.mark.server

# The files a user's checkout has at its root, minus the data and results (flows/ is linked, see below).
PROJECT_FILES = ("params.yaml", "offline.yaml", "prefect.yaml", "prefect.toml", "dvc.yaml", ".dvcignore")
DEPLOYMENTS = ("training_pipeline", "collect", "retrain_offline", "sweep")


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    """One Prefect server for the module: the environment variables that point a process at it."""
    with prefect_server(tmp_path_factory.mktemp("prefect-home")) as (_url, env):
        yield env


def _tail(path: Path | None, chars: int = 4000) -> str:
    if path is None:
        return ""
    text = path.read_text(errors="replace") if path.exists() else "(no log)"
    return f"--- last {chars} characters of {path.name} ---\n{text[-chars:]}"


def _prefect(*args: str, cwd: Path, env: dict[str, str], timeout: float = 120) -> str:
    """Run the ``prefect`` CLI in ``cwd`` (wide terminal: no wrapped lines); stdout, or a failure with both streams."""
    result = subprocess.run(
        [PREFECT, *args],
        cwd=cwd,
        env={**os.environ, **env, "COLUMNS": "250"},
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert result.returncode == 0, (
        f"prefect {' '.join(args)} exited {result.returncode}:\n{result.stdout}\n{result.stderr}"
    )
    return result.stdout


def _start(command: list[str], cwd: Path, env: dict[str, str], log: Path) -> subprocess.Popen:
    """A long-running process in its own process group, its output in ``log``."""
    with open(log, "w") as out:  # the child keeps its own descriptor
        return subprocess.Popen(
            command,
            cwd=cwd,
            env={**os.environ, **env},
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


def _poll(
    check: Callable[[], Any],
    timeout: float,
    what: str,
    log: Path | None = None,
    process: subprocess.Popen | None = None,
) -> Any:
    """``check()`` every second until it returns something truthy; fails after ``timeout`` s or if ``process`` exits."""
    deadline = time.monotonic() + timeout
    while True:
        result = check()
        if result:
            return result
        if process is not None and process.poll() is not None:
            pytest.fail(f"{what}: the process exited {process.returncode} first\n{_tail(log)}")
        if time.monotonic() > deadline:
            pytest.fail(f"{what}: not after {timeout} s\n{_tail(log)}")
        time.sleep(1)


def _client():
    from prefect.client.orchestration import get_client

    return get_client(sync_client=True)


def _deployment(name: str):
    from prefect.exceptions import ObjectNotFound

    with _client() as client:
        try:
            return client.read_deployment_by_name(name)
        except ObjectNotFound:
            return None


def _runs_of(deployment_id) -> list:
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterDeploymentId

    with _client() as client:
        return client.read_flow_runs(
            flow_run_filter=FlowRunFilter(deployment_id=FlowRunFilterDeploymentId(any_=[deployment_id]))
        )


def _scheduled_by(run, schedule_id) -> bool:
    """Created by the server's scheduler from this schedule (not by `prefect deployment run` or run_deployment)."""
    created_by = run.created_by
    return bool(
        run.auto_scheduled and created_by is not None and created_by.type == "SCHEDULE" and created_by.id == schedule_id
    )


def test_prefect_yaml_deploys_on_a_work_pool_and_a_process_worker_runs_it(server: dict[str, str], tmp_path: Path):
    project = tmp_path / "project"
    project.mkdir()
    for name in PROJECT_FILES:
        shutil.copy(PROJECT / name, project / name)
    # prefect.yaml's entrypoints are file paths (flows/pipeline.py:training_pipeline), read by `prefect deploy` and by
    # the worker's flow run from the recorded working directory: the editable install alone does not do, the folder
    # needs flows/ as a checkout has it. A link, not a copy: one copy of the code, the one the install imports too.
    (project / "flows").symlink_to(PROJECT / "flows", target_is_directory=True)
    worker_log = tmp_path / "worker.log"

    with pointed_at(server):
        _prefect("work-pool", "create", "rlcore", "--type", "process", cwd=project, env=server)
        # --no-prompt: in a terminal, prefect.yaml having no pull step, `prefect deploy` asks per deployment whether
        # workers should pull the code from remote storage (default yes); no means this folder, as --no-prompt does.
        deployed = _prefect("--no-prompt", "deploy", "--all", cwd=project, env=server)

        # Four deployments on the pool; the cron line of params.yaml's deploy.pipeline on training_pipeline only.
        cron = yaml.safe_load((PROJECT / "params.yaml").read_text())["deploy"]["pipeline"]["cron"]
        registered = {name: _deployment(f"{name}/ppo-cartpole") for name in DEPLOYMENTS}
        assert all(registered.values()), f"not registered: {registered}\n{deployed}"
        with _client() as client:
            on_the_pool = [d for d in client.read_deployments() if d.work_pool_name == "rlcore"]
        assert len(on_the_pool) == 4, [d.name for d in on_the_pool]
        pipeline = registered["training_pipeline"]
        assert [(s.schedule.cron, s.schedule.timezone, s.active) for s in pipeline.schedules] == [(cron, "UTC", True)]
        assert all(registered[name].schedules == [] for name in DEPLOYMENTS if name != "training_pipeline")
        assert pipeline.pull_steps == [
            {"prefect.deployments.steps.set_working_directory": {"directory": str(project)}}
        ], "runs should use the folder `prefect deploy` ran in"

        # The server's scheduler turns the cron line into upcoming runs at 03:00 UTC (within its 5 s loop for
        # deployments updated just now, at worst its 60 s main loop).
        schedule_id = pipeline.schedules[0].id
        upcoming = _poll(
            lambda: [r for r in _runs_of(pipeline.id) if _scheduled_by(r, schedule_id)],
            timeout=90,
            what="scheduled runs of the cron schedule",
        )
        times = [r.expected_start_time.astimezone(UTC) for r in upcoming]
        assert all((t.hour, t.minute, t.second) == (3, 0, 0) for t in times), times
        # Switch the schedule off (which deletes those runs) before a worker polls the pool: a test that happens
        # to run just before 03:00 UTC must not start a full-length training run.
        with _client() as client:
            client.update_deployment_schedule(pipeline.id, schedule_id, active=False)
        _poll(lambda: not _runs_of(pipeline.id), timeout=30, what="the cron runs deleted")

        worker = _start(
            [PREFECT, "worker", "start", "--pool", "rlcore"],
            cwd=project,
            env={**server, "PREFECT_WORKER_QUERY_SECONDS": "1"},
            log=worker_log,
        )
        try:
            created = _prefect(
                "deployment",
                "run",
                "training_pipeline/ppo-cartpole",
                "--params",
                json.dumps({"overrides": QUICK}),
                cwd=project,
                env=server,
            )
            match = re.search(r"UUID: ([0-9a-f-]{36})", created)
            assert match, created
            run_id = match.group(1)

            def final():
                with _client() as client:
                    run = client.read_flow_run(run_id)
                return run if run.state is not None and run.state.is_final() else None

            run = _poll(final, timeout=240, what="the triggered run finished", log=worker_log, process=worker)
            assert run.state.is_completed(), f"{run.state}\n{_tail(worker_log)}"
            assert run.parameters["overrides"] == QUICK and run.parameters["root"] == "."
            assert (outputs(project).export / "model_card.json").is_file(), _tail(worker_log)

            from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterFlowRunId

            with _client() as client:
                artifacts = client.read_artifacts(
                    artifact_filter=ArtifactFilter(flow_run_id=ArtifactFilterFlowRunId(any_=[run.id]))
                )
            assert sorted(a.type for a in artifacts) == ["markdown", "table"], artifacts
            table = next(a for a in artifacts if a.type == "table")
            assert len(yaml.safe_load(table.data)) >= 4  # a row per checkpoint (the data is JSON)
        finally:
            stop(worker)
        assert not group_alive(worker.pid), f"the worker left processes behind\n{_tail(worker_log)}"


def test_a_scheduled_run_fires_and_completes(server: dict[str, str], tmp_path: Path):
    project = tmp_path / "project"
    project.mkdir()
    for name in PROJECT_FILES:
        shutil.copy(PROJECT / name, project / name)
    serve_log = tmp_path / "serve.log"
    overrides = [
        "name=every-few-seconds",  # not ppo-cartpole: the work-pool deployments of the other test keep their names
        "deploy.pipeline.cron=null",  # nothing long-running on this server
        "deploy.collect.interval_seconds=5",
        "collect.policy=random",
        "collect.steps=200",
    ]
    with pointed_at(server):
        served = _start(
            [RLCORE, "deploy", "serve", *sets(overrides)],
            cwd=project,
            env={**server, "PREFECT_RUNNER_POLL_FREQUENCY": "1"},
            log=serve_log,
        )
        try:
            collect = _poll(
                lambda: _deployment("collect/every-few-seconds"),
                timeout=90,
                what="collect/every-few-seconds registered",
                log=serve_log,
                process=served,
            )
            assert [s.schedule.interval.total_seconds() for s in collect.schedules] == [5]
            schedule_id = collect.schedules[0].id

            def completed_by_schedule():
                runs = _runs_of(collect.id)
                assert all(_scheduled_by(r, schedule_id) for r in runs), [(r.name, r.created_by) for r in runs]
                return next((r for r in runs if r.state is not None and r.state.is_completed()), None)

            run = _poll(
                completed_by_schedule,
                timeout=120,
                what="a run created by the interval schedule completed",
                log=serve_log,
                process=served,
            )
            assert run.auto_scheduled and run.created_by.type == "SCHEDULE"
            assert (project / "data" / "dataset.parquet").is_file(), _tail(serve_log)
        finally:
            stop(served)
        assert not group_alive(served.pid), f"the serving process left processes behind\n{_tail(serve_log)}"
