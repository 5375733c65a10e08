"""The project folder: where the user's own modules named in params (``env.id: reach_env:ReachEnv``, a wrapper, an
opponent, a parameters adapter) are imported from, in every process of a run, and how a file is told to be the
user's (not Python's, an installed package's or rlcore's own).

The project folder is the working directory ``rlcore`` runs in: the folder of ``dvc.yaml`` under ``dvc repro``
(DVC runs every stage there), the ``root`` of a Prefect flow, the folder a sweep's trials write under. It is made
importable as ``python script.py`` makes the script's folder: first on ``sys.path``. It is also put first in
``PYTHONPATH``, so every process started from this one imports from it too: spawned children (IMPALA actors,
ES workers, sweep trial workers), Dask workers of a local cluster, subprocesses, Prefect's process runs."""

from __future__ import annotations

import functools
import importlib
import os
import site
import sys
import sysconfig
from pathlib import Path

_OWN = (Path(__file__).resolve().parents[1], Path(__file__).resolve().parents[2] / "flows")
"""rlcore's own packages (``rlcore/``, ``flows/``): never the user's code, wherever rlcore is installed."""


def use_project_folder(folder: str | Path) -> Path:
    """Make ``folder`` importable here and in every process started from here (module docstring): first on
    ``sys.path`` and first in ``PYTHONPATH``, each once. Returns the folder as an absolute path."""
    folder = Path(folder).resolve()
    entry = str(folder)
    if entry not in sys.path:
        sys.path.insert(0, entry)
        importlib.invalidate_caches()  # a finder that listed the folder before must see files written since
    inherited = [path for path in os.environ.get("PYTHONPATH", "").split(os.pathsep) if path]
    if entry not in inherited:
        os.environ["PYTHONPATH"] = os.pathsep.join([entry, *inherited])
    return folder


@functools.cache
def _installed_roots() -> tuple[Path, ...]:
    """Where Python's own modules and installed packages live (the standard library, site-packages, the virtual
    environment)."""
    paths = sysconfig.get_paths()
    roots = {paths[key] for key in ("stdlib", "platstdlib", "purelib", "platlib") if key in paths}
    roots.update(site.getsitepackages() + [site.getusersitepackages()])
    roots.update({sys.prefix, sys.exec_prefix})  # a virtual environment's own folder (its bin/, for a console script)
    return tuple(Path(root).resolve() for root in roots if root)


def is_user_file(filename: str) -> bool:
    """Whether ``filename`` (of a traceback frame, a module) is the user's code: a real file outside Python, its
    installed packages and rlcore."""
    if not filename or filename.startswith("<"):  # <frozen importlib._bootstrap>, <string>
        return False
    path = Path(filename).resolve()
    return not any(path.is_relative_to(root) for root in (*_installed_roots(), *_OWN))


def searched_folders() -> list[str]:
    """The folders on ``sys.path`` a module of the user's can come from: the project folder and any other folder
    that is not Python's or an installed package's (``PYTHONPATH``), in import order."""
    folders = []
    for entry in sys.path:
        folder = Path(entry or os.getcwd()).resolve()
        if folder.is_dir() and is_user_file(str(folder)) and str(folder) not in folders:
            folders.append(str(folder))
    return folders
