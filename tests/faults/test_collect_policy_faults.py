"""A bad ``collect.policy``: one line naming the key and the path, exit 2, no dataset written."""

from __future__ import annotations

from pathlib import Path

import pytest
from cli_support import assert_refused, run_in_process
from conftest import sets

SMALL = ["collect.steps=64", "collect.num_envs=2"]


def refused_without_a_dataset(project: Path, overrides: list[str], *fragments: str) -> None:
    assert_refused(run_in_process(["collect", *sets([*SMALL, *overrides])], project), *fragments)
    assert not (project / "data").exists()


def test_the_default_run_s_model_not_selected_yet_says_which_run(project: Path) -> None:
    refused_without_a_dataset(
        project,
        ["name=reach"],
        "collect.policy: models/reach/policy.pt: model not found",
        "the selected model of run reach: run its train, evaluate and select stages first",
    )


@pytest.mark.parametrize("shards", [1, 2])
def test_a_missing_file_is_named(project: Path, shards: int) -> None:
    overrides = ["collect.policy=models/nowhere.pt", f"collect.shards={shards}"]
    refused_without_a_dataset(project, overrides, "collect.policy: models/nowhere.pt: model not found")


def test_a_folder_is_not_a_model(project: Path) -> None:
    (project / "models" / "reach").mkdir(parents=True)
    refused_without_a_dataset(
        project, ["collect.policy=models/reach"], "collect.policy: models/reach: is a folder, not a model"
    )
