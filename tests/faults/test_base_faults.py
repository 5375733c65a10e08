"""Bad ``base`` in a params file (issue 38): one line naming the file and the key, exit 2, nothing trained."""

from __future__ import annotations

from pathlib import Path

import pytest
from cli_support import run_in_process
from conftest import one_line_error

CASES = {
    "not a path": ("base: 3\nname: x\n", None, ("run.yaml: base:", "expected the path of a params file", "3")),
    "no such file": ("base: nowhere.yaml\n", None, ("run.yaml: base:", "nowhere.yaml: no such params file")),
    "a cycle": ("base: other.yaml\n", "base: run.yaml\n", ("base:", "the files inherit from each other")),
    "a base that is not params": ("base: other.yaml\n", "- a list\n", ("other.yaml:", "expected a mapping")),
}


@pytest.mark.parametrize("label", list(CASES))
def test_a_bad_base_is_refused_in_one_line(tmp_path: Path, label: str) -> None:
    text, other, fragments = CASES[label]
    (tmp_path / "run.yaml").write_text(text)
    if other is not None:
        (tmp_path / "other.yaml").write_text(other)
    outcome = run_in_process(["train", "--params", "run.yaml"], tmp_path)
    one_line_error(outcome, *fragments)
    assert not (tmp_path / "runs").exists()
