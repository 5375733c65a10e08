"""Errors meant for users: one line that names the key or file, what was expected and what was given."""

from __future__ import annotations

import difflib
import stat
import traceback
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from rlcore.common.project import is_user_file

MAX_MESSAGE_CHARS = 300
"""The most characters of an exception's own message quoted in an error line (a user's exception may hold a page)."""


class RLCoreError(Exception):
    """Base class: the CLI prints ``error: <message>`` and exits with status 2, no traceback.

    ``details`` (a traceback, empty by default) never reaches the terminal: the CLI writes it to the run's
    ``error.log`` and names that file in the line."""

    details: str = ""


class ConfigError(RLCoreError):
    """A params file, an override or a params value is not what the run needs."""


class CheckpointError(RLCoreError):
    """A checkpoint or model file is missing, truncated, or was written by something else."""


class UserCodeError(RLCoreError):
    """The user's code (an env, a wrapper, an ``env.parameters_adapter``) raised. The message names the key or the
    env and the step, then the exception's own ``Type: message`` on one line; ``details`` holds its traceback."""

    def __init__(self, message: str, details: str = "") -> None:
        super().__init__(message)
        self.details = details

    def __reduce__(self) -> tuple[Any, ...]:  # picklable with its details (sent back by worker processes)
        return (type(self), (str(self), self.details))

    @classmethod
    def raised(cls, where: str, exc: BaseException) -> UserCodeError:
        """``<where>: <Type>: <message>`` for ``exc``, its traceback as the details."""
        return cls(f"{where}: {describe_exception(exc)}", format_traceback(exc))


def worker_failure(exc: BaseException) -> RLCoreError:
    """What a worker process sends back for ``exc`` (picklable): rlcore's own error as it is, any other as one line
    (``Type: message``) with its traceback as the details."""
    if isinstance(exc, RLCoreError):
        return exc
    error = RLCoreError(describe_exception(exc))
    error.details = format_traceback(exc)
    return error


def raise_worker_failure(worker: str, failure: RLCoreError, error: type[RLCoreError]) -> None:
    """Raise what ``worker`` sent back (:func:`worker_failure`): an error naming a key or the user's code as it is
    (it says what went wrong wherever it ran), any other as ``error`` naming the worker, with the same details."""
    if isinstance(failure, UserCodeError | ConfigError):
        raise failure
    raised = error(f"{worker} failed: {failure}")
    raised.details = failure.details
    raise raised


def describe_exception(exc: BaseException, limit: int = MAX_MESSAGE_CHARS) -> str:
    """``Type: message`` of ``exc`` on one line, its message cut to ``limit`` characters."""
    message = " ".join(str(exc).split())
    if len(message) > limit:
        message = message[: limit - 1].rstrip() + "…"
    return f"{type(exc).__name__}: {message}" if message else type(exc).__name__


def format_traceback(exc: BaseException) -> str:
    return "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))


def raised_at(exc: BaseException) -> str:
    """``Type: message (at file.py:line)``: the exception on one line and where it came from: the innermost frame
    of the user's own code when the traceback has one (``rlcore.common.project.is_user_file``), else the innermost
    frame. A syntax error names its file and line in its message already."""
    frames = list(traceback.extract_tb(exc.__traceback__))
    users = [frame for frame in frames if is_user_file(frame.filename)]
    where = ""
    if users or frames:
        frame = (users or frames)[-1]
        where = f" (at {Path(frame.filename).name}:{frame.lineno})"
    return describe_exception(exc) + ("" if isinstance(exc, SyntaxError) else where)


class UserCodeValueError(ValueError):
    """A ``ValueError`` (what validators raise) for an exception of the user's code, keeping its traceback as
    ``details`` (:class:`RLCoreError`) for the run's error log."""

    def __init__(self, message: str, details: str = "") -> None:
        super().__init__(message)
        self.details = details


def file_problem(path: Path, what: str) -> str | None:
    """Why ``path`` cannot be read as a ``what`` (a file), or None when it is a regular file: the one check of every
    path a user gives (params files, checkpoints, ``train.init_from``, datasets), so ``/dev/zero`` or a pipe is "not a
    regular file" everywhere rather than "not found" (or a read that never ends)."""
    try:
        mode = path.stat().st_mode  # a symbolic link is followed: what it points to counts
    except (FileNotFoundError, NotADirectoryError):
        return f"{what} not found"
    except OSError as exc:
        return f"cannot read the {what}: {exc.strerror or exc}"
    if stat.S_ISDIR(mode):
        return f"is a folder, not {_a(what)}"
    if not stat.S_ISREG(mode):
        return f"not a regular file (a device, a pipe or a socket), so not {_a(what)}"
    return None


def _a(noun: str) -> str:
    return f"an {noun}" if noun[:1].lower() in "aeiou" else f"a {noun}"


def closest(word: str, candidates: Iterable[str]) -> str | None:
    """The candidate closest to ``word`` (a likely typo of it), or ``None`` when none is close."""
    matches = difflib.get_close_matches(word, list(candidates), n=1, cutoff=0.6)
    return matches[0] if matches else None


def did_you_mean(word: str, candidates: list[str] | tuple[str, ...], prefix: str = "") -> str:
    """``" (did you mean 'x'?)"`` for the closest candidate, or ``""`` when none is close."""
    match = closest(word, candidates)
    return f" (did you mean {prefix + match!r}?)" if match is not None else ""
