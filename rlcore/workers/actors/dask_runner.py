"""The ``dask`` runner: each actor is one long-running task on a Dask cluster.

The cluster is ``deploy.dask_address`` (the one sweeps and collection shards use) or, when that is null, a
LocalCluster of ``num_actors`` single-thread worker processes on 127.0.0.1 started for the run and closed
after it. The learner and the actors meet through named objects on the scheduler, so nothing but a few
numbers and the trajectories crosses the network:

- ``<channel>-version`` (a Variable): the newest weights version; ``<channel>-weights`` holds
  ``(version, flat weights)`` and is read only when the version changed;
- ``<channel>-trajectories`` (a Queue): what actors send; an actor waits while it holds ``queue_size``
  trajectories, so it never runs more than one trajectory ahead of a full queue;
- ``<channel>-stop`` (an Event): set when the run ends.

A worker that dies takes its actor with it; Dask runs the task again on a live worker (or the restarted one)
and the actor announces itself again: the learner reports it as replaced. A task that fails for good, or an
actor silent for ``actor_timeout_seconds``, is resubmitted as a new incarnation.
"""

from __future__ import annotations

import logging
import time
import uuid
from typing import Any

import numpy as np
import torch

from rlcore.common.errors import RLCoreError
from rlcore.workers.actors.actor import Actor, ActorSpec
from rlcore.workers.actors.runners import ActorError, Runner, SpecFactory
from rlcore.workers.dask_cluster import local_cluster_kwargs
from rlcore.workers.failed_starts import FailedStarts

log = logging.getLogger("rlcore")


def dask_actor(spec: ActorSpec, channel: str, incarnation: int, max_queued: int) -> int:
    """The body of an actor task: announce itself, then roll out trajectories until the stop event.
    Returns the number of trajectories it sent."""
    from distributed import Event, Queue, Variable, get_worker

    torch.set_num_threads(1)
    torch.manual_seed(spec.sampling_seed)
    queue, stop = Queue(f"{channel}-trajectories"), Event(f"{channel}-stop")
    version_var, weights_var = Variable(f"{channel}-version"), Variable(f"{channel}-weights")
    actor = Actor(spec)
    sent = 0
    try:
        queue.put(
            {"kind": "started", "actor_id": spec.actor_id, "incarnation": incarnation, "worker": get_worker().address}
        )
        while not stop.is_set():
            if int(version_var.get()) != actor.version:
                version, weights = weights_var.get()
                actor.set_weights(int(version), np.asarray(weights))
            trajectory = actor.rollout()
            # Wait for room rather than put with a timeout: a timed-out queue operation is logged as an error
            # by the scheduler. Two actors may both see room; the second then waits in put for the learner.
            while queue.qsize() >= max_queued and not stop.is_set():
                time.sleep(0.005)
            if not stop.is_set():
                queue.put({"kind": "trajectory", "actor_id": spec.actor_id, "trajectory": trajectory})
                sent += 1
    finally:
        actor.close()
    return sent


class DaskRunner(Runner):
    """Actors as tasks on a Dask cluster (see the module docstring)."""

    def __init__(
        self, make_spec: SpecFactory, num_actors: int, queue_size: int, timeout_seconds: float, address: str | None
    ) -> None:
        super().__init__()
        from distributed import Client, Event, LocalCluster, Queue, Variable

        self._make_spec = make_spec
        self._num_actors = num_actors
        self._timeout = timeout_seconds
        self._queue_size = queue_size
        self._cluster = None if address else LocalCluster(**local_cluster_kwargs(num_actors))
        self._client = Client(address or self._cluster)
        self.channel = f"rlcore-actors-{uuid.uuid4().hex[:12]}"
        self._queue = Queue(f"{self.channel}-trajectories", client=self._client, maxsize=queue_size)
        self._version = Variable(f"{self.channel}-version", client=self._client)
        self._weights = Variable(f"{self.channel}-weights", client=self._client)
        self._stop = Event(f"{self.channel}-stop", client=self._client)
        self._futures: list[Any] = [None] * num_actors
        self._incarnations = [0] * num_actors
        self._failed_starts = FailedStarts(num_actors, "actor", "sending a trajectory", ActorError)
        self._announced: set[tuple[int, int]] = set()
        self._last_progress = [0.0] * num_actors

    def start(self, weights: np.ndarray, version: int) -> None:
        self.publish(weights, version)
        for actor_id in range(self._num_actors):
            self._submit(actor_id)

    def publish(self, weights: np.ndarray, version: int) -> None:
        self._weights.set((version, weights))
        self._version.set(version)

    def _submit(self, actor_id: int) -> None:
        incarnation = self._incarnations[actor_id]
        self._futures[actor_id] = self._client.submit(
            dask_actor,
            self._make_spec(actor_id, incarnation),
            self.channel,
            incarnation,
            self._queue_size,
            key=f"{self.channel}-actor-{actor_id}-{incarnation}",
            pure=False,
        )
        self._last_progress[actor_id] = time.monotonic()

    def _resubmit(self, actor_id: int, why: str) -> None:
        future = self._futures[actor_id]
        if future.status == "error":
            if isinstance(future.exception(), RLCoreError):  # a user's error (a non-finite value): not retried
                raise ActorError(f"actor {actor_id}: {future.exception()}")
            why = f"{why}: {type(future.exception()).__name__}: {future.exception()}"
        self._failed_starts.replaced(actor_id, (actor_id, self._incarnations[actor_id]) in self._announced, why)
        future.cancel()
        self._incarnations[actor_id] += 1
        self._submit(actor_id)
        self.replacements += 1
        log.warning(
            "actor %d %s; replaced by a new actor task (incarnation %d)", actor_id, why, self._incarnations[actor_id]
        )

    def _next(self) -> dict[str, Any]:
        while True:
            if self._queue.qsize() == 0:  # polled: a timed-out get is logged as an error by the scheduler
                self._watch()
                time.sleep(0.002)
                continue
            message = self._queue.get()
            actor_id = int(message["actor_id"])
            self._last_progress[actor_id] = time.monotonic()
            if message["kind"] == "trajectory":
                trajectory: dict[str, Any] = message["trajectory"]
                return trajectory
            announced = (actor_id, int(message["incarnation"]))
            if announced in self._announced:  # Dask ran the task again: its worker was lost
                self.replacements += 1
                log.warning(
                    "actor %d lost its worker; Dask restarted it on %s (incarnation %d)",
                    actor_id,
                    message["worker"],
                    announced[1],
                )
            self._announced.add(announced)

    def _watch(self) -> None:
        now = time.monotonic()
        for actor_id, future in enumerate(self._futures):
            if future.status in ("error", "cancelled", "lost"):
                self._resubmit(actor_id, f"failed ({future.status})")
            elif future.status == "finished":
                self._resubmit(actor_id, "stopped")
            elif now - self._last_progress[actor_id] > self._timeout:
                self._resubmit(actor_id, f"sent nothing for {self._timeout:g} s")

    def close(self) -> None:
        try:
            self._stop.set()
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline and not all(f is None or f.done() for f in self._futures):
                self._queue.get(batch=True)  # everything queued now: unblocks actors waiting to put
                time.sleep(0.05)
            for future in self._futures:
                if future is not None:
                    future.cancel()
        finally:
            self._client.close()
            if self._cluster is not None:
                self._cluster.close()
