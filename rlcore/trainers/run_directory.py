"""The run directory ``runs/<name>/``: resume or start fresh, checkpoints, and the summary written last.

    checkpoints/step_<step>.pt   one per periodic evaluation (the candidates for select-best)
    dvclive/                     learning curves (TSV per metric, x = the run's steps) and metrics.json
    replay/step_<step>.npz       off-policy runs: the replay buffer at the latest checkpoint
    train_summary.json           written last: its presence means the run finished

A step counts what the run's budget counts (``step_unit``): env steps for online runs, gradient steps
for offline runs. A run without ``train_summary.json`` was interrupted: re-running with the same train
params resumes from its latest checkpoint. A finished run, or one whose params changed, is replaced.
"""

from __future__ import annotations

import hashlib
import json
import logging
import shlex
import shutil
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rlcore.checkpoints import (
    Checkpoint,
    StepUnit,
    checkpoint_path,
    list_checkpoints,
    load_checkpoint,
    save_checkpoint,
)
from rlcore.config import Params
from rlcore.errors import CheckpointError
from rlcore.evaluation import EvalResult
from rlcore.io import write_json

log = logging.getLogger("rlcore")


def train_fingerprint(params: Params, reads_dataset: bool) -> str:
    """Hash of every params key that changes what training computes (``dataset`` only for runs that read it)."""
    tree = params.to_dict()
    relevant = {key: tree[key] for key in ("seed", "env", "policy", "algo")}
    if reads_dataset:
        relevant["dataset"] = tree["dataset"]
    relevant["train"] = {k: v for k, v in tree["train"].items() if k != "progress_bar"}
    return hashlib.sha256(json.dumps(relevant, sort_keys=True).encode()).hexdigest()[:16]


def command_line() -> str:
    return shlex.join([Path(sys.argv[0]).name, *sys.argv[1:]])


@dataclass
class RunState:
    """Counters that a checkpoint restores. Both step counts are true counts: an offline run takes no env
    steps; ``unit`` says which one the budget, evaluation and logging cadence count."""

    unit: StepUnit
    env_steps: int = 0
    gradient_steps: int = 0
    updates: int = 0
    wall_seconds: float = 0.0
    next_eval: int = 0
    evaluations: list[dict[str, Any]] = field(default_factory=list)

    @property
    def steps(self) -> int:
        """The budget's counter: ``env_steps`` or ``gradient_steps``."""
        return self.env_steps if self.unit == "env_steps" else self.gradient_steps

    def counters(self) -> dict[str, Any]:
        return {
            "step_unit": self.unit,
            "env_steps": self.env_steps,
            "gradient_steps": self.gradient_steps,
            "updates": self.updates,
            "wall_seconds": self.wall_seconds,
            "next_eval": self.next_eval,
            "evaluations": self.evaluations,
        }

    @classmethod
    def from_checkpoint(cls, checkpoint: Checkpoint) -> RunState:
        meta = checkpoint.meta
        return cls(
            checkpoint.step_unit,
            meta["env_steps"],
            meta["gradient_steps"],
            meta["updates"],
            meta["wall_seconds"],
            meta["next_eval"],
            meta["evaluations"],
        )


class RunDirectory:
    def __init__(self, run_dir: Path, fingerprint: str) -> None:
        self.root = Path(run_dir)
        self.fingerprint = fingerprint
        self.checkpoints = self.root / "checkpoints"
        self.live = self.root / "dvclive"
        self.replay = self.root / "replay"
        self.summary = self.root / "train_summary.json"

    def prepare(self, params: Params, resume_from: Path | None) -> Checkpoint | None:
        """Decide between resume and a fresh start; return the checkpoint to resume from, if any."""
        if resume_from is not None:
            checkpoint = load_checkpoint(resume_from, expected_algo=params.algo.name)
            self._check_compatible(checkpoint, params)
            if checkpoint.path.parent.resolve() != self.checkpoints.resolve():
                self._wipe(f"resuming from {resume_from}")
            return checkpoint
        if self.summary.exists():
            self._wipe("the previous run finished; starting a fresh run")
            return None
        existing = list_checkpoints(self.checkpoints)
        if not existing:
            self._wipe("")
            return None
        checkpoint = load_checkpoint(existing[-1][1])
        if checkpoint.meta.get("fingerprint") != self.fingerprint:
            self._wipe(f"train params changed since the interrupted run in {self.root}; starting fresh")
            return None
        return checkpoint

    def _check_compatible(self, checkpoint: Checkpoint, params: Params) -> None:
        saved_env = checkpoint.meta["params"]["env"]["id"]
        if saved_env != params.env.id:
            raise CheckpointError(
                f"{checkpoint.path}: checkpoint is for env {saved_env!r}, params say {params.env.id!r}"
            )
        saved_policy = checkpoint.meta["params"]["policy"]
        if saved_policy != params.policy.model_dump(mode="json"):
            raise CheckpointError(f"{checkpoint.path}: checkpoint's policy section differs from params' policy section")

    def _wipe(self, reason: str) -> None:
        if reason and self.root.exists():
            log.info("%s", reason)
        for path in (self.checkpoints, self.live, self.replay):
            shutil.rmtree(path, ignore_errors=True)
        self.summary.unlink(missing_ok=True)
        self.checkpoints.mkdir(parents=True, exist_ok=True)

    def save(
        self,
        params: Params,
        state: RunState,
        tensors: dict[str, Any],
        spaces: dict[str, Any],
        evaluation: EvalResult,
        extra: dict[str, Any],
    ) -> Path:
        meta = {
            **extra,
            **state.counters(),
            "fingerprint": self.fingerprint,
            "params": params.to_dict(),
            "spaces": spaces,
            "evaluation": evaluation.to_dict(),
            "command": command_line(),
        }
        path = checkpoint_path(self.checkpoints, state.steps)
        save_checkpoint(path, params.algo.name, state.steps, state.unit, meta, tensors)
        return path

    def finish(self, state: RunState, stop_reason: str) -> dict[str, Any]:
        rate_key = f"{state.unit}_per_second"
        summary = {
            "step_unit": state.unit,
            "env_steps": state.env_steps,
            "gradient_steps": state.gradient_steps,
            "updates": state.updates,
            "wall_seconds": round(state.wall_seconds, 3),
            rate_key: round(state.steps / max(state.wall_seconds, 1e-9), 1),
            "stop_reason": stop_reason,
            "checkpoints": [p.name for _, p in list_checkpoints(self.checkpoints)],
            "evaluations": state.evaluations,
        }
        write_json(self.summary, summary)
        return summary
