"""A finished run kept (``train.seeds``): a session opened with ``keep_finished`` on a run folder whose finished run
has the same train params raises :class:`RunFinishedError` (before anything is written) instead of training a fresh
run, so a re-run trains only the seeds not yet finished."""

from __future__ import annotations

from pathlib import Path

from rlcore.common.errors import RLCoreError


class RunFinishedError(RLCoreError):
    """The run folder holds a finished run with these train params, and the session keeps finished runs
    (``keep_finished``): nothing to train. Raised before anything is written."""

    def __init__(self, run_dir: Path) -> None:
        super().__init__(f"{run_dir}: finished with these train params; kept")
        self.run_dir = run_dir
