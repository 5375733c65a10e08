"""Prefect task options from params.yaml's ``deploy`` section: retries, and prefect-dask's DaskTaskRunner.

``deploy.task_runner: dask`` runs the flows' parallel parts (a task run per checkpoint evaluation, per
collection shard, per sweep trial) on a Dask cluster: a LocalCluster of ``deploy.dask_workers`` processes,
or the existing cluster at ``deploy.dask_address``. Dask workers report to the Prefect API themselves:
set PREFECT_API_URL to a running server, or every worker process starts a temporary server of its own.
On another machine's workers, ``root`` (the project folder) must be the same shared path.
"""

from __future__ import annotations

from typing import Any

from prefect.task_runners import TaskRunner

from rlcore.config import DeployConfig


def dask_task_runner(deploy: DeployConfig) -> TaskRunner:
    """prefect-dask's runner for ``deploy``: the cluster at ``dask_address``, or a LocalCluster of processes."""
    from prefect_dask import DaskTaskRunner

    if deploy.dask_address:
        return DaskTaskRunner(address=deploy.dask_address)
    return DaskTaskRunner(cluster_kwargs=local_cluster_kwargs(deploy))


def local_cluster_kwargs(deploy: DeployConfig) -> dict[str, Any]:
    """A LocalCluster that listens on 127.0.0.1 only, with no dashboard.

    ``dashboard_address=None`` alone is not enough: the scheduler still starts its HTTP server (health and
    metrics routes) on port 8787; here it takes an ephemeral loopback port instead.
    """
    return {
        "n_workers": deploy.dask_workers,
        "processes": True,
        "threads_per_worker": 1,
        "host": "127.0.0.1",
        "dashboard_address": None,
        "scheduler_kwargs": {"dashboard": False, "dashboard_address": "127.0.0.1:0"},
    }


def retry_options(deploy: DeployConfig) -> dict[str, Any]:
    """``task.with_options(**retry_options(deploy))``: every task run of the flows retries as ``deploy`` says."""
    return {"retries": deploy.retries, "retry_delay_seconds": deploy.retry_delay_seconds}
