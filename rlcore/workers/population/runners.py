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

from abc import ABC, abstractmethod
from collections import deque
from collections.abc import Sequence
from multiprocessing.connection import Connection
from typing import Any

import numpy as np
import torch

from rlcore.algos.population_tasks import RolloutResult, RolloutTask
from rlcore.common.errors import RLCoreError, worker_failure
from rlcore.workers.population.worker import RolloutWorker
from rlcore.workers.processes import Supervisor, WorkerKind

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
        conn.send(worker_failure(exc))
    finally:
        if worker is not None:
            worker.close()


WORKERS = WorkerKind(
    noun="rollout worker",
    process_name="rlcore-rollout-worker",
    main=_local_worker_main,
    duplex=True,
    delivery="returning a result",
    silence="returned nothing",
    replacement="a new worker process (pid {pid})",
    error=PopulationRunnerError,
    exit_wait_seconds=1.0,
)
"""The local runner's worker processes, for their :class:`Supervisor`."""


class LocalRunner(PopulationRunner):
    """``num_workers`` spawned subprocesses on this machine, each with its own pipe (see the module docstring),
    supervised by :class:`rlcore.workers.processes.Supervisor`; this runner dispatches the tasks and re-issues a
    lost worker's.

    A worker that exits, breaks its pipe, or holds a task for ``timeout_seconds`` without answering is reported,
    replaced by a new process, and the tasks it held are sent again (to it or another worker).
    """

    def __init__(self, tree: dict[str, Any], num_workers: int, timeout_seconds: float) -> None:
        super().__init__()
        self._versions = [-1] * num_workers
        self._in_flight: list[list[int]] = [[] for _ in range(num_workers)]
        self._pending: deque[int] = deque()
        self._weights: tuple[int, np.ndarray] | None = None
        self._workers = Supervisor(WORKERS, num_workers, timeout_seconds, lambda *_: (tree,), self._take_back)
        self._workers.start()

    def run(self, version: int, weights: np.ndarray, tasks: Sequence[RolloutTask]) -> list[RolloutResult]:
        self._weights = (version, weights)
        self._pending = deque(range(len(tasks)))
        results: list[RolloutResult | None] = [None] * len(tasks)
        remaining = len(tasks)
        while remaining:
            self._dispatch(tasks)
            for worker_id, message in self._workers.messages(timeout_seconds=0.5):
                index, result = int(message[1]), message[2]
                self._in_flight[worker_id].remove(index)
                self._workers.delivered(worker_id)
                if results[index] is None:
                    results[index] = result
                    remaining -= 1
            self._workers.watch(lambda worker_id: bool(self._in_flight[worker_id]))
        return [result for result in results if result is not None]

    def _dispatch(self, tasks: Sequence[RolloutTask]) -> None:
        """Give every worker a task before any gets a second (up to :data:`TASKS_IN_FLIGHT`): the first pending one
        it may take (its affinity slot, or any worker), the weights first when it has not got this version yet."""
        for depth in range(TASKS_IN_FLIGHT):
            for worker_id in range(self._workers.count):
                if len(self._in_flight[worker_id]) <= depth:
                    index = next((i for i in self._pending if self._may_take(tasks[i], worker_id)), None)
                    if index is not None:
                        self._pending.remove(index)
                        self._send(worker_id, index, tasks[index])

    def _send(self, worker_id: int, index: int, task: RolloutTask) -> None:
        assert self._weights is not None
        version, weights = self._weights
        if not self._in_flight[worker_id]:
            self._workers.progressed(worker_id)
        self._in_flight[worker_id].append(index)
        if self._versions[worker_id] != version:
            self._workers.send(worker_id, ("weights", version, weights))
            self._versions[worker_id] = version
        self._workers.send(worker_id, ("task", index, task))

    def _may_take(self, task: RolloutTask, worker_id: int) -> bool:
        affinity = task.affinity
        return affinity is None or affinity % self._workers.count == worker_id

    def _take_back(self, worker_id: int) -> str:
        """A lost worker: the tasks it held go back to the front of the pending ones, in task order."""
        self.replacements += 1
        lost = sorted(self._in_flight[worker_id])
        self._in_flight[worker_id] = []
        self._versions[worker_id] = -1  # its replacement has no weights yet
        self._pending.extendleft(reversed(lost))
        self.reissued += len(lost)
        return f"{len(lost)} rollout task(s) re-issued; "

    def close(self) -> None:
        for worker_id in range(self._workers.count):
            self._workers.send(worker_id, ("stop",))
        self._workers.close()
