"""Files that are not what they seem (issue 37): every path rlcore writes is refused in one line unless it is absent or
a regular file, before any work, and the pipe or folder in the way is left exactly as it was; a command never replaces
an input it reads.

Each writer is run in this process through the ``rlcore`` entry point (``cli_support.run_in_process``) with a named
pipe (``os.mkfifo``) and a folder as its target; every refusal comes before training, rolling out or exporting, so no
case needs a trained run. No test touches ``/dev``.
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import socket
import stat
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from cli_support import assert_refused, run_in_process
from conftest import PROJECT, sets
from gymnasium import spaces

from rlcore.cli import write_error_log
from rlcore.common.errors import RLCoreError
from rlcore.common.files import AtomicTarget, check_target, write_text
from rlcore.data.writer import DatasetWriter, merge_datasets

KINDS = {"fifo": "is a named pipe (FIFO)", "directory": "is a directory"}
EXPECTED = "expected a file path (absent or a regular file)"


class InTheWay:
    """A named pipe or a folder (holding one file) at ``path``, and the check that it is still there, unchanged."""

    def __init__(self, path: Path, kind: str) -> None:
        self.path, self.kind = path, kind
        path.parent.mkdir(parents=True, exist_ok=True)
        if kind == "fifo":
            os.mkfifo(path)
        else:
            path.mkdir()
            (path / "kept.txt").write_text("kept")
        self.inode = os.lstat(path).st_ino

    @property
    def said(self) -> str:
        return KINDS[self.kind]

    def assert_unchanged(self) -> None:
        mode = os.lstat(self.path).st_mode
        assert os.lstat(self.path).st_ino == self.inode
        if self.kind == "fifo":
            assert stat.S_ISFIFO(mode)
        else:
            assert stat.S_ISDIR(mode)
            assert [p.name for p in self.path.iterdir()] == ["kept.txt"]
            assert (self.path / "kept.txt").read_text() == "kept"


@pytest.fixture(params=list(KINDS))
def kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


RUN = "ppo-cartpole"
"""The name of the run of the project's params.yaml: its reports, model and export are in folders of that name."""


def refused(project: Path, target: InTheWay, args: list[str], *fragments: str) -> None:
    outcome = run_in_process(args, project)
    assert_refused(outcome, *fragments, target.said, EXPECTED)
    target.assert_unchanged()


# --- the helper itself ------------------------------------------------------------------------------------------


def test_a_target_that_is_not_a_regular_file_is_refused_naming_the_key(tmp_path: Path, kind: str) -> None:
    target = InTheWay(tmp_path / "out.json", kind)
    with pytest.raises(RLCoreError, match=rf"^some\.key: .*out\.json {re.escape(target.said)}; {re.escape(EXPECTED)}$"):
        write_text(target.path, "{}", "some.key")
    target.assert_unchanged()
    assert list(tmp_path.iterdir()) == [target.path]  # no temporary file left


@pytest.mark.parametrize("kind", list(KINDS))
def test_a_symbolic_link_to_a_pipe_or_folder_is_refused_and_both_stay(tmp_path: Path, kind: str) -> None:
    target = InTheWay(tmp_path / "real", kind)
    link = tmp_path / "out.json"
    link.symlink_to(target.path)
    with pytest.raises(RLCoreError, match=re.escape(f"is a symbolic link to {target.said[3:]}")):
        write_text(link, "{}")
    assert link.is_symlink()
    target.assert_unchanged()


def test_a_socket_or_a_device_node_is_refused_and_stays(tmp_path: Path) -> None:
    """The issue's ``--output /dev/full`` (as root it replaced the device node with a file), without touching /dev: a
    node of the null device made in a temporary folder (where mknod is allowed), and a socket."""
    with socket.socket(socket.AF_UNIX) as server:
        server.bind(str(tmp_path / "sock"))
        with pytest.raises(RLCoreError, match=r"sock is a socket; "):
            write_text(tmp_path / "sock", "{}")
        assert stat.S_ISSOCK(os.lstat(tmp_path / "sock").st_mode)
    try:
        os.mknod(tmp_path / "null", stat.S_IFCHR | 0o600, os.makedev(1, 3))
    except PermissionError:
        pytest.skip("mknod is not allowed here")
    outcome = run_in_process(["params-schema", "--output", "null"], tmp_path)
    assert_refused(outcome, "error: --output: null is a character device; " + EXPECTED)
    assert stat.S_ISCHR(os.lstat(tmp_path / "null").st_mode)


def test_a_symbolic_link_to_a_regular_file_is_replaced_and_what_it_points_to_is_not(tmp_path: Path) -> None:
    original = tmp_path / "original.json"
    original.write_text("old")
    link = tmp_path / "out.json"
    link.symlink_to(original)
    write_text(link, "new")
    assert not link.is_symlink() and link.read_text() == "new"
    assert original.read_text() == "old"


def test_a_pipe_that_appears_while_the_file_is_written_is_not_replaced(tmp_path: Path) -> None:
    path = tmp_path / "out.json"
    atomic = AtomicTarget(path, "k")
    atomic.tmp.write_text("{}")
    os.mkfifo(path)
    try:
        with pytest.raises(RLCoreError, match=r"k: .*out.json is a named pipe \(FIFO\)"):
            atomic.commit()
    finally:
        atomic.discard()
    assert stat.S_ISFIFO(os.lstat(path).st_mode)


def test_an_empty_path_is_refused_in_one_line(tmp_path: Path) -> None:
    with pytest.raises(RLCoreError, match=re.escape(f"k: an empty path; {EXPECTED}")):
        check_target("", "k")


def test_a_folder_that_cannot_be_created_is_one_line_naming_the_file_in_the_way(tmp_path: Path) -> None:
    (tmp_path / "data").write_text("a file, not a folder")
    with pytest.raises(RLCoreError, match=r"^k: .*data/sub/out.json cannot be created: .*data is a file, not a folder"):
        write_text(tmp_path / "data" / "sub" / "out.json", "{}", "k")
    assert (tmp_path / "data").read_text() == "a file, not a folder"


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into a read-only folder")
def test_a_read_only_folder_is_one_line_and_leaves_the_file_there(tmp_path: Path) -> None:
    folder = tmp_path / "ro"
    folder.mkdir()
    (folder / "out.json").write_text("old")
    folder.chmod(0o555)
    try:
        with pytest.raises(RLCoreError, match=r"^k: .*ro/out.json: cannot write in .*ro \(Permission denied\)$"):
            write_text(folder / "out.json", "{}", "k")
    finally:
        folder.chmod(0o755)
    assert (folder / "out.json").read_text() == "old"


# --- params-schema ----------------------------------------------------------------------------------------------


def test_params_schema_output_not_a_regular_file_is_refused(project: Path, kind: str) -> None:
    target = InTheWay(project / "schema.json", kind)
    refused(project, target, ["params-schema", "--output", "schema.json"], "error: --output: schema.json ")


def test_params_schema_never_overwrites_the_params_file(project: Path) -> None:
    before = (project / "params.yaml").read_bytes()
    outcome = run_in_process(["params-schema", "--output", "params.yaml"], project)
    assert_refused(outcome, "--output: params.yaml holds something other than a JSON Schema", "delete the file first")
    assert (project / "params.yaml").read_bytes() == before


def test_params_schema_replaces_an_earlier_schema_or_an_empty_file(project: Path) -> None:
    (project / "empty.json").touch()
    (project / "schema.json").write_text('{"$schema": "an older one"}')
    for name in ("empty.json", "schema.json"):
        outcome = run_in_process(["params-schema", "--output", name], project)
        assert outcome.returncode == 0, outcome
        assert (project / name).read_text() == (PROJECT / "docs" / "params.schema.json").read_text()


def test_params_schema_empty_output_and_impossible_folder_are_one_line(project: Path) -> None:
    assert_refused(run_in_process(["params-schema", "--output", ""], project), "--output: . is a directory", EXPECTED)
    (project / "docs").write_text("a file")
    outcome = run_in_process(["params-schema", "--output", "docs/schema.json"], project)
    assert_refused(outcome, "--output: docs/schema.json cannot be created: docs is a file, not a folder")


# --- compare ----------------------------------------------------------------------------------------------------


def test_compare_output_not_a_regular_file_is_refused_before_dvc_runs(project: Path, kind: str) -> None:
    target = InTheWay(project / "reports" / "compare.png", kind)
    refused(project, target, ["compare", "--output", "reports/compare.png"], "error: --output: reports/compare.png ")


# --- collect, import-minari and the dataset writer --------------------------------------------------------------

COLLECT = ["collect", *sets(["collect.policy=random", "collect.steps=64", "collect.num_envs=2"])]


@pytest.mark.parametrize("shards", [1, 2])
def test_collect_output_not_a_regular_file_is_refused_before_rolling_out(project: Path, kind: str, shards: int) -> None:
    target = InTheWay(project / "data" / "x", kind)
    args = [*COLLECT, *sets(["collect.output=data/x", f"collect.shards={shards}"])]
    refused(project, target, args, "error: collect.output: data/x ")
    assert not (project / "data" / "x.shards").exists()


def test_collect_output_never_replaces_the_policy_it_rolls_out(project: Path) -> None:
    (project / "models").mkdir()
    (project / "models" / "policy.pt").write_bytes(b"PK\x03\x04 a checkpoint")
    args = ["collect", *sets(["collect.policy=models/policy.pt", "collect.output=models/policy.pt"])]
    assert_refused(run_in_process(args, project), "collect.output: models/policy.pt is collect.policy")
    assert (project / "models" / "policy.pt").read_bytes() == b"PK\x03\x04 a checkpoint"


def test_collect_output_never_replaces_a_file_that_is_not_a_dataset(project: Path) -> None:
    before = (project / "params.yaml").read_bytes()
    outcome = run_in_process([*COLLECT, "--set", "collect.output=params.yaml"], project)
    assert_refused(outcome, "collect.output: params.yaml is not a Parquet file", "delete the file first")
    assert (project / "params.yaml").read_bytes() == before


def test_collect_output_empty_is_one_line(project: Path) -> None:
    outcome = run_in_process([*COLLECT, "--set", "collect.output=''"], project)
    assert_refused(outcome, f"collect.output: an empty path; {EXPECTED}")
    assert sorted(p.name for p in project.iterdir()) == [".dvcignore", "dvc.yaml", "params.yaml", "prefect.toml"]


def test_import_minari_output_not_a_regular_file_is_refused_before_reading(project: Path, kind: str) -> None:
    target = InTheWay(project / "data.parquet", kind)
    args = ["import-minari", "no/such-dataset-v0", "--output", "data.parquet"]
    refused(project, target, args, "error: --output: data.parquet ")


def small_dataset(path: Path) -> DatasetWriter:
    """A writer of a CartPole-shaped dataset with one 3-step episode added."""
    observation, action = spaces.Box(-1.0, 1.0, (4,), np.float32), spaces.Discrete(2)
    writer = DatasetWriter(path, observation, action, {"policy": {"kind": "random"}})
    zeros = np.zeros((3, 4), np.float32)
    writer.add_episode(zeros, np.zeros(3), np.ones(3), zeros, np.r_[False, False, True], np.zeros(3, bool), None)
    return writer


def test_a_dataset_writer_never_opens_a_pipe_or_folder(tmp_path: Path, kind: str) -> None:
    target = InTheWay(tmp_path / "data.parquet", kind)
    with pytest.raises(RLCoreError, match=re.escape(target.said)):
        small_dataset(target.path)
    target.assert_unchanged()
    assert list(tmp_path.iterdir()) == [target.path]


def test_merging_datasets_into_a_pipe_or_folder_is_refused(tmp_path: Path, kind: str) -> None:
    shard = tmp_path / "shard.parquet"
    small_dataset(shard).close()
    target = InTheWay(tmp_path / "merged.parquet", kind)
    with pytest.raises(RLCoreError, match=re.escape(target.said)):
        merge_datasets([shard], target.path, {})
    target.assert_unchanged()
    assert sorted(tmp_path.iterdir()) == sorted([shard, target.path])


# --- evaluate, select (reports), export -------------------------------------------------------------------------


def test_evaluations_json_not_a_regular_file_is_refused_before_any_episode(project: Path, kind: str) -> None:
    target = InTheWay(project / "reports" / RUN / "evaluations.json", kind)
    refused(project, target, ["evaluate"], f"error: reports/{RUN}/evaluations.json ")


@pytest.mark.parametrize(
    "name",
    [
        f"reports/{RUN}/report.md",
        f"reports/{RUN}/metrics.json",
        f"reports/{RUN}/scores.json",
        f"reports/{RUN}/learning_curve.png",
        f"models/{RUN}/policy.pt",
    ],
)
def test_select_outputs_not_regular_files_are_refused_before_any_test_episode(
    project: Path, kind: str, name: str
) -> None:
    target = InTheWay(project / name, kind)
    refused(project, target, ["select"], f"error: {name} ")


def test_a_stale_chart_that_is_a_pipe_is_not_deleted(project: Path) -> None:
    target = InTheWay(project / "reports" / RUN / "settings.png", "fifo")
    refused(project, target, ["select"], f"error: reports/{RUN}/settings.png ")


@pytest.mark.parametrize("name", ["policy.onnx", "policy.pt2", "model_card.json"])
def test_export_targets_not_regular_files_are_refused_before_the_model_is_read(
    project: Path, kind: str, name: str
) -> None:
    target = InTheWay(project / "export" / RUN / name, kind)
    refused(project, target, ["export"], f"error: export/{RUN}/{name} ")


def test_a_stale_export_that_is_a_pipe_is_neither_deleted_nor_replaced(project: Path) -> None:
    """export.onnx false: policy.onnx is a stale file the stage would delete; a pipe there is not ours."""
    target = InTheWay(project / "export" / RUN / "policy.onnx", "fifo")
    refused(project, target, ["export", "--set", "export.onnx=false"], f"error: export/{RUN}/policy.onnx ")


# --- sweep, train, error.log ------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["summary.md", "trials.parquet", "history.png"])
def test_sweep_reports_not_regular_files_are_refused_before_any_trial(project: Path, kind: str, name: str) -> None:
    target = InTheWay(project / "reports" / "sweep" / name, kind)
    refused(project, target, ["sweep", "--no-flow"], f"error: reports/sweep/{name} ")
    assert not (project / ".optuna").exists() and not (project / "runs").exists()


def test_sweep_journal_not_a_regular_file_is_refused_naming_sweep_storage(project: Path, kind: str) -> None:
    target = InTheWay(project / "study.log", kind)
    refused(project, target, ["sweep", "--no-flow", "--set", "sweep.storage=study.log"], "error: sweep.storage: ")


def test_a_run_lock_that_is_a_folder_is_one_line(project: Path) -> None:
    target = InTheWay(project / "runs" / "quick" / ".lock", "directory")
    refused(project, target, ["train", "--set", "name=quick"], "error: runs/quick/.lock ")


def test_a_train_summary_that_is_not_a_regular_file_is_refused_before_training(project: Path, kind: str) -> None:
    target = InTheWay(project / "runs" / "quick" / "train_summary.json", kind)
    refused(project, target, ["train", "--set", "name=quick"], "error: runs/quick/train_summary.json ")
    assert sorted(p.name for p in (project / "runs" / "quick").iterdir()) == [".lock", "train_summary.json"]


@pytest.fixture
def alarm() -> Iterator[None]:
    """Fail instead of hanging (opening a pipe to write blocks until a reader comes)."""

    def hang(signum: int, frame: object) -> None:
        raise TimeoutError("blocked on the pipe")

    previous = signal.signal(signal.SIGALRM, hang)
    signal.alarm(10)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def test_an_error_log_that_is_a_pipe_is_named_not_written_and_not_blocked_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, alarm: None
) -> None:
    monkeypatch.chdir(tmp_path)
    target = InTheWay(tmp_path / "runs" / "error.log", "fifo")
    shown = write_error_log(argparse.Namespace(), "Traceback ...")
    assert str(shown).startswith("<not written: runs/error.log is a named pipe (FIFO)")
    target.assert_unchanged()
