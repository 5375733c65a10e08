"""Faults of the run folder ``runs/<name>/`` (issue 12), with the real ``rlcore`` command and real signals:

- two trainers on one folder: the second is refused in one line naming the first's PID; the first finishes;
- a SIGKILLed trainer's lock does not block the next run;
- a corrupt latest checkpoint (truncated, or bytes garbled in its middle): the re-run says so, naming the file,
  keeps it as ``*.corrupt`` and resumes from the previous checkpoint; garbled bytes are caught by the content hash;
- a 0-byte ``dvclive/metrics.json`` (what a kill mid-write leaves): the re-run resumes and rewrites it;
- a finished run is replaced only by a run that finished: a replacement trains in ``.next/``; one that fails after
  its checkpoints, or is killed (at any of its renames, moving into place included), leaves the finished run in
  place for evaluate; the same params resume the replacement, other params discard it;
- ``--resume-from models/best/policy.pt`` (a selected model) is refused in one line; the run folder is untouched;
- the offline branch under ``dvc repro`` with a re-collected dataset is retrained, and its model card names the
  dataset MD5 that ``dvc.lock`` records.
"""

from __future__ import annotations

import hashlib
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
from conftest import PROJECT, QUICK, one_line_error, outputs, rlcore, sets

from rlcore.common.checkpoints import load_checkpoint, save_checkpoint
from rlcore.common.errors import CheckpointError

from .run_support import (
    DVC,
    checkpoint_name,
    checkpoint_steps,
    curves,
    env,
    kill,
    make_dvc_repo,
    read_json,
    rlcore_here,
    run,
    snapshot,
    start_rlcore,
    wait_until,
    write_params,
)

# Each test trains two or three small runs (seconds each; the kills are real `rlcore` processes, the runs around them
# run in the test process): outside the fast subset.
pytestmark = pytest.mark.slow

RUN = [*QUICK, "train.progress_bar=off", "eval.test_episodes=10"]
STEPS = [1024, 2048, 3072, 4096]


def train(project: Path, *extra: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    """``rlcore train`` on the small budget, in the test process (a run nothing kills: no process start to pay)."""
    return rlcore_here("train", *sets(RUN), *extra, cwd=project, check=check)


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
    """Every output goes through ``.<name>.<pid>.tmp`` beside it (rlcore.common.files): a kill in the middle of a
    write leaves
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
        rlcore_here(stage, *sets(RUN), cwd=root)
    assert (outputs(root).best_policy).is_file()
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
    result = train(project, "--resume-from", "models/quick/policy.pt", check=False)
    one_line_error(result, "models/quick/policy.pt", "selected model")
    assert snapshot(run_dir(project)) == before  # the lock file aside (it records the PID of the last trainer)
    assert snapshot(project / "models") == model


def in_place(project: Path) -> dict[str, bytes]:
    """The files of the run in ``runs/quick/`` (not of a replacement training in ``.next/``, nor the lock)."""
    return {name: data for name, data in snapshot(run_dir(project)).items() if not name.startswith(".next/")}


def evaluated_checkpoints(project: Path) -> list[str]:
    rlcore_here("evaluate", *sets(RUN), cwd=project)
    return [Path(c["checkpoint"]).name for c in read_json(outputs(project).evaluations)["candidates"]]


NAN_AFTER = "env.wrappers=[{wrapper: nan_after.NaNRewardAfter, kwargs: {steps: 1500}}]"


def test_a_replacement_that_fails_after_writing_checkpoints_leaves_the_finished_run_in_place(
    selected: Path, tmp_path: Path
) -> None:
    """Issue 26 item 6: a replacement that diverged (or was stopped for NaN rewards) after its first checkpoints
    used to evict the finished run. Now the finished run stays where evaluate and select read it; the failed
    replacement waits in ``.next/`` and is discarded by a start with other train params, which replaces the run
    once it finishes."""
    project = copy_of(selected, tmp_path)
    folder = run_dir(project)
    old = in_place(project)
    old_checkpoints = evaluated_checkpoints(project)
    assert old_checkpoints == [checkpoint_name(step) for step in STEPS]

    failed = rlcore(
        "train", *sets(RUN), "--replace", "--set", "seed=1", "--set", NAN_AFTER, "--set", "train.max_steps=30000",
        cwd=project, check=False,
        env={"PYTHONPATH": f"{os.environ.get('PYTHONPATH', '')}{os.pathsep}{Path(__file__).parent}"},
    )  # fmt: skip
    assert failed.returncode != 0, failed.stderr
    assert "Traceback" not in failed.stderr, failed.stderr
    assert checkpoint_steps(folder / ".next" / "checkpoints"), failed.stderr  # it failed after a checkpoint
    assert in_place(project) == old  # the finished run, byte for byte
    assert evaluated_checkpoints(project) == old_checkpoints
    assert read_json(outputs(project).evaluations)["candidates"][0]["checkpoint"].startswith("runs/quick/")

    result = train(project, "--replace", "--set", "seed=1")  # other train params: the failed replacement is discarded
    assert "discarding the unfinished replacement" in result.stderr, result.stderr
    assert_finished(project)
    assert not (folder / ".next").exists()
    assert seeds(folder) == [1] * len(STEPS)


def test_a_killed_replacement_leaves_the_finished_run_in_place_and_resumes_until_it_replaces_it(
    selected: Path, tmp_path: Path
) -> None:
    """A replacement SIGKILLed mid-way: the finished run is untouched in place (evaluate sees it); the next start
    with the same train params resumes the replacement in ``.next/``, which takes the run's place once finished."""
    project = copy_of(selected, tmp_path)
    folder = run_dir(project)
    old = in_place(project)
    proc = start_train(project, tmp_path / "killed.log", "--replace", "--set", "seed=1")
    assert wait_until((folder / ".next" / "checkpoints" / checkpoint_name(2048)).exists, proc), (
        tmp_path / "killed.log"
    ).read_text()
    assert kill(proc), "the run ended before the kill"
    assert "the previous run finished" in (tmp_path / "killed.log").read_text()
    assert in_place(project) == old
    assert evaluated_checkpoints(project) == [checkpoint_name(step) for step in STEPS]
    assert seeds(folder) == [0] * len(STEPS)

    result = train(project, "--replace", "--set", "seed=1")
    assert "resuming the unfinished replacement" in result.stderr, result.stderr
    assert f"from {checkpoint_name(2048)}" in result.stderr
    assert_finished(project)
    assert not (folder / ".next").exists()
    assert seeds(folder) == [1] * len(STEPS)


def test_init_from_inside_the_run_folder_it_replaces_is_refused_and_a_copy_outside_trains_twice(
    selected: Path, tmp_path: Path
) -> None:
    """Issue 26 item 7: ``train.init_from`` pointing into ``runs/quick/`` trained, then its run replaced the source:
    the re-run failed with "file not found", and the card named the sha256 of a file since overwritten. Refused now,
    nothing changed; a copy outside the folder warm-starts, the record names it, and it is still there to re-run."""
    project = copy_of(selected, tmp_path)
    source = f"runs/quick/checkpoints/{checkpoint_name(2048)}"
    before, models = snapshot(run_dir(project)), snapshot(project / "models")
    for path in (source, f"runs/quick/.next/checkpoints/{checkpoint_name(1024)}"):
        result = train(project, "--replace", "--set", "seed=1", "--set", f"train.init_from={path}", check=False)
        one_line_error(result, "train.init_from", path, "runs/quick/")
        assert snapshot(run_dir(project)) == before and snapshot(project / "models") == models

    copy = project / "models" / "init" / "policy.pt"
    copy.parent.mkdir(parents=True)
    shutil.copy(project / source, copy)
    digest = hashlib.sha256(copy.read_bytes()).hexdigest()
    for _ in range(2):  # the second run replaces the first; its source is still there
        train(project, "--replace", "--set", "seed=1", "--set", "train.init_from=models/init/policy.pt")
        record = read_json(run_dir(project) / "train_summary.json")["initialized_from"]
        assert record["path"] == "models/init/policy.pt" and record["sha256"] == digest
        assert hashlib.sha256(copy.read_bytes()).hexdigest() == digest
    assert seeds(run_dir(project)) == [1] * len(STEPS)


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
            "collect": {"steps": 2000, "policy": "models/quick/policy.pt"},
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
    # Retrained on the new data from scratch, not resumed from the run trained on the old data (DVC keeps the run
    # folder, a persisted output: the finished run is replaced once the new one finishes).
    assert "starting a fresh run" in output and "resuming" not in output, output
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
    return read_json(outputs(root, "bc-cartpole").export / "model_card.json")["training"]["dataset"]


KILLED_AT = Path(__file__).with_name("rlcore_killed_at.py")


def killed_at_change(
    project: Path, number: int, *args: str, trace: Path | None = None
) -> subprocess.CompletedProcess[str]:
    """``rlcore train *args``, SIGKILLed right after its ``number``-th change in the run folder (0: never)."""
    environment = {"KILL_IN": str(run_dir(project)), "KILL_AT": str(number)}
    if trace is not None:
        environment["KILL_TRACE"] = str(trace)
    command = [sys.executable, str(KILLED_AT), "train", *sets(RUN), *args]
    return subprocess.run(
        command, cwd=project, capture_output=True, text=True, timeout=300, env={**env(), **environment}
    )


@pytest.mark.slow
def test_a_replacement_killed_at_any_change_of_its_finish_loses_nothing(selected: Path, tmp_path: Path) -> None:
    """Crash points, not moments: a new run replacing a finished one is SIGKILLed right after one of its renames and
    deletions in the run folder: its first checkpoint, the commit of its summary and every step of moving it into
    place (the old run into ``.previous/``, each entry of ``.next/`` into the folder, dropping both). After every
    one the next start leaves exactly one complete run in the folder: the old one while the replacement had not
    finished, the new one once its summary was written. Of a series of alike moves (entry after entry between the
    same two folders) the first and the last are tried, of a removal its end (:func:`kill_points`)."""
    template = copy_of(selected, tmp_path / "template")
    old = snapshot(run_dir(template))
    traced = tmp_path / "traced"
    shutil.copytree(template, traced)
    trace = tmp_path / "trace.txt"
    assert killed_at_change(traced, 0, "--replace", "--set", "seed=1", trace=trace).returncode == 0
    changes = trace.read_text().splitlines()
    finished = next(i for i, line in enumerate(changes, 1) if line.endswith("/.next/train_summary.json"))
    first_checkpoint = next(i for i, line in enumerate(changes, 1) if "/.next/checkpoints/step_" in line)
    assert finished < len(changes) - 3, changes  # the moves into place come after the summary
    new = snapshot(run_dir(traced))
    for number in [first_checkpoint, finished - 1, *kill_points(changes, finished)]:
        project = tmp_path / f"try-{number}"
        shutil.copytree(template, project)
        result = killed_at_change(project, number, "--replace", "--set", "seed=1")
        assert result.returncode == -signal.SIGKILL, f"change {number}: exit {result.returncode}\n{result.stderr}"
        refused = train(project, "--replace", "--set", "seed=1", "--resume-from", "models/quick/policy.pt", check=False)
        assert refused.returncode == 2, refused.stderr
        after = {name: data for name, data in snapshot(run_dir(project)).items() if not name.startswith(".next/")}
        where = f"killed after change {number} ({changes[number - 1]}):\n{result.stderr}"
        if number < finished:
            assert after == old, where
        else:  # the new run, complete (its bytes differ from the traced run's: wall times)
            assert sorted(after) == sorted(new), where
            assert not [p for p in run_dir(project).iterdir() if p.name.startswith((".next", ".previous"))], where
            assert_finished(project)
            assert seeds(run_dir(project)) == [1] * len(STEPS), where
        shutil.rmtree(project)


def kill_points(changes: list[str], first: int) -> list[int]:
    """The numbers of the changes from ``first`` on that a kill tries, from a ``KILL_TRACE`` (``"<n> <call> <path>
    [<path>]"`` lines): every change, except that of a series of moves between the same two folders (the old run's
    entries into ``.previous.partial/``, ``.next/``'s into the run folder: one code path, entry after entry) only
    the first and the last, and of the removals of one path (``shutil.rmtree``'s last step is the ``rmdir`` of its
    top folder: the same folder state twice) only the last."""
    kinds = []
    for line in changes[first - 1 :]:
        _, call, *paths = line.split(" ")
        if call in ("replace", "rename"):
            kinds.append(("move", *(str(Path(path).parent) for path in paths)))
        else:
            kinds.append(("remove", *paths))
    numbers = []
    for offset, kind in enumerate(kinds):
        before = kinds[offset - 1] if offset else None
        after = kinds[offset + 1] if offset + 1 < len(kinds) else None
        series_end = kind != after
        if series_end or (kind[0] == "move" and kind != before):
            numbers.append(first + offset)
    return numbers


def test_the_kill_points_keep_the_ends_of_each_series_of_alike_changes() -> None:
    trace = [
        f"{n} {line}"
        for n, line in enumerate(
            [
                "replace r/.next/checkpoints/.a.tmp r/.next/checkpoints/a",
                "replace r/.next/.train_summary.json.1.tmp r/.next/train_summary.json",
                "replace r/checkpoints r/.previous.partial/checkpoints",
                "replace r/dvclive r/.previous.partial/dvclive",
                "replace r/train_summary.json r/.previous.partial/train_summary.json",
                "replace r/.previous.partial r/.previous",
                "replace r/.next/checkpoints r/checkpoints",
                "replace r/.next/dvclive r/dvclive",
                "replace r/.next/train_summary.json r/train_summary.json",
                "rmdir r/.next",
                "rmtree r/.next",
                "rmdir r/.previous",
                "rmtree r/.previous",
            ],
            1,
        )
    ]
    assert kill_points(trace, 2) == [2, 3, 5, 6, 7, 9, 11, 13]


def seeds(folder: Path) -> list[int]:
    """The seed of the run that wrote each checkpoint in ``folder``, oldest first."""
    return [
        load_checkpoint(folder / "checkpoints" / checkpoint_name(step)).meta["params"]["seed"]
        for step in checkpoint_steps(folder / "checkpoints")
    ]
