"""Training: one loop per algorithm family and what the loops share (the session, experience sources, the run
directory, metrics, stopping, warm starts, the memory estimate); :func:`train` runs one run through its family's loop,
:func:`train_seeds` every seed of ``train.seeds`` through the same loop as one program (split over child processes,
each one such program: ``rlcore.trainers.seed_processes``).

May import: ``rlcore.workers`` and every layer below it; not ``rlcore.stages`` or ``rlcore.cli``."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rlcore.algos.base import (
    ActorLearnerAlgorithm,
    Algorithm,
    OfflineAlgorithm,
    OffPolicyAlgorithm,
    OnPolicyAlgorithm,
    PopulationAlgorithm,
)
from rlcore.config.sections import Params
from rlcore.registry import algorithm_class
from rlcore.trainers.actor_learner import run_actor_learner
from rlcore.trainers.off_policy import run_off_policy
from rlcore.trainers.offline import run_offline
from rlcore.trainers.on_policy import run_on_policy
from rlcore.trainers.population import run_population
from rlcore.trainers.seed_sessions import SeedRun, SessionsLoop, SourceFactory, run_alone, run_together
from rlcore.trainers.session import TrainingSession
from rlcore.trainers.sources import DatasetSource, DataSource, EnvSource, ReplaySource
from rlcore.trainers.stopping import EvaluationCallback


@dataclass(frozen=True)
class Family:
    """An algorithm family's training: its loop over open sessions (a run's alone, or every seed's of
    ``train.seeds`` as one program), the source of its experience, and whether its loop steps the seeds itself."""

    loop: SessionsLoop[Any]
    make_source: SourceFactory[Any]
    lockstep: bool
    """Whether its loop steps every seed in this process (``train.seed_processes`` may split the seeds over child
    processes, each its own batched program), not on worker processes every seed shares (one learner process)."""

    @property
    def seeds_together(self) -> str:
        """How its seeds share one program, for logs."""
        if self.lockstep:
            return "as one batched program"
        return "sharing their worker processes (one learner process)"


def _no_source(*_: Any) -> DataSource:
    return DataSource()  # the workers' rollouts are the experience (rlcore.workers)


# The keys are the abstract family classes: mypy refuses abstract classes as type[...] values (type-abstract).
FAMILIES: dict[type[Algorithm[Any, Any]], Family] = {
    OnPolicyAlgorithm: Family(run_on_policy, lambda params, *_: EnvSource(params), lockstep=True),  # type: ignore[type-abstract]
    OffPolicyAlgorithm: Family(run_off_policy, ReplaySource, lockstep=True),  # type: ignore[type-abstract]
    OfflineAlgorithm: Family(run_offline, DatasetSource, lockstep=True),  # type: ignore[type-abstract]
    ActorLearnerAlgorithm: Family(run_actor_learner, _no_source, lockstep=False),  # type: ignore[type-abstract]
    PopulationAlgorithm: Family(run_population, _no_source, lockstep=False),  # type: ignore[type-abstract]
}
"""Family -> how it trains."""


def family_of(params: Params) -> Family:
    """The training of ``params.algo``'s family."""
    algo_cls = algorithm_class(params.algo.name)
    for family, training in FAMILIES.items():
        if issubclass(algo_cls, family):
            return training
    raise TypeError(f"{algo_cls.__name__} belongs to no algorithm family with a trainer")


def train(
    params: Params,
    run_dir: Path,
    on_evaluation: EvaluationCallback | None = None,
    resume_from: Path | None = None,
    *,
    keep_finished: bool = False,
) -> dict[str, Any]:
    """Train ``params`` into ``run_dir`` (resuming an interrupted run there, or from ``resume_from``); returns the
    train summary. ``keep_finished``: a finished run in ``run_dir`` with these train params is kept
    (``RunFinishedError``)."""
    algorithm_class(params.algo.name).check_params(params)
    family = family_of(params)
    with TrainingSession(
        params, run_dir, on_evaluation, resume_from, family.make_source, keep_finished=keep_finished
    ) as session:
        return run_alone(family.loop, session)


def train_seeds(runs: list[SeedRun], on_evaluation: EvaluationCallback | None) -> None:
    """Train every seed's run (``train.seeds``, each into its ``run_dir``) through the family's loop as one program,
    each seed's run its one-seed run with its own random streams. A seed whose folder holds its finished run with the
    same train params is kept; an interrupted one resumes from its own checkpoint."""
    params = runs[0].params
    algorithm_class(params.algo.name).check_params(params)
    family = family_of(params)
    run_together(family.loop, runs, on_evaluation, family.make_source)


def is_offline(params: Params) -> bool:
    """Whether ``params`` train from a dataset (the offline family) rather than from env steps."""
    return issubclass(algorithm_class(params.algo.name), OfflineAlgorithm)
