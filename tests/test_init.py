"""``rlcore init [DIR]`` (issue 38): a working project outside this repository, whose dvc.yaml is the same
generator's output as this repository's. That ``dvc repro`` runs such a project and ``dvc status`` then finds it up to
date is tests/test_own_env.py's DVC test (the same new project, with the user's own env)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import yaml
from cli_support import run_in_process
from conftest import PROJECT, tool_env

from rlcore.params import load_params
from rlcore.project.pipeline_file import pipeline_yaml

DVC = str(Path(sys.executable).parent / "dvc")


def run(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(list(args), cwd=cwd, capture_output=True, text=True, timeout=600, env=tool_env())
    assert result.returncode == 0, f"{' '.join(args)}: {result.stdout}\n{result.stderr}"
    return result


def init(folder: Path, *args: str) -> None:
    outcome = run_in_process(["init", str(folder), *args], folder.parent, limit=120)
    assert outcome.returncode == 0, outcome.stderr


def test_init_writes_a_project_in_an_empty_folder(tmp_path: Path) -> None:
    folder = tmp_path / "reach"
    init(folder)
    for name in ("params.yaml", "params.schema.json", "dvc.yaml", ".gitignore", ".dvcignore", "README.md"):
        assert (folder / name).is_file(), name
    assert (folder / ".git").is_dir() and (folder / ".dvc").is_dir()
    params_text = (folder / "params.yaml").read_text()
    assert params_text.splitlines()[0] == "# yaml-language-server: $schema=params.schema.json"
    # The default run of this repository, with its comments.
    assert params_text.splitlines()[1:] == (PROJECT / "params.yaml").read_text().splitlines()[1:]
    assert (folder / "params.schema.json").read_text() == (PROJECT / "docs" / "params.schema.json").read_text()
    assert load_params(folder / "params.yaml").name == "ppo-cartpole"
    assert (folder / "dvc.yaml").read_text() == pipeline_yaml(folder)
    assert "offline" not in (folder / "dvc.yaml").read_text()  # no offline.yaml: the run's four stages
    assert len((folder / "README.md").read_text().splitlines()) == 3
    assert "analytics = false" in (folder / ".dvc" / "config").read_text()
    assert "Data and pipelines are up to date" not in run(DVC, "status", cwd=folder).stderr


def test_init_in_an_existing_git_repository_keeps_its_gitignore_and_history(tmp_path: Path) -> None:
    run("git", "init", "-q", cwd=tmp_path)
    (tmp_path / ".gitignore").write_text("/secrets/\n")
    run("git", "add", "-A", cwd=tmp_path)
    run("git", "commit", "-q", "-m", "mine", cwd=tmp_path)
    init(tmp_path)
    assert (tmp_path / ".gitignore").read_text() == "/secrets/\n"
    assert run("git", "log", "--oneline", cwd=tmp_path).stdout.count("\n") == 1
    assert (tmp_path / ".dvc").is_dir()


def test_the_dvc_yaml_of_a_stage_depends_on_the_project_s_files_and_params_only(tmp_path: Path) -> None:
    init(tmp_path)
    stages = yaml.safe_load((tmp_path / "dvc.yaml").read_text())["stages"]
    assert list(stages) == ["train", "evaluate", "select", "export"]
    deps = [dep for stage in stages.values() for dep in stage.get("deps", [])]
    assert all(re.fullmatch(r"(runs|reports|models)/\$\{name\}.*", dep) for dep in deps), deps
