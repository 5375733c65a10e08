"""SIGKILL at random moments, under ``rlcore train`` and under ``dvc repro``: nothing is lost (issue 12).

Twenty kills across PPO (params.yaml), DQN (configs/dqn-cartpole.yaml), SAC (configs/sac-pendulum.yaml) and an
offline BC run (offline.yaml, on a dataset collected once with a random policy), each on a small budget. The
moments are drawn once from a seeded ``random.Random`` (CI tries the same ones every time): in the start-up (a
delay after the process start), anywhere between two checkpoints (a delay after a checkpoint file appears: training
steps, curve rows, the periodic evaluation, replay and checkpoint writes; after the last one, the summary), and right
after a checkpoint file appears (``checkpoints/`` polled every 5 ms). A delay is a fraction of the same stretch of
an uninterrupted run of the same params, timed once per algorithm. Under ``dvc repro`` the whole process group dies
(dvc and its child ``rlcore train``).

After each kill the same command is run again to completion, and the run folder must hold:

- every checkpoint, loadable (also right after the kill: a kill never leaves half a checkpoint), one per periodic
  evaluation, as the uninterrupted run's; no ``.tmp`` file, no ``.previous*/``, no ``*.corrupt``;
- for DQN and SAC the replay buffer of the latest checkpoint (and only it); when the kill came after the first
  checkpoint the re-run resumed from the latest one and restored N > 0 transitions;
- ``train_summary.json``, and a dvclive ``metrics.json`` that is valid JSON at the final step;
- learning curves without duplicated or missing steps: the evaluation curve has exactly the uninterrupted run's
  steps, every row written before the checkpoint resumed from is the uninterrupted run's row byte for byte, and an
  offline run (no env, so nothing restarts) equals the uninterrupted run everywhere. An online run's rows after the
  resume point differ by design: its training episodes restart at the resume (README, "Crashes and resume").

No process of a killed run outlives it (issue 26): after every kill above, and after SIGKILLs of the learner alone
(its children are left to notice) in the runs that start processes: IMPALA's local actors (also while they start
up), its Dask workers, ES's rollout workers, and ``rlcore pipeline``'s temporary Prefect server, during training and
between stages. Each run's process tree is collected with psutil before the kill; every one of its processes must be
gone within :data:`ORPHAN_SECONDS`.
"""

from __future__ import annotations

import contextlib
import os
import random
import re
import shutil
import subprocess
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil
import pytest
import yaml
from conftest import PROJECT, RLCORE, rlcore, sets

from rlcore.common.checkpoints import load_checkpoint

from .run_support import (
    DVC,
    checkpoint_name,
    checkpoint_steps,
    curves,
    kill,
    make_dvc_repo,
    read_json,
    run,
    start,
    wait_until,
    write_params,
)

pytestmark = pytest.mark.slow

COMMON = {"train": {"progress_bar": "off", "target_return": None, "eval_episodes": 5}}


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


ALGOS = {
    "ppo": Algo("params.yaml", "ppo-cartpole", {"max_steps": 16384, "eval_every": 4096, "log_every": 2048}),
    "dqn": Algo(
        "configs/dqn-cartpole.yaml",
        "dqn-cartpole",
        {"max_steps": 6000, "eval_every": 1500, "log_every": 1000},
        replay=True,
    ),
    "sac": Algo(
        "configs/sac-pendulum.yaml",
        "sac-pendulum",
        {"max_steps": 1500, "eval_every": 500, "log_every": 250},
        {"learning_starts": 200, "batch_size": 64},
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
    """One project folder for the module: the small params files, the dataset, the uninterrupted runs (each made
    the first time a test needs it) and the ``rlcore train`` kills (each in its own run folder)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.references: dict[str, Reference] = {}
        for name in ("params.yaml", "offline.yaml", "dvc.yaml", ".dvcignore", "prefect.toml"):
            shutil.copy(PROJECT / name, root / name)
        for key, algo in ALGOS.items():
            write_params(PROJECT / algo.preset, self.params(key), algo.edits())
        # The offline run's data: collected once, from a random policy (no online model needed).
        rlcore("collect", "--params", "bc.yaml", *sets(["collect.policy=random", "collect.steps=2000"]), cwd=root)
        self.dataset = root / "data" / "dataset.parquet"
        assert self.dataset.is_file()

    def params(self, algo: str) -> Path:
        return self.root / f"{algo}.yaml"

    def reference(self, algo: str) -> Reference:
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


@pytest.fixture(scope="module")
def workspace(tmp_path_factory: pytest.TempPathFactory) -> Workspace:
    return Workspace(tmp_path_factory.mktemp("kills"))


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


@pytest.mark.parametrize("kill_case", KILLS, ids=[k.id for k in KILLS])
def test_a_sigkill_loses_nothing_and_the_rerun_completes(kill_case: Kill, workspace: Workspace, tmp_path: Path) -> None:
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

    rerun = run(*command, cwd=root, check=not group)
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


# --- Orphans (issue 26): every process a killed run started dies with it. ---------------------------------------

TESTS = PROJECT / "tests"
"""On the runs' PYTHONPATH: ``slow_env``'s wrapper."""

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


def _describe(process: psutil.Process) -> str:
    try:
        return f"pid {process.pid} (parent {process.ppid()}): {' '.join(process.cmdline())[:200]}"
    except psutil.Error:
        return f"pid {process.pid}"


def kill_and_check_no_orphans(proc: subprocess.Popen[bytes], seen: dict[int, psutil.Process], context: str) -> None:
    """SIGKILL ``proc`` (only it: its children must notice on their own), then fail unless every process of its tree
    (``seen`` before the kill, and the tree right before it) is gone within :data:`ORPHAN_SECONDS`."""
    assert proc.poll() is None, f"the run ended before the kill\n{context}"
    tree = {**seen, **{p.pid: p for p in process_tree(proc.pid)}}
    proc.kill()
    proc.wait(timeout=60)
    check_no_orphans(list(tree.values()), context)


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
        + "\n".join(_describe(p) for p in survivors)
        + f"\n{context}"
    )


def run_until(
    command: list[str], cwd: Path, log: Path, ready: Callable[[list[psutil.Process]], bool], timeout: float = 300
) -> tuple[subprocess.Popen[bytes], dict[int, psutil.Process]]:
    """Start ``command``; return once ``ready(its descendants now)`` holds, with every descendant seen so far."""
    proc = start(command, cwd, log)
    seen: dict[int, psutil.Process] = {}
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and proc.poll() is None:
        tree = process_tree(proc.pid)
        seen.update((p.pid, p) for p in tree)
        if ready(tree):
            return proc, seen
        time.sleep(0.02)
    kill(proc)
    raise AssertionError(f"{' '.join(command)}: not ready (exit {proc.poll()}):\n{log.read_text(errors='replace')}")


def _spawned(tree: list[psutil.Process]) -> list[psutil.Process]:
    """The multiprocessing children in ``tree`` (actors, rollout workers, Dask workers), not its resource tracker."""
    found = []
    for process in tree:
        with contextlib.suppress(psutil.Error):
            if "spawn_main" in " ".join(process.cmdline()):
                found.append(process)
    return found


def _checkpointed(run_dir: Path) -> Callable[[list[psutil.Process]], bool]:
    return lambda tree: any((run_dir / "checkpoints").glob("step_*.pt")) and bool(_spawned(tree))


def _two_spawned(tree: list[psutil.Process]) -> bool:
    return len(_spawned(tree)) >= 2


ORPHAN_CASES = {
    # IMPALA's actors wait for a credit the dead learner never gives back; killed once they have been sending.
    "impala-local-actors": (
        "configs/impala-cartpole.yaml",
        ["train.max_steps=200000", "train.target_return=null", "train.eval_every=2048"],
        "checkpointed",
    ),
    # ... and while they start up (importing torch: seconds), before any has reached its loop.
    "impala-local-actors-starting": (
        "configs/impala-cartpole.yaml",
        ["train.max_steps=200000", "train.target_return=null"],
        "spawned",
    ),
    # Dask workers of the LocalCluster the run started (distributed's own parent pipe ends them).
    "impala-dask-workers": (
        "configs/impala-cartpole.yaml",
        ["algo.runner=dask", "train.max_steps=200000", "train.target_return=null", "train.eval_every=2048"],
        "checkpointed",
    ),
    # ES's rollout workers in the middle of a task that lasts 16 s or more (each env step 0.1 s longer, 16 envs a
    # task, 10 steps or more an episode), with a second task waiting in their pipe: without a parent-death check
    # they run both before noticing.
    "es-local-workers": (
        "configs/es-cartpole.yaml",
        ["train.max_steps=1000000", "train.target_return=null", "env.wrappers=[{wrapper: slow_env.SlowSteps}]"],
        "stepping",
    ),
}


@pytest.mark.serial
@pytest.mark.parametrize("case", list(ORPHAN_CASES))
def test_a_killed_learner_leaves_no_process_behind(case: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    preset, overrides, when = ORPHAN_CASES[case]
    shutil.copy(PROJECT / preset, tmp_path / "params.yaml")
    run_dir = tmp_path / "runs" / case
    command = [RLCORE, "train", *sets([f"name={case}", "train.progress_bar=off", *overrides])]
    marker = tmp_path / "stepping"
    monkeypatch.setenv("SLOW_ENV_MARKER", str(marker))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(TESTS), os.environ.get("PYTHONPATH")])))
    ready = {
        "checkpointed": _checkpointed(run_dir),
        "spawned": _two_spawned,
        "stepping": lambda tree: marker.exists(),
    }[when]
    log = tmp_path / "killed.log"
    proc, seen = run_until(command, tmp_path, log, ready)
    kill_and_check_no_orphans(proc, seen, f"{case}:\n{log.read_text(errors='replace')}")


PIPELINE_KILLS = {
    # Training: IMPALA's actors started from the flow's task, and the temporary Prefect server.
    "training": (
        "configs/impala-cartpole.yaml",
        ["train.max_steps=200000", "train.target_return=null", "train.eval_every=2048"],
    ),
    # Between train and evaluate: only the temporary Prefect server.
    "between-stages": ("params.yaml", ["train.max_steps=2048", "train.eval_every=1024", "train.target_return=null"]),
}


@pytest.mark.serial
@pytest.mark.server
def test_a_killed_pipeline_leaves_no_process_behind(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``rlcore pipeline`` without PREFECT_API_URL: its temporary Prefect server (and any actor) dies with it."""
    monkeypatch.setenv("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "300")  # migrations on a busy machine
    for name in ("prefect.toml",):
        shutil.copy(PROJECT / name, tmp_path / name)
    for case, (preset, overrides) in PIPELINE_KILLS.items():
        params = tmp_path / f"{case}.yaml"
        shutil.copy(PROJECT / preset, params)
        run_dir = tmp_path / "runs" / case
        command = [RLCORE, "pipeline", "--params", params.name]
        command += sets([f"name={case}", "train.progress_bar=off", *overrides])

        def ready(tree: list[psutil.Process], case: str = case, run_dir: Path = run_dir) -> bool:
            if case == "training":
                return _checkpointed(run_dir)(tree)
            return (run_dir / "train_summary.json").exists()

        log = tmp_path / f"{case}.log"
        proc, seen = run_until(command, tmp_path, log, ready)
        servers = [p for p in seen.values() if "uvicorn" in _describe(p)]
        assert servers, f"no temporary Prefect server in the pipeline's tree:\n{log.read_text(errors='replace')}"
        kill_and_check_no_orphans(proc, seen, f"pipeline, {case}:\n{log.read_text(errors='replace')}")


# --- ES's budget after a kill (issue 26) ---------------------------------------------------------------------------

ES_BUDGET = ["train.max_steps=12000", "train.eval_every=3000", "train.target_return=null", "train.progress_bar=off"]


@pytest.mark.serial
def test_a_killed_and_resumed_es_run_ends_at_the_uninterrupted_runs_step_within_one_iteration_of_the_budget(
    tmp_path: Path,
) -> None:
    """ES counts whole iterations (population_size rollouts of up to 500 steps on CartPole) and checks the budget
    between them, so a run ends up to one iteration past ``train.max_steps``; a killed and resumed run ends at the
    very step the uninterrupted one does (the issue's 72,012 for 60,000 is the uninterrupted run's end too)."""
    shutil.copy(PROJECT / "configs" / "es-cartpole.yaml", tmp_path / "params.yaml")
    whole = run(RLCORE, "train", *sets(["name=whole", *ES_BUDGET]), cwd=tmp_path)
    summary = read_json(tmp_path / "runs" / "whole" / "train_summary.json")
    steps = [e["env_steps"] for e in summary["evaluations"]]

    run_dir = tmp_path / "runs" / "killed"
    command = [RLCORE, "train", *sets(["name=killed", *ES_BUDGET])]
    log = tmp_path / "killed.log"
    proc, seen = run_until(command, tmp_path, log, _checkpointed(run_dir))  # killed in the second iteration or later
    kill_and_check_no_orphans(proc, seen, f"es killed:\n{log.read_text(errors='replace')}")
    killed_at = checkpoint_steps(run_dir / "checkpoints")
    rerun = run(*command, cwd=tmp_path)
    resumed = read_json(run_dir / "train_summary.json")
    context = f"killed with checkpoints {killed_at}\n{whole.stderr}\n{rerun.stderr}"
    assert RESUMED.search(rerun.stdout + rerun.stderr), context
    assert resumed["env_steps"] == summary["env_steps"], context
    assert [e["env_steps"] for e in resumed["evaluations"]] == steps, context
    population_size = yaml.safe_load((tmp_path / "params.yaml").read_text())["algo"]["population_size"]
    assert 12000 <= resumed["env_steps"] < 12000 + population_size * 500, context
