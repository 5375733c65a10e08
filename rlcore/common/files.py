"""Atomic file output: write to a temporary name beside the target, fsync, then rename into place, only over nothing
or a regular file.

A crash at any moment leaves either the previous file or the new one, never half of one. Every path rlcore writes is
checked by one rule (:func:`check_target`): a folder, device, pipe or socket there is refused, never replaced.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import os
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from rlcore.common.errors import RLCoreError

EXPECTED_TARGET = "expected a file path (absent or a regular file)"
"""What every refused output path is told it should be."""

_KINDS = (
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISFIFO, "a named pipe (FIFO)"),
    (stat.S_ISSOCK, "a socket"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
)


def target_problem(path: Path) -> str | None:
    """Why a new file may not be renamed over ``path`` (``"is a directory"``, ``"is a symbolic link to a named pipe
    (FIFO)"``), or None when ``path`` is absent or a regular file (a symbolic link to one: the rename replaces the
    link, never what it points to)."""
    try:
        mode = os.stat(path).st_mode  # follows a symbolic link: what it points to is what a reader would open
    except FileNotFoundError:
        return None  # absent, or a link to nothing: the rename puts the file there
    except NotADirectoryError:
        return f"cannot be created: {_file_above(Path(path))} is a file, not a folder"
    except OSError as exc:
        return f"cannot be examined ({exc.strerror or exc})"
    if stat.S_ISREG(mode):
        return None
    kind = next((name for test, name in _KINDS if test(mode)), "not a regular file")
    return f"is a symbolic link to {kind}" if os.path.islink(path) else f"is {kind}"


def _file_above(path: Path) -> str:
    """The nearest folder of ``path`` that exists but is not a folder (what makes ``path`` impossible)."""
    for parent in path.parents:
        if parent.exists():
            return shown_path(parent) if not parent.is_dir() else shown_path(path)
    return shown_path(path)


def check_target(path: Path | str, key: str | None = None) -> Path:
    """``path`` as a Path if a file may be written there (:func:`target_problem`); else :class:`RLCoreError`, one line
    naming ``key`` (the params key or option that named the path; None: the path says it all), the path and what it
    is. An empty path is refused too (``Path("")`` would be the working directory)."""
    where = f"{key}: " if key else ""
    if str(path) == "":
        raise RLCoreError(f"{where}an empty path; {EXPECTED_TARGET}")
    problem = target_problem(Path(path))
    if problem is not None:
        raise RLCoreError(f"{where}{shown_path(Path(path))} {problem}; {EXPECTED_TARGET}")
    return Path(path)


def remove_stale(path: Path, key: str | None = None) -> None:
    """Delete ``path``, a file an earlier run wrote and this one does not (a chart no longer drawn): only if it is a
    regular file; a folder, pipe or device under that name is not ours to delete (:func:`check_target`)."""
    check_target(path, key)
    path.unlink(missing_ok=True)


def refuse_same_file(target: Path, key: str | None, source: Path, what: str) -> None:
    """:class:`RLCoreError` when ``target`` names the file ``source`` (``what``: e.g. ``"collect.policy, the model
    this command reads"``): a command never replaces an input it reads."""
    same = target.resolve() == source.resolve()
    with contextlib.suppress(OSError):
        same = same or os.path.samefile(target, source)
    if same:
        where = f"{key}: " if key else ""
        raise RLCoreError(f"{where}{shown_path(target)} is {what}; write to another path")


class AtomicTarget:
    """A temporary path beside ``target`` to write: :meth:`commit` renames it into place, :meth:`discard` drops it.

    For writers that outlive one ``with`` block (a streaming dataset writer); otherwise use :func:`atomic_path`.
    ``target`` is checked (:func:`check_target`) before anything is written and again right before the rename, and
    the temporary file is created at once, so a folder that cannot be made or written is one line naming ``key``
    before any work is done.
    """

    def __init__(self, target: Path, key: str | None = None) -> None:
        self.target = check_target(target, key)
        self.key = key
        parent = self.target.parent
        try:
            parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise self._error(f"its folder {shown_path(parent)} cannot be created", exc) from None
        self.tmp = self.target.with_name(f".{self.target.name}.{os.getpid()}.tmp")
        try:
            self.tmp.unlink(missing_ok=True)  # left by a killed writer that had our process id
            os.close(os.open(self.tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666))
        except OSError as exc:
            raise self._error(f"cannot write in {shown_path(parent)}", exc) from None

    def _error(self, what: str, exc: OSError) -> RLCoreError:
        if isinstance(exc, FileExistsError | NotADirectoryError):
            reason = f"{_file_above(self.target)} is a file, not a folder"
        else:
            reason = exc.strerror or str(exc)
        where = f"{self.key}: " if self.key else ""
        return RLCoreError(f"{where}{shown_path(self.target)}: {what} ({reason})")

    def commit(self) -> None:
        """fsync the temporary file, rename it over ``target`` (still absent or a regular file), fsync the folder."""
        with open(self.tmp, "rb+") as handle:
            os.fsync(handle.fileno())
        check_target(self.target, self.key)  # what appeared there while we wrote is not replaced either
        try:
            os.replace(self.tmp, self.target)
        except OSError as exc:
            raise self._error("cannot be replaced", exc) from None
        _fsync_dir(self.target.parent)

    def discard(self) -> None:
        """Delete the temporary file (nothing once committed); ``target`` is untouched."""
        self.tmp.unlink(missing_ok=True)


@contextlib.contextmanager
def atomic_path(target: Path, key: str | None = None) -> Iterator[Path]:
    """Yield a temporary path to write; on success it replaces ``target`` atomically (:class:`AtomicTarget`)."""
    atomic = AtomicTarget(target, key)
    try:
        yield atomic.tmp
        atomic.commit()
    finally:
        atomic.discard()


def _fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_text(target: Path, text: str, key: str | None = None) -> None:
    with atomic_path(target, key) as tmp:
        tmp.write_text(text)


def json_safe(value: Any) -> Any:
    """``value`` with every non-finite float (NaN, ±inf: a diverged loss or return) as None, since JSON has none."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {key: json_safe(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [json_safe(item) for item in value]
    return value


def write_json(target: Path, data: Any, key: str | None = None) -> None:
    """Strict JSON, atomically; non-finite floats are written as null."""
    write_text(target, json.dumps(json_safe(data), indent=2, sort_keys=False, allow_nan=False) + "\n", key)


def read_json(path: Path) -> Any:
    return json.loads(Path(path).read_text())


def file_digests(path: Path, *algorithms: str) -> dict[str, str]:
    """Hex digests of the file under each of ``algorithms`` (hashlib names), in one read."""
    digests = {name: hashlib.new(name, usedforsecurity=False) for name in algorithms}
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            for digest in digests.values():
                digest.update(block)
    return {name: digest.hexdigest() for name, digest in digests.items()}


def sha256_file(path: Path) -> str:
    return file_digests(path, "sha256")["sha256"]


def shown_path(path: Path) -> str:
    """``path`` as messages and records show it: relative to the working directory (the project, for ``rlcore``
    commands) where it is inside it, else as given."""
    path = Path(path)
    cwd = Path.cwd()
    return str(path.relative_to(cwd)) if path.is_absolute() and path.is_relative_to(cwd) else str(path)
