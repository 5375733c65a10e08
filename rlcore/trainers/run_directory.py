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

import fcntl
import hashlib
import json
import logging
import os
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
from rlcore.errors import CheckpointError, RLCoreError
from rlcore.evaluation import EvalResult
from rlcore.io import write_json, write_text

log = logging.getLogger("rlcore")


def train_fingerprint(params: Params, source: dict[str, Any]) -> str:
    """Hash of every params key that changes what training computes, and of what the run learns from beyond
    the params (``source``: for an offline run the dataset section and the file's sha256)."""
    tree = params.to_dict()
    relevant = {key: tree[key] for key in ("seed", "env", "policy", "algo")}
    relevant.update(source)
    relevant["train"] = {k: v for k, v in tree["train"].items() if k != "progress_bar"}
    # Where it trains is not what it trains: a run started on a GPU machine resumes on a CPU one, and back (hashed
    # as the default, so runs from before train.device keep their fingerprint).
    relevant["train"]["device"] = "auto"
    # The periodic evaluations' episode cap changes their scores, which stop training (target_return).
    relevant["eval_max_episode_steps"] = tree["eval"]["max_episode_steps"]
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
    next_log: int = 0
    """Step of the next row of training metrics (kept, so a resumed run logs on an uninterrupted run's rows)."""
    evaluations: list[dict[str, Any]] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    """What the user should know about the run (e.g. a collapsed policy), in the summary and the report."""
    curriculum: dict[str, Any] | None = None
    """The curriculum's state (``rlcore.curriculum``: the lesson, its start, its smoothed signal, when each lesson
    started), restored on resume; None without ``env.curriculum``."""
    initialized_from: dict[str, Any] | None = None
    """``train.init_from``'s record (``rlcore.warm_start``: path, sha256, what was loaded), kept across resumes."""

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
            "next_log": self.next_log,
            "evaluations": self.evaluations,
            "warnings": self.warnings,
            "curriculum": self.curriculum,
            "initialized_from": self.initialized_from,
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
            meta["next_log"],
            meta["evaluations"],
            meta.get("warnings", []),
            meta.get("curriculum"),
            meta.get("initialized_from"),
        )


class RunLockedError(RLCoreError):
    """Another live process is training into the same run folder."""


class RunLock:
    """An exclusive ``flock`` on ``runs/<name>/.lock``, held while a process trains into the folder.

    The kernel drops it when the process dies (SIGKILL included), so the next run takes over a dead one's
    folder, while a second live trainer (or the orphan of a killed ``dvc repro``) is refused, by PID.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self.handle: Any = None

    def acquire(self) -> None:
        if self.handle is not None:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        handle = open(self.path, "a+")  # noqa: SIM115  (held open for the lock's lifetime)
        try:
            fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.seek(0)
            holder = handle.read().strip() or "?"
            handle.close()
            raise RunLockedError(
                f"{self.path.parent}: another rlcore process (PID {holder}) is training this run; "
                "wait for it to finish or stop it"
            ) from None
        self.handle = handle

    def claim(self) -> None:
        """Write this process's PID into the lock file (once the run really starts: a refused command
        changes nothing in the folder)."""
        assert self.handle is not None
        self.handle.seek(0)
        self.handle.truncate()
        self.handle.write(f"{os.getpid()}\n")
        self.handle.flush()

    def release(self) -> None:
        if self.handle is not None:
            fcntl.flock(self.handle.fileno(), fcntl.LOCK_UN)
            self.handle.close()
            self.handle = None


class RunDirectory:
    """One run's folder. Nothing in it is deleted before the new run has something better to keep: a run
    being replaced is moved to ``.previous/`` and dropped only once the new run wrote its first checkpoint
    (put back if the new run fails before that, or was killed: the next start restores it)."""

    def __init__(self, run_dir: Path, fingerprint: str) -> None:
        self.root = Path(run_dir)
        self.fingerprint = fingerprint
        self.checkpoints = self.root / "checkpoints"
        self.live = self.root / "dvclive"
        self.replay = self.root / "replay"
        self.summary = self.root / "train_summary.json"
        self.previous = self.root / ".previous"
        # Moving a run aside, or back, takes one rename per entry: it happens in these folders, renamed at once when
        # complete, so a kill halfway leaves a state the next start can finish (``_recover``).
        self.moving_aside = self.root / ".previous.partial"
        self.moving_back = self.root / ".previous.restoring"
        self.lock = RunLock(self.root / ".lock")

    @property
    def _contents(self) -> list[Path]:
        return [self.checkpoints, self.live, self.replay, self.summary]

    def prepare(self, params: Params, resume_from: Path | None) -> Checkpoint | None:
        """Lock the folder, then decide between resume and a fresh start; the checkpoint to resume from, if any."""
        self.lock.acquire()
        try:
            self._recover()
            checkpoint = self._choose(params, resume_from)
            self.lock.claim()
            return checkpoint
        except BaseException:
            self.lock.release()
            raise

    def _choose(self, params: Params, resume_from: Path | None) -> Checkpoint | None:
        if resume_from is not None:
            checkpoint = load_checkpoint(resume_from, expected_algo=params.algo.name)
            if not {"policy", "algorithm", "rng"} <= checkpoint.tensors.keys():
                raise CheckpointError(
                    f"{checkpoint.path}: a selected model, not a training checkpoint (no optimizer or RNG state); "
                    "resume from runs/<name>/checkpoints/step_*.pt"
                )
            self._check_compatible(checkpoint, params)
            if checkpoint.path.parent.resolve() != self.checkpoints.resolve():
                self._replace(f"resuming from {resume_from}")
            return checkpoint
        if self.summary.exists():
            self._replace("the previous run finished; starting a fresh run")
            return None
        latest = self._latest_readable()
        if latest is None:
            self._replace("")
            return None
        if latest.meta.get("fingerprint") != self.fingerprint:
            self._replace(f"train params changed since the interrupted run in {self.root}; starting fresh")
            return None
        self._repair_for_resume(latest.step)
        return latest

    def _latest_readable(self) -> Checkpoint | None:
        """The newest checkpoint that loads; unreadable newer ones are renamed ``*.corrupt`` (kept, but no
        longer candidates), saying so."""
        for _, path in reversed(list_checkpoints(self.checkpoints)):
            try:
                return load_checkpoint(path)
            except CheckpointError as exc:
                aside = path.with_name(path.name + ".corrupt")
                os.replace(path, aside)
                log.warning("%s; resuming from an earlier checkpoint (the file is kept as %s)", exc, aside.name)
        return None

    def _recover(self) -> None:
        """Finish what a killed process left: temporary files, a run moved aside or back halfway, and a replacement
        that never reached a checkpoint."""
        stale = [path for folder in (self.root, self.checkpoints, self.replay) for path in folder.glob(".*.tmp")]
        stale += self.live.rglob(".*.tmp")  # the curves and metrics.json rewritten by repair_curves
        for path in stale:
            path.unlink(missing_ok=True)  # we hold the lock: no live writer owns them
        if self.moving_aside.exists():  # killed while moving the run aside: it was never replaced
            self._put_back(self.moving_aside)
        if self.moving_back.exists():  # killed while putting the previous run back: finish
            self._put_back(self.moving_back)
        if self.previous.exists():
            if list_checkpoints(self.checkpoints):
                shutil.rmtree(self.previous)
            else:
                self.restore_previous()

    def _replace(self, reason: str) -> None:
        """Move the current run aside (into ``.previous/``) and start an empty one."""
        if reason and self.root.exists():
            log.info("%s", reason)
        present = [path for path in self._contents if path.exists()]
        if present:
            shutil.rmtree(self.previous, ignore_errors=True)
            self.moving_aside.mkdir(parents=True, exist_ok=True)
            for path in present:
                os.replace(path, self.moving_aside / path.name)
            os.replace(self.moving_aside, self.previous)
        self.checkpoints.mkdir(parents=True, exist_ok=True)

    def restore_previous(self) -> None:
        """Put a moved-aside run back (the replacement produced no checkpoint)."""
        if not self.previous.exists() or list_checkpoints(self.checkpoints):
            return
        for path in self._contents:  # the new run's (every file of the previous run is in .previous/)
            if path.is_dir():
                shutil.rmtree(path)
            else:
                path.unlink(missing_ok=True)
        os.replace(self.previous, self.moving_back)
        self._put_back(self.moving_back)
        log.info("restored the previous run in %s (the new one stopped before its first checkpoint)", self.root)

    def _put_back(self, folder: Path) -> None:
        """Move every entry of ``folder`` back into the run folder (none of them is there), then drop ``folder``."""
        for path in folder.iterdir():
            os.replace(path, self.root / path.name)
        folder.rmdir()

    def _repair_for_resume(self, step: int) -> None:
        """Make the learning curves end at the checkpoint resumed from: rows logged after it are logged again
        by the resumed run (no duplicates), and a summary file a kill left half-written is rebuilt."""
        repair_curves(self.live, step)

    def _check_compatible(self, checkpoint: Checkpoint, params: Params) -> None:
        saved_env = checkpoint.meta["params"]["env"]["id"]
        if saved_env != params.env.id:
            raise CheckpointError(
                f"{checkpoint.path}: checkpoint is for env {saved_env!r}, params say {params.env.id!r}"
            )
        saved_policy = checkpoint.meta["params"]["policy"]
        if saved_policy != params.policy.model_dump(mode="json"):
            raise CheckpointError(f"{checkpoint.path}: checkpoint's policy section differs from params' policy section")

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
        shutil.rmtree(self.previous, ignore_errors=True)  # the new run has something to keep now
        return path

    def finish(self, state: RunState, stop_reason: str) -> dict[str, Any]:
        rate_key = f"{state.unit}_per_second"
        summary: dict[str, Any] = {
            "step_unit": state.unit,
            "env_steps": state.env_steps,
            "gradient_steps": state.gradient_steps,
            "updates": state.updates,
            "wall_seconds": round(state.wall_seconds, 3),
            rate_key: round(state.steps / max(state.wall_seconds, 1e-9), 1),
            "stop_reason": stop_reason,
            "checkpoints": [p.name for _, p in list_checkpoints(self.checkpoints)],
            "evaluations": state.evaluations,
            "warnings": state.warnings,
        }
        if state.curriculum is not None:
            summary["curriculum"] = state.curriculum
        if state.initialized_from is not None:
            summary["initialized_from"] = state.initialized_from
        write_json(self.summary, summary)
        return summary

    def close(self) -> None:
        self.lock.release()


def repair_curves(live_dir: Path, step: int) -> None:
    """Cut every dvclive TSV under ``live_dir`` to its rows at or before ``step`` and rewrite ``metrics.json``
    (the latest value of each metric, and the step) from them, atomically."""
    plots = Path(live_dir) / "plots" / "metrics"
    latest: dict[str, Any] = {}
    for tsv in sorted(plots.rglob("*.tsv")) if plots.is_dir() else []:
        lines = tsv.read_text().splitlines()
        if not lines:
            continue
        header, rows = lines[0], lines[1:]
        column = header.split("\t").index("step") if "step" in header.split("\t") else None
        kept = []
        for row in rows:
            fields = row.split("\t")
            try:
                row_step = int(fields[column]) if column is not None else None
            except (ValueError, IndexError):
                continue  # a row cut by a kill
            if row_step is None or row_step <= step:
                kept.append(row)
        if kept != rows:
            write_text(tsv, "\n".join([header, *kept]) + "\n")
        if kept:
            node = latest
            *parents, name = tsv.relative_to(plots).with_suffix("").parts
            for part in parents:
                node = node.setdefault(part, {})
            value_column = header.split("\t").index(name) if name in header.split("\t") else -1
            node[name] = float(kept[-1].split("\t")[value_column])
    if plots.is_dir():
        write_json(Path(live_dir) / "metrics.json", {**latest, "step": step})
