"""Training: one loop per algorithm family and what the loops share (the session, experience sources, the run
directory, metrics, stopping, warm starts, the memory estimate); :func:`train` runs the loop of the algorithm's family.

May import: ``rlcore.workers`` and every layer below it; not ``rlcore.stages`` or ``rlcore.cli``."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

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
from rlcore.trainers.actor_learner import train_actor_learner
from rlcore.trainers.off_policy import train_off_policy, train_off_policy_seeds
from rlcore.trainers.offline import train_offline, train_offline_seeds
from rlcore.trainers.on_policy import train_on_policy, train_on_policy_seeds
from rlcore.trainers.population import train_population
from rlcore.trainers.seed_sessions import SeedRun
from rlcore.trainers.stopping import EvaluationCallback


class Trainer(Protocol):
    """A family's trainer: train ``params`` into ``run_dir`` (resuming an interrupted run there, or from
    ``resume_from``); ``keep_finished``: a finished run with these train params is kept (``RunFinishedError``).
    Returns the train summary."""

    def __call__(
        self,
        params: Params,
        run_dir: Path,
        on_evaluation: EvaluationCallback | None = None,
        resume_from: Path | None = None,
        *,
        keep_finished: bool = False,
    ) -> dict[str, Any]: ...


# The keys are the abstract family classes: mypy refuses abstract classes as type[...] values (type-abstract).
TRAINERS: dict[type[Algorithm[Any, Any]], Trainer] = {
    OnPolicyAlgorithm: train_on_policy,  # type: ignore[type-abstract]
    OffPolicyAlgorithm: train_off_policy,  # type: ignore[type-abstract]
    OfflineAlgorithm: train_offline,  # type: ignore[type-abstract]
    ActorLearnerAlgorithm: train_actor_learner,  # type: ignore[type-abstract]
    PopulationAlgorithm: train_population,  # type: ignore[type-abstract]
}
"""Family -> its trainer."""


def train(
    params: Params,
    run_dir: Path,
    on_evaluation: EvaluationCallback | None = None,
    resume_from: Path | None = None,
    *,
    keep_finished: bool = False,
) -> dict[str, Any]:
    """Train ``params`` into ``run_dir`` (resuming an interrupted run there); returns the train summary.
    ``keep_finished``: a finished run in ``run_dir`` with these train params is kept (``RunFinishedError``)."""
    algo_cls = algorithm_class(params.algo.name)
    for family, trainer in TRAINERS.items():
        if issubclass(algo_cls, family):
            return trainer(params, run_dir, on_evaluation, resume_from, keep_finished=keep_finished)
    raise TypeError(f"{algo_cls.__name__} belongs to no algorithm family with a trainer")


def is_offline(params: Params) -> bool:
    """Whether ``params`` train from a dataset (the offline family) rather than from env steps."""
    return issubclass(algorithm_class(params.algo.name), OfflineAlgorithm)


SeedsTrainer = Callable[[list[SeedRun], EvaluationCallback | None], None]
"""Trains several seeds' runs together, each into its own run directory. A seed whose run folder holds a finished run
with the same train params is kept (open its session with ``keep_finished=True`` and skip it on
``RunFinishedError``); an interrupted one resumes."""

BATCHED_TRAINERS: dict[type[Algorithm[Any, Any]], SeedsTrainer] = {
    OnPolicyAlgorithm: train_on_policy_seeds,  # type: ignore[type-abstract]
    OffPolicyAlgorithm: train_off_policy_seeds,  # type: ignore[type-abstract]
    OfflineAlgorithm: train_offline_seeds,  # type: ignore[type-abstract]
}
"""Family -> its trainer of several seeds as one batched program; used for algorithms with ``batched_seeds`` in their
capabilities when ``train.batch_seeds`` is true."""


def batched_trainer(params: Params) -> SeedsTrainer | None:
    """The batched trainer of ``params``' seeds, or None when they run one after another (``train.batch_seeds``
    false, or an algorithm without ``batched_seeds``)."""
    algo_cls = algorithm_class(params.algo.name)
    if not params.train.batch_seeds or "batched_seeds" not in algo_cls.capabilities:
        return None
    for family, trainer in BATCHED_TRAINERS.items():
        if issubclass(algo_cls, family):
            return trainer
    return None
