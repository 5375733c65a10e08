"""The ``rlcore`` command, SIGKILLed by itself right after its N-th change to a folder: a crash at an exact point.

    KILL_IN=runs/quick KILL_AT=3 python tests/faults/rlcore_killed_at.py train --set seed=1

A change is a rename, replace or deletion (``os.replace``, ``os.rename``, ``os.unlink``/``os.remove``,
``os.rmdir``, ``shutil.rmtree``) of an existing path inside ``KILL_IN``: every step of moving a run aside, putting
it back, committing an atomic write or dropping what a checkpoint superseded. ``KILL_AT=0`` never kills.
``KILL_TRACE=file`` appends one line per change (its number, the call and its paths).
"""

from __future__ import annotations

import os
import shutil
import signal
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

FOLDER = Path(os.environ["KILL_IN"]).resolve()
KILL_AT = int(os.environ.get("KILL_AT", "0"))
TRACE = os.environ.get("KILL_TRACE")
changes = 0


def _inside(path: Any) -> bool:
    if not isinstance(path, str | bytes | os.PathLike):
        return False
    return Path(os.fsdecode(path)).resolve().is_relative_to(FOLDER)


def _watched(name: str, function: Callable[..., Any]) -> Callable[..., Any]:
    def call(*args: Any, **kwargs: Any) -> Any:
        global changes
        paths = [arg for arg in args[:2] if isinstance(arg, str | bytes | os.PathLike)]
        # Relative to a directory descriptor: a step inside shutil.rmtree, counted as the rmtree itself. A call on
        # a path that does not exist changes nothing (rmtree(..., ignore_errors=True)): not counted.
        counted = kwargs.get("dir_fd") is None and bool(paths) and os.path.lexists(paths[0])
        result = function(*args, **kwargs)
        if counted and any(_inside(path) for path in paths):
            changes += 1
            if TRACE:
                with open(TRACE, "a") as trace:
                    trace.write(f"{changes} {name} {' '.join(os.fsdecode(p) for p in paths)}\n")
            if changes == KILL_AT:
                os.kill(os.getpid(), signal.SIGKILL)
        return result

    return call


for _name in ("replace", "rename", "unlink", "remove", "rmdir"):
    setattr(os, _name, _watched(_name, getattr(os, _name)))
shutil.rmtree = _watched("rmtree", shutil.rmtree)  # type: ignore[assignment]

if __name__ == "__main__":
    from flows.cli import main

    sys.argv[0] = "rlcore"
    sys.exit(main())
