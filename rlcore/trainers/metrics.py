"""Learning curves: training-episode statistics and the dvclive log (x axis = the run's steps)."""

from __future__ import annotations

import atexit
import gc
import logging
import math
from pathlib import Path
from typing import Any

import numpy as np

log = logging.getLogger("rlcore")


class EpisodeStats:
    """Undiscounted returns and lengths of the training episodes that end between two log rows."""

    def __init__(self, num_envs: int) -> None:
        self.running_return = np.zeros(num_envs)
        self.running_length = np.zeros(num_envs, dtype=np.int64)
        self.returns: list[float] = []
        self.lengths: list[int] = []

    def step(self, rewards: np.ndarray, valid: np.ndarray, ended: np.ndarray) -> None:
        """``valid`` is False for autoreset steps (they belong to no episode)."""
        self.running_return += rewards * valid
        self.running_length += valid
        if ended.any():
            self.returns += self.running_return[ended].tolist()
            self.lengths += self.running_length[ended].tolist()
            self.running_return[ended] = 0.0
            self.running_length[ended] = 0

    def add(self, returns: np.ndarray, lengths: np.ndarray) -> None:
        """Episodes counted elsewhere (an actor process), ``returns`` and ``lengths`` (E,)."""
        self.returns += np.asarray(returns, dtype=np.float64).tolist()
        self.lengths += np.asarray(lengths, dtype=np.int64).tolist()

    def drain(self) -> dict[str, float]:
        if not self.returns:
            return {}
        metrics = {
            "train/episode_return": float(np.mean(self.returns)),
            "train/episode_length": float(np.mean(self.lengths)),
        }
        self.returns, self.lengths = [], []
        return metrics


def _live(directory: Path, resume: bool) -> Any:
    """A dvclive logger; in a git repository without commits, one without DVC integration (which we never use).

    dvclive asks git for the HEAD commit before it checks that there is one, and raises in a fresh
    ``git init`` (dvclive 3.49): the metrics are the same either way.
    """
    from dvclive import Live
    from scmrepo.exceptions import SCMError

    options: dict[str, Any] = {"resume": resume, "dvcyaml": None, "save_dvc_exp": False, "report": None}
    try:
        return Live(str(directory), **options)
    except SCMError as exc:
        log.warning("dvclive: %s (no commit yet?); logging metrics without DVC's git integration", exc)
        import dvclive.live

        original = dvclive.live.get_dvc_repo
        dvclive.live.get_dvc_repo = lambda: None
        try:
            return Live(str(directory), **options)
        finally:
            dvclive.live.get_dvc_repo = original


class MetricsLog:
    """dvclive learning curves with steps on the x axis; never touches dvc.yaml or DVC experiments.

    Training metrics are averaged over updates and written every ``every`` steps: one dvclive row
    costs milliseconds, as much as a whole small PPO update.

    A non-finite value (a NaN or infinite loss) is never averaged in, but never hidden either: every row
    has ``train/non_finite_metrics``, the number of non-finite values since the previous row, and the
    first one is a warning in the log naming the metric and the step.
    """

    NON_FINITE = "train/non_finite_metrics"

    def __init__(self, directory: Path, resume: bool, every: int, next_row: int) -> None:
        from dvclive.studio import get_dvc_studio_config

        self.live = _live(directory, resume)
        self.studio = bool(get_dvc_studio_config(self.live))
        """Whether DVC Studio is configured (dvclive then sends it every row's data); see :meth:`_end_row`."""
        atexit.register(self._release_at_exit)  # unregistered by close()
        self.every = every
        self.next_row = next_row
        self.sums: dict[str, float] = {}
        self.counts: dict[str, int] = {}
        self.non_finite = 0
        """Non-finite values since the last row."""
        self.warned = False

    def add(self, metrics: dict[str, float]) -> None:
        for key, value in metrics.items():
            if math.isfinite(value):  # a Python float: math's test costs ~1/10 of NumPy's, per metric per update
                self.sums[key] = self.sums.get(key, 0.0) + float(value)
                self.counts[key] = self.counts.get(key, 0) + 1
            else:
                self._count_non_finite(key, value, self.next_row - self.every)

    def _count_non_finite(self, key: str, value: float, step: int) -> None:
        self.non_finite += 1
        if not self.warned:
            self.warned = True
            log.warning(
                "non-finite metric %s = %s near step %d (training diverged, or a loss is undefined): left out of "
                "the curves, counted in %s (this warning is shown once per run)",
                key,
                value,
                step,
                self.NON_FINITE,
            )

    def due(self, step: int) -> bool:
        return step >= self.next_row

    def flush(self, step: int, extra: dict[str, float]) -> None:
        """Write the averages since the last row, plus ``extra``, as one row at ``step``."""
        row = {key: total / self.counts[key] for key, total in self.sums.items()}
        for key, value in extra.items():
            if np.isfinite(value):
                row[key] = value
            else:
                self._count_non_finite(key, value, step)
        row[self.NON_FINITE] = float(self.non_finite)
        self.sums, self.counts, self.non_finite = {}, {}, 0
        self.next_row = step + self.every
        self.log(step, row)

    def log(self, step: int, metrics: dict[str, float]) -> None:
        """Log ``{"train/loss": ..., "eval/mean_return": ...}`` as one row at ``step``; a non-finite value is
        left out of the row and counted in the next training row."""
        self.live.step = step
        for key, value in metrics.items():
            if np.isfinite(value):
                self.live.log_metric(key, float(value))
            elif key != self.NON_FINITE:
                self._count_non_finite(key, value, step)
        self._end_row()

    def _end_row(self) -> None:
        """What dvclive's ``next_step()`` does after a row, without its Studio update where Studio is not configured.

        ``next_step()`` builds that update on every call by re-reading every curve's whole TSV file, and only then
        drops it when Studio is not configured (dvclive 3.49): a cost that grows with the rows written, quadratic over
        a run (~7 ms a row from the 250th to the 500th row of 8 curves here). Without Studio, the rest is what it
        does: the summary (``metrics.json``), the DVC VS Code extension's step signal, the step count."""
        if self.studio:
            self.live.next_step()
            return
        from dvclive.vscode import mark_dvclive_step_completed

        self.live.make_summary()
        mark_dvclive_step_completed(self.live.step)
        self.live.step += 1

    def close(self) -> None:
        atexit.unregister(self._release_at_exit)
        self.live.end()

    def _release_at_exit(self) -> None:
        """Free a log nobody closed (a program that stopped on an error) while the interpreter still runs: in a DVC
        project the log holds the project's git repository open, and objects of it finalized during the interpreter's
        shutdown print tracebacks (``Exception ignored ... sys.meta_path is None``). Nothing is written: the rows
        logged so far and their summary are on disk already."""
        del self.live
        gc.collect()  # the log's objects refer to each other: freed by a collection, not by their counts
