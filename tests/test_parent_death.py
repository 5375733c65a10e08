"""rlcore.workers.parent_death: a child started through it dies with its parent, and one whose parent is already gone
exits.

Real processes: a parent (a Python subprocess) starts the child, prints its pid, and is SIGKILLed; the child must
be gone within seconds (its work is a 60 s sleep). The whole runs' version is in tests/faults/test_kills.py."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import psutil
import pytest

from rlcore.workers.parent_death import EXIT_CODE

SLEEP = ["timeit", "-n", "1", "-r", "1", "import time; time.sleep(60)"]
"""``python -m timeit ...``: a module that runs for a minute."""

PARENTS = {
    # A multiprocessing child, started with start_child from the parent's main thread.
    "start_child": (
        "import multiprocessing as mp, sys, time\n"
        "from rlcore.workers.parent_death import start_child\n"
        "if __name__ == '__main__':\n"
        "    child = start_child(mp.get_context('spawn'), time.sleep, (60,), 'sleeper')\n"
        "    print(child.pid, flush=True)\n"
        "    time.sleep(60)\n"
    ),
    # A command run through `python -m rlcore.workers.parent_death <pid> <module> ...` (the embedded Prefect server's
    # way).
    "command": (
        "import os, subprocess, sys, time\n"
        "child = subprocess.Popen(\n"
        f"    [sys.executable, '-m', 'rlcore.workers.parent_death', str(os.getpid()), *{SLEEP!r}]\n"
        ")\n"
        "print(child.pid, flush=True)\n"
        "time.sleep(60)\n"
    ),
    # The portable fallback alone (no PR_SET_PDEATHSIG, as off Linux): the thread that polls the parent.
    "fallback": (
        "import os, subprocess, sys, time\n"
        "child = subprocess.Popen([sys.executable, '-c', "
        '\'import os, sys, time; sys.platform = "other"; from rlcore.workers.parent_death import die_with_parent; '
        "die_with_parent(os.getppid()); time.sleep(60)'])\n"
        "print(child.pid, flush=True)\n"
        "time.sleep(60)\n"
    ),
}


def _gone(pid: int, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            if psutil.Process(pid).status() == psutil.STATUS_ZOMBIE:
                return True
        except psutil.NoSuchProcess:
            return True
        time.sleep(0.05)
    return False


@pytest.mark.parametrize("how", list(PARENTS))
def test_a_child_dies_with_its_sigkilled_parent(how: str) -> None:
    parent = subprocess.Popen([sys.executable, "-c", PARENTS[how]], stdout=subprocess.PIPE, text=True)
    try:
        assert parent.stdout is not None
        child = int(parent.stdout.readline())
        time.sleep(1.0)  # the child is past its start-up
        assert psutil.pid_exists(child)
    finally:
        parent.kill()
        parent.wait()
    alive = not _gone(child, 10)
    if alive:
        os.kill(child, 9)
    assert not alive, f"the child (pid {child}) outlived its parent by 10 s"


def test_a_child_whose_parent_is_already_gone_exits_at_once() -> None:
    # The pid given is not this child's parent (this test's process is): as if the parent had died before the child
    # tied its life to it, leaving it reparented.
    started = time.monotonic()
    result = subprocess.run([sys.executable, "-m", "rlcore.workers.parent_death", "1", *SLEEP], timeout=30)
    assert result.returncode == EXIT_CODE
    assert time.monotonic() - started < 30
