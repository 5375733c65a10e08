"""Shared test set-up: quiet offline tools, one torch thread, and helpers to run the real CLI."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

PROJECT = Path(__file__).resolve().parents[1]

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ["DVC_NO_ANALYTICS"] = "1"
os.environ["DO_NOT_TRACK"] = "1"
os.environ["PREFECT_SERVER_ANALYTICS_ENABLED"] = "false"
os.environ["DASK_LOGGING__DISTRIBUTED"] = "warning"

RLCORE = str(Path(sys.executable).parent / "rlcore")

# Mirrors the output entries of the project's .gitignore (a temporary project commits only its sources).
GITIGNORE = "/runs/\n/models/\n/export/\n/data/\n/dvclive/\n/reports/*\n!/reports/.gitkeep\n"


def tool_env() -> dict[str, str]:
    """The environment for git and dvc in a temporary project: the venv's tools first, no analytics, an author."""
    return {
        **os.environ,
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
        "DVC_NO_ANALYTICS": "1",
        "GIT_AUTHOR_NAME": "rlcore tests",
        "GIT_AUTHOR_EMAIL": "tests@rlcore.invalid",
        "GIT_COMMITTER_NAME": "rlcore tests",
        "GIT_COMMITTER_EMAIL": "tests@rlcore.invalid",
    }


# Small, fast runs: CartPole, a few thousand steps, frequent checkpoints.
QUICK = [
    "name=quick",
    "train.max_steps=4096",
    "train.eval_every=1024",
    "train.eval_episodes=3",
    "train.target_return=null",
    "eval.episodes=3",
    "export.parity_observations=200",
]


def sets(overrides: list[str]) -> list[str]:
    """``["a=1", "b=2"]`` -> ``["--set", "a=1", "--set", "b=2"]``."""
    return [arg for item in overrides for arg in ("--set", item)]


def rlcore(
    *args: str, cwd: Path, check: bool = True, timeout: float = 600, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """Run the installed ``rlcore`` command in ``cwd``, as a user would (``env`` adds variables)."""
    env = {
        **os.environ,
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
        **(env or {}),
    }
    result = subprocess.run([RLCORE, *args], cwd=cwd, capture_output=True, text=True, timeout=timeout, env=env)
    if check and result.returncode != 0:
        raise AssertionError(f"rlcore {' '.join(args)} exited {result.returncode}:\n{result.stdout}\n{result.stderr}")
    return result


def preset_text(preset: str) -> str:
    """The text of the project's params file ``preset`` to copy elsewhere: as it is, or for a file inheriting from
    another (``base``: offline.yaml) the merged keys, whole (a copy alone in a folder has no base beside it)."""
    import yaml

    from rlcore.config.inheritance import BASE_KEY, base_tree, read_params_tree
    from rlcore.params import with_collect_policy

    text = (PROJECT / preset).read_text()
    if BASE_KEY not in (yaml.safe_load(text) or {}):
        return text
    tree = read_params_tree(PROJECT / preset)
    base = base_tree(PROJECT / preset, tree)
    tree.pop(BASE_KEY)
    # collect.policy: null follows the base run, which a copy alone cannot: it names the model (models/<name>/policy.pt)
    return yaml.safe_dump(with_collect_policy(tree, base), sort_keys=False)


def outputs(root: Path, name: str | None = None) -> Any:
    """Where the stages wrote run ``name``'s outputs in project ``root`` (``rlcore.common.stage_paths.Layout``); name
    None: the project's one run (the one folder in ``runs/``)."""
    from rlcore.common.stage_paths import Layout

    if name is None:
        folder = root / "runs"
        runs = sorted(path.name for path in folder.iterdir() if path.is_dir()) if folder.is_dir() else []
        assert len(runs) == 1, f"{root}/runs: expected one run, found {runs}: name it"
        name = runs[0]
    return Layout(root, name)


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A copy of the project's declarative files (params.yaml, dvc.yaml, prefect.toml) in an empty folder."""
    for name in ("params.yaml", "dvc.yaml", ".dvcignore", "prefect.toml"):
        shutil.copy(PROJECT / name, tmp_path / name)
    return tmp_path


@pytest.fixture(scope="session")
def shared_prefect_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, dict[str, str]]]:
    """One real Prefect server (URL, environment) for the modules that only run flows on it and read back their own
    runs: started once (15 s or more: its database's migrations), not once per module. Modules that deploy, schedule
    or run work-pool workers start their own."""
    from prefect_server import prefect_server

    with prefect_server(tmp_path_factory.mktemp("shared-prefect-home"), startup_timeout=120) as server:
        yield server


def one_line_error(result: subprocess.CompletedProcess[str], *fragments: str) -> str:
    """The user-error contract: exit 2, no traceback, exactly one ``error: `` line holding every fragment."""
    assert result.returncode == 2, f"exit status {result.returncode}\n{result.stdout}\n{result.stderr}"
    assert "Traceback" not in result.stderr, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, f"expected one line on stderr, got {len(lines)}:\n{result.stderr}"
    line = lines[0]
    assert line.startswith("error: "), line
    for fragment in fragments:
        assert fragment in line, f"{fragment!r} not in {line!r}"
    return line


def assert_trees_match(mine: Any, theirs: Any, where: str, rtol: float | None = None, atol: float = 0.0) -> None:
    """Two checkpoints' trees (dicts, lists, tuples, tensors, plain values) alike: containers of one kind and keys,
    tensors of one dtype and shape, float tensors within ``rtol`` / ``atol`` (None: bitwise), every other tensor
    (random-number states among them) and value equal. ``where`` names the first difference."""
    import torch

    if isinstance(mine, torch.Tensor):
        assert isinstance(theirs, torch.Tensor) and mine.dtype == theirs.dtype and mine.shape == theirs.shape, where
        if rtol is not None and mine.is_floating_point():
            torch.testing.assert_close(mine, theirs, rtol=rtol, atol=atol, msg=lambda message: f"{where}: {message}")
        else:
            assert torch.equal(mine, theirs), f"{where}: max difference {(mine.double() - theirs.double()).abs().max()}"
    elif isinstance(mine, dict):
        assert isinstance(theirs, dict) and mine.keys() == theirs.keys(), f"{where}: {mine.keys()} != {theirs.keys()}"
        for key in mine:
            assert_trees_match(mine[key], theirs[key], f"{where}/{key}", rtol, atol)
    elif isinstance(mine, list | tuple):
        assert type(mine) is type(theirs) and len(mine) == len(theirs), where
        for index, (item, other) in enumerate(zip(mine, theirs, strict=True)):
            assert_trees_match(item, other, f"{where}[{index}]", rtol, atol)
    else:
        assert mine == theirs, f"{where}: {mine!r} != {theirs!r}"


def replay_arrays(run_dir: Path) -> dict[str, Any]:
    """The arrays of every replay file beside a run's checkpoints (off-policy runs), by file name then array name."""
    import numpy as np

    arrays: dict[str, Any] = {}
    for path in sorted((run_dir / "replay").glob("*.npz")):
        with np.load(path) as saved:
            arrays[path.name] = {key: saved[key] for key in saved.files}
    return arrays


@pytest.hookimpl(tryfirst=True)  # before ``-m`` deselects: the check needs the tests of every mark
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The files with the most learning tests first (:func:`heaviest_files_first`); a collection holding a ``serial``
    or ``server`` test that ``make test`` would never run is refused (:func:`marks_the_makefile_misses`)."""
    missed = marks_the_makefile_misses(items)
    if missed:
        raise pytest.UsageError(f"{missed[0]}: a mark the Makefile cannot find; write pytest.mark.<name> in the file")
    items[:] = heaviest_files_first(items)


ALONE_MARKS = ("serial", "server")
"""The marks whose tests ``make test`` runs apart, collecting only the files whose text holds ``mark.<name>``."""


def marks_the_makefile_misses(items: list[pytest.Item]) -> list[str]:
    """``<file>: <test> is <mark>`` for each test marked ``serial`` or ``server`` in a file whose text lacks
    ``mark.serial`` / ``mark.server``: the Makefile's parts for those marks collect only the files grep finds (a
    mark applied from another module, or by a hook, would leave the test out of every part)."""
    texts: dict[Path, str] = {}
    missed = []
    for item in items:
        for mark in ALONE_MARKS:
            if item.get_closest_marker(mark) is None:
                continue
            if item.path not in texts:
                texts[item.path] = item.path.read_text()
            if f"mark.{mark}" not in texts[item.path]:
                missed.append(f"{item.path}: {item.name} is {mark}")
    return missed


SLOW_TEST_WEIGHT = 100
"""A ``slow`` test's weight against a unit test's 1 when files are ordered: they take minutes, the others a second."""


def heaviest_files_first(items: list[pytest.Item]) -> list[pytest.Item]:
    """``items`` file by file, the files with the most ``slow`` tests first (each file's own order kept). ``make
    test`` hands whole files to two pytest-xdist workers in this order (``--dist loadfile --no-loadscope-reorder``):
    the longest files start first instead of leaving one worker alone with a ten-minute file at the end."""
    files: dict[Path, list[pytest.Item]] = {}
    for item in items:
        files.setdefault(item.path, []).append(item)

    def weight(tests: list[pytest.Item]) -> int:
        return sum(SLOW_TEST_WEIGHT if test.get_closest_marker("slow") else 1 for test in tests)

    ordered = sorted(files.values(), key=weight, reverse=True)
    return [item for tests in ordered for item in tests]
