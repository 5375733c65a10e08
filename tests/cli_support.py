"""Running the ``rlcore`` command inside the test process: ``flows.cli.main`` (the console script's entry point) with
stdout and stderr captured (native code's writes to file descriptor 2 included), a time limit, and the process-wide
state it changes put back afterwards.

A real ``rlcore`` process costs ~2 s of imports (torch, gymnasium, pydantic) before it reads its first argument; in
process that is paid once per test session. What only a real process shows (the console script itself, its exit
status, start-up warnings on its stderr, Prefect's settings read from the environment at start-up) is left to the
few tests that still run ``conftest.rlcore``.
"""

from __future__ import annotations

import contextlib
import io
import logging
import os
import random
import shlex
import signal
import subprocess
import sys
import tempfile
import time
import traceback
import types
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any, TextIO

from conftest import RLCORE

from rlcore.common.project import is_user_file

TIME_LIMIT = 30
"""Seconds a refusal may take (a probe of bad params found commands that hung for 60 s)."""

LOGGERS = ("", "rlcore", "rlcore.sweep")
"""The root logger and the loggers the command configures (``rlcore.cli.run``, ``flows.cli``, ``flows``)."""

PYTHON_DEFAULT_WARNING_FILTERS: list[tuple[Any, type[Warning], str]] = [
    ("default", DeprecationWarning, "__main__"),
    ("ignore", DeprecationWarning, ""),
    ("ignore", PendingDeprecationWarning, ""),
    ("ignore", ImportWarning, ""),
    ("ignore", ResourceWarning, ""),
]
"""``warnings.filters`` of a fresh ``python`` (3.11, no ``-W``): what a real ``rlcore`` process shows on stderr.
pytest records warnings instead (and this project's pytest config ignores DeprecationWarning everywhere)."""


class Hang(BaseException):
    """Raised by the alarm: a BaseException, so no ``except Exception`` in the code under test swallows it."""


class Outcome(subprocess.CompletedProcess[str]):
    """What an in-process run ended with, read like a finished ``rlcore`` process (``returncode``, ``stdout``,
    ``stderr``: ``conftest.one_line_error`` takes either). A run stopped by the time limit reads as a process
    killed by SIGALRM (``returncode == -SIGALRM``)."""

    def __init__(self, args: list[str], returncode: int, stdout: str, stderr: str, seconds: float) -> None:
        super().__init__(args, returncode, stdout, stderr)
        self.seconds = seconds

    @property
    def hung(self) -> bool:
        return self.returncode == -signal.SIGALRM

    def __repr__(self) -> str:
        return (
            f"rlcore {shlex.join(self.args)[:300]} -> exit {self.returncode} after {self.seconds:.1f} s\n"
            f"stdout: {self.stdout[-2000:]}\nstderr: {self.stderr[-4000:]}"
        )


def _exit_status(code: object, stderr: TextIO) -> int:
    """The exit status of ``SystemExit(code)``, as the interpreter sets it (a message goes to stderr, status 1)."""
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    print(code, file=stderr)
    return 1


@contextlib.contextmanager
def _restored_process_state() -> Iterator[None]:
    """Put back what a command changes for the whole process: the working directory, ``sys.argv``, ``sys.path``
    (the command puts its project folder first), environment variables, logger levels and handlers, torch's thread
    count, and the global random generators (a training run seeds torch's, NumPy's); and forget the modules it
    imported from a folder it put on ``sys.path`` (the next test's project may hold another ``reach_env.py``).
    Module-level caches (``rlcore.params.params_model``) are kept: they hold pure functions of their arguments, and a
    process that runs ``main`` twice (the sweep's in-process trials) shares them too."""
    import numpy as np
    import torch

    cwd, environ, argv, path, modules = Path.cwd(), dict(os.environ), list(sys.argv), list(sys.path), set(sys.modules)
    loggers = [logging.getLogger(name) for name in LOGGERS]
    logger_state = [(lg.level, list(lg.handlers), lg.propagate, lg.disabled) for lg in loggers]
    threads = torch.get_num_threads()
    rng = (torch.random.get_rng_state(), np.random.get_state(), random.getstate())
    try:
        yield
    finally:
        added = [Path(entry).resolve() for entry in sys.path if entry and entry not in path]
        for name in set(sys.modules) - modules:
            file = str(getattr(sys.modules[name], "__file__", None) or "")
            if is_user_file(file) and any(Path(file).resolve().is_relative_to(folder) for folder in added):
                del sys.modules[name]  # never rlcore's own (a project folder may be this repository)
        os.chdir(cwd)
        sys.argv[:] = argv
        sys.path[:] = path
        if dict(os.environ) != environ:
            os.environ.clear()
            os.environ.update(environ)
        for lg, (level, handlers, propagate, disabled) in zip(loggers, logger_state, strict=True):
            lg.setLevel(level)  # setLevel, not `.level =`: it also clears the loggers' isEnabledFor caches
            lg.handlers[:] = handlers
            lg.propagate, lg.disabled = propagate, disabled
        torch.set_num_threads(threads)
        torch.random.set_rng_state(rng[0])
        np.random.set_state(rng[1])
        random.setstate(rng[2])


@contextlib.contextmanager
def _warnings_as_a_process_shows_them() -> Iterator[None]:
    """Python's default warning filters, each warning written to the (captured) ``sys.stderr`` as the interpreter
    writes it: a warning the command emits is a second line on its stderr, as it is for a user."""

    def show(
        message: Warning | str,
        category: type[Warning],
        filename: str,
        lineno: int,
        file: TextIO | None = None,
        line: str | None = None,
    ) -> None:
        (file or sys.stderr).write(warnings.formatwarning(message, category, filename, lineno, line))

    with warnings.catch_warnings():
        warnings.resetwarnings()
        for action, category, module in PYTHON_DEFAULT_WARNING_FILTERS:
            warnings.filterwarnings(action, category=category, module=module, append=True)
        warnings.showwarning = show  # pytest's catch_warnings(record=True) would otherwise keep them from stderr
        yield


@contextlib.contextmanager
def _file_descriptor_captured(fd: int) -> Iterator[io.StringIO]:
    """What native code (a C or C++ library: MuJoCo, ALE) writes straight to ``fd``, bypassing ``sys.stderr``:
    in a real process that lands on the same stderr. Read the yielded buffer after the block."""
    captured = io.StringIO()
    with tempfile.TemporaryFile() as sink:
        saved = os.dup(fd)
        os.dup2(sink.fileno(), fd)
        try:
            yield captured
        finally:
            os.dup2(saved, fd)
            os.close(saved)
            sink.seek(0)
            captured.write(sink.read().decode(errors="replace"))


def run_in_process(args: list[str], cwd: Path, limit: int = TIME_LIMIT) -> Outcome:
    """``flows.cli.main(args)`` (the ``rlcore`` command's entry point) in ``cwd``, stopped after ``limit`` seconds;
    an exception that escapes it is what the command would print as a traceback (status 1)."""
    from flows.cli import main

    def alarm(signum: int, frame: types.FrameType | None) -> None:
        raise Hang(f"still running after {limit} s")

    stdout, stderr = io.StringIO(), io.StringIO()
    previous_handler = signal.signal(signal.SIGALRM, alarm)
    started = time.monotonic()
    status: int
    try:
        with (
            _restored_process_state(),
            _file_descriptor_captured(2) as native_stderr,
            contextlib.redirect_stdout(stdout),
            contextlib.redirect_stderr(stderr),
            _warnings_as_a_process_shows_them(),
        ):
            os.chdir(cwd)
            sys.argv[:] = [RLCORE, *args]  # a run folder records the command it was started with (sys.argv)
            signal.alarm(limit)
            try:
                status = main(args)
            except SystemExit as exc:
                status = _exit_status(exc.code, stderr)
            except Hang:
                status = -signal.SIGALRM
            except BaseException:
                stderr.write(traceback.format_exc())
                status = 1
            finally:
                signal.alarm(0)
    finally:
        signal.signal(signal.SIGALRM, previous_handler)
    seconds = time.monotonic() - started
    return Outcome(args, status, stdout.getvalue(), stderr.getvalue() + native_stderr.getvalue(), seconds)


def assert_refused(outcome: Outcome, *fragments: str) -> str:
    """Exit 2, exactly one line on stderr, ``error: ...`` holding every fragment, no traceback, within
    :data:`TIME_LIMIT`. Returns the line."""
    assert not outcome.hung, outcome
    assert "Traceback" not in outcome.stderr + outcome.stdout, outcome
    assert outcome.returncode == 2, outcome
    lines = [line for line in outcome.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, outcome
    assert lines[0].startswith("error: "), outcome
    for fragment in fragments:
        assert fragment in lines[0], f"{fragment!r} not in {lines[0]!r}"
    assert outcome.seconds < TIME_LIMIT, outcome
    return lines[0]


def assert_usage_error(outcome: Outcome, *fragments: str) -> str:
    """A command line that does not parse: exit 2, no traceback, our ``error: ...`` line holding every fragment, then
    the command's usage (argparse's own ``rlcore: error:`` line never). Returns the error line."""
    assert not outcome.hung, outcome
    assert "Traceback" not in outcome.stderr + outcome.stdout, outcome
    assert outcome.returncode == 2, outcome
    lines = [line for line in outcome.stderr.splitlines() if line.strip()]
    assert len(lines) >= 2 and lines[0].startswith("error: ") and lines[1].startswith("usage: rlcore"), outcome
    assert not any("error" in line for line in lines[1:]), outcome
    for fragment in fragments:
        assert fragment in lines[0], f"{fragment!r} not in {lines[0]!r}"
    return lines[0]
