"""Runners: where an actor-learner run's actors live, behind one interface the learner calls.

| runner    | actors                              | weights to actors                 | trajectories to the learner |
|-----------|-------------------------------------|-----------------------------------|-----------------------------|
| ``dev``   | in the learner's process, in turn   | set directly                      | returned                    |
| ``local`` | one spawned subprocess each         | one shared-memory block + version | one pipe per actor          |
| ``dask``  | one long-running task each          | a Dask Variable                   | a Dask Queue                |
|           | (``dask_runner``)                   |                                   |                             |

At most ``queue_size`` trajectories are in flight (being made, in transit, or waiting for the learner): an
actor takes a credit before each trajectory and the learner gives it back when it takes the trajectory,
so actors never run ahead of the learner by more than that, and the policy lag stays bounded.

A runner watches its actors: one that exits, breaks its pipe or sends nothing for ``actor_timeout_seconds``
is reported (a warning naming it and why) and replaced by a new one with fresh seeds; the run goes on.

The seeds of ``train.seeds`` share the actors: each seed is a lane, with its own published weights and versions,
and every actor process rolls out for each unfinished lane in turn (``rlcore.workers.actors.actor.SeedActors``).
The learner collects one lane's trajectories at a time; another lane's that arrive meanwhile wait for it. The
credits are ``queue_size`` per lane, so each seed has as many trajectories in flight as its one-seed run.
"""

from __future__ import annotations

import contextlib
import multiprocessing as mp
import time
from abc import ABC, abstractmethod
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import asdict
from multiprocessing.connection import Connection
from typing import Any

import numpy as np
import torch

from rlcore.common.errors import RLCoreError, worker_failure
from rlcore.workers.actors.actor import Actor, ActorSpec, SeedActors, Streams
from rlcore.workers.processes import Supervisor, WorkerKind

SpecFactory = Callable[[int, int], list[ActorSpec]]
"""(actor id, incarnation) -> the specs of that actor, one per lane (seed); a replaced actor gets the next
incarnation."""


class ActorError(RLCoreError):
    """Actors cannot run: they keep dying before sending anything."""


class Runner(ABC):
    """Starts actors, publishes weights to them, and hands the learner their trajectories."""

    def __init__(self, lanes: int) -> None:
        self.replacements = 0
        """Actors replaced so far (each one also logged as a warning)."""
        self.dropped = [0] * lanes
        """Each lane's trajectories dropped for a policy lag above ``max_policy_lag``."""
        self.retired = [False] * lanes
        """Lanes whose seed finished: actors no longer roll out for them."""
        self._waiting: list[deque[dict[str, Any]]] = [deque() for _ in range(lanes)]

    @abstractmethod
    def start(self, weights: Sequence[np.ndarray], version: int) -> None:
        """Start the actors acting with each lane's ``weights`` (flat float64) of ``version``."""

    @abstractmethod
    def publish(self, weights: np.ndarray, version: int, lane: int = 0) -> None:
        """Make ``weights`` of ``version`` the ones actors use for ``lane`` from its next trajectory on."""

    @abstractmethod
    def _next(self, lane: int) -> dict[str, Any]:
        """The next trajectory any actor finished (blocks); ``lane``: the one the learner waits for."""

    def _taken(self) -> None:  # noqa: B027 - runners without credits do nothing
        """The learner took a trajectory: its credit goes back to the actors."""

    def retire(self, lane: int) -> None:
        """Lane ``lane``'s seed finished: no more trajectories for it (those on their way are discarded)."""
        self.retired[lane] = True
        self._waiting[lane].clear()

    def collect(self, count: int, min_version: int, lane: int = 0) -> list[dict[str, Any]]:
        """``count`` trajectories of ``lane`` made with weights of version ``min_version`` or later (older ones
        are dropped and counted in :attr:`dropped`); other lanes' that arrive meanwhile wait for their turn."""
        batch: list[dict[str, Any]] = []
        while len(batch) < count:
            if self._waiting[lane]:
                trajectory = self._waiting[lane].popleft()
            else:
                trajectory = self._next(lane)
                self._taken()
                arrived = int(trajectory["lane"])
                if arrived != lane:
                    if not self.retired[arrived]:
                        self._waiting[arrived].append(trajectory)
                    continue
            if int(trajectory["version"]) < min_version:
                self.dropped[lane] += 1
                continue
            batch.append(trajectory)
        return batch

    def close(self) -> None:  # noqa: B027 - in-process runners hold nothing to release
        pass

    def __enter__(self) -> Runner:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class DevRunner(Runner):
    """Actors in the learner's process, taking turns (each lane's in its own turn order), sampling from torch's
    global generator in each lane's ``streams`` (the learner's seeds' generator states; None: the generator as it
    is, one lane): reproducible and easy to debug (no lag, no parallelism)."""

    def __init__(self, make_spec: SpecFactory, num_actors: int, lanes: int = 1, streams: Streams | None = None) -> None:
        super().__init__(lanes)
        self.actors: list[SeedActors] = []
        streams = streams or (lambda lane: contextlib.nullcontext())
        try:
            for actor_id in range(num_actors):
                self.actors.append(SeedActors(make_spec(actor_id, 0), streams))
        except BaseException:
            self.close()
            raise
        self._turns = [0] * lanes
        self._weights: list[tuple[int, np.ndarray] | None] = [None] * lanes

    def start(self, weights: Sequence[np.ndarray], version: int) -> None:
        for lane, flat in enumerate(weights):
            self.publish(flat, version, lane)

    def publish(self, weights: np.ndarray, version: int, lane: int = 0) -> None:
        self._weights[lane] = (version, weights)

    def _next(self, lane: int) -> dict[str, Any]:
        published = self._weights[lane]
        assert published is not None, "start() first"
        actors = self.actors[self._turns[lane] % len(self.actors)]
        self._turns[lane] += 1
        version, weights = published
        actor = actors.actors[lane]
        if actor.version != version:
            actor.set_weights(version, weights)
        return actors.rollout(lane)

    def close(self) -> None:
        for actors in self.actors:
            actors.close()


def _local_actor_main(
    spec_fields: list[dict[str, Any]],
    weights: Any,
    versions: Any,
    retired: Any,
    credits: Any,
    acquired: Any,
    stop: Any,
    conn: Connection,
) -> None:
    """A subprocess actor: take a credit, refresh the next unfinished lane's weights if a newer version is
    published, send its trajectory. Started by :func:`rlcore.workers.parent_death.start_child`, so it dies with the
    learner: a SIGKILLed learner gives no credit back, and would leave its actors waiting for one forever.
    ``spec_fields``: each lane's :class:`ActorSpec`'s fields (plain data, unpickled before the child has tied its
    life to the learner's)."""
    specs = [ActorSpec(**fields) for fields in spec_fields]
    actor_id = specs[0].actor_id
    torch.set_num_threads(1)
    flat = np.frombuffer(weights, dtype=np.float64).reshape(len(specs), -1)
    version = np.frombuffer(versions, dtype=np.int64).reshape(len(specs), 2)
    finished = np.frombuffer(retired, dtype=np.int8)
    taken = np.frombuffer(acquired, dtype=np.int64)
    actors: SeedActors | None = None
    try:
        actors = SeedActors(specs)
        while not stop.is_set():
            lane = actors.next_lane(lambda lane: not finished[lane])
            if lane is None:
                time.sleep(0.05)  # every seed finished: the learner is closing the run
                continue
            if not credits.acquire(timeout=0.2):
                continue
            taken[actor_id] += 1  # only this actor's process writes its slot
            _refresh(actors.actors[lane], flat[lane], version[lane])
            conn.send(actors.rollout(lane))
    except (BrokenPipeError, EOFError, KeyboardInterrupt):
        pass  # the learner closed the run
    except Exception as exc:  # a bad env or wrapper, a bug: the learner raises it (one line, no traceback here)
        with contextlib.suppress(BrokenPipeError, EOFError, OSError):
            conn.send(worker_failure(exc))
    finally:
        if actors is not None:
            actors.close()


def _refresh(actor: Actor, flat: np.ndarray, version: np.ndarray) -> None:
    """Copy the published weights if they are newer (a sequence lock: the learner writes ``version[0]``, the
    weights, then ``version[1]``; a copy is consistent when both read the same before and after it)."""
    while True:
        published = int(version[1])
        if published == actor.version:
            return
        copy = flat.copy()
        if int(version[0]) == published:
            actor.set_weights(published, copy)
            return
        time.sleep(0.0005)  # the learner is writing: read again


ACTORS = WorkerKind(
    noun="actor",
    process_name="rlcore-actor",
    main=_local_actor_main,
    duplex=False,
    delivery="sending a trajectory",
    silence="sent nothing",
    replacement="a new actor process (pid {pid}, incarnation {incarnation})",
    error=ActorError,
    exit_wait_seconds=2.0,
)
"""The local runner's actor processes, for their :class:`Supervisor`."""


class LocalRunner(Runner):
    """One spawned subprocess per actor on this machine (see the module docstring), supervised by
    :class:`rlcore.workers.processes.Supervisor`; this runner keeps the credits, the shared-memory weights and the
    trajectories' pipes' protocol."""

    def __init__(
        self,
        make_spec: SpecFactory,
        num_actors: int,
        weights_size: int,
        queue_size: int,
        timeout_seconds: float,
        lanes: int = 1,
    ) -> None:
        super().__init__(lanes)
        ctx = mp.get_context("spawn")
        self._make_spec = make_spec
        self._weights = ctx.RawArray("d", lanes * weights_size)
        self._versions = ctx.RawArray("q", lanes * 2)
        self._retired = ctx.RawArray("b", lanes)
        self._acquired = ctx.RawArray("q", num_actors)
        self._credits = ctx.Semaphore(queue_size * lanes)
        self._stop = ctx.Event()
        self._flat = np.frombuffer(self._weights, dtype=np.float64).reshape(lanes, weights_size)
        self._version = np.frombuffer(self._versions, dtype=np.int64).reshape(lanes, 2)
        self._finished = np.frombuffer(self._retired, dtype=np.int8)
        self._taken_by = np.frombuffer(self._acquired, dtype=np.int64)
        self._received = np.zeros(num_actors, dtype=np.int64)
        self._seen_taken = np.zeros(num_actors, dtype=np.int64)
        self._ready: deque[dict[str, Any]] = deque()
        self._actors = Supervisor(ACTORS, num_actors, timeout_seconds, self._actor_args, self._take_back)

    def start(self, weights: Sequence[np.ndarray], version: int) -> None:
        for lane, flat in enumerate(weights):
            self.publish(flat, version, lane)
        self._actors.start()

    def publish(self, weights: np.ndarray, version: int, lane: int = 0) -> None:
        self._version[lane, 0] = version
        self._flat[lane] = weights
        self._version[lane, 1] = version

    def retire(self, lane: int) -> None:
        super().retire(lane)
        self._finished[lane] = 1

    def _actor_args(self, actor_id: int, incarnation: int) -> tuple[Any, ...]:
        specs = [asdict(spec) for spec in self._make_spec(actor_id, incarnation)]
        return (specs, self._weights, self._versions, self._retired, self._credits, self._acquired, self._stop)

    def _take_back(self, actor_id: int) -> str:
        """A lost actor: the credits it took for trajectories that never arrived go back to the pool."""
        self.replacements += 1
        for _ in range(int(self._taken_by[actor_id] - self._received[actor_id])):
            self._credits.release()
        self._received[actor_id] = self._taken_by[actor_id]
        return ""

    def _next(self, lane: int) -> dict[str, Any]:
        while not self._ready:
            for actor_id, trajectory in self._actors.messages(timeout_seconds=1.0):
                self._received[actor_id] += 1
                self._actors.delivered(actor_id)
                self._ready.append(trajectory)
            self._watch()
        return self._ready.popleft()

    def _watch(self) -> None:
        """Replace actors that died, and actors that hold a credit but have sent nothing for the timeout (an
        actor waiting for a credit is idle, not stuck; taking one is progress)."""
        for actor_id in range(self._actors.count):
            taken = int(self._taken_by[actor_id])
            if taken != self._seen_taken[actor_id]:
                self._seen_taken[actor_id] = taken
                self._actors.progressed(actor_id)
        self._actors.watch(lambda actor_id: bool(self._taken_by[actor_id] > self._received[actor_id]))

    def _taken(self) -> None:
        self._credits.release()

    def close(self) -> None:
        self._stop.set()
        self._actors.drain()  # unblock actors waiting to send
        self._actors.close()
