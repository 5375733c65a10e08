"""Runners: where a population learner's rollout tasks run, behind one interface the trainer calls.

    results = runner.run(version, weights, tasks)     # results[i] is tasks[i]'s, whoever ran it and when

| runner    | workers                              | weights to workers           | a lost worker                      |
|-----------|--------------------------------------|------------------------------|------------------------------------|
| ``dev``   | one, in the learner's process        | loaded directly              | —                                  |
| ``local`` | ``num_workers`` spawned subprocesses | a pipe message per iteration | replaced; its tasks re-issued      |
| ``dask``  | tasks on a Dask cluster              | a Dask task per iteration    | Dask re-runs its tasks; failed     |
|           | (``dask_runner``)                    |                              | ones are submitted again           |

Results are ordered by task, never by arrival, and a task's result does not depend on the worker that ran it,
so the same seed gives the same learner whatever the runner and the number of workers (SVPG's particles, whose
envs live in a worker, excepted: a lost worker's particle restarts its episodes).
"""

from __future__ import annotations

import contextlib
import logging
import multiprocessing as mp
import pickle
import time
from abc import ABC, abstractmethod
from collections import deque
from collections.abc import Sequence
from multiprocessing.connection import Connection, wait
from typing import Any

import numpy as np
import torch

from rlcore.algos.population_tasks import RolloutResult, RolloutTask
from rlcore.common.errors import RLCoreError, raise_worker_failure, worker_failure
from rlcore.workers.failed_starts import FailedStarts
from rlcore.workers.parent_death import start_child
from rlcore.workers.population.worker import RolloutWorker

log = logging.getLogger("rlcore")

TASKS_IN_FLIGHT = 2
"""Tasks a local worker holds at once: one running, one waiting, so it never idles between messages."""


class PopulationRunnerError(RLCoreError):
    """Rollout workers cannot run: a task failed, or workers keep dying before returning anything."""


class PopulationRunner(ABC):
    """Runs rollout tasks on workers (see the module docstring)."""

    def __init__(self) -> None:
        self.replacements = 0
        """Workers lost (and replaced) so far, each also logged as a warning."""
        self.reissued = 0
        """Tasks run again because the worker holding them was lost."""

    @abstractmethod
    def run(self, version: int, weights: np.ndarray, tasks: Sequence[RolloutTask]) -> list[RolloutResult]:
        """Every task's result, in task order, run with ``weights`` ((members, size) float64) of ``version``."""

    def close(self) -> None:  # noqa: B027 - the in-process runner holds nothing to release
        pass

    def __enter__(self) -> PopulationRunner:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class DevRunner(PopulationRunner):
    """Every task in the learner's process, one after another: errors show directly."""

    def __init__(self, tree: dict[str, Any]) -> None:
        super().__init__()
        self.worker = RolloutWorker(tree)

    def run(self, version: int, weights: np.ndarray, tasks: Sequence[RolloutTask]) -> list[RolloutResult]:
        self.worker.load(version, weights)
        return [self.worker.run(task) for task in tasks]

    def close(self) -> None:
        self.worker.close()


def _local_worker_main(tree: dict[str, Any], conn: Connection) -> None:
    """A subprocess worker: load the weights it is sent, run each task it is sent, send back its result. Started by
    :func:`rlcore.workers.parent_death.start_child`, so it dies with the learner, even in the middle of a task."""
    torch.set_num_threads(1)
    worker: RolloutWorker | None = None
    try:
        worker = RolloutWorker(tree)
        while True:
            message = conn.recv()
            if message[0] == "stop":
                return
            if message[0] == "weights":
                worker.load(message[1], message[2])
                continue
            index, task = message[1], message[2]
            conn.send(("result", index, worker.run(task)))
    except (BrokenPipeError, EOFError, KeyboardInterrupt):
        pass  # the learner closed the run
    except Exception as exc:  # a bug or a bad env: tell the learner instead of dying silently
        conn.send(("error", -1, worker_failure(exc)))
    finally:
        if worker is not None:
            worker.close()


class LocalRunner(PopulationRunner):
    """``num_workers`` spawned subprocesses on this machine, each with its own pipe (see the module docstring).

    A worker that exits, breaks its pipe, or holds a task for ``timeout_seconds`` without answering is reported,
    replaced by a new process, and the tasks it held are sent again (to it or another worker).
    """

    def __init__(self, tree: dict[str, Any], num_workers: int, timeout_seconds: float) -> None:
        super().__init__()
        self._ctx = mp.get_context("spawn")
        self._tree = tree
        self._timeout = timeout_seconds
        self._processes: list[Any] = [None] * num_workers
        self._conns: list[Connection | None] = [None] * num_workers
        self._versions = [-1] * num_workers
        self._in_flight: list[list[int]] = [[] for _ in range(num_workers)]
        self._last_progress = [0.0] * num_workers
        self._answered = [False] * num_workers
        self._failed_starts = FailedStarts(num_workers, "rollout worker", "returning a result", PopulationRunnerError)
        self._weights: tuple[int, np.ndarray] | None = None
        for worker_id in range(num_workers):
            self._spawn(worker_id)

    def _spawn(self, worker_id: int) -> None:
        conn, child = self._ctx.Pipe(duplex=True)
        process = start_child(self._ctx, _local_worker_main, (self._tree, child), f"rlcore-rollout-worker-{worker_id}")
        child.close()  # the child holds the only other end: its death closes the pipe
        self._processes[worker_id], self._conns[worker_id] = process, conn
        self._versions[worker_id] = -1
        self._answered[worker_id] = False
        self._last_progress[worker_id] = time.monotonic()

    def run(self, version: int, weights: np.ndarray, tasks: Sequence[RolloutTask]) -> list[RolloutResult]:
        self._weights = (version, weights)
        pending: deque[int] = deque(range(len(tasks)))
        results: list[RolloutResult | None] = [None] * len(tasks)
        remaining = len(tasks)
        while remaining:
            self._dispatch(pending, tasks)
            conns = {conn: worker_id for worker_id, conn in enumerate(self._conns) if conn is not None}
            for ready in wait(list(conns), timeout=0.5):
                assert isinstance(ready, Connection)
                worker_id = conns[ready]
                try:
                    message = ready.recv()
                except (EOFError, OSError, pickle.UnpicklingError):
                    self._processes[worker_id].join(timeout=1.0)  # a closed pipe: the process is exiting
                    code = self._processes[worker_id].exitcode
                    self._replace(
                        worker_id, f"died (exit code {code})" if code is not None else "broke its pipe", pending
                    )
                    continue
                if message[0] == "error":
                    raise_worker_failure(f"rollout worker {worker_id}", message[2], PopulationRunnerError)
                index, result = int(message[1]), message[2]
                self._in_flight[worker_id].remove(index)
                self._last_progress[worker_id] = time.monotonic()
                self._answered[worker_id] = True
                if results[index] is None:
                    results[index] = result
                    remaining -= 1
            self._watch(pending)
        return [result for result in results if result is not None]

    def _dispatch(self, pending: deque[int], tasks: Sequence[RolloutTask]) -> None:
        """Give every worker a task before any gets a second (up to :data:`TASKS_IN_FLIGHT`): the first pending one
        it may take (its affinity slot, or any worker), the weights first when it has not got this version yet."""
        for depth in range(TASKS_IN_FLIGHT):
            for worker_id in range(len(self._processes)):
                if len(self._in_flight[worker_id]) <= depth:
                    index = next((i for i in pending if self._may_take(tasks[i], worker_id)), None)
                    if index is not None:
                        pending.remove(index)
                        self._send(worker_id, index, tasks[index])

    def _send(self, worker_id: int, index: int, task: RolloutTask) -> None:
        assert self._weights is not None
        version, weights = self._weights
        conn = self._conns[worker_id]
        assert conn is not None
        if not self._in_flight[worker_id]:
            self._last_progress[worker_id] = time.monotonic()
        self._in_flight[worker_id].append(index)
        try:
            if self._versions[worker_id] != version:
                conn.send(("weights", version, weights))
                self._versions[worker_id] = version
            conn.send(("task", index, task))
        except (BrokenPipeError, OSError):
            pass  # it died: _watch replaces it and re-issues what it held

    def _may_take(self, task: RolloutTask, worker_id: int) -> bool:
        affinity = task.affinity
        return affinity is None or affinity % len(self._processes) == worker_id

    def _watch(self, pending: deque[int]) -> None:
        """Replace workers that died (once their pipe is drained), and workers holding tasks silent too long."""
        now = time.monotonic()
        for worker_id, process in enumerate(self._processes):
            conn = self._conns[worker_id]
            if not process.is_alive() and conn is not None and not conn.poll():
                self._replace(worker_id, f"died (exit code {process.exitcode})", pending)
            elif self._in_flight[worker_id] and now - self._last_progress[worker_id] > self._timeout:
                self._replace(worker_id, f"returned nothing for {self._timeout:g} s", pending)

    def _replace(self, worker_id: int, why: str, pending: deque[int]) -> None:
        process, conn = self._processes[worker_id], self._conns[worker_id]
        if process.is_alive():
            process.kill()
        process.join(timeout=10)
        if conn is not None:
            conn.close()
            self._conns[worker_id] = None  # closed: close() skips it if the run stops before a replacement exists
        lost = sorted(self._in_flight[worker_id])
        self._in_flight[worker_id] = []
        pending.extendleft(reversed(lost))  # at the front, in task order
        self.reissued += len(lost)
        self._failed_starts.replaced(worker_id, self._answered[worker_id], why)
        old_pid = process.pid
        self._spawn(worker_id)
        self.replacements += 1
        log.warning(
            "rollout worker %d (pid %s) %s; %d rollout task(s) re-issued; replaced by a new worker process (pid %s)",
            worker_id,
            old_pid,
            why,
            len(lost),
            self._processes[worker_id].pid,
        )

    def close(self) -> None:
        for conn in self._conns:
            if conn is not None:
                with contextlib.suppress(BrokenPipeError, OSError):
                    conn.send(("stop",))
        for process in self._processes:
            if process is not None:
                process.join(timeout=5)
                if process.is_alive():
                    process.kill()
                    process.join(timeout=5)
        for conn in self._conns:
            if conn is not None:
                conn.close()
        self._conns = [None] * len(self._conns)
