"""Where a trainer's experience comes from, and what of it a checkpoint keeps.

A source is built before anything in the run directory is replaced (so what it refuses, e.g. a bad
dataset, never costs the previous run), and the session calls it at fixed points:

| source          | experience                         | saved with a checkpoint        | step unit       |
|-----------------|------------------------------------|--------------------------------|-----------------|
| `EnvSource`     | the training envs (on-policy)      | nothing: episodes restart      | env steps       |
| `ReplaySource`  | the envs + a replay buffer         | the buffer (``replay/*.npz``)  | env steps       |
| `DatasetSource` | a Parquet dataset; no env at all   | the dataset's identity         | gradient steps  |
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from gymnasium import spaces

from rlcore.algos.base import Algorithm, OfflineAlgorithm, OffPolicyConfig
from rlcore.common.checkpoints import StepUnit
from rlcore.common.files import file_digests
from rlcore.common.seeds import training_seed
from rlcore.config.sections import Params
from rlcore.data.reader import OfflineData, load_dataset, transition_count
from rlcore.data.replay import OlderReplayFormatError, ReplayBuffer
from rlcore.data.stream import InMemoryBatches, RowGroupStream
from rlcore.envs.observations import storage_dtype
from rlcore.envs.stepping import VectorStepper
from rlcore.envs.vector import EpisodeSettings, make_vector_env, use_settings
from rlcore.nets.blocks import ObsNormalizer
from rlcore.nets.policy import action_dim

log = logging.getLogger("rlcore")


class DataSource:
    """The interface the session calls; the defaults do nothing."""

    unit: StepUnit = "env_steps"

    def fingerprint(self) -> dict[str, Any]:
        """What the run learns from beyond the params: part of the run's fingerprint, so a change starts fresh."""
        return {}

    def metadata(self) -> dict[str, Any]:
        """Recorded in every checkpoint (and so in the model card)."""
        return {}

    def start(self, fresh: bool, normalizer: ObsNormalizer) -> None:
        """Called once the policy exists, before the first step (``fresh``: not resuming)."""

    def save(self, run_root: Path, step: int) -> None:
        """Called right before the checkpoint of ``step`` is written."""

    def after_checkpoint(self, run_root: Path, step: int) -> None:
        """Called once the checkpoint of ``step`` is in place (what it supersedes may go now)."""

    def restore(self, run_root: Path, step: int) -> None:
        """Called when resuming from the checkpoint of ``step``."""

    def validate(self, algorithm: Algorithm[Any, Any]) -> dict[str, float]:
        """Validation metrics recorded with each checkpoint."""
        return {}

    def close(self) -> None:
        pass


class EnvSource(DataSource):
    """The training envs: ``env.num_envs`` copies of the env, stepped with the autoreset mask."""

    def __init__(self, params: Params) -> None:
        self.params = params
        self.env = make_vector_env(params.env, params.env.num_envs)
        self.stepper = VectorStepper(self.env)

    def reset(self, env_steps: int) -> np.ndarray:
        """Reset every env; seeded from the step count, so a resumed run is itself reproducible (per-episode env
        parameters too: they are drawn from each sub-env's reset seed, ``rlcore.envs.vector.ApplyEpisodeSettings``)."""
        return self.stepper.reset(training_seed(self.params.seed, env_steps), env_steps)

    def use_settings(self, settings: EpisodeSettings) -> None:
        """Train under ``settings`` (a curriculum lesson) from each sub-env's next reset."""
        use_settings(self.env, settings)

    def close(self) -> None:
        self.env.close()


class ReplaySource(EnvSource):
    """The training envs and a replay of their transitions, saved beside each checkpoint (only the latest
    kept), so a resumed run keeps its memory."""

    def __init__(self, params: Params, observation_space: spaces.Space, action_space: spaces.Space) -> None:
        super().__init__(params)
        cfg = params.algo
        assert isinstance(cfg, OffPolicyConfig)
        discrete = isinstance(action_space, spaces.Discrete)
        self.replay = ReplayBuffer(
            cfg.buffer_size,
            tuple(observation_space.shape or ()),
            () if discrete else (action_dim(action_space),),  # Box actions of any shape are flat vectors
            np.int64 if discrete else np.float32,
            self.env.num_envs,  # rows: a multi-agent env has one per agent of each copy
            cfg.gamma,
            cfg.n_step,
            storage_dtype(observation_space),  # uint8 frames stay uint8
        )

    @staticmethod
    def path(run_root: Path, step: int) -> Path:
        return Path(run_root) / "replay" / f"step_{step:010d}.npz"

    def save(self, run_root: Path, step: int) -> None:
        self.replay.save(self.path(run_root, step), step)

    def after_checkpoint(self, run_root: Path, step: int) -> None:
        """Only now is the previous buffer superseded: a kill before the checkpoint resumes from the previous
        checkpoint, whose buffer is still there."""
        self._keep_only(run_root, step)

    def _keep_only(self, run_root: Path, step: int) -> None:
        path = self.path(run_root, step)
        for stale in path.parent.glob("step_*.npz"):
            if stale != path:
                stale.unlink()

    def restore(self, run_root: Path, step: int) -> None:
        self._keep_only(run_root, step)  # buffers of checkpoints that were never completed
        path = self.path(run_root, step)
        if not path.is_file():
            log.warning("no replay buffer saved for env step %d (%s): resuming with an empty buffer", step, path)
            return
        try:
            self.replay.load(path)
        except OlderReplayFormatError as exc:
            log.warning("%s: resuming with an empty buffer", exc)
            return
        log.info("restored %d replay transitions from %s", len(self.replay), path.name)


class DatasetSource(DataSource):
    """A fixed dataset read whole (``dataset.in_memory``) or streamed through a shuffle buffer; read and
    validated on construction. Held-out episodes give the algorithm's validation metrics."""

    unit: StepUnit = "gradient_steps"

    def __init__(self, params: Params, observation_space: spaces.Space, action_space: spaces.Space) -> None:
        cfg = params.dataset
        self._dataset_params = cfg.model_dump(mode="json")
        self.path = Path(cfg.path)
        self.batches: InMemoryBatches | RowGroupStream
        self.held_out: OfflineData | None
        if cfg.in_memory:
            data = load_dataset(self.path, observation_space, action_space, params.env.id)
            data = data.of_agents(cfg.agents, self.path).of_groups(cfg.groups, self.path)
            train, self.held_out = data.split_by_episode(cfg.validation_fraction, params.seed)
            self.batches = InMemoryBatches(train)
        else:
            stream = RowGroupStream(
                self.path,
                observation_space,
                action_space,
                params.env.id,
                cfg.buffer_transitions,
                params.algo.batch_size,  # type: ignore[attr-defined]  # every offline config has one
                params.seed,
                cfg.validation_fraction,
                cfg.validation_limit,
                cfg.agents,
                cfg.groups,
            )
            self.batches, self.held_out = stream, stream.validation
        self._held_out_tensors: dict[str, torch.Tensor] | None = None
        self._metadata = {
            "path": str(self.path),
            **file_digests(self.path, "sha256", "md5"),  # md5: the hash DVC records for the file in dvc.lock
            "transitions": transition_count(self.path),
            "metadata": self.batches.metadata,
        }
        held = len(self.held_out) if self.held_out else 0
        log.info(
            "training %s on %d transitions (%s%d held out) from %s",
            params.algo.name,
            self.batches.rows,
            self.batches.how,
            held,
            self.path,
        )

    def metadata(self) -> dict[str, Any]:
        return {"dataset": self._metadata}

    def fingerprint(self) -> dict[str, Any]:
        # The file's content, not only its path: a re-collected dataset must not resume a run trained on the old one.
        return {"dataset": self._dataset_params, "dataset_sha256": self._metadata["sha256"]}

    def start(self, fresh: bool, normalizer: ObsNormalizer) -> None:
        if fresh and normalizer.enabled:  # the dataset's statistics, fixed from here on
            self.batches.update_normalizer(normalizer)

    def batch(
        self, gradient_step: int, rng: np.random.Generator, batch_size: int, fields: Sequence[str] | None = None
    ) -> dict[str, torch.Tensor]:
        """A minibatch of ``fields`` (None: every field) drawn with ``rng``, (batch_size, ...) each."""
        return self.batches.batch(gradient_step, rng, batch_size, fields)

    def validate(self, algorithm: Algorithm[Any, Any]) -> dict[str, float]:
        if self.held_out is None or not isinstance(algorithm, OfflineAlgorithm):
            return {}
        if self._held_out_tensors is None:
            self._held_out_tensors = self.held_out.tensors()
        return algorithm.validate(self._held_out_tensors)
