"""What every trainer shares: the run directory, resume, checkpoints, stop conditions, progress, metrics.

Run directory ``runs/<name>/``:
    checkpoints/step_<env_steps>.pt   one per periodic evaluation (the candidates for select-best)
    dvclive/                          learning curves (TSV per metric, step = env steps) and metrics.json
    replay/step_<env_steps>.npz       off-policy runs: the replay buffer at the latest checkpoint
    train_summary.json                written last: its presence means the run finished

A run without ``train_summary.json`` was interrupted: re-running with the same train params resumes
from its latest checkpoint. A finished run, or one whose params changed, is replaced by a fresh run.
"""

from __future__ import annotations

import hashlib
import json
import logging
import shlex
import shutil
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from rlcore.algos import algorithm_class
from rlcore.checkpoints import Checkpoint, checkpoint_path, list_checkpoints, load_checkpoint, save_checkpoint
from rlcore.config import Params
from rlcore.errors import CheckpointError
from rlcore.evaluation import EvalResult
from rlcore.io import write_json

log = logging.getLogger("rlcore")

EvaluationCallback = Callable[[int, EvalResult], bool]
"""``(env_steps, result) -> should_stop``: called after each periodic evaluation (e.g. a sweep's pruner)."""


def train_fingerprint(params: Params) -> str:
    """Hash of every params key that changes what training computes."""
    tree = params.to_dict()
    relevant = {key: tree[key] for key in ("seed", "env", "policy", "algo")}
    if algorithm_class(params.algo.name).kind == "offline":  # only an offline run reads the dataset
        relevant["dataset"] = tree["dataset"]
    relevant["train"] = {k: v for k, v in tree["train"].items() if k != "progress_bar"}
    return hashlib.sha256(json.dumps(relevant, sort_keys=True).encode()).hexdigest()[:16]


def seed_everything(seed: int, threads: int) -> None:
    torch.manual_seed(seed)
    np.random.seed(seed % 2**32)
    torch.set_num_threads(threads)


def command_line() -> str:
    return shlex.join([Path(sys.argv[0]).name, *sys.argv[1:]])


@dataclass
class RunState:
    """Counters that a checkpoint restores."""

    env_steps: int = 0
    updates: int = 0
    wall_seconds: float = 0.0
    next_eval: int = 0
    evaluations: list[dict[str, Any]] = field(default_factory=list)


class RunDirectory:
    def __init__(self, run_dir: Path) -> None:
        self.root = Path(run_dir)
        self.checkpoints = self.root / "checkpoints"
        self.live = self.root / "dvclive"
        self.summary = self.root / "train_summary.json"

    def prepare(self, params: Params, resume_from: Path | None) -> Checkpoint | None:
        """Decide between resume and a fresh start; return the checkpoint to resume from, if any."""
        fingerprint = train_fingerprint(params)
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
        if checkpoint.meta.get("fingerprint") != fingerprint:
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
        for path in (self.checkpoints, self.live, self.root / "replay"):
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
            "fingerprint": train_fingerprint(params),
            "params": params.to_dict(),
            "spaces": spaces,
            "evaluation": evaluation.to_dict(),
            "updates": state.updates,
            "wall_seconds": state.wall_seconds,
            "next_eval": state.next_eval,
            "evaluations": state.evaluations,
            "command": command_line(),
        }
        path = checkpoint_path(self.checkpoints, state.env_steps)
        save_checkpoint(path, params.algo.name, state.env_steps, meta, tensors)
        return path

    def finish(self, state: RunState, stop_reason: str) -> dict[str, Any]:
        summary = {
            "env_steps": state.env_steps,
            "updates": state.updates,
            "wall_seconds": round(state.wall_seconds, 3),
            "env_steps_per_second": round(state.env_steps / max(state.wall_seconds, 1e-9), 1),
            "stop_reason": stop_reason,
            "checkpoints": [p.name for _, p in list_checkpoints(self.checkpoints)],
            "evaluations": state.evaluations,
        }
        write_json(self.summary, summary)
        return summary


class StopConditions:
    """Env-step budget, target evaluation return, wall-clock limit, and the evaluation callback."""

    def __init__(self, params: Params, on_evaluation: EvaluationCallback | None) -> None:
        self.train = params.train
        self.on_evaluation = on_evaluation

    def after_evaluation(self, state: RunState, result: EvalResult) -> str | None:
        target = self.train.target_return
        if target is not None and result.mean_return >= target:
            return f"reached target return {target:g} (eval mean {result.mean_return:.1f})"
        if self.on_evaluation is not None and self.on_evaluation(state.env_steps, result):
            return "stopped by the evaluation callback"
        return self.budget(state)

    def budget(self, state: RunState) -> str | None:
        if state.env_steps >= self.train.max_steps:
            return f"reached the budget of {self.train.max_steps} env steps"
        limit = self.train.max_wall_seconds
        if limit is not None and state.wall_seconds >= limit:
            return f"reached the wall-clock limit of {limit:g} s"
        return None


class Progress:
    """A tqdm bar on a terminal; one log line per evaluation otherwise."""

    def __init__(self, mode: str, total: int, initial: int) -> None:
        self.bar = None
        if mode == "on" or (mode == "auto" and sys.stderr.isatty()):
            from tqdm import tqdm

            self.bar = tqdm(total=total, initial=initial, unit="step", unit_scale=True, dynamic_ncols=True)
        self.last = initial
        self.started = time.perf_counter()

    def advance(self, env_steps: int) -> None:
        if self.bar is not None:
            self.bar.update(env_steps - self.last)
        self.last = env_steps

    def evaluation(self, env_steps: int, result: EvalResult, steps_per_second: float) -> None:
        if self.bar is not None:
            self.bar.set_postfix(eval=f"{result.mean_return:.1f}", refresh=False)
        else:
            log.info("step %d | eval %s | %.0f env-steps/s", env_steps, result.summary(), steps_per_second)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


def _live(directory: Path, resume: bool) -> Any:
    """A dvclive logger; in a git repository without commits, one without DVC integration (which we never use).

    dvclive asks git for the HEAD commit before it checks that there is one, and raises in a fresh
    ``git init`` (dvclive 3.49): the metrics are the same either way.
    """
    from dvclive import Live
    from scmrepo.exceptions import SCMError

    options = {"resume": resume, "dvcyaml": None, "save_dvc_exp": False, "report": None}
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
    """dvclive learning curves with env steps on the x axis; never touches dvc.yaml or DVC experiments.

    Training metrics are averaged over updates and written every ``every`` env steps: one dvclive row
    costs milliseconds, as much as a whole small PPO update.
    """

    def __init__(self, directory: Path, resume: bool, every: int, env_steps: int) -> None:
        self.live = _live(directory, resume)
        self.every = every
        self.next_row = env_steps + every
        self.sums: dict[str, float] = {}
        self.counts: dict[str, int] = {}

    def add(self, metrics: dict[str, float]) -> None:
        for key, value in metrics.items():
            if np.isfinite(value):
                self.sums[key] = self.sums.get(key, 0.0) + float(value)
                self.counts[key] = self.counts.get(key, 0) + 1

    def due(self, env_steps: int) -> bool:
        return env_steps >= self.next_row

    def flush(self, env_steps: int, extra: dict[str, float]) -> None:
        """Write the averages since the last row, plus ``extra``, as one row at ``env_steps``."""
        row = {key: total / self.counts[key] for key, total in self.sums.items()}
        row.update(extra)
        self.sums, self.counts = {}, {}
        self.next_row = env_steps + self.every
        self.log(env_steps, row)

    def log(self, env_steps: int, metrics: dict[str, float]) -> None:
        """Log ``{"train/loss": ..., "eval/mean_return": ...}`` as one row at ``env_steps``."""
        self.live.step = env_steps
        for key, value in metrics.items():
            if np.isfinite(value):
                self.live.log_metric(key, float(value))
        self.live.next_step()

    def close(self) -> None:
        self.live.end()
