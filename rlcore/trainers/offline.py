"""The offline loop: gradient steps on minibatches of a fixed dataset; the env is used only to evaluate.

The step counter of an offline run counts *gradient steps*: ``train.max_steps``, ``train.eval_every``
and ``train.log_every`` are in gradient steps, and checkpoints are named after them. Evaluation,
checkpoints, logging and stop conditions are the session's; if the algorithm can validate (BC), its
validation loss and accuracy on held-out episodes are recorded with every checkpoint.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rlcore.config import Params
from rlcore.dataset_stream import InMemoryBatches, RowGroupStream
from rlcore.datasets import load_dataset, transition_count
from rlcore.io import file_digests
from rlcore.trainers.run import EvaluationCallback, log
from rlcore.trainers.session import TrainingSession


def train_offline(
    params: Params, run_dir: Path, on_evaluation: EvaluationCallback | None = None, resume_from: Path | None = None
) -> dict[str, Any]:
    """Train ``params.algo`` (an offline algorithm) on ``params.dataset`` into ``run_dir``."""
    path = Path(params.dataset.path)
    # The dataset is read and validated before the session replaces any previous run.
    with TrainingSession(
        params, run_dir, on_evaluation, resume_from, before_prepare=lambda session: _load(session, path)
    ) as session:
        source, validation = session.dataset
        policy, algorithm, state = session.policy, session.algorithm, session.state
        if session.checkpoint is None and policy.obs_normalizer.enabled:  # the dataset's statistics, fixed from here
            source.update_normalizer(policy.obs_normalizer)
        held_out = len(validation) if validation else 0
        session.extra_meta["dataset"] = {
            "path": str(path),
            **file_digests(path, "sha256", "md5"),  # md5: the hash DVC records for the file in dvc.lock
            "transitions": transition_count(path),
            "metadata": source.metadata,
        }
        if validation is not None and hasattr(algorithm, "validate"):
            held_out_tensors = validation.tensors()
            session.validate = lambda: algorithm.validate(held_out_tensors)
        algo = params.algo.name
        log.info("training %s on %d transitions (%s%d held out) from %s", algo, source.rows, source.how, held_out, path)
        batch_size = params.algo.batch_size
        stop_reason = session.stops.budget(state)
        while stop_reason is None:
            batch = source.batch(state.env_steps, session.rng, batch_size)
            session.after_update(algorithm.update(batch, session.progress_fraction))
            session.after_env_steps(1)
            stop_reason = session.checkpoint_due_or_stop()
        return session.finish(stop_reason)


def _load(session: TrainingSession, path: Path) -> None:
    cfg, params = session.params.dataset, session.params
    if cfg.in_memory:
        data = load_dataset(path, session.observation_space, session.action_space, params.env.id)
        train, validation = data.split_by_episode(cfg.validation_fraction, params.seed)
        session.dataset = (InMemoryBatches(train), validation)
        return
    stream = RowGroupStream(
        path,
        session.observation_space,
        session.action_space,
        params.env.id,
        cfg.buffer_transitions,
        params.algo.batch_size,
        params.seed,
        cfg.validation_fraction,
        cfg.validation_limit,
    )
    session.dataset = (stream, stream.validation)
