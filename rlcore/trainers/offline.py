"""The offline loop: gradient steps on minibatches of a fixed dataset; the env is used only to evaluate.

The step counter of an offline run counts *gradient steps*: ``train.max_steps``, ``train.eval_every``
and ``train.log_every`` are in gradient steps, and checkpoints are named after them. Evaluation,
checkpoints, logging and stop conditions are the session's; if the algorithm can validate (BC), its
validation loss and accuracy on held-out episodes are recorded with every checkpoint.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import torch

from rlcore.config import Params
from rlcore.dataset_stream import RowGroupStream
from rlcore.datasets import load_dataset
from rlcore.io import sha256_file
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
        streamed = isinstance(source, RowGroupStream)
        if session.checkpoint is None and policy.obs_normalizer.enabled:  # the dataset's statistics, fixed from here
            if streamed:
                source.update_normalizer(policy.obs_normalizer)
            else:
                policy.obs_normalizer.update(torch.from_numpy(source.obs))
        held_out = len(validation) if validation else 0
        training_rows = source.transitions - held_out if streamed else len(source)
        session.extra_meta["dataset"] = {
            "path": str(path),
            "sha256": sha256_file(path),
            "md5": _md5(path),
            "transitions": training_rows + held_out,
            "metadata": source.metadata,
        }
        if validation is not None and hasattr(algorithm, "validate"):
            held_out_tensors = validation.tensors()
            session.validate = lambda: algorithm.validate(held_out_tensors)
        batch_size = params.algo.batch_size
        how = f"streamed through a buffer of {source.groups_in_buffer} row groups; " if streamed else ""
        log.info(
            "training %s on %d transitions (%s%d held out) from %s",
            params.algo.name,
            training_rows,
            how,
            held_out,
            path,
        )
        if streamed:

            def sample() -> dict[str, torch.Tensor]:
                return source.batch(state.env_steps, session.rng, batch_size)
        else:
            tensors = source.tensors()

            def sample() -> dict[str, torch.Tensor]:
                index = torch.from_numpy(session.rng.integers(0, training_rows, size=batch_size))
                return {name: values[index] for name, values in tensors.items()}

        stop_reason = session.stops.budget(state)
        while stop_reason is None:
            session.after_update(algorithm.update(sample(), session.progress_fraction))
            session.after_env_steps(1)
            stop_reason = session.checkpoint_due_or_stop()
        return session.finish(stop_reason)


def _load(session: TrainingSession, path: Path) -> None:
    cfg, params = session.params.dataset, session.params
    if cfg.in_memory:
        data = load_dataset(path, session.observation_space, session.action_space, params.env.id)
        session.dataset = data.split_by_episode(cfg.validation_fraction, params.seed)
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


def _md5(path: Path) -> str:
    """The file's MD5: the hash DVC records for it (``dvc.lock``), so a model names its dataset version."""
    digest = hashlib.md5(usedforsecurity=False)
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()
