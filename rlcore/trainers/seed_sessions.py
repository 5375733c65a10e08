"""The sessions a family's loop runs: a seed's run (:class:`SeedRun`) and its open ``TrainingSession``
(:class:`SeedSession`: opened as its one-seed run opens it, with the state of torch's global generator that run would
have); one run's session alone (:func:`run_alone`) or every seed's of ``train.seeds`` at once (:func:`run_together`),
abandoned together on an error."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Generic

import torch

from rlcore.config.sections import Params
from rlcore.trainers.finished_runs import RunFinishedError
from rlcore.trainers.session import SourceFactory, SourceT, TrainingSession
from rlcore.trainers.stopping import EvaluationCallback

log = logging.getLogger("rlcore")


@dataclass(frozen=True)
class SeedRun:
    """One seed of a run with ``train.seeds``: the one-seed run's params (``seed: k``, ``train.seeds: null``) and
    its run directory ``runs/<name>/seed_<k>/``."""

    seed: int
    params: Params
    run_dir: Path


@dataclass
class SeedSession(Generic[SourceT]):
    """One seed's open session, and the state of torch's global generator as its own run would have it (each
    session seeds the global generator when it opens; its checkpoints save the state). ``summary``: its train
    summary once finished."""

    seed: int
    session: TrainingSession[SourceT]
    torch_rng: torch.Tensor
    finished: bool = False
    summary: dict[str, Any] | None = None
    one_seed_run: ClassVar[bool] = False
    """Whether this is a one-seed run's session (:meth:`alone`), not a seed of ``train.seeds``."""

    @classmethod
    def alone(cls, seed: int, session: TrainingSession[SourceT]) -> SeedSession[SourceT]:
        """A one-seed run's session, the only one open: torch's global generator is its own as it is."""
        return _Alone(seed, session, torch.empty(0))

    @contextlib.contextmanager
    def own_rng(self) -> Iterator[None]:
        """Torch's global generator in this seed's state for the block."""
        other = torch.get_rng_state()
        torch.set_rng_state(self.torch_rng)
        try:
            yield
        finally:
            self.torch_rng = torch.get_rng_state()
            torch.set_rng_state(other)

    def finish(self, reason: str) -> None:
        """The session's final evaluation, checkpoint and summary."""
        with self.own_rng():
            self.summary = self.session.finish(reason)
        self.finished = True


class _Alone(SeedSession[SourceT]):
    """:meth:`SeedSession.alone`: nothing to swap in."""

    one_seed_run = True

    @contextlib.contextmanager
    def own_rng(self) -> Iterator[None]:
        yield


def open_seed_sessions(
    runs: Sequence[SeedRun],
    on_evaluation: EvaluationCallback | None,
    make_source: SourceFactory[SourceT],
) -> list[SeedSession[SourceT]]:
    """Every seed's session, in the list's order; a seed whose folder holds its finished run with the same train
    params is kept (and skipped), an interrupted one resumes. On an error every session opened is abandoned."""
    seeds: list[SeedSession[SourceT]] = []
    with abandoned_on_error(seeds):
        for run in runs:
            try:
                session = TrainingSession(
                    run.params,
                    run.run_dir,
                    on_evaluation,
                    None,
                    make_source,
                    seeds_in_memory=len(runs),  # the memory check: every seed's run is held at once
                    label=f"seed {run.seed}",
                    keep_finished=True,
                )
            except RunFinishedError:
                log.info("seed %d: finished in %s with these train params; kept", run.seed, run.run_dir)
                continue
            seeds.append(SeedSession(run.seed, session, torch.get_rng_state()))
    return seeds


def named_seeds(seeds: Sequence[int]) -> str:
    """``seeds 0-3`` for a contiguous run of seeds, ``seed 5`` for one, ``seeds 0, 2, 7`` otherwise."""
    if len(seeds) == 1:
        return f"seed {seeds[0]}"
    if list(seeds) == list(range(seeds[0], seeds[0] + len(seeds))):
        return f"seeds {seeds[0]}-{seeds[-1]}"
    return "seeds " + ", ".join(str(seed) for seed in seeds)


def log_program(seeds: Sequence[SeedSession[Any]], how: str) -> None:
    """The one log line of a loop that trains seeds of ``train.seeds``: which ones this program trains and ``how``
    they share it (a family's words). A one-seed run's loop says nothing; a program left with one seed (the others
    finished, or a seed process of its own) names that one."""
    if seeds and not seeds[0].one_seed_run:
        log.info("train.seeds: this program trains %s (%s)", named_seeds([seed.seed for seed in seeds]), how)


SessionsLoop = Callable[[Sequence[SeedSession[SourceT]]], None]
"""A family's loop (``rlcore.trainers.FAMILIES``): runs open sessions (a run's alone, or every seed's), each to its
end, setting each one's ``finished`` and ``summary``."""


def run_alone(loop: SessionsLoop[SourceT], session: TrainingSession[SourceT]) -> dict[str, Any]:
    """A one-seed run's open ``session`` through ``loop`` (as its only member); its train summary."""
    seed = SeedSession.alone(session.params.seed, session)
    loop([seed])
    assert seed.summary is not None  # the loop runs every session to its end
    return seed.summary


def run_together(
    loop: SessionsLoop[SourceT],
    runs: Sequence[SeedRun],
    on_evaluation: EvaluationCallback | None,
    make_source: SourceFactory[SourceT],
) -> None:
    """The seeds' runs (each into its ``run_dir``) through ``loop`` as one program; a seed whose folder holds its
    finished run with the same train params is kept, an interrupted one resumes from its latest checkpoint."""
    seeds = open_seed_sessions(runs, on_evaluation, make_source)
    with abandoned_on_error(seeds):
        loop(seeds)


@contextlib.contextmanager
def abandoned_on_error(seeds: Sequence[SeedSession[Any]]) -> Iterator[None]:
    """On an error, every unfinished seed's session is abandoned as the one-seed run's would be."""
    try:
        yield
    except BaseException as error:
        for seed in seeds:
            if not seed.finished:
                seed.session.__exit__(type(error), error, error.__traceback__)
        raise
