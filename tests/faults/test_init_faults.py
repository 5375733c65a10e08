"""Bad input to ``rlcore init`` (issue 38): a folder that is a project already, or that cannot be written, is refused
in one line naming it, and nothing in it changes; ``--force`` overwrites the project's own files."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from cli_support import run_in_process
from conftest import one_line_error


def snapshot(folder: Path) -> dict[str, bytes]:
    return {path.name: path.read_bytes() for path in folder.iterdir() if path.is_file()}


@pytest.mark.parametrize("existing", ["params.yaml", "dvc.yaml"])
def test_a_folder_with_a_project_file_is_refused_and_left_as_it_was(tmp_path: Path, existing: str) -> None:
    (tmp_path / existing).write_text("mine: true\n")
    before = snapshot(tmp_path)
    outcome = run_in_process(["init", str(tmp_path)], tmp_path, limit=60)
    one_line_error(outcome, f"{tmp_path / existing}: already exists", "nothing changed", "--force")
    assert snapshot(tmp_path) == before and not (tmp_path / ".dvc").exists() and not (tmp_path / ".git").exists()


def test_force_overwrites_the_project_files(tmp_path: Path) -> None:
    (tmp_path / "params.yaml").write_text("mine: true\n")
    outcome = run_in_process(["init", str(tmp_path), "--force"], tmp_path, limit=120)
    assert outcome.returncode == 0, outcome.stderr
    assert "mine" not in (tmp_path / "params.yaml").read_text()


def test_a_folder_that_cannot_be_created_is_refused_in_one_line(tmp_path: Path) -> None:
    (tmp_path / "a-file").write_text("")
    outcome = run_in_process(["init", str(tmp_path / "a-file" / "project")], tmp_path, limit=60)
    one_line_error(outcome, str(tmp_path / "a-file" / "project"), "cannot create the folder")


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into read-only folders")
def test_a_read_only_folder_is_refused_in_one_line(tmp_path: Path) -> None:
    folder = tmp_path / "read-only"
    folder.mkdir()
    folder.chmod(0o500)
    try:
        outcome = run_in_process(["init", str(folder)], tmp_path, limit=60)
    finally:
        folder.chmod(0o700)
    one_line_error(outcome, str(folder), "cannot write here")
    assert list(folder.iterdir()) == []
