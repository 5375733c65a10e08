"""Helpers of the fault suite (test_kills.py, test_run_folder.py): real ``rlcore`` and ``dvc`` processes, real
signals, and readers for what a run folder holds (checkpoints, dvclive curves, replay buffers)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml
from cli_support import run_in_process
from conftest import GITIGNORE, PROJECT, RLCORE, tool_env

from rlcore.project.pipeline_file import pipeline_yaml

BIN = Path(sys.executable).parent
DVC = str(BIN / "dvc")

env = tool_env


def run(*args: str, cwd: Path, timeout: float = 600, check: bool = True) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(list(args), cwd=cwd, capture_output=True, text=True, timeout=timeout, env=env())
    if check and result.returncode != 0:
        raise AssertionError(f"{' '.join(args)} exited {result.returncode}:\n{result.stdout}\n{result.stderr}")
    return result


def rlcore_here(*args: str, cwd: Path, check: bool = True, limit: int = 300) -> subprocess.CompletedProcess[str]:
    """``rlcore *args`` in ``cwd`` inside the test process (``cli_support``): a run the test neither kills nor times
    skips the ~5 s of imports a real process pays (the kills themselves are real processes)."""
    outcome = run_in_process(list(args), cwd, limit=limit)
    if check and outcome.returncode != 0:
        raise AssertionError(repr(outcome))
    return outcome


def start(args: list[str], cwd: Path, log: Path, group: bool = False) -> subprocess.Popen[bytes]:
    """Start a command in the background, its output (stdout and stderr) into ``log``; ``group``: in a session
    of its own, so that :func:`kill` can reach its children (``dvc repro`` runs ``rlcore train`` as a child)."""
    with open(log, "wb") as handle:
        return subprocess.Popen(
            args, cwd=cwd, stdout=handle, stderr=subprocess.STDOUT, env=env(), start_new_session=group
        )


def start_rlcore(*args: str, cwd: Path, log: Path) -> subprocess.Popen[bytes]:
    return start([RLCORE, *args], cwd, log)


def kill(proc: subprocess.Popen[bytes], group: bool = False) -> bool:
    """SIGKILL the process (``group``: its whole process group); True when it was still running."""
    alive = proc.poll() is None
    if alive:
        try:
            if group:
                os.killpg(proc.pid, signal.SIGKILL)
            else:
                proc.kill()
        except ProcessLookupError:
            alive = False
    proc.wait(timeout=60)
    if group:  # the group's other members (dvc's child `rlcore train`) die with it; wait until they are gone
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                os.killpg(proc.pid, 0)
            except ProcessLookupError:
                break
            time.sleep(0.01)
    return alive


def wait_until(
    condition: Callable[[], bool],
    proc: subprocess.Popen[bytes] | None = None,
    timeout: float = 300,
    poll: float = 0.005,
) -> bool:
    """Poll ``condition`` until it holds (True), or ``proc`` exits or ``timeout`` passes (False)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        if proc is not None and proc.poll() is not None:
            return condition()
        time.sleep(poll)
    return False


def write_params(source: Path, target: Path, edits: dict[str, Any]) -> None:
    """``source`` (a whole params file) with ``edits`` merged in section by section, written to ``target``."""
    params = yaml.safe_load(Path(source).read_text())
    for key, value in edits.items():
        if isinstance(value, dict):
            params.setdefault(key, {}).update(value)
        else:
            params[key] = value
    Path(target).write_text(yaml.safe_dump(params, sort_keys=False))


def make_dvc_repo(root: Path, files: dict[str, Path]) -> Path:
    """A git + DVC project in ``root``: ``files`` (name in the project -> file to copy) and the dvc.yaml generated
    from its params files."""
    root.mkdir(parents=True, exist_ok=True)
    for name in (".dvcignore", "prefect.toml"):
        shutil.copy(PROJECT / name, root / name)
    for name, source in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(source, root / name)
    (root / "dvc.yaml").write_text(pipeline_yaml(root))  # from its params files, as `rlcore dvc-yaml` writes it
    (root / ".gitignore").write_text(GITIGNORE)
    run("git", "init", "-q", cwd=root)
    run("git", "config", "user.email", "tests@rlcore.invalid", cwd=root)
    run("git", "config", "user.name", "rlcore tests", cwd=root)
    run(DVC, "init", "-q", cwd=root)
    run(DVC, "config", "core.analytics", "false", cwd=root)
    run("git", "add", "-A", cwd=root)
    run("git", "commit", "-q", "-m", "fault-suite project", cwd=root)
    return root


def checkpoint_name(step: int) -> str:
    return f"step_{step:010d}.pt"


def checkpoint_steps(folder: Path) -> list[int]:
    return sorted(int(path.name[5:15]) for path in Path(folder).glob("step_*.pt"))


def read_tsv(path: Path) -> list[tuple[int, str]]:
    """The rows of a dvclive TSV as ``(step, row)``: the step and the whole row as written."""
    lines = Path(path).read_text().splitlines()
    column = lines[0].split("\t").index("step")
    return [(int(line.split("\t")[column]), line) for line in lines[1:]]


def curves(live: Path) -> dict[str, list[tuple[int, str]]]:
    """Every dvclive TSV of a run (relative path under ``plots/metrics`` -> rows)."""
    plots = Path(live) / "plots" / "metrics"
    return {str(path.relative_to(plots)): read_tsv(path) for path in sorted(plots.rglob("*.tsv"))}


def snapshot(folder: Path, exclude: tuple[str, ...] = (".lock",)) -> dict[str, bytes]:
    """Every file under ``folder`` (relative path -> bytes), hidden ones included, except the names ``exclude``."""
    return {
        str(path.relative_to(folder)): path.read_bytes()
        for path in sorted(Path(folder).rglob("*"))
        if path.is_file() and path.name not in exclude
    }


def read_json(path: Path) -> Any:
    return json.loads(Path(path).read_text())
