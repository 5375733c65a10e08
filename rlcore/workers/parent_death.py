"""Child processes that die with their parent: a SIGKILLed learner, trainer or flow leaves nothing running.

A child process calls :func:`die_with_parent` first thing: :func:`start_child` starts a ``multiprocessing`` child
that does (actor and rollout worker subprocesses), and this module's command line (below) runs a Python module in a
process that does (the embedded Prefect server). Two mechanisms, because neither covers every case:

- Linux: ``prctl(PR_SET_PDEATHSIG, SIGKILL)``. The kernel kills the child the moment its parent dies, even while
  the child is blocked or deep in a rollout. Its "parent" is the *thread* that started the child, so a child must
  be started by a thread that outlives it: rlcore starts and stops its actors, workers and the embedded server
  from the thread that runs the training or the flow.
- Everywhere: a daemon thread that polls the parent every :data:`POLL_SECONDS` and ends the process once it is
  gone (the portable fallback; on Linux it also catches a parent that died before ``prctl`` took effect).

A process that rlcore does not spawn through ``multiprocessing`` is started as
``python -m rlcore.workers.parent_death <parent pid> <module> <args...>``: the module runs as ``python -m <module>
<args...>`` would, in a process that dies with ``<parent pid>``.
"""

from __future__ import annotations

import contextlib
import ctypes
import importlib
import multiprocessing
import os
import runpy
import signal
import sys
import threading
import time
from collections.abc import Callable
from multiprocessing.context import BaseContext
from multiprocessing.process import BaseProcess
from typing import Any

PR_SET_PDEATHSIG = 1
"""``<sys/prctl.h>``: the signal this process gets when its parent (thread) dies."""

POLL_SECONDS = 0.5
"""How often the fallback thread checks the parent."""

EXIT_CODE = 70
"""This process's exit status when it ends because its parent died (EX_SOFTWARE; never seen by a live parent)."""


def die_with_parent(parent_pid: int) -> None:
    """Make this process end when the process ``parent_pid`` (the one that started it) dies; end it now if that
    already happened."""
    if sys.platform.startswith("linux"):
        with contextlib.suppress(OSError, AttributeError):
            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    # The parent may have died before prctl took effect: this process was reparented already and no signal comes.
    if not _parent_alive(parent_pid):
        os._exit(EXIT_CODE)
    threading.Thread(target=_watch, args=(parent_pid,), name="rlcore-parent-watch", daemon=True).start()


def start_child(context: BaseContext, target: Callable[..., Any], args: tuple[Any, ...], name: str) -> BaseProcess:
    """Start ``target(*args)`` in a daemon process of ``context`` (spawn) that dies with this process.

    The child makes itself die with this process before it imports ``target``'s module, so a learner killed while
    its children start up (importing torch alone takes seconds) leaves none behind. ``args`` are unpickled before
    that: keep them plain data and ``multiprocessing`` objects, whose modules import fast.
    """
    process = context.Process(  # type: ignore[attr-defined]
        target=_child_main,
        args=(os.getpid(), f"{target.__module__}:{target.__qualname__}", args),
        name=name,
        daemon=True,
    )
    process.start()
    return process


def _child_main(parent_pid: int, target: str, args: tuple[Any, ...]) -> None:
    die_with_parent(parent_pid)
    module, _, qualname = target.partition(":")
    function: Any = importlib.import_module(module)
    for part in qualname.split("."):
        function = getattr(function, part)
    function(*args)


def _parent_alive(parent_pid: int) -> bool:
    if os.name == "posix":
        return os.getppid() == parent_pid  # an orphan is reparented (to init or a subreaper)
    parent = multiprocessing.parent_process()  # elsewhere: a multiprocessing child's parent sentinel
    return parent is None or parent.pid != parent_pid or parent.is_alive()


def _watch(parent_pid: int) -> None:
    while True:
        time.sleep(POLL_SECONDS)
        if not _parent_alive(parent_pid):
            os._exit(EXIT_CODE)


def main(argv: list[str]) -> None:
    """``<parent pid> <module> <args...>``: run ``module`` as ``python -m`` would, dying with ``parent pid``."""
    parent_pid, module, *args = argv
    die_with_parent(int(parent_pid))
    sys.argv = [module, *args]
    runpy.run_module(module, run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main(sys.argv[1:])
