"""One supervisor for a runner's worker subprocesses: started to die with the learner, one pipe each, watched,
replaced when lost (failed starts counted), closed.

IMPALA's local actors and ES/SVPG's local rollout workers both run through a :class:`Supervisor`; what is theirs
stays in their runner (credits and shared-memory weights; task dispatch and re-issue). A worker that exits,
breaks its pipe, or is busy but silent for ``timeout_seconds`` is reported (a warning naming it and why), its
runner takes back the work it held, and a new process takes its place with the next incarnation; one that keeps
dying before it delivered anything stops the run (:class:`rlcore.workers.failed_starts.FailedStarts`).
"""

from __future__ import annotations

import contextlib
import logging
import multiprocessing as mp
import pickle
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from multiprocessing.connection import Connection, wait
from multiprocessing.process import BaseProcess
from typing import Any

from rlcore.common.errors import RLCoreError, raise_worker_failure
from rlcore.workers.failed_starts import FailedStarts
from rlcore.workers.parent_death import start_child

log = logging.getLogger("rlcore")


@dataclass(frozen=True)
class WorkerKind:
    """What a :class:`Supervisor` starts, and the words its warnings and errors use for it."""

    noun: str
    """A worker in warnings and errors: "actor", "rollout worker"."""
    process_name: str
    """Processes are named ``<process_name>-<worker id>`` (tests and operators find them by it)."""
    main: Callable[..., None]
    """What each process runs: ``main(*args, conn)``, ``args`` from the supervisor's ``args`` function. A worker
    that fails sends :func:`rlcore.common.errors.worker_failure` of its exception down ``conn``."""
    duplex: bool
    """Whether the learner sends down the pipe too (tasks), not only receives from it (trajectories)."""
    delivery: str
    """What a worker that started delivers, for the failed-starts error: "sending a trajectory"."""
    silence: str
    """Why a busy worker silent for the timeout is replaced: "sent nothing" (then "for 60 s")."""
    replacement: str
    """The warning's end: "a new actor process (pid {pid}, incarnation {incarnation})", the new process's."""
    error: type[RLCoreError]
    """The error a worker's failure, or workers that cannot start, stop the run with."""
    exit_wait_seconds: float
    """How long to wait for a worker's exit code once its pipe closed (a closed pipe is most often a death)."""


@dataclass
class _Worker:
    """One worker process and what the supervisor knows of it."""

    process: BaseProcess
    conn: Connection | None
    """The learner's end of its pipe; None once closed (by :meth:`Supervisor.close`, or lost and not replaced)."""
    incarnation: int
    """0 for the first process of this worker id, one more for each replacement."""
    delivered: bool = False
    """It sent something (so it started, whatever happens to it later)."""
    last_progress: float = 0.0
    """``time.monotonic()`` of its last sign of progress (spawned, delivered, or what its runner counts)."""


class Supervisor:
    """``count`` worker processes of one :class:`WorkerKind` (see the module docstring).

    ``args(worker_id, incarnation)`` gives a new process's arguments (``conn`` is added last); ``on_lost(worker_id)``
    is called when a worker was lost, its process gone, before the failed-start accounting and its replacement: the
    runner counts the replacement, takes back what the worker held and returns what it did, as a clause ending in
    "; " for the warning ("3 rollout task(s) re-issued; "), or "".
    """

    def __init__(
        self,
        kind: WorkerKind,
        count: int,
        timeout_seconds: float,
        args: Callable[[int, int], tuple[Any, ...]],
        on_lost: Callable[[int], str],
    ) -> None:
        self.kind = kind
        self.count = count
        self._ctx = mp.get_context("spawn")
        self._timeout = timeout_seconds
        self._args = args
        self._on_lost = on_lost
        self._failed_starts = FailedStarts(count, kind.noun, kind.delivery, kind.error)
        self._workers: list[_Worker] = []

    def start(self) -> None:
        """Start every worker."""
        for worker_id in range(self.count):
            self._workers.append(self._spawn(worker_id, 0))

    def _spawn(self, worker_id: int, incarnation: int) -> _Worker:
        conn, theirs = self._ctx.Pipe(duplex=self.kind.duplex)  # one-way: the first end receives
        args = (*self._args(worker_id, incarnation), theirs)
        process = start_child(self._ctx, self.kind.main, args, f"{self.kind.process_name}-{worker_id}")
        theirs.close()  # the child holds the only other end: its death closes the pipe
        return _Worker(process, conn, incarnation, last_progress=time.monotonic())

    def messages(self, timeout_seconds: float) -> Iterator[tuple[int, Any]]:
        """(worker id, message) of each message workers sent, waiting up to ``timeout_seconds`` for the first.
        A worker whose pipe closed is replaced; a worker's failure is raised as the kind's error."""
        conns = {worker.conn: worker_id for worker_id, worker in enumerate(self._workers) if worker.conn is not None}
        for ready in wait(list(conns), timeout=timeout_seconds):
            assert isinstance(ready, Connection)
            worker_id = conns[ready]
            try:
                message = ready.recv()
            except (EOFError, OSError, pickle.UnpicklingError):
                process = self._workers[worker_id].process
                process.join(timeout=self.kind.exit_wait_seconds)  # a closed pipe: the process is exiting
                code = process.exitcode
                self._replace(worker_id, f"died (exit code {code})" if code is not None else "broke its pipe")
                continue
            if isinstance(message, RLCoreError):  # what the worker raised (worker_failure)
                raise_worker_failure(f"{self.kind.noun} {worker_id}", message, self.kind.error)
            yield worker_id, message

    def delivered(self, worker_id: int) -> None:
        """``worker_id`` delivered what it is for: it started, and it progresses."""
        self._workers[worker_id].delivered = True
        self.progressed(worker_id)

    def progressed(self, worker_id: int) -> None:
        """``worker_id`` shows progress now: its silence counts from here."""
        self._workers[worker_id].last_progress = time.monotonic()

    def send(self, worker_id: int, message: Any) -> None:
        """Send ``message`` to ``worker_id``; a worker that died meanwhile is left to :meth:`watch`."""
        conn = self._workers[worker_id].conn
        if conn is not None:
            with contextlib.suppress(BrokenPipeError, OSError):
                conn.send(message)

    def watch(self, busy: Callable[[int], bool]) -> None:
        """Replace workers that died (once their pipe is drained), and workers ``busy(worker_id)`` but silent
        for the timeout (a worker with nothing to do is idle, not stuck)."""
        now = time.monotonic()
        for worker_id, worker in enumerate(self._workers):
            process, conn = worker.process, worker.conn
            if not process.is_alive() and conn is not None and not conn.poll():
                self._replace(worker_id, f"died (exit code {process.exitcode})")
            elif busy(worker_id) and now - worker.last_progress > self._timeout:
                self._replace(worker_id, f"{self.kind.silence} for {self._timeout:g} s")

    def _replace(self, worker_id: int, why: str) -> None:
        lost = self._workers[worker_id]
        if lost.process.is_alive():
            lost.process.kill()
        lost.process.join(timeout=10)
        if lost.conn is not None:
            lost.conn.close()
            lost.conn = None  # closed: close() skips it if the run stops before a replacement exists
        taken_back = self._on_lost(worker_id)
        self._failed_starts.replaced(worker_id, lost.delivered, why)
        new = self._workers[worker_id] = self._spawn(worker_id, lost.incarnation + 1)
        log.warning(
            "%s %d (pid %s) %s; %sreplaced by %s",
            self.kind.noun,
            worker_id,
            lost.process.pid,
            why,
            taken_back,
            self.kind.replacement.format(pid=new.process.pid, incarnation=new.incarnation),
        )

    def drain(self) -> None:
        """Read and drop what workers are sending, so none stays blocked on a full pipe."""
        for worker in self._workers:
            while worker.conn is not None and worker.conn.poll(0):
                try:
                    worker.conn.recv()
                except (EOFError, OSError, pickle.UnpicklingError):
                    break

    def close(self) -> None:
        """Wait for every worker to exit (5 s; killed after that), and close the pipes."""
        for worker in self._workers:
            worker.process.join(timeout=5)
            if worker.process.is_alive():
                worker.process.kill()
                worker.process.join(timeout=5)
        for worker in self._workers:
            if worker.conn is not None:
                worker.conn.close()
                worker.conn = None
