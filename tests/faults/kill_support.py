"""The kills of the fault suite's SIGKILL tests (test_kills.py: PPO and BC; test_kills_replay.py: DQN and SAC), drawn
once from a seeded generator, and what a killed and re-run folder must hold (issue 12): the small params of each
algorithm, the uninterrupted reference runs (timed: a kill's delay is a fraction of one of their stretches), the kill
and the re-run, and the checks of the run folder; every process of a killed run must be gone (issue 26)."""

from __future__ import annotations

import contextlib
import random
import re
import shutil
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil
from conftest import PROJECT, RLCORE, sets

from rlcore.common.checkpoints import load_checkpoint

from .run_support import (
    DVC,
    checkpoint_name,
    checkpoint_steps,
    curves,
    kill,
    make_dvc_repo,
    read_json,
    rlcore_here,
    run,
    start,
    wait_until,
    write_params,
)

COMMON = {"train": {"progress_bar": "off", "target_return": None, "eval_episodes": 3}}


@dataclass(frozen=True)
class Algo:
    preset: str
    """The project's params file it starts from."""
    name: str
    """``name`` of the preset (dvc.yaml's run folder); the offline one is fixed in dvc.yaml."""
    train: dict[str, int]
    algo: dict[str, Any] = field(default_factory=dict)
    replay: bool = False
    offline: bool = False

    @property
    def max_steps(self) -> int:
        return self.train["max_steps"]

    @property
    def steps(self) -> list[int]:
        """The steps of the periodic evaluations (and checkpoints) of an uninterrupted run."""
        every = self.train["eval_every"]
        return list(range(every, self.max_steps + 1, every))

    def edits(self) -> dict[str, Any]:
        edits: dict[str, Any] = {"train": {**COMMON["train"], **self.train}}
        if self.algo:
            edits["algo"] = self.algo
        return edits


# Budgets: a few seconds of training each (a run's process start, its imports, is as long); four checkpoints (three
# for SAC), so that the seeded draws of the plan pick the same checkpoint of each run whatever its budget.
ALGOS = {
    "ppo": Algo("params.yaml", "ppo-cartpole", {"max_steps": 8192, "eval_every": 2048, "log_every": 1024}),
    "dqn": Algo(
        "configs/dqn-cartpole.yaml",
        "dqn-cartpole",
        {"max_steps": 4000, "eval_every": 1000, "log_every": 500},
        {"learning_starts": 500},
        replay=True,
    ),
    "sac": Algo(
        "configs/sac-pendulum.yaml",
        "sac-pendulum",
        {"max_steps": 900, "eval_every": 300, "log_every": 150},
        {"learning_starts": 150, "batch_size": 64},
        replay=True,
    ),
    "bc": Algo("offline.yaml", "bc-cartpole", {"max_steps": 600, "eval_every": 200, "log_every": 100}, offline=True),
}

# (algorithm, runner, where the kill lands): 13 kills under `rlcore train`, 7 under `dvc repro`.
# "start-up": between the process start and the first checkpoint (imports, env and policy set-up, resume, the first
# training steps); "training": somewhere between two checkpoints (training steps, the training rows of the curves,
# the periodic evaluation, its row, the replay buffer and checkpoint writes), or after the last one (the summary
# and the exit); "checkpoint": right after a checkpoint file appears (before its replay's predecessor is deleted).
PLAN = [
    ("ppo", "train", "start-up"),
    ("ppo", "train", "training"),
    ("ppo", "train", "training"),
    ("ppo", "train", "checkpoint"),
    ("ppo", "dvc", "start-up"),
    ("ppo", "dvc", "training"),
    ("dqn", "train", "start-up"),
    ("dqn", "train", "training"),
    ("dqn", "train", "checkpoint"),
    ("dqn", "dvc", "training"),
    ("dqn", "dvc", "checkpoint"),
    ("sac", "train", "start-up"),
    ("sac", "train", "training"),
    ("sac", "train", "checkpoint"),
    ("sac", "dvc", "training"),
    ("bc", "train", "start-up"),
    ("bc", "train", "training"),
    ("bc", "train", "checkpoint"),
    ("bc", "dvc", "start-up"),
    ("bc", "dvc", "training"),
]


@dataclass(frozen=True)
class Kill:
    """A SIGKILL ``fraction`` of the uninterrupted run's time from its event ``after`` to its next one after the
    same event in the killed run: ``after`` 0 is the process start, any other step the appearance of that step's
    checkpoint. Anchoring the delay on the killed run's own events lands it in the same part of the run however
    long the start-up takes on a busy machine."""

    index: int
    algo: str
    runner: str
    """``train``: ``rlcore train``; ``dvc``: ``dvc repro`` (its process group is killed)."""
    after: int
    fraction: float

    @property
    def id(self) -> str:
        anchor = "start" if self.after == 0 else f"ckpt{self.after}"
        return f"{self.index:02d}-{self.algo}-{self.runner}-{anchor}+{self.fraction:.2f}"


def plan(seed: int = 12) -> list[Kill]:
    """The 20 kills, drawn once from a seeded generator: CI tries the same moments every time."""
    rng = random.Random(seed)
    kills = []
    for index, (algo, runner, kind) in enumerate(PLAN):
        steps = ALGOS[algo].steps
        if kind == "start-up":
            kills.append(Kill(index, algo, runner, 0, round(rng.uniform(0.05, 1.0), 2)))
        elif kind == "training":
            kills.append(Kill(index, algo, runner, rng.choice(steps), round(rng.uniform(0.0, 1.0), 2)))
        else:
            kills.append(Kill(index, algo, runner, rng.choice(steps), 0.0))
    return kills


KILLS = plan()
assert len(KILLS) == 20


@dataclass
class Reference:
    """An uninterrupted run of the same params, and when its events came (seconds from its start)."""

    run_dir: Path
    events: dict[int, float]
    """0: the start; each step: its checkpoint appeared."""
    seconds: float
    curves: dict[str, list[tuple[int, str]]]
    checkpoints: list[str]

    def segment(self, after: int) -> float:
        """Seconds from the event ``after`` to the next one (the end, after the last checkpoint)."""
        times = sorted(self.events.values()) + [self.seconds]
        return times[times.index(self.events[after]) + 1] - self.events[after]


class Workspace:
    """One project folder for a test module: the small params files, the dataset, the uninterrupted runs (each made
    the first time a test needs it) and the ``rlcore train`` kills (each in its own run folder)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.references: dict[str, Reference] = {}
        for name in ("params.yaml", "offline.yaml", "dvc.yaml", ".dvcignore", "prefect.toml"):
            shutil.copy(PROJECT / name, root / name)
        for key, algo in ALGOS.items():
            write_params(PROJECT / algo.preset, self.params(key), algo.edits())

    @property
    def dataset(self) -> Path:
        """The offline run's data: collected the first time a test needs it, from a random policy (no online model
        needed)."""
        dataset = self.root / "data" / "dataset.parquet"
        if not dataset.is_file():
            overrides = sets(["collect.policy=random", "collect.steps=2000"])
            rlcore_here("collect", "--params", "bc.yaml", *overrides, cwd=self.root)
            assert dataset.is_file()
        return dataset

    def params(self, algo: str) -> Path:
        return self.root / f"{algo}.yaml"

    def reference(self, algo: str) -> Reference:
        if ALGOS[algo].offline:
            assert self.dataset.is_file()  # its data, for the reference and the kills (train.dataset.path)
        if algo not in self.references:
            name = f"reference-{algo}"
            run_dir = self.root / "runs" / name
            command = [RLCORE, "train", "--params", self.params(algo).name, "--set", f"name={name}"]
            log = self.root / f"{name}.log"
            started = time.perf_counter()
            proc = start(command, self.root, log)
            events = {0: 0.0}
            pending = list(ALGOS[algo].steps)
            while True:
                while pending and (run_dir / "checkpoints" / checkpoint_name(pending[0])).exists():
                    events[pending.pop(0)] = time.perf_counter() - started
                if not pending or proc.poll() is not None:
                    break
                time.sleep(0.005)
            assert proc.wait() == 0, log.read_text()
            seconds = time.perf_counter() - started
            assert sorted(events) == [0, *ALGOS[algo].steps], log.read_text()
            checkpoints = sorted(p.name for p in run_dir.glob("checkpoints/*.pt"))
            assert checkpoints == [checkpoint_name(s) for s in ALGOS[algo].steps]
            self.references[algo] = Reference(run_dir, events, seconds, curves(run_dir / "dvclive"), checkpoints)
        return self.references[algo]


@dataclass
class Killed:
    """What a kill left behind."""

    landed: bool
    """The process was still running when the SIGKILL came."""
    checkpoints: list[int]
    summary: bool
    seconds: float


def kill_at(proc: Any, kill_case: Kill, reference: Reference, run_dir: Path, group: bool, started: float) -> Killed:
    checkpoints = run_dir / "checkpoints"
    if kill_case.after:
        wait_until((checkpoints / checkpoint_name(kill_case.after)).exists, proc)
    delay = kill_case.fraction * reference.segment(kill_case.after)
    deadline = time.perf_counter() + delay
    wait_until(lambda: time.perf_counter() >= deadline, proc)
    tree = process_tree(proc.pid)
    landed = kill(proc, group=group)
    check_no_orphans(tree, f"{kill_case.id}: killed")
    return Killed(
        landed, checkpoint_steps(checkpoints), (run_dir / "train_summary.json").exists(), time.perf_counter() - started
    )


RESUMED = re.compile(r"resuming \S+ from step_(\d{10})\.pt")
RESTORED = re.compile(r"restored (\d+) replay transitions from step_(\d{10})\.npz")
RWLOCK_CORRUPT = "Unable to read RWLock-file"
"""DVC's error when a kill cut its in-place rewrite of .dvc/tmp/rwlock short (an empty or partial JSON file)."""


def sigkill_and_rerun(kill_case: Kill, workspace: Workspace, tmp_path: Path) -> None:
    """Kill a run at ``kill_case``, run the same command again to completion (``rlcore train``'s re-run in the test
    process, ``dvc repro``'s as a real process), and check what the folder holds."""
    algo = ALGOS[kill_case.algo]
    reference = workspace.reference(kill_case.algo)
    if kill_case.runner == "train":
        root, name = workspace.root, f"kill-{kill_case.index:02d}-{kill_case.algo}"
        command = [RLCORE, "train", "--params", workspace.params(kill_case.algo).name, "--set", f"name={name}"]
    else:
        root, name = tmp_path / "project", algo.name
        files = {"params.yaml": workspace.params("ppo")}
        if algo.offline:
            files |= {"offline.yaml": workspace.params("bc"), "data/dataset.parquet": workspace.dataset}
            command = [DVC, "repro", "--single-item", "train_offline"]
        else:
            files["params.yaml"] = workspace.params(kill_case.algo)
            command = [DVC, "repro", "train"]
        make_dvc_repo(root, files)
    run_dir = root / "runs" / name
    group = kill_case.runner == "dvc"

    started = time.perf_counter()
    proc = start(command, root, tmp_path / "killed.log", group=group)
    killed = kill_at(proc, kill_case, reference, run_dir, group, started)
    killed_log = (tmp_path / "killed.log").read_text(errors="replace")
    if not killed.landed:
        warnings.warn(f"{kill_case.id}: the run ended before the kill ({killed.seconds:.1f} s)", stacklevel=1)
    # A kill never leaves half a checkpoint behind.
    for step in killed.checkpoints:
        load_checkpoint(run_dir / "checkpoints" / checkpoint_name(step))

    rerun = run(*command, cwd=root, check=False) if group else rlcore_here(*command[1:], cwd=root)
    if group and rerun.returncode != 0 and RWLOCK_CORRUPT in rerun.stdout + rerun.stderr:
        # The kill landed inside DVC's own in-place rewrite of .dvc/tmp/rwlock (treeverse/dvc#7615). The README's
        # remedy: remove that file (DVC's record of running stages, nothing of the run) and run again.
        lock = root / ".dvc" / "tmp" / "rwlock"
        warnings.warn(f"{kill_case.id}: the kill cut DVC's rwlock write ({lock.read_bytes()[:40]!r})", stacklevel=1)
        lock.unlink()
        rerun = run(*command, cwd=root, check=False)
    assert rerun.returncode == 0, f"{' '.join(command)} exited {rerun.returncode}:\n{rerun.stdout}\n{rerun.stderr}"
    output = rerun.stdout + rerun.stderr
    context = f"{kill_case.id}: killed after {killed.seconds:.2f} s with {killed.checkpoints}\n{killed_log}\n{output}"

    # Resumed from the latest checkpoint the kill left (unless the run had finished: a fresh run, or dvc skipping).
    resumed = RESUMED.search(output)
    resume_step = int(resumed.group(1)) if resumed else None
    if killed.checkpoints and not killed.summary:
        assert resume_step == killed.checkpoints[-1], context
    if not killed.checkpoints:
        assert resume_step is None, context
    if algo.replay and resume_step is not None:
        restored = RESTORED.search(output)
        assert restored is not None, context
        assert int(restored.group(1)) > 0 and int(restored.group(2)) == resume_step, context
        assert "empty buffer" not in output, context

    restored_note = f", restored {RESTORED.search(output).group(1)} transitions" if algo.replay and resume_step else ""
    print(
        f"{kill_case.id}: SIGKILL after {killed.seconds:.2f} s ({'landed' if killed.landed else 'run had ended'}; "
        f"checkpoints {killed.checkpoints}, summary {killed.summary}); re-run "
        + (f"resumed from step {resume_step}{restored_note}" if resume_step is not None else "started fresh")
    )
    check_run_folder(run_dir, algo, reference, resume_step, context)
    if group:  # DVC agrees that the stage's outputs are what it ran
        status = run(DVC, "status", "train_offline" if algo.offline else "train", cwd=root)
        assert "changed" not in status.stdout, status.stdout + context


def check_run_folder(run_dir: Path, algo: Algo, reference: Reference, resume_step: int | None, context: str) -> None:
    # Every checkpoint loads: one per periodic evaluation, as the uninterrupted run.
    names = sorted(path.name for path in (run_dir / "checkpoints").iterdir())
    assert names == reference.checkpoints, context
    for name in names:
        checkpoint = load_checkpoint(run_dir / "checkpoints" / name)
        assert checkpoint.algo == reference_algo(reference), context
    leftovers = [
        p for p in run_dir.rglob("*") if p.name.endswith((".tmp", ".corrupt")) or p.name.startswith(".previous")
    ]
    assert leftovers == [], context

    if algo.replay:  # the buffer of the latest checkpoint, and only it
        assert sorted(p.name for p in (run_dir / "replay").iterdir()) == [f"step_{algo.max_steps:010d}.npz"], context

    summary = read_json(run_dir / "train_summary.json")
    assert summary["checkpoints"] == reference.checkpoints, context
    assert summary["gradient_steps" if algo.offline else "env_steps"] == algo.max_steps, context
    metrics = read_json(run_dir / "dvclive" / "metrics.json")  # valid JSON
    assert metrics["step"] == algo.max_steps, context

    # The learning curves: no duplicated steps, no gaps; the rows written before the resume point are the
    # uninterrupted run's (an offline run's are identical everywhere: nothing restarts at a resume).
    identical_through = algo.max_steps if (resume_step is None or algo.offline) else resume_step
    found = curves(run_dir / "dvclive")
    assert found.keys() == reference.curves.keys(), context
    for tsv, rows in found.items():
        steps = [step for step, _ in rows]
        assert steps == sorted(set(steps)), f"{tsv}: duplicated or unordered steps {steps}\n{context}"
        if not tsv.startswith("train/"):  # evaluation and validation rows: one at every periodic evaluation
            assert steps == algo.steps, f"{tsv}: steps {steps}, expected {algo.steps}\n{context}"
        if tsv.endswith("_per_second.tsv"):
            continue  # wall-clock speed
        expected = [row for step, row in reference.curves[tsv] if step <= identical_through]
        assert [row for step, row in rows if step <= identical_through] == expected, f"{tsv}\n{context}"


def reference_algo(reference: Reference) -> str:
    return load_checkpoint(reference.run_dir / "checkpoints" / reference.checkpoints[0]).algo


ORPHAN_SECONDS = 10.0
"""How long the killed run's descendants may outlive it (the parent-death signal is immediate; the portable fallback
polls every 0.5 s; a child still importing when the kill comes checks its parent before its imports)."""


def process_tree(pid: int) -> list[psutil.Process]:
    """Every descendant of ``pid`` now (children, grandchildren, ...)."""
    try:
        return psutil.Process(pid).children(recursive=True)
    except psutil.NoSuchProcess:
        return []


def _alive(process: psutil.Process) -> bool:
    """Still running (a zombie has exited: it waits only for its new parent to reap it)."""
    try:
        return process.is_running() and process.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def describe(process: psutil.Process) -> str:
    try:
        return f"pid {process.pid} (parent {process.ppid()}): {' '.join(process.cmdline())[:200]}"
    except psutil.Error:
        return f"pid {process.pid}"


def check_no_orphans(tree: list[psutil.Process], context: str) -> None:
    """Fail unless every process of ``tree`` (a killed run's descendants) is gone within :data:`ORPHAN_SECONDS`."""
    deadline = time.monotonic() + ORPHAN_SECONDS
    survivors = [p for p in tree if _alive(p)]
    while survivors and time.monotonic() < deadline:
        time.sleep(0.1)
        survivors = [p for p in survivors if _alive(p)]
    for process in survivors:  # leave nothing running on the machine, then fail
        with contextlib.suppress(psutil.Error):
            process.kill()
    assert not survivors, (
        f"{len(survivors)} of the {len(tree)} processes of the killed run outlived it by {ORPHAN_SECONDS:g} s:\n"
        + "\n".join(describe(p) for p in survivors)
        + f"\n{context}"
    )
