"""`rlcore deploy serve` against a real Prefect server: a scheduled deployment, a triggered run, artifacts."""

from __future__ import annotations

import asyncio
import os
import subprocess
import time
from pathlib import Path

import pytest
import yaml
from cli_support import run_in_process
from conftest import QUICK, RLCORE, outputs, sets
from prefect_server import group_alive, pointed_at, prefect_server, stop

from rlcore.common.files import read_json


async def _wait_for_deployment(name: str, timeout: float):
    from prefect.client.orchestration import get_client
    from prefect.exceptions import ObjectNotFound

    deadline = time.monotonic() + timeout
    async with get_client() as client:
        while True:
            try:
                return await client.read_deployment_by_name(name)
            except ObjectNotFound:
                if time.monotonic() > deadline:
                    raise
                await asyncio.sleep(1)


async def _run_and_wait(name: str, timeout: float):
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterId
    from prefect.deployments import run_deployment

    flow_run = await run_deployment(name, timeout=0)
    deadline = time.monotonic() + timeout
    async with get_client() as client:
        while True:
            flow_run = await client.read_flow_run(flow_run.id)
            if flow_run.state.is_final() or time.monotonic() > deadline:
                break
            await asyncio.sleep(1)
        this_run = FlowRunFilter(id=FlowRunFilterId(any_=[flow_run.id]))
        artifacts = await client.read_artifacts(flow_run_filter=this_run)
    return flow_run, artifacts


@pytest.mark.server
def test_served_deployments_run_on_a_real_server_and_publish_artifacts(project: Path, tmp_path: Path):
    overrides = [
        *QUICK,
        "collect.steps=500",  # collect/quick rolls out the run's own selected model, models/quick/policy.pt
        "deploy.pipeline.cron=*/5 * * * *",
    ]
    with prefect_server(tmp_path / "prefect-home") as (url, env), pointed_at(env):
        served = subprocess.Popen(
            [RLCORE, "deploy", "serve", *sets(overrides)],
            cwd=project,
            env={**os.environ, **env, "PREFECT_RUNNER_POLL_FREQUENCY": "1"},
            stdout=open(tmp_path / "serve.log", "w"),  # noqa: SIM115
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        try:
            deployment = asyncio.run(_wait_for_deployment("training_pipeline/quick", timeout=90))
            assert [s.schedule.cron for s in deployment.schedules] == ["*/5 * * * *"]
            assert deployment.parameters["overrides"] == overrides
            assert deployment.parameters["root"] == str(project.resolve())
            sweep = asyncio.run(_wait_for_deployment("sweep/quick", timeout=30))  # registered, on demand
            assert sweep.schedules == [] and sweep.parameters["overrides"] == overrides

            flow_run, artifacts = asyncio.run(_run_and_wait("training_pipeline/quick", timeout=180))
            assert flow_run.state.is_completed(), (flow_run.state, (tmp_path / "serve.log").read_text()[-3000:])
            assert {a.type for a in artifacts} == {"markdown", "table"}
            table = next(a for a in artifacts if a.type == "table")
            rows = yaml.safe_load(table.data)  # the table artifact's data is JSON
            assert [row["checkpoint"] for row in rows] == [
                c["checkpoint"] for c in read_json(outputs(project).evaluations)["candidates"]
            ]
            assert len(rows) >= 4
            assert (outputs(project).export / "model_card.json").is_file()

            flow_run, artifacts = asyncio.run(_run_and_wait("collect/quick", timeout=120))
            assert flow_run.state.is_completed(), (flow_run.state, (tmp_path / "serve.log").read_text()[-3000:])
            assert {a.type for a in artifacts} == {"markdown", "table"}
            markdown = next(a for a in artifacts if a.type == "markdown")
            assert "transitions" in markdown.data and (project / "data" / "dataset.parquet").is_file()
        finally:
            stop(served)
        assert not group_alive(served.pid), "the serving process left processes behind"


@pytest.mark.parametrize(
    "deploy", [{"pipeline": {"cron": "* * *"}}, {"collect": {"cron": "0 3 * * *", "interval_seconds": 60}}]
)
def test_bad_deploy_sections_are_refused_before_prefect_starts(project: Path, deploy: dict):
    params = yaml.safe_load((project / "params.yaml").read_text())
    params["deploy"] = deploy
    (project / "params.yaml").write_text(yaml.safe_dump(params))
    result = run_in_process(["deploy", "serve"], project)
    assert result.returncode == 2 and result.stderr.startswith("error: ") and "deploy." in result.stderr


def test_prefect_yaml_schedules_agree_with_params_yaml():
    from conftest import PROJECT

    from flows.deploy import build_deployments

    spec = yaml.safe_load((PROJECT / "prefect.yaml").read_text())
    by_entrypoint = {d["entrypoint"]: d for d in spec["deployments"]}
    for deployment in build_deployments(str(PROJECT / "params.yaml"), [], str(PROJECT)):
        module, _, function = deployment.entrypoint.rpartition(".")
        declared = by_entrypoint[f"{module.replace('.', '/')}.py:{function}"]
        assert declared["name"] == deployment.name
        assert [s.get("cron") for s in declared["schedules"]] == [s.schedule.cron for s in deployment.schedules]
        assert declared["parameters"]["overrides"] == deployment.parameters["overrides"]
        assert declared["work_pool"]["name"] == "rlcore"
