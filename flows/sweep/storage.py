"""Where a study lives: Optuna's journal file or an RDB, and the lock that serializes asking for trials.

The default is Optuna's journal file (``.optuna/journal.log``): safe for several processes on one host,
where SQLite races on study creation and costs 0.15-0.3 s per trial. An RDB URL (PostgreSQL, MySQL)
shares one study between machines; Optuna's own heartbeats then fail the trials of a dead worker.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import time
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

from optuna.exceptions import ExperimentalWarning
from optuna.storages import BaseStorage, JournalStorage, RDBStorage, RetryHeartbeatStaleTrialCallback
from optuna.storages.journal import JournalFileBackend

from rlcore.config.sweep import SweepConfig

DEFAULT_JOURNAL = Path(".optuna") / "journal.log"
T = TypeVar("T")


def storage_spec(sweep: SweepConfig, root: Path) -> str:
    """The study's storage as a string: an absolute journal file path, or the RDB URL as given."""
    if sweep.storage is None:
        return str((root / DEFAULT_JOURNAL).resolve())
    if sweep.storage.endswith(".log") and "://" not in sweep.storage:
        return str((root / sweep.storage).resolve())
    return sweep.storage


def is_journal(spec: str) -> bool:
    return "://" not in spec


def storage_files(spec: str) -> list[Path]:
    """The local files a study at ``spec`` writes: the journal file or SQLite database and the lock beside it
    (:func:`study_lock`); none for a database server."""
    if is_journal(spec):
        path = spec
    elif spec.startswith("sqlite"):
        path = spec.split(":///", 1)[-1]
    else:
        return []
    return [Path(path), Path(f"{path}.rlcore-lock")]


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
        return racing_schema_creation(lambda: RDBStorage(spec, **options))


def racing_schema_creation(create: Callable[[], T]) -> T:
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


def asks_are_locked(spec: str) -> bool:
    """True when :func:`study_lock` excludes every other asking process (journal file, SQLite, PostgreSQL, MySQL):
    then a RUNNING trial without an owner, seen under the lock, was asked by a process that died before claiming it
    (asking and claiming happen together under the lock)."""
    return is_journal(spec) or spec.startswith(("sqlite", "postgresql", "mysql"))


@contextlib.contextmanager
def study_lock(spec: str, study_name: str) -> Iterator[None]:
    """Serializes count-then-ask between the processes of one study, so it never gets more than n_trials.

    Journal file: a file lock (processes on one host). PostgreSQL and MySQL: a lock held by the database
    server (an advisory lock; ``GET_LOCK``), which covers processes on every machine. SQLite: a file lock
    beside the database file.
    """
    files = storage_files(spec)
    if files:
        with open(files[-1], "a") as handle:
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
