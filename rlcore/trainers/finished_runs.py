"""Keeping finished runs (``train.seeds``): inside :func:`keeping_finished_runs`, a start on a run folder whose
finished run has the same train params raises :class:`RunFinishedError` (before anything is written) instead of
training a fresh run, so a re-run trains only the seeds not yet finished."""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator
from pathlib import Path

from rlcore.common.errors import RLCoreError


class RunFinishedError(RLCoreError):
    """The run folder holds a finished run with these train params, and finished runs are kept
    (:func:`keeping_finished_runs`): nothing to train. Raised before anything is written."""

    def __init__(self, run_dir: Path) -> None:
        super().__init__(f"{run_dir}: finished with these train params; kept")
        self.run_dir = run_dir


_KEEP_FINISHED: contextvars.ContextVar[bool] = contextvars.ContextVar("keep_finished_runs", default=False)


@contextlib.contextmanager
def keeping_finished_runs() -> Iterator[None]:
    """Inside the block, a start on a folder whose finished run has the same fingerprint raises
    :class:`RunFinishedError` instead of training a fresh run (``train.seeds``: a re-run trains the seeds not yet
    finished). Outside it, a finished run is replaced, as always."""
    token = _KEEP_FINISHED.set(True)
    try:
        yield
    finally:
        _KEEP_FINISHED.reset(token)


def finished_runs_kept() -> bool:
    """Whether a finished run with the same train params is kept (inside :func:`keeping_finished_runs`)."""
    return _KEEP_FINISHED.get()
