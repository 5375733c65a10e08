"""SIGKILL at random moments, under ``rlcore train`` and under ``dvc repro``: nothing is lost (issue 12).

Twenty kills across PPO (params.yaml), DQN (configs/dqn-cartpole.yaml), SAC (configs/sac-pendulum.yaml) and an
offline BC run (offline.yaml, on a dataset collected once with a random policy), each on a small budget: PPO's and
BC's here, DQN's and SAC's in test_kills_replay.py (the plan, the reference runs and the checks: kill_support.py). The
moments are drawn once from a seeded ``random.Random`` (CI tries the same ones every time): in the start-up (a
delay after the process start), anywhere between two checkpoints (a delay after a checkpoint file appears: training
steps, curve rows, the periodic evaluation, replay and checkpoint writes; after the last one, the summary), and right
after a checkpoint file appears (``checkpoints/`` polled every 5 ms). A delay is a fraction of the same stretch of
an uninterrupted run of the same params, timed once per algorithm. Under ``dvc repro`` the whole process group dies
(dvc and its child ``rlcore train``).

After each kill the same command is run again to completion (``rlcore train``'s re-run inside the test process: it
is not killed, so it need not pay a process start), and the run folder must hold:

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
gone within ``kill_support.ORPHAN_SECONDS``.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import psutil
import pytest
import yaml
from conftest import PROJECT, RLCORE, preset_text, sets

from .kill_support import (
    KILLS,
    RESUMED,
    Kill,
    Workspace,
    check_no_orphans,
    describe,
    process_tree,
    sigkill_and_rerun,
)
from .run_support import checkpoint_steps, kill, read_json, rlcore_here, start

pytestmark = pytest.mark.slow

ALGOS_HERE = ("ppo", "bc")
"""The kills of this module; DQN's and SAC's (with their replay buffers) are in test_kills_replay.py: the two halves
run on two pytest-xdist workers side by side."""
CASES = [k for k in KILLS if k.algo in ALGOS_HERE]


@pytest.fixture(scope="module")
def workspace(tmp_path_factory: pytest.TempPathFactory) -> Workspace:
    return Workspace(tmp_path_factory.mktemp("kills"))


@pytest.mark.parametrize("kill_case", CASES, ids=[k.id for k in CASES])
def test_a_sigkill_loses_nothing_and_the_rerun_completes(kill_case: Kill, workspace: Workspace, tmp_path: Path) -> None:
    sigkill_and_rerun(kill_case, workspace, tmp_path)


# --- Orphans (issue 26): every process a killed run started dies with it. ---------------------------------------

TESTS = PROJECT / "tests"
"""On the runs' PYTHONPATH: ``slow_env``'s wrapper."""


def kill_and_check_no_orphans(proc: subprocess.Popen[bytes], seen: dict[int, psutil.Process], context: str) -> None:
    """SIGKILL ``proc`` (only it: its children must notice on their own), then fail unless every process of its tree
    (``seen`` before the kill, and the tree right before it) is gone within ``kill_support.ORPHAN_SECONDS``."""
    assert proc.poll() is None, f"the run ended before the kill\n{context}"
    tree = {**seen, **{p.pid: p for p in process_tree(proc.pid)}}
    proc.kill()
    proc.wait(timeout=60)
    check_no_orphans(list(tree.values()), context)


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
    (tmp_path / "params.yaml").write_text(preset_text(preset))
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
        (params).write_text(preset_text(preset))
        run_dir = tmp_path / "runs" / case
        command = [RLCORE, "pipeline", "--params", params.name]
        command += sets([f"name={case}", "train.progress_bar=off", *overrides])

        def ready(tree: list[psutil.Process], case: str = case, run_dir: Path = run_dir) -> bool:
            if case == "training":
                return _checkpointed(run_dir)(tree)
            return (run_dir / "train_summary.json").exists()

        log = tmp_path / f"{case}.log"
        proc, seen = run_until(command, tmp_path, log, ready)
        servers = [p for p in seen.values() if "uvicorn" in describe(p)]
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
    # The runs nothing kills run in the test process (no process start, ~5 s of imports, to pay in the serial part).
    whole = rlcore_here("train", *sets(["name=whole", *ES_BUDGET]), cwd=tmp_path)
    summary = read_json(tmp_path / "runs" / "whole" / "train_summary.json")
    steps = [e["env_steps"] for e in summary["evaluations"]]

    run_dir = tmp_path / "runs" / "killed"
    command = [RLCORE, "train", *sets(["name=killed", *ES_BUDGET])]
    log = tmp_path / "killed.log"
    proc, seen = run_until(command, tmp_path, log, _checkpointed(run_dir))  # killed in the second iteration or later
    kill_and_check_no_orphans(proc, seen, f"es killed:\n{log.read_text(errors='replace')}")
    killed_at = checkpoint_steps(run_dir / "checkpoints")
    rerun = rlcore_here(*command[1:], cwd=tmp_path)
    resumed = read_json(run_dir / "train_summary.json")
    context = f"killed with checkpoints {killed_at}\n{whole.stderr}\n{rerun.stderr}"
    assert RESUMED.search(rerun.stdout + rerun.stderr), context
    assert resumed["env_steps"] == summary["env_steps"], context
    assert [e["env_steps"] for e in resumed["evaluations"]] == steps, context
    population_size = yaml.safe_load((tmp_path / "params.yaml").read_text())["algo"]["population_size"]
    assert 12000 <= resumed["env_steps"] < 12000 + population_size * 500, context
