"""What a terminal shows while training: a tqdm bar, or one log line per evaluation in logs."""

from __future__ import annotations

import logging
import sys
import time

from rlcore.common.numbers import score
from rlcore.evaluation.evaluator import EvalResult

log = logging.getLogger("rlcore")


class Progress:
    """A tqdm bar on a terminal; one log line per evaluation otherwise."""

    def __init__(self, mode: str, total: int, initial: int, unit: str, label: str | None = None) -> None:
        """``label`` names the run in the bar and in front of each line (``seed 3``: the seeds of a batched run
        report side by side)."""
        self.bar = None
        self.unit = unit.replace("_", " ")
        self.prefix = f"{label}: " if label else ""
        if mode == "on" or (mode == "auto" and sys.stderr.isatty()):
            from tqdm import tqdm

            self.bar = tqdm(
                total=total, initial=initial, unit=" " + self.unit, unit_scale=True, dynamic_ncols=True, desc=label
            )
        self.last = initial
        self.started = time.perf_counter()

    def advance(self, steps: int) -> None:
        if self.bar is not None:
            self.bar.update(steps - self.last)
        self.last = steps

    def evaluation(self, steps: int, result: EvalResult, steps_per_second: float) -> None:
        if self.bar is not None:
            self.bar.set_postfix(eval=score(result.mean_return), refresh=False)
        else:
            log.info(
                "%s%s %d | eval %s | %.0f %s/s",
                self.prefix,
                self.unit,
                steps,
                result.summary(),
                steps_per_second,
                self.unit,
            )

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
