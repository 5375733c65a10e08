"""The run directory ``runs/<name>/``: resume or start fresh, checkpoints, and the summary written last.

    checkpoints/step_<step>.pt   one per periodic evaluation (the candidates for select-best)
    dvclive/                     learning curves (TSV per metric, x = the run's steps) and metrics.json
    replay/step_<step>.npz       off-policy runs: the replay buffer at the latest checkpoint
    train_summary.json           written last: its presence means the run finished
    .next/                       a run replacing the one here, with the same layout, until it finishes

A step counts what the run's budget counts (``step_unit``): env steps for online runs, gradient steps
for offline runs. A run without ``train_summary.json`` was interrupted: re-running with the same train
params resumes from its latest checkpoint. A finished run, or one whose params changed, is replaced, but only
by a run that finished: the replacement trains in ``.next/`` (see :class:`RunDirectory`).
"""

from __future__ import annotations

import fcntl
import logging
import os
import re
import shlex
import shutil
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rlcore.common.checkpoints import (
    Checkpoint,
    StepUnit,
    checkpoint_path,
    list_checkpoints,
    load_checkpoint,
    save_checkpoint,
)
from rlcore.common.errors import CheckpointError, RLCoreError
from rlcore.common.files import check_target, write_json, write_text
from rlcore.common.versions import rlcore_version
from rlcore.config.sections import Params
from rlcore.evaluation.evaluator import EvalResult
from rlcore.trainers.finished_runs import RunFinishedError

log = logging.getLogger("rlcore")


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
    """The curriculum's state (``rlcore.envs.curriculum``: the lesson, its start, its smoothed signal, when each lesson
    started), restored on resume; None without ``env.curriculum``."""
    initialized_from: dict[str, Any] | None = None
    """``train.init_from``'s record (``rlcore.trainers.warm_start``: path, sha256, what was loaded), kept across
    resumes."""

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
        check_target(self.path)  # a folder or a pipe named .lock: one line, not a traceback or a hang
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


_SEED_FOLDER = re.compile(r"seed_\d+")
"""The runs of ``train.seeds`` inside ``runs/<name>/`` (``seed_<k>/``): beside a one-seed run there, never part
of it (never moved aside or cleared with it)."""


class RunDirectory:
    """One run's folder. A run in it is replaced only by a run that finished: a new run that would replace one trains
    in ``runs/<name>/.next/`` and is moved into place when it finishes (its summary written). A replacement that
    fails, diverges or is killed leaves the old run as it was, so evaluate and select still see it; the unfinished
    replacement is resumed by the next start with the same train params and discarded by any other start.

    Moving the finished replacement into place renames the old run's entries into ``.previous/`` (through
    ``.previous.partial/``, renamed at once when complete), then each entry of ``.next/`` into the folder, then drops
    ``.previous/``: a kill at any point leaves a state the next start finishes (``_recover``).
    """

    BOOKKEEPING = frozenset({".lock", ".next", ".previous", ".previous.partial", ".previous.restoring"})
    """Entries of the folder that are not part of the run in it."""

    def __init__(self, run_dir: Path, fingerprint: str) -> None:
        self.home = Path(run_dir)
        self.fingerprint = fingerprint
        self.next = self.home / ".next"
        self.previous = self.home / ".previous"
        self.moving_aside = self.home / ".previous.partial"
        self.moving_back = self.home / ".previous.restoring"
        self.lock = RunLock(self.home / ".lock")
        self._train_in(self.home)
        self._fresh = False
        self._resume_step: int | None = None
        self._begun = False

    def _train_in(self, folder: Path) -> None:
        """Where this run writes: the run folder itself, or ``.next/`` when it replaces the run there."""
        self.root = folder
        self.checkpoints = folder / "checkpoints"
        self.live = folder / "dvclive"
        self.replay = folder / "replay"
        self.summary = folder / "train_summary.json"

    @property
    def replacing(self) -> bool:
        """True when this run trains in ``.next/`` (a run stays in the folder until this one finishes)."""
        return self.root != self.home

    def _entries(self, folder: Path) -> list[Path]:
        """What makes up the run in ``folder`` (checkpoints, curves, replay, summary, any other file of it)."""
        if not folder.is_dir():
            return []
        return sorted(
            path
            for path in folder.iterdir()
            if path.name not in self.BOOKKEEPING and not _SEED_FOLDER.fullmatch(path.name)
        )

    def _holds_a_run(self) -> bool:
        """A finished run, or one with a checkpoint (readable or kept as ``*.corrupt``): worth keeping."""
        checkpoints = self.home / "checkpoints"
        return (self.home / "train_summary.json").exists() or (checkpoints.is_dir() and any(checkpoints.glob("step_*")))

    def prepare(self, params: Params, resume_from: Path | None, *, keep_finished: bool = False) -> Checkpoint | None:
        """Lock the folder, finish what a killed run left, then decide between resume and a fresh start (in the
        folder, or in ``.next/`` when it holds a run): the checkpoint to resume from, if any. Nothing of a run is
        removed here: :meth:`begin` does that once the session starts, so a refused start changes nothing.
        ``keep_finished``: a finished run with this fingerprint raises :class:`RunFinishedError` instead."""
        self.lock.acquire()
        try:
            check_target(self.home / "train_summary.json")  # a pipe or folder there is not a finished run's summary
            self._recover()
            checkpoint = self._choose(params, resume_from, keep_finished)
            self.lock.claim()
            return checkpoint
        except BaseException:
            self.lock.release()
            raise

    def _choose(self, params: Params, resume_from: Path | None, keep_finished: bool) -> Checkpoint | None:
        if resume_from is not None:
            checkpoint = load_checkpoint(resume_from, expected_algo=params.algo.name)
            if not {"policy", "algorithm", "rng"} <= checkpoint.tensors.keys():
                raise CheckpointError(
                    f"{checkpoint.path}: a selected model, not a training checkpoint (no optimizer or RNG state); "
                    "resume from runs/<name>/checkpoints/step_*.pt"
                )
            self._check_compatible(checkpoint, params)
            folder = checkpoint.path.parent.resolve()
            if folder == (self.next / "checkpoints").resolve():
                self._train_in(self.next)
            elif folder != (self.home / "checkpoints").resolve():
                self._start_fresh(f"resuming from {resume_from}")
            return checkpoint
        if self.next.is_dir():  # an unfinished replacement: resumed with its own train params
            latest = self._latest_readable(self.next / "checkpoints")
            if latest is not None and latest.meta.get("fingerprint") == self.fingerprint:
                log.info("resuming the unfinished replacement of the run in %s (kept until it finishes)", self.home)
                self._train_in(self.next)
                self._resume_step = latest.step
                return latest
        if (self.home / "train_summary.json").exists():
            if keep_finished:
                latest = self._latest_readable(self.home / "checkpoints")
                if latest is not None and latest.meta.get("fingerprint") == self.fingerprint:
                    raise RunFinishedError(self.home)
            self._start_fresh("the previous run finished; starting a fresh run")
            return None
        latest = self._latest_readable(self.home / "checkpoints")
        if latest is None:
            self._start_fresh("")
            return None
        if latest.meta.get("fingerprint") != self.fingerprint:
            self._start_fresh(f"train params changed since the interrupted run in {self.home}; starting fresh")
            return None
        self._resume_step = latest.step
        return latest

    def _start_fresh(self, reason: str) -> None:
        """A fresh run: in ``.next/`` when the folder holds a run (kept until this one finishes), else in place."""
        self._fresh = True
        if self._holds_a_run():
            self._train_in(self.next)
            if reason:
                log.info("%s in %s (the run in %s is kept until this one finishes)", reason, self.next, self.home)
        elif reason and self.home.exists():
            log.info("%s", reason)

    def begin(self) -> None:
        """Make the chosen folder ready (the session passed every check): clear it for a fresh run, or cut its
        curves to the checkpoint resumed from; an unfinished replacement not trained now is discarded."""
        self._begun = True
        if self.next.exists() and (self._fresh or not self.replacing):
            log.info("discarding the unfinished replacement in %s (other train params)", self.next)
            shutil.rmtree(self.next)
        if self._fresh:
            if not self.replacing:  # nothing worth keeping: curves of a run killed before its first checkpoint
                for path in self._entries(self.home):
                    shutil.rmtree(path) if path.is_dir() else path.unlink()
        elif self._resume_step is not None:
            self._repair_for_resume(self._resume_step)
        self.checkpoints.mkdir(parents=True, exist_ok=True)

    def _latest_readable(self, checkpoints: Path) -> Checkpoint | None:
        """The newest checkpoint in ``checkpoints`` that loads; unreadable newer ones are renamed ``*.corrupt``
        (kept, but no longer candidates), saying so."""
        for _, path in reversed(list_checkpoints(checkpoints)):
            try:
                return load_checkpoint(path)
            except CheckpointError as exc:
                aside = path.with_name(path.name + ".corrupt")
                os.replace(path, aside)
                log.warning("%s; resuming from an earlier checkpoint (the file is kept as %s)", exc, aside.name)
        return None

    def _recover(self) -> None:
        """Finish what a killed process left: temporary files, a run moved aside or back halfway, a finished
        replacement not yet (or not completely) moved into place."""
        stale: list[Path] = []
        for folder in (self.home, self.next):
            for sub in (folder, folder / "checkpoints", folder / "replay"):
                stale += sub.glob(".*.tmp")
            stale += (folder / "dvclive").rglob(".*.tmp")  # the curves and metrics.json rewritten by repair_curves
        for path in stale:
            path.unlink(missing_ok=True)  # we hold the lock: no live writer owns them
        if self.moving_aside.exists():  # killed while moving the run aside: it was never replaced
            self._put_back(self.moving_aside)
        if self.moving_back.exists():  # killed while putting the previous run back (an older rlcore): finish
            self._put_back(self.moving_back)
        if self.previous.exists():
            if self.next.exists():  # killed while moving a finished replacement into place: finish
                self._move_next_into_place()
            elif list_checkpoints(self.home / "checkpoints"):
                shutil.rmtree(self.previous)
            else:
                self.restore_previous()
        elif (self.next / "train_summary.json").exists():  # finished, killed before it was moved into place
            self._replace_with_next()

    def _replace_with_next(self) -> None:
        """Put the finished run of ``.next/`` in place of the run in the folder."""
        self.moving_aside.mkdir(parents=True, exist_ok=True)
        for path in self._entries(self.home):
            os.replace(path, self.moving_aside / path.name)
        os.replace(self.moving_aside, self.previous)
        self._move_next_into_place()

    def _move_next_into_place(self) -> None:
        """With the old run in ``.previous/``: move each entry of ``.next/`` into the folder, then drop both."""
        for path in self._entries(self.next):
            os.replace(path, self.home / path.name)
        shutil.rmtree(self.next)  # empty now (but for a leftover a kill left, already superseded)
        shutil.rmtree(self.previous)
        log.info("the new run replaced the previous one in %s", self.home)

    def restore_previous(self) -> None:
        """Put a moved-aside run back (left by an older rlcore, whose replacement stopped before a checkpoint)."""
        if not self.previous.exists() or list_checkpoints(self.home / "checkpoints"):
            return
        for path in self._entries(self.home):  # the new run's (every file of the previous run is in .previous/)
            if path.is_dir():
                shutil.rmtree(path)
            else:
                path.unlink(missing_ok=True)
        os.replace(self.previous, self.moving_back)
        self._put_back(self.moving_back)
        log.info("restored the previous run in %s (the new one stopped before its first checkpoint)", self.home)

    def _put_back(self, folder: Path) -> None:
        """Move every entry of ``folder`` back into the run folder (none of them is there), then drop ``folder``."""
        for path in folder.iterdir():
            os.replace(path, self.home / path.name)
        folder.rmdir()

    def abandon(self) -> None:
        """After an error: a fresh start that wrote no checkpoint leaves nothing behind; an unfinished replacement
        with checkpoints stays in ``.next/`` (resumable), beside the run it would have replaced, untouched."""
        if not self._begun or self.previous.exists() or self.summary.exists():
            return  # moving a finished replacement into place failed halfway: the next start finishes it
        if self.replacing:
            if not list_checkpoints(self.checkpoints):
                shutil.rmtree(self.next, ignore_errors=True)
            else:
                log.info(
                    "the run in %s is unchanged; the unfinished replacement is kept in %s (the same train params "
                    "resume it)",
                    self.home,
                    self.next,
                )

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
            "rlcore": rlcore_version(),  # which code trained it (the stages do not depend on rlcore's sources)
        }
        if state.curriculum is not None:
            summary["curriculum"] = state.curriculum
        if state.initialized_from is not None:
            summary["initialized_from"] = state.initialized_from
        write_json(self.summary, summary)  # last: the run is finished
        if self.replacing:
            self._replace_with_next()
            self._train_in(self.home)
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
