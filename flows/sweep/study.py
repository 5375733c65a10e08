"""The sweep's Optuna study: create or load it, tell outcomes, and recover trials of stopped processes.

Optuna keeps a study's storage private, so :class:`SweepStudy` holds the storage it opened the study on
and looks trials up there by number (``get_trial_id_from_study_id_trial_number``), through public API only.

Stale trials. The process that asks for a trial owns it until it tells the result; it records its
host, process id and start time, and a heartbeat every ``sweep.heartbeat_seconds``, in the trial's
system attributes. Before each new trial, a RUNNING trial whose owner process is gone (same host) or
whose heartbeat is older than ``sweep.stale_after_seconds`` (any host) is failed, and its params are
queued again (at most ``sweep.max_retries`` times), so a killed sweep never leaves a trial RUNNING.
"""

from __future__ import annotations

import contextlib
import os
import socket
import threading
import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import optuna
from optuna.exceptions import ExperimentalWarning, UpdateFinishedTrialError
from optuna.storages import BaseStorage, RDBStorage
from optuna.trial import FrozenTrial, TrialState

from flows.sweep.search import make_pruner, make_sampler
from flows.sweep.storage import open_storage, racing_schema_creation
from rlcore.config.sweep import SweepConfig

OWNER = "rlcore:owner"
HEARTBEAT = "rlcore:heartbeat"

optuna.logging.set_verbosity(optuna.logging.WARNING)


@dataclass(frozen=True)
class SweepStudy:
    """A study as the process that asks for its trials holds it: with the storage it was opened on."""

    study: optuna.Study
    storage: BaseStorage
    study_id: int

    @classmethod
    def create(cls, spec: str, name: str, sweep: SweepConfig) -> SweepStudy:
        """Create the study, or load it to continue (its finished trials are kept); for the owning process."""
        storage = open_storage(spec, sweep, heartbeats=True)
        study = racing_schema_creation(
            lambda: optuna.create_study(
                study_name=name,
                storage=storage,
                direction=sweep.direction,
                sampler=make_sampler(sweep),
                pruner=make_pruner(sweep),
                load_if_exists=True,
            )
        )
        return cls(study, storage, storage.get_study_id_from_name(name))

    def trial_id(self, number: int) -> int:
        """The storage's id of trial ``number`` (what ``optuna.trial.Trial`` and the storage's setters take)."""
        return self.storage.get_trial_id_from_study_id_trial_number(self.study_id, number)

    def tell(self, number: int, value: float | None = None, state: TrialState | None = None) -> None:
        """``study.tell``, minus the grid sampler's "grid exhausted" stop, which only works inside ``optimize``."""
        try:
            self.study.tell(number, value, state=state)
        except RuntimeError as exc:
            if "Study.stop" not in str(exc):
                raise

    def fail(self, trial: FrozenTrial, why: str) -> None:
        """Record why in the trial's ``error`` user attribute, then mark it FAIL."""
        self.storage.set_trial_user_attr(self.trial_id(trial.number), "error", why)
        self.tell(trial.number, state=TrialState.FAIL)

    def fail_and_retry(self, trial_id: int, why: str, max_retries: int) -> None:
        """Fail the trial ``trial_id`` (if still running) and queue its params again."""
        trial = self.storage.get_trial(trial_id)
        if trial.state != TrialState.RUNNING:
            return
        with contextlib.suppress(UpdateFinishedTrialError, RuntimeError, ValueError):
            self.fail(trial, why)
            self.retry(trial, max_retries)

    def retry(self, trial: FrozenTrial, max_retries: int) -> None:
        """Queue ``trial``'s params again as a WAITING trial (as Optuna's RetryHeartbeatStaleTrialCallback does)."""
        history = [*trial.system_attrs.get("retry_history", []), trial.number]
        if len(history) > max_retries:
            return
        self.study.add_trial(
            optuna.trial.create_trial(
                state=TrialState.WAITING,
                params=trial.params,
                distributions=trial.distributions,
                system_attrs={"failed_trial": history[0], "retry_history": history},
            )
        )

    def recover_stale_trials(self, sweep: SweepConfig, asks_are_locked: bool = False) -> list[int]:
        """Fail the RUNNING trials of dead processes and queue their params again; returns their numbers.
        ``asks_are_locked``: called under a study lock that every asking process holds while it asks and claims
        (``flows.sweep.storage.asks_are_locked``), so an unclaimed RUNNING trial is a dead asker's at once."""
        if isinstance(self.storage, RDBStorage):  # Optuna's heartbeats (their callback queues the retry)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", ExperimentalWarning)
                optuna.storages.fail_stale_trials(self.study)
        now = time.time()
        recovered = []
        for trial in self.study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
            if not is_stale(trial, sweep, now, unclaimed_is_stale=asks_are_locked):
                continue
            try:
                self.fail(trial, "its process stopped (killed?) while it was running")
            except (UpdateFinishedTrialError, RuntimeError, ValueError):
                continue  # another process finished or failed it first
            self.retry(trial, sweep.max_retries)
            recovered.append(trial.number)
        return recovered


def load_study(spec: str, name: str, sweep: SweepConfig) -> optuna.Study:
    """The study as a trial's worker process sees it: reports and pruning only (it never samples)."""
    return optuna.load_study(
        study_name=name,
        storage=open_storage(spec, sweep),
        sampler=optuna.samplers.RandomSampler(),
        pruner=make_pruner(sweep),
    )


def owner() -> dict[str, Any]:
    """Who owns a trial: this host (and PID namespace), this process and its start time."""
    return {"machine": _machine(), "pid": os.getpid(), "started": _process_start(os.getpid())}


def _machine() -> str:
    try:
        namespace = os.stat("/proc/self/ns/pid").st_ino
    except OSError:
        namespace = 0
    return f"{socket.gethostname()}/{namespace}"


def _process_start(pid: int) -> str | None:
    """The process's start time in clock ticks since boot (Linux), so a reused PID is not mistaken for it."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat.rsplit(")", 1)[1].split()[19]


def _owner_gone(record: dict[str, Any]) -> bool:
    if record.get("machine") != _machine():
        return False
    pid = int(record["pid"])
    if Path("/proc").is_dir():
        return _process_start(pid) != record.get("started")
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    return False


def is_stale(trial: FrozenTrial, sweep: SweepConfig, now: float, unclaimed_is_stale: bool = False) -> bool:
    """A RUNNING trial whose owner process is gone (same host) or whose heartbeat is older than
    ``sweep.stale_after_seconds``. One never claimed was asked for by a process that died before claiming it: stale
    at once when ``unclaimed_is_stale`` (asking and claiming are one step under the study lock), else after
    ``stale_after_seconds`` (a sweep that ended sooner left it RUNNING, one trial short)."""
    record = trial.system_attrs.get(OWNER)
    if trial.state != TrialState.RUNNING:
        return False
    if not isinstance(record, dict):  # asked for, but its process died before claiming it
        if unclaimed_is_stale:
            return True
        started = trial.datetime_start.timestamp() if trial.datetime_start else now
        return now - started > sweep.stale_after_seconds
    beat = float(trial.system_attrs.get(HEARTBEAT, 0.0))
    return _owner_gone(record) or now - beat > sweep.stale_after_seconds


class Heartbeat:
    """A thread recording a heartbeat for every trial this process owns, every ``interval`` seconds."""

    def __init__(self, storage: BaseStorage, interval: float) -> None:
        self.storage = storage
        self.interval = interval
        self.trial_ids: set[int] = set()
        self.lock = threading.Lock()
        self.stopped = threading.Event()
        self.thread = threading.Thread(target=self._run, name="sweep-heartbeat", daemon=True)

    def claim(self, trial_id: int) -> None:
        """Mark ``trial_id`` as this process's and record its first heartbeat."""
        self.storage.set_trial_system_attr(trial_id, OWNER, owner())
        self._beat(trial_id)
        with self.lock:
            self.trial_ids.add(trial_id)

    def release(self, trial_id: int) -> None:
        with self.lock:
            self.trial_ids.discard(trial_id)

    def _beat(self, trial_id: int) -> None:
        if isinstance(self.storage, RDBStorage):
            self.storage.record_heartbeat(trial_id)
        self.storage.set_trial_system_attr(trial_id, HEARTBEAT, time.time())

    def _run(self) -> None:
        while not self.stopped.wait(self.interval):
            with self.lock:
                owned = sorted(self.trial_ids)
            for trial_id in owned:
                with contextlib.suppress(UpdateFinishedTrialError, KeyError):
                    self._beat(trial_id)

    def __enter__(self) -> Heartbeat:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stopped.set()
        self.thread.join()
