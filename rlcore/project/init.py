"""``rlcore init [DIR]``: a working project in an empty folder (or an existing git repository): ``params.yaml`` (the
default run, commented, checked by editors against ``params.schema.json`` beside it), ``dvc.yaml`` generated from it
(``rlcore.project.pipeline_file``, as this repository's), ``.gitignore``, ``.dvcignore``, a three-line README, and
``git init`` / ``dvc init`` where they are missing. Nothing is written when the folder already holds a
``params.yaml`` or ``dvc.yaml`` (unless ``force``) or cannot be written; each refusal is one line.
"""

from __future__ import annotations

import os
from importlib import resources
from pathlib import Path

from rlcore.common.errors import RLCoreError
from rlcore.project.pipeline_file import PARAMS, pipeline_yaml
from rlcore.project.tools import dvc_command, run_tool

GITIGNORE = """\
# What the stages write (DVC tracks it in its cache; `dvc exp show` and `dvc exp apply` read it from there)
/runs/
/models/
/export/
/data/
/reports/
/dvclive/
# Tools' own state
.prefect/
.optuna/
__pycache__/
*.pyc
"""

DVCIGNORE = """\
# Python writes bytecode next to the project's modules: never part of a stage's inputs.
__pycache__/
*.pyc
"""

README = """\
# {name}
An rlcore project: `dvc repro` trains, evaluates, selects and exports the run of params.yaml (runs/, reports/, models/, export/<name>/).
Compare settings: commit, `dvc exp run -S algo.lr=0.002` (any key), `dvc exp show`; after editing params.yaml's keys, `rlcore dvc-yaml`.
"""  # noqa: E501  (three lines, as a user reads them)

OWN_FILES = (PARAMS, "dvc.yaml")
"""Files whose presence means the folder is already a project: refused without ``force``."""


def init_project(folder: Path, force: bool = False) -> list[str]:
    """Create the project in ``folder`` (made if missing); returns the names of the files written and of the tools
    initialized, in order."""
    folder = Path(folder)
    if not force:
        for name in OWN_FILES:
            if (folder / name).exists():
                raise RLCoreError(
                    f"{folder / name}: already exists, so {folder} is a project already; nothing changed "
                    "(`rlcore init --force` overwrites params.yaml, dvc.yaml and the files beside them)"
                )
    _check_writable(folder)
    package = resources.files("rlcore.project")
    files = {
        PARAMS: package.joinpath("params.yaml").read_text(),
        # docs/params.schema.json (a link to it in the package): `rlcore params-schema` would import every
        # algorithm (torch) to write it, which costs seconds.
        "params.schema.json": package.joinpath("params.schema.json").read_text(),
        ".gitignore": GITIGNORE,
        ".dvcignore": DVCIGNORE,
        "README.md": README.format(name=folder.resolve().name),
    }
    done = []
    for name, text in files.items():
        if name in (".gitignore", "README.md") and (folder / name).exists() and not force:
            continue  # an existing repository's own files are kept
        (folder / name).write_text(text)
        done.append(name)
    (folder / "dvc.yaml").write_text(pipeline_yaml(folder))
    done.append("dvc.yaml")
    if run_tool(["git", "rev-parse", "--show-toplevel"], folder, check=False).returncode != 0:
        run_tool(["git", "init", "-q"], folder)
        done.append("git init")
    if not (folder / ".dvc").is_dir():
        top = Path(run_tool(["git", "rev-parse", "--show-toplevel"], folder).stdout.strip()).resolve()
        subdir = ["--subdir"] if top != folder.resolve() else []
        run_tool([dvc_command(), "init", "-q", *subdir], folder)
        with open(folder / ".dvc" / "config", "a") as config:  # `dvc config core.analytics false`, one process less
            config.write("[core]\n    analytics = false\n")
        done.append("dvc init")
    return done


def _check_writable(folder: Path) -> None:
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise RLCoreError(f"{folder}: cannot create the folder ({exc.strerror})") from None
    if not folder.is_dir():
        raise RLCoreError(f"{folder}: not a folder")
    if not os.access(folder, os.W_OK | os.X_OK):
        raise RLCoreError(f"{folder}: cannot write here (permission denied); nothing changed")
