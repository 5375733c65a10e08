"""Atomic file output: write to a temporary name beside the target, fsync, then rename into place.

A crash at any moment leaves either the previous file or the new one, never half of one.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any


class AtomicTarget:
    """A temporary path beside ``target`` to write: :meth:`commit` renames it into place, :meth:`discard` drops it.

    For writers that outlive one ``with`` block (a streaming dataset writer); otherwise use :func:`atomic_path`.
    """

    def __init__(self, target: Path) -> None:
        self.target = Path(target)
        self.target.parent.mkdir(parents=True, exist_ok=True)
        self.tmp = self.target.with_name(f".{self.target.name}.{os.getpid()}.tmp")

    def commit(self) -> None:
        """fsync the temporary file, rename it over ``target``, fsync the folder."""
        with open(self.tmp, "rb+") as handle:
            os.fsync(handle.fileno())
        os.replace(self.tmp, self.target)
        _fsync_dir(self.target.parent)

    def discard(self) -> None:
        """Delete the temporary file (nothing once committed); ``target`` is untouched."""
        self.tmp.unlink(missing_ok=True)


@contextlib.contextmanager
def atomic_path(target: Path) -> Iterator[Path]:
    """Yield a temporary path to write; on success it replaces ``target`` atomically."""
    atomic = AtomicTarget(target)
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


def write_text(target: Path, text: str) -> None:
    with atomic_path(target) as tmp:
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


def write_json(target: Path, data: Any) -> None:
    """Strict JSON, atomically; non-finite floats are written as null."""
    write_text(target, json.dumps(json_safe(data), indent=2, sort_keys=False, allow_nan=False) + "\n")


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
