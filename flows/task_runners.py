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

from rlcore.config.sections import DeployConfig
from rlcore.workers.dask_cluster import local_cluster_kwargs as dask_local_cluster_kwargs


def dask_task_runner(deploy: DeployConfig) -> TaskRunner:
    """prefect-dask's runner for ``deploy``: the cluster at ``dask_address``, or a LocalCluster of processes."""
    from prefect_dask import DaskTaskRunner

    if deploy.dask_address:
        return DaskTaskRunner(address=deploy.dask_address)
    return DaskTaskRunner(cluster_kwargs=local_cluster_kwargs(deploy))


def local_cluster_kwargs(deploy: DeployConfig) -> dict[str, Any]:
    """A LocalCluster of ``deploy.dask_workers`` processes on 127.0.0.1, with no dashboard."""
    return dask_local_cluster_kwargs(deploy.dask_workers)


def retry_options(deploy: DeployConfig) -> dict[str, Any]:
    """``task.with_options(**retry_options(deploy))``: every task run of the flows retries as ``deploy`` says."""
    return {"retries": deploy.retries, "retry_delay_seconds": deploy.retry_delay_seconds}
