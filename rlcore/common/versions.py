"""Which code made a run: a folder's git revision, and rlcore's own version (its package version and, when it runs
from a git checkout, that checkout's revision), recorded in each run's summary and model card.

The pipeline's stages do not depend on rlcore's source folder (a project outside this repository has none): a run
says which rlcore made it instead.
"""

from __future__ import annotations

import functools
import subprocess
from importlib import metadata
from pathlib import Path
from typing import Any

PACKAGE = Path(__file__).resolve().parents[1]
"""The ``rlcore`` package folder this process imported."""


def _git(cwd: Path, *args: str) -> str | None:
    try:
        result = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    return result.stdout.strip() if result.returncode == 0 else None


def git_revision(cwd: Path) -> dict[str, Any]:
    """The commit and whether the work tree had uncommitted changes; nulls outside a git repo."""
    revision = _git(cwd, "rev-parse", "HEAD")
    status = _git(cwd, "status", "--porcelain", "--untracked-files=no") if revision else None
    return {"revision": revision, "dirty": None if status is None else bool(status)}


def revision_label(cwd: Path) -> str | None:
    """:func:`git_revision` in one string, ``<commit>`` or ``<commit>+dirty``; None outside a git repo (what a
    sweep records with its study and each trial)."""
    found = git_revision(cwd)
    if found["revision"] is None:
        return None
    return str(found["revision"]) + ("+dirty" if found["dirty"] else "")


@functools.cache
def rlcore_version() -> dict[str, Any]:
    """``{"version": the installed package's version, "revision": ..., "dirty": ...}``: the revision of the git
    checkout rlcore runs from (an editable install), or nulls when it is installed from a wheel. A checkout counts
    only when the package sits at its top (a wheel installed in a virtualenv inside a user's repository is not that
    repository's code)."""
    try:
        version: str | None = metadata.version("rlcore")
    except metadata.PackageNotFoundError:
        version = None
    top = _git(PACKAGE.parent, "rev-parse", "--show-toplevel")
    in_checkout = top is not None and Path(top).resolve() == PACKAGE.parent
    revision = git_revision(PACKAGE.parent) if in_checkout else {"revision": None, "dirty": None}
    return {"version": version, **revision}
