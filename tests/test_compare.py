"""``rlcore compare`` (issue 38): what it refuses, in one line each, and how it names what differs between experiments.
Its drawing of real ``dvc exp run`` experiments is in the Done-when test of tests/test_own_env.py; an ``--output`` that
is a folder or a pipe, in tests/faults/test_file_targets.py."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from cli_support import run_in_process
from conftest import one_line_error, tool_env

from rlcore.project.compare import ComparedCurve, Listing, Revision, changed_params, default_revisions, table
from rlcore.project.tools import dvc_command

DVC_YAML = """\
stages:
  train:
    cmd: python -c "print('never run here')"
    params:
      - name
      - algo.lr
    outs:
      - runs/tiny
plots:
  - runs/tiny/dvclive/plots/metrics:
      x: step
"""


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A DVC project with one commit and no experiments; its workspace has the curve ``eval/mean_return`` of run
    ``tiny`` (written by hand: the stage never ran, so no commit holds it)."""
    root = tmp_path_factory.mktemp("compare")
    (root / "params.yaml").write_text("name: tiny\nalgo:\n  lr: 0.1\n")
    (root / "dvc.yaml").write_text(DVC_YAML)
    (root / ".gitignore").write_text("/runs/\n")
    for command in (["git", "init", "-q"], [dvc_command(), "init", "-q"], ["git", "add", "-A"]):
        subprocess.run(command, cwd=root, check=True, env=tool_env())
    subprocess.run(["git", "commit", "-qm", "tiny"], cwd=root, check=True, env=tool_env())
    curve = root / "runs" / "tiny" / "dvclive" / "plots" / "metrics" / "eval" / "mean_return.tsv"
    curve.parent.mkdir(parents=True)
    curve.write_text("step\tmean_return\n512\t-3.5\n1024\t-2.25\n")
    yield root


def test_a_folder_outside_a_dvc_project_is_refused(tmp_path: Path) -> None:
    one_line_error(run_in_process(["compare"], tmp_path), f"{tmp_path.resolve()}: not a DVC project", "rlcore init")


def test_a_project_without_experiments_is_refused_and_says_how_to_make_one(project: Path) -> None:
    one_line_error(run_in_process(["compare"], project), "no experiments to compare", "dvc exp run -S")
    assert not (project / "reports").exists()


def test_an_unknown_revision_is_refused_naming_it_and_the_known_ones(project: Path) -> None:
    line = one_line_error(run_in_process(["compare", "no-such-exp"], project), "no-such-exp: unknown revision")
    assert "(workspace, " in line


def test_a_named_commit_that_never_ran_has_no_curve(project: Path) -> None:
    one_line_error(
        run_in_process(["compare", "HEAD"], project), "HEAD: no eval/mean_return curve in runs/tiny/dvclive/"
    )


def test_an_unknown_metric_is_refused_with_the_curves_there_are(project: Path) -> None:
    line = one_line_error(run_in_process(["compare", "--metric", "eval/mean_retrun"], project))
    assert line == "error: --metric: no curve eval/mean_retrun; the curves in runs/tiny/dvclive/: eval/mean_return"


def test_the_params_that_differ_are_those_not_equal_in_every_revision() -> None:
    params = [
        {"name": "r", "algo.lr": 0.001, "env.kwargs": [1, 2]},
        {"name": "r", "algo.lr": 0.003, "env.kwargs": [1, 2], "train.seeds": 3},
        {"name": "r", "algo.lr": 0.001, "env.kwargs": [1, 3]},
    ]
    assert changed_params(params) == [
        {"algo.lr": 0.001, "env.kwargs": [1, 2], "train.seeds": None},
        {"algo.lr": 0.003, "env.kwargs": [1, 2], "train.seeds": 3},
        {"algo.lr": 0.001, "env.kwargs": [1, 3], "train.seeds": None},
    ]


def revision(name: str, lr: float, score: float) -> Revision:
    return Revision(name, {"name": "r", "algo.lr": lr}, {"reports/r/scores.json": {"test": score}}, name)


def test_by_default_the_workspace_is_left_out_when_it_is_one_of_the_experiments() -> None:
    baseline, first, second = revision("main", 0.001, 1.0), revision("exp-a", 0.003, 2.0), revision("exp-b", 0.03, 3.0)
    after_exp_run = Listing(revision("workspace", 0.03, 3.0), baseline, [first, second])
    assert [rev.name for rev in default_revisions(after_exp_run)] == ["main", "exp-a", "exp-b"]
    edited = Listing(revision("workspace", 0.1, 0.5), baseline, [first, second])
    assert [rev.name for rev in default_revisions(edited)] == ["workspace", "main", "exp-a", "exp-b"]


def test_the_table_shows_each_curves_differing_params_final_and_best_value() -> None:
    curves = [
        ComparedCurve("exp-a", {"algo.lr": 0.003}, [512, 1024], [-3.0, -2.25]),
        ComparedCurve("exp-b", {"algo.lr": 0.0003}, [512, 1024], [-1.5, -29.31]),
    ]
    assert curves[1].label == "exp-b: algo.lr=0.0003"
    assert table(curves).splitlines() == [
        "| experiment | params that differ | final |  best |",
        "|------------|--------------------|-------|-------|",
        "| exp-a      | algo.lr=0.003      | -2.25 | -2.25 |",
        "| exp-b      | algo.lr=0.0003     | -29.3 | -1.50 |",
    ]
