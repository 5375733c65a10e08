"""Prefect task runners on a real server: checkpoints evaluated on Dask worker processes; task retries."""

from __future__ import annotations

import asyncio
import shutil
import time
from pathlib import Path

import pytest
from conftest import QUICK
from prefect_server import pointed_at, prefect_server

from rlcore.config import DeployConfig, load_params
from rlcore.io import read_json
from rlcore.stages import evaluate_stage, train_stage


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    with prefect_server(tmp_path_factory.mktemp("prefect-home")) as (url, env), pointed_at(env):
        yield url


async def _task_runs_and_logs(flow_run_id, wait_for: str = "", timeout: float = 20):
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterId, LogFilter, LogFilterFlowRunId

    deadline = time.monotonic() + timeout
    async with get_client() as client:
        task_runs = await client.read_task_runs(flow_run_filter=FlowRunFilter(id=FlowRunFilterId(any_=[flow_run_id])))
        while True:  # logs reach the server in batches, shortly after the flow run ends
            logs = await client.read_logs(log_filter=LogFilter(flow_run_id=LogFilterFlowRunId(any_=[flow_run_id])))
            text = "\n".join(log.message for log in logs)
            if wait_for in text or time.monotonic() > deadline:
                return task_runs, text
            await asyncio.sleep(1)


def test_dask_local_cluster_evaluates_checkpoints_in_parallel_with_sequential_results(project: Path, server):
    from flows.evaluate import dask_task_runner, evaluate_checkpoints

    # Long enough tasks (~1 s each: 200 episodes, 4 at a time) that two workers visibly overlap.
    overrides = [*QUICK, "eval.episodes=200", "eval.max_parallel_envs=4"]
    params_path = str(project / "params.yaml")
    params = load_params(params_path, overrides)
    train_stage(params, project)
    sequential = read_json(evaluate_stage(params, project))
    assert len(sequential["candidates"]) == 4
    shutil.move(project / "reports" / "evaluations.json", project / "sequential.json")

    runner = dask_task_runner(DeployConfig(task_runner="dask", dask_workers=2))
    assert runner.cluster_kwargs["n_workers"] == 2 and runner.cluster_kwargs["processes"] is True
    state = evaluate_checkpoints.with_options(task_runner=runner)(
        params_path=params_path, overrides=overrides, root=str(project), return_state=True
    )
    assert state.is_completed(), state
    assert read_json(project / "reports" / "evaluations.json") == sequential

    task_runs, _ = asyncio.run(_task_runs_and_logs(state.state_details.flow_run_id))
    assert len(task_runs) == 4 and all(run.state.is_completed() for run in task_runs)
    intervals = sorted((run.start_time, run.end_time) for run in task_runs)
    overlaps = [a_end > b_start for (_, a_end), (b_start, _) in zip(intervals, intervals[1:], strict=False)]
    assert any(overlaps), intervals


def test_a_failing_env_is_retried_then_fails_the_flow_run_with_its_message_in_the_logs(project: Path, server):
    import failing_env  # noqa: F401 - registers Failing-v0 in this process, where the flow runs

    from flows.collect import collect_flow

    overrides = [
        "env.id=Failing-v0",
        "collect.policy=random",
        "collect.steps=100",
        "collect.num_envs=1",
        "deploy.retries=2",
    ]
    state = collect_flow(
        params_path=str(project / "params.yaml"), overrides=overrides, root=str(project), return_state=True
    )
    assert state.is_failed(), state
    message = "failing_env: the simulator crashed on its first step"
    task_runs, logs = asyncio.run(_task_runs_and_logs(state.state_details.flow_run_id, wait_for="Retry 2/2"))
    (collect,) = task_runs
    assert collect.run_count == 3 and collect.state.is_failed()
    assert "Retry 1/2" in logs and "Retry 2/2" in logs
    assert message in logs
    assert not (project / "data" / "dataset.parquet").exists()
