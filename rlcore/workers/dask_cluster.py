"""How rlcore starts a Dask LocalCluster when no ``deploy.dask_address`` is given: loopback only, no dashboard.

Used by the flows' DaskTaskRunner (``flows/task_runners.py``) and by the ``dask`` runners of actor-learner (IMPALA)
and population (ES, SVPG) runs.
Its worker processes die with the process that started the cluster, however it ends: distributed's nannies live in
that process, and each worker process exits at the EOF of a pipe from its nanny (``distributed.process.AsyncProcess``;
checked after a SIGKILL by ``tests/faults/test_kills.py``).
"""

from __future__ import annotations

from typing import Any


def local_cluster_kwargs(workers: int) -> dict[str, Any]:
    """``distributed.LocalCluster`` keywords: ``workers`` processes of one thread, listening on 127.0.0.1 only.

    ``dashboard_address=None`` alone is not enough: the scheduler still starts its HTTP server (health and
    metrics routes) on port 8787; here it takes an ephemeral loopback port instead.
    """
    return {
        "n_workers": workers,
        "processes": True,
        "threads_per_worker": 1,
        "host": "127.0.0.1",
        "dashboard_address": None,
        "scheduler_kwargs": {"dashboard": False, "dashboard_address": "127.0.0.1:0"},
    }
