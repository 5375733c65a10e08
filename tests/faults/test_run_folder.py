"""Faults of the run folder ``runs/<name>/`` (issue 12), with the real ``rlcore`` command and real signals:

- two trainers on one folder: the second is refused in one line naming the first's PID; the first finishes;
- a SIGKILLed trainer's lock does not block the next run;
- a corrupt latest checkpoint (truncated, or bytes garbled in its middle): the re-run says so, naming the file,
  keeps it as ``*.corrupt`` and resumes from the previous checkpoint; garbled bytes are caught by the content hash;
- a 0-byte ``dvclive/metrics.json`` (what a kill mid-write leaves): the re-run resumes and rewrites it;
- a finished run replaced by a run killed before its first checkpoint: the old run waits in ``.previous/`` and the
  next ``rlcore train`` start puts it back; it goes only once the new run has a checkpoint;
- ``--resume-from models/best/policy.pt`` (a selected model) is refused in one line; the run folder is untouched;
- the offline branch under ``dvc repro`` with a re-collected dataset is retrained, and its model card names the
  dataset MD5 that ``dvc.lock`` records.
"""

from __future__ import annotations

import os
import shutil
import signal
import struct
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
import torch
import yaml
from conftest import PROJECT, QUICK, one_line_error, rlcore, sets

from rlcore.checkpoints import load_checkpoint, save_checkpoint
from rlcore.errors import CheckpointError

from .run_support import (
    DVC,
    checkpoint_name,
    checkpoint_steps,
    curves,
    env,
    kill,
    make_dvc_repo,
    read_json,
    run,
    snapshot,
    start_rlcore,
    wait_until,
    write_params,
)

# Each test starts two or three real `rlcore` processes (~10 s): outside the fast subset.
pytestmark = pytest.mark.slow

RUN = [*QUICK, "train.progress_bar=off", "eval.test_episodes=10"]
STEPS = [1024, 2048, 3072, 4096]


def train(project: Path, *extra: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return rlcore("train", *sets(RUN), *extra, cwd=project, check=check)


def start_train(project: Path, log: Path, *extra: str) -> subprocess.Popen[bytes]:
    return start_rlcore("train", *sets(RUN), *extra, cwd=project, log=log)


def run_dir(project: Path) -> Path:
    return project / "runs" / "quick"


def killed_after(project: Path, log: Path, step: int) -> list[int]:
    """Start a run, SIGKILL it right after its checkpoint of ``step`` appears; the checkpoints left."""
    proc = start_train(project, log)
    assert wait_until((run_dir(project) / "checkpoints" / checkpoint_name(step)).exists, proc), log.read_text()
    assert kill(proc), "the run ended before the kill"
    return checkpoint_steps(run_dir(project) / "checkpoints")


def assert_finished(project: Path) -> None:
    """A complete run: a summary, every checkpoint loads, curves with one row per step."""
    folder = run_dir(project)
    summary = read_json(folder / "train_summary.json")
    assert summary["env_steps"] == STEPS[-1]
    assert checkpoint_steps(folder / "checkpoints") == STEPS
    for step in STEPS:
        load_checkpoint(folder / "checkpoints" / checkpoint_name(step))
    for tsv, rows in curves(folder / "dvclive").items():
        steps = [step for step, _ in rows]
        assert steps == sorted(set(steps)), f"{tsv}: {steps}"
        if tsv.startswith("eval/"):
            assert steps == STEPS, f"{tsv}: {steps}"
    assert read_json(folder / "dvclive" / "metrics.json")["step"] == STEPS[-1]
    assert not [p for p in folder.rglob("*") if p.name.endswith(".tmp") or p.name.startswith(".previous")]


def test_a_second_trainer_on_the_same_folder_is_refused_naming_the_first_ones_pid(
    project: Path, tmp_path: Path
) -> None:
    first = start_train(project, tmp_path / "first.log")
    lock = run_dir(project) / ".lock"
    assert wait_until(lambda: lock.is_file() and lock.read_text() == f"{first.pid}\n", first)
    os.kill(first.pid, signal.SIGSTOP)  # holds the lock for as long as the second one needs
    try:
        second = train(project, check=False)
    finally:
        os.kill(first.pid, signal.SIGCONT)
    one_line_error(second, f"PID {first.pid}", "runs/quick")
    assert first.wait(timeout=300) == 0, (tmp_path / "first.log").read_text()
    assert_finished(project)


def test_a_sigkilled_trainers_lock_does_not_block_the_next_run(project: Path, tmp_path: Path) -> None:
    proc = start_train(project, tmp_path / "killed.log")
    lock = run_dir(project) / ".lock"
    assert wait_until(lambda: lock.is_file() and lock.read_text() == f"{proc.pid}\n", proc)
    assert wait_until((run_dir(project) / "checkpoints" / checkpoint_name(1024)).exists, proc)
    assert kill(proc)
    assert lock.read_text() == f"{proc.pid}\n"  # the dead process's PID is still written there
    result = train(project)
    assert "another rlcore process" not in result.stderr
    assert "resuming" in result.stderr
    assert_finished(project)


def tensor_record(path: Path) -> tuple[int, int]:
    """``(offset, size)`` in the file of the largest tensor storage of a ``torch.save`` zip archive."""
    with zipfile.ZipFile(path) as archive:
        info = max((i for i in archive.infolist() if "/data/" in i.filename), key=lambda i: i.file_size)
    with open(path, "rb") as handle:
        handle.seek(info.header_offset)
        header = handle.read(30)
    name_length, extra_length = struct.unpack("<HH", header[26:30])
    return info.header_offset + 30 + name_length + extra_length, info.file_size


def garble_middle(path: Path, count: int = 32) -> None:
    """Invert ``count`` bytes in the middle of the largest tensor's storage: the archive stays readable."""
    offset, size = tensor_record(path)
    data = bytearray(path.read_bytes())
    middle = offset + size // 2
    data[middle : middle + count] = bytes(b ^ 0xFF for b in data[middle : middle + count])
    path.write_bytes(bytes(data))


def truncate(path: Path) -> None:
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


@pytest.mark.parametrize("corrupt", [truncate, garble_middle], ids=["truncated", "garbled"])
def test_a_corrupt_latest_checkpoint_is_kept_aside_and_the_run_resumes_from_the_previous_one(
    project: Path, tmp_path: Path, corrupt
) -> None:
    steps = killed_after(project, tmp_path / "killed.log", 2048)
    latest, previous = steps[-1], steps[-2]
    path = run_dir(project) / "checkpoints" / checkpoint_name(latest)
    corrupt(path)
    corrupted = path.read_bytes()
    result = train(project)
    warning = next(line for line in result.stderr.splitlines() if "earlier checkpoint" in line)
    assert checkpoint_name(latest) in warning and f"kept as {checkpoint_name(latest)}.corrupt" in warning
    assert f"from {checkpoint_name(previous)} at env step {previous}" in result.stderr
    assert (path.parent / f"{path.name}.corrupt").read_bytes() == corrupted  # kept, byte for byte
    assert_finished(project)  # the step was trained again: a new, loadable checkpoint in its place


def test_a_checkpoint_with_garbled_middle_bytes_is_refused_at_load_by_its_content_hash(tmp_path: Path) -> None:
    path = tmp_path / checkpoint_name(1024)
    tensors = {"policy": {"weight": torch.randn(128, 128), "bias": torch.zeros(128)}, "rng": {"torch": torch.ones(8)}}
    save_checkpoint(path, "ppo", 1024, "env_steps", {"env_steps": 1024}, tensors)
    assert load_checkpoint(path).step == 1024
    garble_middle(path)
    # torch reads the garbled file without complaint: only the stored hash tells.
    garbled = torch.load(path, weights_only=True)
    assert not torch.equal(garbled["policy"]["weight"], tensors["policy"]["weight"])
    with pytest.raises(CheckpointError, match="content does not match the hash") as refused:
        load_checkpoint(path)
    assert str(path) in str(refused.value) and "\n" not in str(refused.value)
    truncate(path)
    with pytest.raises(CheckpointError, match="not a readable checkpoint"):
        load_checkpoint(path)


def test_a_zero_byte_dvclive_metrics_json_is_rewritten_when_the_run_resumes(project: Path, tmp_path: Path) -> None:
    steps = killed_after(project, tmp_path / "killed.log", 2048)
    metrics = run_dir(project) / "dvclive" / "metrics.json"
    metrics.write_bytes(b"")  # what a kill in the middle of dvclive's write leaves
    result = train(project)
    assert f"from {checkpoint_name(steps[-1])}" in result.stderr
    assert_finished(project)  # metrics.json valid JSON, at the last step


def test_temporary_files_a_kill_leaves_mid_write_are_removed_by_the_next_run(project: Path, tmp_path: Path) -> None:
    """Every output goes through ``.<name>.<pid>.tmp`` beside it (rlcore.io): a kill in the middle of a write leaves
    that file. The next run removes them all: checkpoints, replay, the summary, and the curves it rewrites."""
    killed_after(project, tmp_path / "killed.log", 2048)
    folder = run_dir(project)
    left = [
        folder / "checkpoints" / ".step_0000003072.pt.4242.tmp",
        folder / ".train_summary.json.4242.tmp",
        folder / "dvclive" / ".metrics.json.4242.tmp",
        folder / "dvclive" / "plots" / "metrics" / "eval" / ".mean_return.tsv.4242.tmp",
    ]
    for path in left:
        path.write_bytes(b"half of a file")
    train(project)
    assert [path for path in left if path.exists()] == []
    assert_finished(project)


@pytest.fixture(scope="module")
def selected(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A project with a finished run and its selected model (models/best/policy.pt), to copy."""
    root = tmp_path_factory.mktemp("selected")
    for name in ("params.yaml", "dvc.yaml", ".dvcignore", "prefect.toml"):
        shutil.copy(PROJECT / name, root / name)
    for stage in ("train", "evaluate", "select"):
        rlcore(stage, *sets(RUN), cwd=root)
    assert (root / "models" / "best" / "policy.pt").is_file()
    return root


def copy_of(template: Path, tmp_path: Path) -> Path:
    project = tmp_path / "project"
    shutil.copytree(template, project)
    (run_dir(project) / ".lock").unlink(missing_ok=True)
    return project


def test_resume_from_a_selected_model_is_refused_and_the_run_folder_is_untouched(
    selected: Path, tmp_path: Path
) -> None:
    project = copy_of(selected, tmp_path)
    before, model = snapshot(run_dir(project)), snapshot(project / "models")
    result = train(project, "--resume-from", "models/best/policy.pt", check=False)
    one_line_error(result, "models/best/policy.pt", "selected model")
    assert snapshot(run_dir(project)) == before  # the lock file aside (it records the PID of the last trainer)
    assert snapshot(project / "models") == model


def test_a_finished_run_replaced_by_a_run_killed_before_its_first_checkpoint_comes_back(
    selected: Path, tmp_path: Path
) -> None:
    project = copy_of(selected, tmp_path)
    folder = run_dir(project)
    old = snapshot(folder)
    assert "train_summary.json" in old and any(name.startswith("checkpoints/") for name in old)
    moved = folder / ".previous" / "train_summary.json"  # the last of the old run's files to be moved aside

    # A new run (another seed) replaces the finished one; it is killed before its first checkpoint.
    new_run = start_train(project, tmp_path / "killed.log", "--set", "seed=1")
    assert wait_until(moved.exists, new_run), (tmp_path / "killed.log").read_text()
    assert kill(new_run)
    assert checkpoint_steps(folder / "checkpoints") == []
    assert snapshot(folder / ".previous") == old  # nothing of the old run was deleted

    # The next start puts it back, whatever it does next (here: refused, so the folder is left as restored).
    result = train(project, "--set", "seed=1", "--resume-from", "models/best/policy.pt", check=False)
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr
    assert "restored the previous run" in result.stderr
    assert result.stderr.strip().splitlines()[-1].startswith("error: ")
    assert snapshot(folder) == old
    assert not (folder / ".previous").exists()

    # A new run that gets to its first checkpoint replaces it for good; until then the old run is kept aside.
    new_run = start_train(project, tmp_path / "new.log", "--set", "seed=1")
    assert wait_until(moved.exists, new_run), (tmp_path / "new.log").read_text()
    os.kill(new_run.pid, signal.SIGSTOP)
    try:
        assert checkpoint_steps(folder / "checkpoints") == []
        assert snapshot(folder / ".previous") == old
    finally:
        os.kill(new_run.pid, signal.SIGCONT)
    assert new_run.wait(timeout=300) == 0, (tmp_path / "new.log").read_text()
    assert_finished(project)
    first = load_checkpoint(folder / "checkpoints" / checkpoint_name(1024))
    assert first.meta["params"]["seed"] == 1


@pytest.mark.slow
def test_the_offline_branch_under_dvc_repro_retrains_on_a_recollected_dataset(tmp_path: Path) -> None:
    """After ``collect`` writes a new dataset, ``train_offline`` starts a fresh run on it (DVC deleted the summary,
    but the run's fingerprint holds the dataset's hash), and the offline model card names the MD5 of dvc.lock."""
    sources = tmp_path / "sources"
    sources.mkdir()
    small = {"target_return": None, "progress_bar": "off", "eval_episodes": 3}
    evaluation = {"eval": {"episodes": 3, "test_episodes": 10}, "export": {"parity_observations": 200}}
    write_params(
        PROJECT / "params.yaml",
        sources / "params.yaml",
        {"name": "quick", "train": {**small, "max_steps": 4096, "eval_every": 1024}, **evaluation},
    )
    write_params(
        PROJECT / "offline.yaml",
        sources / "offline.yaml",
        {
            "collect": {"steps": 2000},
            "train": {**small, "max_steps": 400, "eval_every": 200, "log_every": 200},
            **evaluation,
        },
    )
    files = {"params.yaml": sources / "params.yaml", "offline.yaml": sources / "offline.yaml"}
    root = make_dvc_repo(tmp_path / "project", files)
    offline_run = root / "runs" / "bc-cartpole"

    first = run(DVC, "repro", cwd=root)
    assert "Running stage 'train_offline'" in first.stdout
    md5_before = dataset_md5(root)
    assert card_dataset(root)["md5"] == md5_before
    old_checkpoints = snapshot(offline_run / "checkpoints")

    # A new dataset: the same policy, collected from other seeds.
    write_params(root / "offline.yaml", root / "offline.yaml", {"collect": {"seed": 3000000}})
    second = run(DVC, "repro", cwd=root)
    output = second.stdout + second.stderr
    for stage in ("collect", "train_offline", "evaluate_offline", "select_offline", "export_offline"):
        assert f"Running stage '{stage}'" in output, output
    md5_after = dataset_md5(root)
    assert md5_after != md5_before
    assert card_dataset(root)["md5"] == md5_after
    # Retrained on the new data from scratch, not resumed from the run trained on the old data.
    assert "starting fresh" in output and "resuming" not in output, output
    assert snapshot(offline_run / "checkpoints").keys() == old_checkpoints.keys()
    for step in checkpoint_steps(offline_run / "checkpoints"):
        checkpoint = load_checkpoint(offline_run / "checkpoints" / checkpoint_name(step))
        assert checkpoint.meta["dataset"]["md5"] == md5_after
    assert "changed" not in run(DVC, "status", cwd=root).stdout


def dataset_md5(root: Path) -> str:
    lock = yaml.safe_load((root / "dvc.lock").read_text())
    outs = lock["stages"]["collect"]["outs"]
    return next(out["md5"] for out in outs if out["path"] == "data/dataset.parquet")


def card_dataset(root: Path) -> dict:
    return read_json(root / "export" / "offline" / "model_card.json")["training"]["dataset"]


KILLED_AT = Path(__file__).with_name("rlcore_killed_at.py")


def killed_at_change(project: Path, number: int, *args: str) -> subprocess.CompletedProcess[str]:
    """``rlcore train *args``, SIGKILLed right after its ``number``-th change in the run folder."""
    environment = {"KILL_IN": str(run_dir(project)), "KILL_AT": str(number)}
    command = [sys.executable, str(KILLED_AT), "train", *sets(RUN), *args]
    return subprocess.run(
        command, cwd=project, capture_output=True, text=True, timeout=300, env={**env(), **environment}
    )


@pytest.mark.slow
@pytest.mark.parametrize("state", ["finished", "replacement-killed"])
def test_a_replacement_killed_at_any_change_before_its_first_checkpoint_loses_nothing(
    selected: Path, tmp_path: Path, state: str
) -> None:
    """Crash points, not moments: a new run replacing a finished one (``finished``), or the next start after such a
    replacement died (``replacement-killed``: it first puts the old run back), is SIGKILLed right after each of its
    renames and deletions in the run folder, one per try, until its first checkpoint exists. After every one of
    them the next start restores the finished run exactly."""
    template = copy_of(selected, tmp_path / "template")
    old = snapshot(run_dir(template))
    if state == "replacement-killed":
        proc = start_train(template, tmp_path / "killed.log", "--set", "seed=1")
        assert wait_until((run_dir(template) / ".previous" / "train_summary.json").exists, proc)
        assert kill(proc)
    number = 0
    while True:
        number += 1
        project = tmp_path / f"try-{number}"
        shutil.copytree(template, project)
        result = killed_at_change(project, number, "--set", "seed=1")
        assert result.returncode == -signal.SIGKILL, f"change {number}: exit {result.returncode}\n{result.stderr}"
        if new_checkpoints(run_dir(project)):
            break  # the new run has its first checkpoint: the old one may go now
        refused = train(project, "--set", "seed=1", "--resume-from", "models/best/policy.pt", check=False)
        assert refused.returncode == 2, refused.stderr
        assert snapshot(run_dir(project)) == old, f"killed after change {number}:\n{result.stderr}\n{refused.stderr}"
        shutil.rmtree(project)
    assert number > 3  # at least the moves of checkpoints/, dvclive/ and the summary were tried


def new_checkpoints(folder: Path) -> list[int]:
    """Checkpoints of the replacing run (seed 1), not of the finished one (seed 0)."""
    return [
        step
        for step in checkpoint_steps(folder / "checkpoints")
        if load_checkpoint(folder / "checkpoints" / checkpoint_name(step)).meta["params"]["seed"] == 1
    ]
