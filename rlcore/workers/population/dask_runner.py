"""The ``dask`` runner: every rollout task is a Dask task on a cluster.

The cluster is ``deploy.dask_address`` (the one sweeps and collection shards use) or, when that is null, a
LocalCluster of ``num_workers`` single-thread worker processes on 127.0.0.1 started for the run and closed
after it (``rlcore.workers.dask_cluster``). What crosses the network per iteration: the weights, once, and each
task's few numbers out and its result back. Each worker process builds its envs,
policy and noise table once (``rlcore.workers.population.worker.cached_worker``).

A worker lost mid-iteration (killed, out of memory, its machine gone) takes its running tasks with it; the
scheduler runs them again on the workers left (or the restarted one), and the runner logs the loss. A task
that fails for good (``KilledWorker`` after repeated losses) is submitted again, up to
:data:`MAX_ATTEMPTS` times. Results are the same whichever worker computes them.
"""

from __future__ import annotations

import contextlib
import json
import logging
import uuid
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from rlcore.algos.population_tasks import RolloutResult, RolloutTask
from rlcore.common.errors import RLCoreError, raise_worker_failure
from rlcore.workers.dask_cluster import local_cluster_kwargs
from rlcore.workers.population.runners import PopulationRunner, PopulationRunnerError
from rlcore.workers.population.worker import cached_worker

log = logging.getLogger("rlcore")

MAX_ATTEMPTS = 3
"""Submissions of one task that ended in an error before the run stops with that error."""


def _published(weights: np.ndarray) -> np.ndarray:
    """An iteration's weights as a Dask task's result (see :meth:`DaskRunner.run`)."""
    return weights


def dask_rollout(tree_json: str, version: int, weights: np.ndarray, task: RolloutTask) -> RolloutResult:
    """The body of a Dask task: this process's worker for the run, the iteration's weights, one task."""
    torch.set_num_threads(1)
    worker = cached_worker(tree_json)
    worker.load(version, weights)
    return worker.run(task)


class DaskRunner(PopulationRunner):
    """Rollout tasks on a Dask cluster (see the module docstring)."""

    def __init__(self, tree: dict[str, Any], num_workers: int, address: str | None) -> None:
        super().__init__()
        from distributed import Client, LocalCluster

        self._cluster = None if address else LocalCluster(**local_cluster_kwargs(num_workers))
        self._client = Client(address or self._cluster)
        self._tree_json = json.dumps(tree)  # a few KB with each task: nothing to lose with a worker
        self.channel = f"rlcore-rollouts-{uuid.uuid4().hex[:12]}"

    def _workers(self) -> list[str]:
        return sorted(self._client.scheduler_info()["workers"])

    def run(self, version: int, weights: np.ndarray, tasks: Sequence[RolloutTask]) -> list[RolloutResult]:
        from distributed import wait

        workers = self._workers()
        # The weights as a task of their own (not scattered data): sent to the scheduler once, computed on one worker,
        # copied to the others when their tasks need them, and recomputed from the scheduler's copy if every worker
        # holding them is lost (a scattered copy would be gone for good, and a broadcast to a dying worker hangs).
        weights_future = self._client.submit(_published, weights, key=f"{self.channel}-weights-{version}", pure=False)
        attempts = [0] * len(tasks)

        def submit(index: int) -> Any:
            task = tasks[index]
            attempts[index] += 1
            placement: dict[str, Any] = {}
            if task.affinity is not None and workers:  # where the task's state lives, if that worker is there
                placement = {"workers": [workers[task.affinity % len(workers)]], "allow_other_workers": True}
            return self._client.submit(
                dask_rollout,
                self._tree_json,
                version,
                weights_future,
                task,
                key=f"{self.channel}-{version}-{index}-{attempts[index]}",
                pure=False,
                **placement,
            )

        results: list[RolloutResult | None] = [None] * len(tasks)
        running = {index: submit(index) for index in range(len(tasks))}
        while running:
            with contextlib.suppress(TimeoutError):  # polled, so a task that errs or is lost is always seen
                wait(list(running.values()), timeout=0.5, return_when="FIRST_COMPLETED")
            for index, future in list(running.items()):
                if future.status == "finished":
                    results[index] = future.result()
                    del running[index]
                elif future.status in ("error", "cancelled", "lost"):
                    why, error = future.status, None
                    if future.status == "error":
                        error = future.exception()
                        if isinstance(error, RLCoreError):  # a user's error (the env raised, a non-finite value):
                            raise_worker_failure(f"rollout task {index}", error, PopulationRunnerError)  # no retry
                        why = f"{type(error).__name__}: {error}"
                    if attempts[index] >= MAX_ATTEMPTS:
                        raise PopulationRunnerError(
                            f"rollout task {index} failed {attempts[index]} times on Dask: {why}"
                        )
                    self.reissued += 1
                    log.warning("rollout task %d failed on Dask (%s); submitted again", index, why)
                    running[index] = submit(index)
        lost = sorted(set(workers) - set(self._workers()))
        if lost:
            self.replacements += len(lost)
            log.warning(
                "Dask worker(s) %s lost during iteration %d; the scheduler ran their rollout tasks again on the "
                "workers left",
                ", ".join(lost),
                version,
            )
        return [result for result in results if result is not None]

    def close(self) -> None:
        try:
            self._client.close()
        finally:
            if self._cluster is not None:
                self._cluster.close()
