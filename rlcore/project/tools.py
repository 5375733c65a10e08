"""git and dvc run as commands (rlcore never imports DVC): where the ``dvc`` command is, and one way to run either
with analytics off, its output captured and a failure turned into one line."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from rlcore.common.errors import RLCoreError


def dvc_command() -> str:
    """The ``dvc`` command installed beside this Python (rlcore depends on DVC), else the one on PATH."""
    beside = Path(sys.executable).parent / "dvc"
    found = str(beside) if beside.is_file() else shutil.which("dvc")
    if found is None:
        raise RLCoreError("dvc: command not found; install DVC (`pip install dvc`), which the pipeline runs on")
    return found


def run_tool(
    command: list[str], cwd: Path, check: bool = True, timeout_seconds: float = 120
) -> subprocess.CompletedProcess[str]:
    """Run ``command`` in ``cwd`` (DVC's analytics off), its output captured as text; with ``check``, a non-zero exit
    is :class:`RLCoreError`: the command and the first 300 characters of what it printed, on one line."""
    env = {**os.environ, "DVC_NO_ANALYTICS": "1"}
    try:
        result = subprocess.run(command, cwd=cwd, capture_output=True, text=True, timeout=timeout_seconds, env=env)
    except OSError as exc:
        raise RLCoreError(f"{command[0]}: cannot run it ({exc.strerror})") from None
    if check and result.returncode != 0:
        shown = " ".join([Path(command[0]).name, *command[1:]])
        raise RLCoreError(f"`{shown}` in {cwd} failed: {problem(result)}")
    return result


def problem(result: subprocess.CompletedProcess[str]) -> str:
    """What a failed command printed (its stderr, else its stdout), on one line, at most 300 characters."""
    return " ".join((result.stderr or result.stdout).split())[:300]
