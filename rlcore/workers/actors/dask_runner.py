"""The ``dask`` runner: each actor is one long-running task on a Dask cluster.

The cluster is ``deploy.dask_address`` (the one sweeps and collection shards use) or, when that is null, a
LocalCluster of ``num_actors`` single-thread worker processes on 127.0.0.1 started for the run and closed
after it. The learner and the actors meet through named objects on the scheduler, so nothing but a few
numbers and the trajectories crosses the network:

- ``<channel>-version`` (a Variable): each lane's (seed's) newest weights version, None once its seed finished;
  ``<channel>-weights-<lane>`` holds ``(version, flat weights)`` and is read only when the version changed;
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
from collections.abc import Sequence
from functools import partial
from typing import Any

import numpy as np
import torch

from rlcore.common.errors import RLCoreError
from rlcore.workers.actors.actor import ActorSpec, SeedActors
from rlcore.workers.actors.runners import ActorError, Runner, SpecFactory
from rlcore.workers.dask_cluster import local_cluster_kwargs
from rlcore.workers.failed_starts import FailedStarts

log = logging.getLogger("rlcore")


def _published(versions: list[int | None], lane: int) -> bool:
    """Whether ``lane``'s seed is still training (a retired lane's version is None)."""
    return versions[lane] is not None


def dask_actor(specs: list[ActorSpec], channel: str, incarnation: int, max_queued: int) -> int:
    """The body of an actor task (one spec per lane): announce itself, then roll out trajectories for each
    unfinished lane in turn until the stop event. Returns the number of trajectories it sent."""
    from distributed import Event, Queue, Variable, get_worker

    torch.set_num_threads(1)
    queue, stop = Queue(f"{channel}-trajectories"), Event(f"{channel}-stop")
    version_var = Variable(f"{channel}-version")
    actors = SeedActors(specs)
    actor_id = specs[0].actor_id
    sent = 0
    try:
        queue.put({"kind": "started", "actor_id": actor_id, "incarnation": incarnation, "worker": get_worker().address})
        while not stop.is_set():
            versions: list[int | None] = version_var.get()
            lane = actors.next_lane(partial(_published, versions))
            if lane is None:
                time.sleep(0.05)  # every seed finished: the learner is closing the run
                continue
            actor = actors.actors[lane]
            if versions[lane] != actor.version:
                version, weights = Variable(f"{channel}-weights-{lane}").get()
                actor.set_weights(int(version), np.asarray(weights))
            trajectory = actors.rollout(lane)
            # Wait for room rather than put with a timeout: a timed-out queue operation is logged as an error
            # by the scheduler. Two actors may both see room; the second then waits in put for the learner.
            while queue.qsize() >= max_queued and not stop.is_set():
                time.sleep(0.005)
            if not stop.is_set():
                queue.put({"kind": "trajectory", "actor_id": actor_id, "trajectory": trajectory})
                sent += 1
    finally:
        actors.close()
    return sent


class DaskRunner(Runner):
    """Actors as tasks on a Dask cluster (see the module docstring)."""

    def __init__(
        self,
        make_spec: SpecFactory,
        num_actors: int,
        queue_size: int,
        timeout_seconds: float,
        address: str | None,
        lanes: int = 1,
    ) -> None:
        super().__init__(lanes)
        from distributed import Client, Event, LocalCluster, Queue, Variable

        self._make_spec = make_spec
        self._num_actors = num_actors
        self._timeout = timeout_seconds
        self._queue_size = queue_size * lanes
        self._cluster = None if address else LocalCluster(**local_cluster_kwargs(num_actors))
        self._client = Client(address or self._cluster)
        self.channel = f"rlcore-actors-{uuid.uuid4().hex[:12]}"
        self._queue = Queue(f"{self.channel}-trajectories", client=self._client, maxsize=self._queue_size)
        self._version = Variable(f"{self.channel}-version", client=self._client)
        self._versions: list[int | None] = [None] * lanes
        self._weights = [Variable(f"{self.channel}-weights-{lane}", client=self._client) for lane in range(lanes)]
        self._stop = Event(f"{self.channel}-stop", client=self._client)
        self._futures: list[Any] = [None] * num_actors
        self._incarnations = [0] * num_actors
        self._failed_starts = FailedStarts(num_actors, "actor", "sending a trajectory", ActorError)
        self._announced: set[tuple[int, int]] = set()
        self._last_progress = [0.0] * num_actors

    def start(self, weights: Sequence[np.ndarray], version: int) -> None:
        for lane, flat in enumerate(weights):
            self.publish(flat, version, lane)
        for actor_id in range(self._num_actors):
            self._submit(actor_id)

    def publish(self, weights: np.ndarray, version: int, lane: int = 0) -> None:
        self._weights[lane].set((version, weights))
        self._versions[lane] = version
        self._version.set(list(self._versions))

    def retire(self, lane: int) -> None:
        super().retire(lane)
        self._versions[lane] = None
        self._version.set(list(self._versions))

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

    def _next(self, lane: int) -> dict[str, Any]:
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
