"""Prefect task runners on a real server: checkpoint evaluations, collection shards and sweep trials on Dask
worker processes (a LocalCluster of 2), the pipeline's Dask path through the CLI, and task retries.

The flows run in this process share one LocalCluster (:func:`cluster`); the CLI tests (``rlcore collect-flow``,
``rlcore pipeline`` with ``deploy.task_runner=dask``) check the flows making a LocalCluster of their own.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import QUICK, outputs, rlcore, sets
from prefect_server import pointed_at

from rlcore.common.files import read_json, sha256_file
from rlcore.config.sections import DeployConfig
from rlcore.data.reader import load_dataset, read_metadata
from rlcore.params import load_params
from rlcore.stages import evaluate_stage, train_stage

pytestmark = pytest.mark.server


@pytest.fixture(scope="module")
def server(shared_prefect_server):
    url, env = shared_prefect_server
    with pointed_at(env):
        yield url


@pytest.fixture(scope="module")
def cluster(server) -> Iterator[tuple[str, set[int]]]:
    """The scheduler address and worker process ids of one LocalCluster as ``deploy.dask_workers: 2`` makes it, for
    the flows this module runs in process: its workers import torch and rlcore once (15 s or more on a loaded
    machine), not once per test. Started after ``server``, so its workers report to that Prefect server."""
    from distributed import Client, LocalCluster

    from flows.task_runners import local_cluster_kwargs

    with (
        LocalCluster(**local_cluster_kwargs(DeployConfig(task_runner="dask", dask_workers=2))) as local,
        Client(local) as client,
    ):
        yield local.scheduler_address, set(client.run(os.getpid).values())


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


def test_dask_local_cluster_evaluates_checkpoints_in_parallel_with_sequential_results(project: Path, cluster):
    from flows.evaluate import evaluate_checkpoints
    from flows.task_runners import dask_task_runner

    # Long enough tasks (~1 s each: 200 episodes, 4 at a time) that two workers visibly overlap.
    overrides = [*QUICK, "eval.episodes=200", "eval.max_parallel_envs=4"]
    params_path = str(project / "params.yaml")
    params = load_params(params_path, overrides)
    train_stage(params, project)
    sequential = read_json(evaluate_stage(params, project))
    assert len(sequential["candidates"]) == 4
    shutil.move(outputs(project).evaluations, project / "sequential.json")

    own = dask_task_runner(DeployConfig(task_runner="dask", dask_workers=2))
    assert own.cluster_kwargs["n_workers"] == 2 and own.cluster_kwargs["processes"] is True
    runner = dask_task_runner(DeployConfig(task_runner="dask", dask_address=cluster[0]))
    state = evaluate_checkpoints.with_options(task_runner=runner)(
        params_path=params_path, overrides=overrides, root=str(project), return_state=True
    )
    assert state.is_completed(), state
    assert read_json(outputs(project).evaluations) == sequential

    task_runs, _ = asyncio.run(_task_runs_and_logs(state.state_details.flow_run_id))
    assert len(task_runs) == 4 and all(run.state.is_completed() for run in task_runs)
    assert_some_overlap(task_runs)


def assert_some_overlap(task_runs) -> None:
    """At least two of the task runs were running at the same time."""
    intervals = sorted((run.start_time, run.end_time) for run in task_runs)
    overlaps = [a_end > b_start for (_, a_end), (b_start, _) in zip(intervals, intervals[1:], strict=False)]
    assert any(overlaps), intervals


async def _subflow_task_runs(flow_run_id, name: str):
    """The task runs of the subflow ``name`` of the flow run ``flow_run_id``."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterParentFlowRunId

    async with get_client() as client:
        children = await client.read_flow_runs(
            flow_run_filter=FlowRunFilter(parent_flow_run_id=FlowRunFilterParentFlowRunId(any_=[flow_run_id]))
        )
        (child,) = [run for run in children if run.name and (await client.read_flow(run.flow_id)).name == name]
        task_runs, _ = await _task_runs_and_logs(child.id)
    return child, task_runs


async def _latest_flow_run(flow_name: str):
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import FlowFilter, FlowFilterName

    async with get_client() as client:
        (flow_run,) = await client.read_flow_runs(
            flow_filter=FlowFilter(name=FlowFilterName(any_=[flow_name])), sort="START_TIME_DESC", limit=1
        )
    return flow_run


def test_collection_shards_on_dask_workers_make_the_same_file_as_rlcore_collect(project: Path, server):
    # ~1 s of rollouts per shard, several row groups each, so the merge regroups rows across shards.
    overrides = ["collect.policy=random", "collect.steps=90000", "collect.shards=3", "collect.row_group_size=7000"]
    rlcore("collect", *sets(overrides), cwd=project)
    dataset = project / "data" / "dataset.parquet"
    sequential = sha256_file(dataset)
    assert not (project / "data" / "dataset.parquet.shards").exists()
    meta = read_metadata(dataset)
    assert [shard["seed"] for shard in meta["shards"]] == [2_000_000, 2_000_008, 2_000_016]
    assert meta["transitions"] == sum(shard["transitions"] for shard in meta["shards"]) >= 90_000
    assert meta["episodes"] == sum(shard["episodes"] for shard in meta["shards"])
    import gymnasium as gym

    env = gym.make("CartPole-v1")
    data = load_dataset(dataset, env.observation_space, env.action_space, "CartPole-v1")  # validates every row
    assert len(data) == meta["transitions"] and len(set(data.episode_id.tolist())) == meta["episodes"]
    dataset.unlink()

    result = rlcore("collect-flow", *sets([*overrides, "deploy.task_runner=dask"]), cwd=project)
    assert result.stderr.rstrip().endswith("Finished in state Completed()"), result.stderr[-3000:]
    assert sha256_file(dataset) == sequential
    assert not (project / "data" / "dataset.parquet.shards").exists()
    collect = asyncio.run(_latest_flow_run("collect"))
    _, task_runs = asyncio.run(_subflow_task_runs(collect.id, "collect_shards"))
    shards = [run for run in task_runs if run.name.startswith("collect-shard-")]
    assert sorted(run.name for run in shards) == ["collect-shard-0", "collect-shard-1", "collect-shard-2"]
    assert all(run.state.is_completed() for run in task_runs) and len(task_runs) == 4  # + merge-shards
    assert_some_overlap(shards)


def test_sweep_trials_run_as_task_runs_on_dask_workers(project: Path, cluster):
    from test_sweep import SHORT, load_study

    from flows.sweep.flow import sweep_flow

    overrides = [
        *SHORT,
        "sweep.n_trials=4",
        "sweep.workers=2",
        "deploy.task_runner=dask",
        f"deploy.dask_address={cluster[0]}",
    ]
    state = sweep_flow(
        params_path=str(project / "params.yaml"), overrides=overrides, root=str(project), return_state=True
    )
    assert state.is_completed(), state
    trials = load_study(project).trials
    assert len(trials) == 4 and all(t.state.is_finished() for t in trials)
    workers = {t.user_attrs["worker_pid"] for t in trials}
    assert workers == cluster[1], workers  # computed on the 2 Dask worker processes
    _, task_runs = asyncio.run(_subflow_task_runs(state.state_details.flow_run_id, "sweep_trials"))
    assert sorted(run.name for run in task_runs) == [f"trial-{n}" for n in range(4)]
    assert all(run.state.is_completed() for run in task_runs)
    assert_some_overlap(task_runs)
    assert (project / "reports" / "sweep" / "summary.md").is_file()


def test_rlcore_pipeline_evaluates_on_dask_through_the_cli(project: Path, server):
    result = rlcore("pipeline", *sets([*QUICK, "deploy.task_runner=dask"]), cwd=project)  # PREFECT_API_URL: server
    output = result.stdout + result.stderr
    evaluated = {line.split("'")[1] for line in output.splitlines() if "Task run 'evaluate-step_" in line}
    assert len(evaluated) == 4, output[-3000:]  # a task run per checkpoint, on the Dask workers
    assert "Flow run" in output and output.rstrip().endswith("Finished in state Completed()"), output[-3000:]
    assert len(read_json(outputs(project).evaluations)["candidates"]) == 4
    assert (outputs(project).export / "model_card.json").is_file()


def test_an_existing_dask_cluster_named_in_params_runs_collection_shards_and_sweep_trials(project: Path, cluster):
    """``deploy.dask_address``: the flows use a cluster that was already running (here the module's LocalCluster,
    standing in for `dask scheduler` + `dask worker` on other machines)."""
    from test_sweep import SHORT, load_study

    from flows.collect import collect_flow
    from flows.sweep.flow import sweep_flow

    address, worker_pids = cluster
    on_cluster = ["deploy.task_runner=dask", f"deploy.dask_address={address}"]

    collect = ["collect.policy=random", "collect.steps=4000", "collect.shards=2", *on_cluster]
    state = collect_flow(
        params_path=str(project / "params.yaml"), overrides=collect, root=str(project), return_state=True
    )
    assert state.is_completed(), state
    assert len(read_metadata(project / "data" / "dataset.parquet")["shards"]) == 2

    sweep = [*SHORT, "sweep.n_trials=2", "sweep.workers=2", *on_cluster]
    params_path = str(project / "params.yaml")
    state = sweep_flow(params_path=params_path, overrides=sweep, root=str(project), return_state=True)
    assert state.is_completed(), state
    trials = load_study(project).trials
    assert len(trials) == 2 and {t.user_attrs["worker_pid"] for t in trials} <= worker_pids
    _, logs = asyncio.run(_task_runs_and_logs(state.state_details.flow_run_id, wait_for="shared file system"))
    assert "on a shared file system (or set sweep.storage to a PostgreSQL URL)" in logs


def test_the_local_dask_cluster_listens_on_loopback_ephemeral_ports_only(cluster):
    """No dashboard and nothing on 8787 or a public interface: only what the run needs, on 127.0.0.1 (the module's
    cluster is made as the flows make theirs: ``local_cluster_kwargs``)."""
    import psutil

    processes = [psutil.Process(), *psutil.Process().children(recursive=True)]
    listening = [
        connection.laddr
        for process in processes
        for connection in process.net_connections(kind="inet")
        if connection.status == psutil.CONN_LISTEN
    ]
    assert listening, "the cluster should listen somewhere (scheduler and workers)"
    assert {address.ip for address in listening} == {"127.0.0.1"}
    assert 8787 not in {address.port for address in listening}
