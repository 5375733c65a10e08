"""Runs side by side (issue 38): every output of a run is in folders named after it, so two runs of different names
never overwrite each other's selected model, report or export; replacing a finished run of the same name with other
train params is refused in one line naming a key that changed, unless ``--replace``."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest
from cli_support import run_in_process
from conftest import PROJECT, one_line_error, outputs, sets

pytestmark = pytest.mark.slow  # four stages in process, twice

TINY = [
    "train.max_steps=1024",
    "train.eval_every=512",
    "train.eval_episodes=2",
    "train.target_return=null",
    "train.progress_bar=off",
    "eval.episodes=2",
    "eval.test_episodes=3",
    "export.parity_observations=20",
]


def stages(root: Path, *overrides: str, commands: tuple[str, ...] = ("train", "evaluate", "select", "export")) -> None:
    for command in commands:
        outcome = run_in_process([command, *sets([*TINY, *overrides])], root, limit=300)
        assert outcome.returncode == 0, outcome.stderr


def digests(folder: Path) -> dict[str, str]:
    return {
        path.relative_to(folder).as_posix(): hashlib.sha256(path.read_bytes()).hexdigest()
        for path in sorted(folder.rglob("*"))
        if path.is_file() and path.name != ".lock"
    }


@pytest.fixture(scope="module")
def finished(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A project whose run ``first`` went through every stage."""
    root = tmp_path_factory.mktemp("names")
    (root / "params.yaml").write_text((PROJECT / "params.yaml").read_text())
    stages(root, "name=first")
    return root


def test_two_runs_of_different_names_keep_their_own_model_report_and_export(finished: Path) -> None:
    first = outputs(finished, "first")
    before = {folder: digests(folder) for folder in (first.run_dir, first.reports, first.best, first.export)}
    stages(finished, "name=second", "algo.lr=0.002")
    assert {folder: digests(folder) for folder in before} == before
    second = outputs(finished, "second")
    for layout in (first, second):
        assert layout.best_policy.is_file() and (layout.export / "policy.onnx").is_file() and layout.report.is_file()
    assert second.selection.read_text() != first.selection.read_text()


def test_a_finished_run_is_not_replaced_by_other_params_under_its_name(finished: Path) -> None:
    """Issue 38: ``rlcore train --set env.id=...`` without a new name replaced the default run."""
    run = outputs(finished, "first").run_dir
    before = digests(run)
    outcome = run_in_process(["train", *sets([*TINY, "name=first", "algo.lr=0.002"])], finished, limit=60)
    line = one_line_error(outcome, "algo.lr:", "finished run", "0.001", "0.002", "--set name=", "--replace")
    assert str(run) in line
    assert digests(run) == before


def test_replace_trains_the_changed_params_in_place_of_the_finished_run(finished: Path) -> None:
    outcome = run_in_process(["train", "--replace", *sets([*TINY, "name=first", "seed=1"])], finished, limit=300)
    assert outcome.returncode == 0, outcome.stderr
    assert "the new run replaced the previous one" in outcome.stderr
