"""Optuna plumbing of a sweep: storage, sampler, pruner, the search space, and stale-trial recovery.

Storage. The default is Optuna's journal file (``.optuna/journal.log``): safe for several processes on
one host, where SQLite races on study creation and costs 0.15-0.3 s per trial. An RDB URL (PostgreSQL,
MySQL) shares one study between machines; Optuna's own heartbeats then fail the trials of a dead worker.

Stale trials. The process that asks for a trial owns it until it tells the result; it records its
host, process id and start time, and a heartbeat every ``sweep.heartbeat_seconds``, in the trial's
system attributes. Before each new trial, a RUNNING trial whose owner process is gone (same host) or
whose heartbeat is older than ``sweep.stale_after_seconds`` (any host) is failed, and its params are
queued again (at most ``sweep.max_retries`` times), so a killed sweep never leaves a trial RUNNING.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import inspect
import os
import socket
import threading
import time
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import optuna
from optuna.distributions import BaseDistribution, CategoricalDistribution, FloatDistribution, IntDistribution
from optuna.exceptions import ExperimentalWarning, UpdateFinishedTrialError
from optuna.storages import BaseStorage, JournalStorage, RDBStorage, RetryHeartbeatStaleTrialCallback
from optuna.storages.journal import JournalFileBackend
from optuna.trial import FrozenTrial, TrialState

from rlcore.errors import ConfigError, did_you_mean
from rlcore.sweep_config import SweepConfig

DEFAULT_JOURNAL = Path(".optuna") / "journal.log"
OWNER = "rlcore:owner"
HEARTBEAT = "rlcore:heartbeat"
T = TypeVar("T")

optuna.logging.set_verbosity(optuna.logging.WARNING)


def storage_spec(sweep: SweepConfig, root: Path) -> str:
    """The study's storage as a string: an absolute journal file path, or the RDB URL as given."""
    if sweep.storage is None:
        return str((root / DEFAULT_JOURNAL).resolve())
    if sweep.storage.endswith(".log") and "://" not in sweep.storage:
        return str((root / sweep.storage).resolve())
    return sweep.storage


def is_journal(spec: str) -> bool:
    return "://" not in spec


def open_storage(spec: str, sweep: SweepConfig, heartbeats: bool = False) -> BaseStorage:
    """The storage behind ``spec``; ``heartbeats`` turns on Optuna's RDB heartbeats (for the owning process)."""
    if is_journal(spec):
        Path(spec).parent.mkdir(parents=True, exist_ok=True)
        return JournalStorage(JournalFileBackend(spec))
    options: dict[str, Any] = {}
    if heartbeats:
        options = {
            "heartbeat_interval": max(1, round(sweep.heartbeat_seconds)),
            "grace_period": max(2, round(sweep.stale_after_seconds)),
            "heartbeat_stale_trial_callback": RetryHeartbeatStaleTrialCallback(max_retry=sweep.max_retries),
        }
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ExperimentalWarning)
        return _racing_schema_creation(lambda: RDBStorage(spec, **options))


def _racing_schema_creation(create: Callable[[], T]) -> T:
    """``create()``, again after a moment if another process was creating the same tables or study at once.

    Optuna creates its schema and studies with plain CREATE statements: two processes starting on a fresh
    database race (SQLite: "table ... already exists"; PostgreSQL: a duplicate key on a type or study name).
    The loser finds everything in place on its next try.
    """
    for attempt in range(4):
        try:
            return create()
        except Exception as exc:
            if attempt == 3 or not ("already exists" in str(exc) or "duplicate key" in str(exc)):
                raise
            time.sleep(0.5 + attempt)
    raise AssertionError("unreachable")


@contextlib.contextmanager
def study_lock(spec: str, study_name: str) -> Iterator[None]:
    """Serializes count-then-ask between the processes of one study, so it never gets more than n_trials.

    Journal file: a file lock (processes on one host). PostgreSQL and MySQL: a lock held by the database
    server (an advisory lock; ``GET_LOCK``), which covers processes on every machine. SQLite: a file lock
    beside the database file.
    """
    if is_journal(spec) or spec.startswith("sqlite"):
        path = spec if is_journal(spec) else spec.split(":///", 1)[-1]
        with open(f"{path}.rlcore-lock", "a") as handle:
            fcntl.flock(handle, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(handle, fcntl.LOCK_UN)
        return
    from sqlalchemy import text

    key = int.from_bytes(hashlib.sha256(f"rlcore:{study_name}".encode()).digest()[:8], "big", signed=True)
    with _lock_engine(spec).connect() as connection:
        if spec.startswith("postgresql"):
            lock, unlock = "SELECT pg_advisory_lock(:key)", "SELECT pg_advisory_unlock(:key)"
        elif spec.startswith("mysql"):
            lock, unlock = "SELECT GET_LOCK(CAST(:key AS CHAR), -1)", "SELECT RELEASE_LOCK(CAST(:key AS CHAR))"
        else:  # another database: no server-side lock known; asks may overshoot n_trials by a trial or two
            yield
            return
        connection.execute(text(lock), {"key": key})
        try:
            yield
        finally:
            connection.execute(text(unlock), {"key": key})
            connection.commit()


_LOCK_ENGINES: dict[str, Any] = {}


def _lock_engine(spec: str) -> Any:
    """One small SQLAlchemy engine per database URL, for the study locks of this process."""
    if spec not in _LOCK_ENGINES:
        from sqlalchemy import create_engine

        _LOCK_ENGINES[spec] = create_engine(spec, pool_size=1, max_overflow=2, pool_pre_ping=True)
    return _LOCK_ENGINES[spec]


_SAMPLERS: dict[str, Any] = {
    "tpe": optuna.samplers.TPESampler,
    "random": optuna.samplers.RandomSampler,
    "cmaes": optuna.samplers.CmaEsSampler,
    "grid": optuna.samplers.GridSampler,
}
_PRUNERS: dict[str, Any] = {
    "median": optuna.pruners.MedianPruner,
    "hyperband": optuna.pruners.HyperbandPruner,
    "none": optuna.pruners.NopPruner,
}
# rlcore's defaults for the median pruner: early CartPole-like evaluations are noisy.
_PRUNER_DEFAULTS: dict[str, dict[str, Any]] = {"median": {"n_startup_trials": 5, "n_warmup_steps": 2}}


def check_options(sweep: SweepConfig, source: str) -> None:
    """One-line errors for options the chosen sampler or pruner does not take, or a missing package."""
    for kind, name, options, classes in (
        ("sampler", sweep.sampler, sweep.sampler_options, _SAMPLERS),
        ("pruner", sweep.pruner, sweep.pruner_options, _PRUNERS),
    ):
        cls = classes[name]
        accepted = [p for p in inspect.signature(cls).parameters if p not in ("self", "search_space", "seed")]
        for option in options:
            if option == "seed":
                raise ConfigError(f"{source}: sweep.{kind}_options: seed: set sweep.seed instead")
            if option not in accepted:
                hint = did_you_mean(option, accepted)
                raise ConfigError(f"{source}: sweep.{kind}_options: {cls.__name__} takes no {option!r}{hint}")
    if sweep.sampler == "cmaes":
        try:
            import cmaes  # noqa: F401
        except ImportError:
            raise ConfigError(f"{source}: sweep.sampler: cmaes needs the 'cmaes' package (pip install cmaes)") from None


def make_sampler(sweep: SweepConfig, trials_so_far: int = 0) -> optuna.samplers.BaseSampler:
    """The sampler for the next trial, seeded by ``sweep.seed`` and the study's trial count.

    Samplers keep their state in the study (TPE refits on every ask, CMA-ES and grid store theirs in
    trial attributes), so a fresh one per trial is equivalent, except that a re-run sweep, or a second
    process on the same study, does not replay the same random draws.
    """
    options: dict[str, Any] = {"seed": sweep.seed + trials_so_far, **sweep.sampler_options}
    if sweep.sampler == "grid":
        return optuna.samplers.GridSampler(sweep.grid(), **options)
    if sweep.sampler == "tpe" and sweep.workers > 1:
        options.setdefault("constant_liar", True)  # running trials count as bad, so workers spread out
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ExperimentalWarning)
        return _SAMPLERS[sweep.sampler](**options)


def make_pruner(sweep: SweepConfig) -> optuna.pruners.BasePruner:
    options = {**_PRUNER_DEFAULTS.get(sweep.pruner, {}), **sweep.pruner_options}
    return _PRUNERS[sweep.pruner](**options)


def distributions(sweep: SweepConfig) -> dict[str, BaseDistribution]:
    """The search space as Optuna distributions (categorical values encoded as in the trial's params)."""
    result: dict[str, BaseDistribution] = {}
    for key, dim in sweep.space.items():
        if dim.type == "categorical":
            result[key] = CategoricalDistribution([dim.encode(c) for c in dim.choices or []])
        elif dim.type == "int":
            assert dim.low is not None and dim.high is not None
            step = int(dim.step) if dim.step is not None else 1
            result[key] = IntDistribution(int(dim.low), int(dim.high), log=dim.log, step=step)
        else:
            assert dim.low is not None and dim.high is not None
            result[key] = FloatDistribution(float(dim.low), float(dim.high), log=dim.log, step=dim.step)
    return result


def decode(sweep: SweepConfig, trial_params: dict[str, Any]) -> dict[str, Any]:
    """A trial's Optuna params -> params values (``"[64, 64]"`` back to ``[64, 64]``), in space order."""
    return {key: dim.decode(trial_params[key]) for key, dim in sweep.space.items() if key in trial_params}


def create_study(spec: str, name: str, sweep: SweepConfig) -> optuna.Study:
    """Create the study, or load it to continue (its finished trials are kept); for the owning process."""
    storage = open_storage(spec, sweep, heartbeats=True)
    return _racing_schema_creation(
        lambda: optuna.create_study(
            study_name=name,
            storage=storage,
            direction=sweep.direction,
            sampler=make_sampler(sweep),
            pruner=make_pruner(sweep),
            load_if_exists=True,
        )
    )


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


def is_stale(trial: FrozenTrial, sweep: SweepConfig, now: float) -> bool:
    record = trial.system_attrs.get(OWNER)
    if trial.state != TrialState.RUNNING:
        return False
    if not isinstance(record, dict):  # asked for, but its process died before claiming it
        started = trial.datetime_start.timestamp() if trial.datetime_start else now
        return now - started > sweep.stale_after_seconds
    beat = float(trial.system_attrs.get(HEARTBEAT, 0.0))
    return _owner_gone(record) or now - beat > sweep.stale_after_seconds


def recover_stale_trials(study: optuna.Study, sweep: SweepConfig) -> list[int]:
    """Fail the RUNNING trials of dead processes and queue their params again; returns their numbers."""
    if isinstance(study._storage, RDBStorage):  # Optuna's heartbeats (their callback queues the retry)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ExperimentalWarning)
            optuna.storages.fail_stale_trials(study)
    now = time.time()
    recovered = []
    for trial in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
        if not is_stale(trial, sweep, now):
            continue
        try:
            fail(study, trial, "its process stopped (killed?) while it was running")
        except (UpdateFinishedTrialError, RuntimeError, ValueError):
            continue  # another process finished or failed it first
        retry(study, trial, sweep.max_retries)
        recovered.append(trial.number)
    return recovered


def tell(study: optuna.Study, number: int, value: float | None = None, state: TrialState | None = None) -> None:
    """``study.tell``, minus the grid sampler's "grid exhausted" stop, which only works inside ``optimize``."""
    try:
        study.tell(number, value, state=state)
    except RuntimeError as exc:
        if "Study.stop" not in str(exc):
            raise


def fail(study: optuna.Study, trial: FrozenTrial, why: str) -> None:
    """Record why in the trial's ``error`` user attribute, then mark it FAIL."""
    study._storage.set_trial_user_attr(trial._trial_id, "error", why)
    tell(study, trial.number, state=TrialState.FAIL)


def fail_and_retry(study: optuna.Study, trial_id: int, why: str, max_retries: int) -> None:
    """Fail the trial ``trial_id`` (if still running) and queue its params again."""
    trial = study._storage.get_trial(trial_id)
    if trial.state != TrialState.RUNNING:
        return
    with contextlib.suppress(UpdateFinishedTrialError, RuntimeError, ValueError):
        fail(study, trial, why)
        retry(study, trial, max_retries)


def retry(study: optuna.Study, trial: FrozenTrial, max_retries: int) -> None:
    """Queue ``trial``'s params again as a WAITING trial (as Optuna's RetryHeartbeatStaleTrialCallback does)."""
    history = [*trial.system_attrs.get("retry_history", []), trial.number]
    if len(history) > max_retries:
        return
    study.add_trial(
        optuna.trial.create_trial(
            state=TrialState.WAITING,
            params=trial.params,
            distributions=trial.distributions,
            system_attrs={"failed_trial": history[0], "retry_history": history},
        )
    )


class Heartbeat:
    """A thread recording a heartbeat for every trial this process owns, every ``interval`` seconds."""

    def __init__(self, study: optuna.Study, interval: float) -> None:
        self.storage = study._storage
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
