"""Workers that die before delivering anything: counted per worker, so a worker that cannot start stops the run.

The actor runners (IMPALA) and the population runners (ES, SVPG) replace a worker process or task that dies. One
that dies before it ever delivered (an env that fails to build in a fresh process, a script without a
``__main__`` guard under ``algo.runner=local``) would be replaced forever; after :data:`MAX_FAILED_STARTS`
replacements in a row the run stops with the runner's error instead.
"""

from __future__ import annotations

from collections.abc import Callable

MAX_FAILED_STARTS = 3
"""Replacements in a row of a worker that never delivered, after which the run stops with an error."""


class FailedStarts:
    """Per worker, the replacements in a row since it last delivered.

    ``worker`` names a worker in the error ("actor", "rollout worker"), ``delivery`` what it should have delivered
    ("sending a trajectory"), ``error`` makes the exception the run stops with.
    """

    def __init__(self, workers: int, worker: str, delivery: str, error: Callable[[str], Exception]) -> None:
        self.in_a_row = [0] * workers
        self._worker = worker
        self._delivery = delivery
        self._error = error

    def delivered(self, worker_id: int) -> None:
        """``worker_id`` delivered something: it started, whatever happens to it later."""
        self.in_a_row[worker_id] = 0

    def replaced(self, worker_id: int, delivered: bool, why: str) -> None:
        """Count a replacement of ``worker_id`` (``why``: what happened to it, e.g. "died (exit code 1)"); raises
        the runner's error at the :data:`MAX_FAILED_STARTS`-th replacement in a row without a delivery."""
        if delivered:
            self.delivered(worker_id)
            return
        self.in_a_row[worker_id] += 1
        count = self.in_a_row[worker_id]
        if count >= MAX_FAILED_STARTS:
            raise self._error(
                f"{self._worker} {worker_id} {why} {count} times in a row before {self._delivery}: "
                f"{self._worker}s cannot start (its error is above; algo.runner=dev runs them in this process, where "
                "errors show directly; a script that calls rlcore with algo.runner=local needs an `if __name__ == "
                '"__main__":` guard)'
            )
