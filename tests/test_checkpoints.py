"""Atomic checkpoints and resume: what a crash leaves behind is always loadable, and training continues."""

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest
import torch
from cli_support import run_in_process
from conftest import RLCORE, sets

from rlcore.common.checkpoints import list_checkpoints, load_checkpoint, save_checkpoint
from rlcore.common.errors import CheckpointError
from rlcore.common.files import read_json, sha256_file

WRITER = textwrap.dedent(
    """
    import sys, torch
    from rlcore.common.checkpoints import checkpoint_path, save_checkpoint
    directory = sys.argv[1]
    big = {"w": torch.randn(4_000_000)}  # ~16 MB: each write takes long enough to be interrupted
    step = 1
    while True:
        save_checkpoint(checkpoint_path(directory, step), "ppo", step, "env_steps", {"step": step}, {"policy": big})
        print(step, flush=True)
        step += 1
    """
)


@pytest.mark.parametrize("delay", [0.0, 0.013, 0.031])
def test_kill_during_checkpoint_write_leaves_every_listed_checkpoint_loadable(tmp_path: Path, delay: float):
    child = subprocess.Popen([sys.executable, "-c", WRITER, str(tmp_path)], stdout=subprocess.PIPE, text=True)
    assert child.stdout is not None
    assert child.stdout.readline().strip() == "1"  # the first checkpoint is complete
    time.sleep(delay)
    child.send_signal(signal.SIGKILL)
    child.wait()

    listed = list_checkpoints(tmp_path)
    assert listed, "the completed checkpoint must survive"
    for step, path in listed:
        assert load_checkpoint(path).step == step
    # An interrupted write leaves at most a hidden temporary file, which is never listed.
    leftovers = [p.name for p in tmp_path.iterdir() if p not in {path for _, path in listed}]
    assert all(name.startswith(".") and name.endswith(".tmp") for name in leftovers), leftovers


def test_the_same_checkpoint_saved_by_two_processes_has_the_same_bytes(tmp_path: Path, monkeypatch):
    """Selecting the same checkpoint again writes a byte-identical ``policy.pt`` (issue 38: torch.save named the zip's
    records after the temporary file, whose name holds the PID, so DVC saw a new model and re-ran collect)."""
    import rlcore.common.files

    tensors = {"policy": {"w": torch.arange(6.0).reshape(2, 3), "b": torch.zeros(2)}}
    meta = {"params": {"name": "quick"}, "evaluation": {"mean_return": 9.5}}
    paths = [tmp_path / "first" / "policy.pt", tmp_path / "second" / "policy.pt"]
    for pid, path in zip((1111, 2222), paths, strict=True):  # as two `rlcore select` processes would
        monkeypatch.setattr(rlcore.common.files.os, "getpid", lambda pid=pid: pid)
        save_checkpoint(path, "ppo", 4096, "env_steps", meta, tensors)
    assert paths[0].read_bytes() == paths[1].read_bytes()


def test_truncated_checkpoint_is_refused_with_its_file_name(tmp_path: Path):
    path = tmp_path / "step_0000000001.pt"
    save_checkpoint(path, "ppo", 1, "env_steps", {}, {"policy": {"w": torch.ones(1000)}})
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    with pytest.raises(CheckpointError, match=r"step_0000000001\.pt: not a readable checkpoint"):
        load_checkpoint(path)


@pytest.mark.slow
def test_resume_after_kill_continues_from_checkpoint_step(project: Path):
    overrides = sets(
        [
            "name=resume",
            "train.max_steps=40960",
            "train.eval_every=2048",
            "train.eval_episodes=2",
            "train.target_return=null",
            "train.progress_bar=off",
        ]
    )
    checkpoints = project / "runs" / "resume" / "checkpoints"
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    child = subprocess.Popen(
        [RLCORE, "train", *overrides], cwd=project, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    deadline = time.monotonic() + 120
    while len(list_checkpoints(checkpoints)) < 3 and child.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    child.send_signal(signal.SIGKILL)
    child.wait()
    before = list_checkpoints(checkpoints)
    assert len(before) >= 3, "training should have been killed after its third checkpoint"
    assert not (project / "runs" / "resume" / "train_summary.json").exists()
    last_step = before[-1][0]
    assert last_step < 40960
    hashes = {path.name: sha256_file(path) for _, path in before}

    result = subprocess.run(
        [RLCORE, "train", *overrides], cwd=project, env=env, capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stderr
    assert f"at env step {last_step}" in result.stderr
    summary = read_json(project / "runs" / "resume" / "train_summary.json")
    assert summary["env_steps"] == 40960
    after = list_checkpoints(checkpoints)
    assert [s for s, _ in after if s <= last_step] == [s for s, _ in before]
    assert all(sha256_file(path) == hashes[path.name] for s, path in after if s <= last_step)
    assert after[-1][0] == 40960
    # The counters carried over: the summary's evaluations span both processes, in order.
    steps = [e["env_steps"] for e in summary["evaluations"]]
    assert steps == sorted(steps) and steps[0] == before[0][0] and steps[-1] == 40960


@pytest.mark.slow
def test_off_policy_resume_after_kill_keeps_replay_and_step_counter(project: Path):
    preset = str(Path(__file__).resolve().parents[1] / "configs" / "dqn-cartpole.yaml")
    overrides = [
        "name=offresume",
        "train.max_steps=16384",
        "train.eval_every=2048",
        "train.eval_episodes=2",
        "train.target_return=null",
        "train.progress_bar=off",
    ]
    run_dir = project / "runs" / "offresume"
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    command = [RLCORE, "train", "--params", preset, *sets(overrides)]
    child = subprocess.Popen(command, cwd=project, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 120
    while len(list_checkpoints(run_dir / "checkpoints")) < 3 and child.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    child.send_signal(signal.SIGKILL)
    child.wait()
    checkpoints = list_checkpoints(run_dir / "checkpoints")
    assert len(checkpoints) >= 3
    last_step = checkpoints[-1][0]
    replay_file = run_dir / "replay" / f"step_{last_step:010d}.npz"
    assert replay_file.is_file(), "the replay buffer is saved with each checkpoint"
    with np.load(replay_file) as saved:  # meta: capacity, transitions added, oldest kept, env steps, ...
        saved_size = int(saved["meta"][1]) - int(saved["meta"][2])
    # Every env step so far is in it, but for the autoreset steps that follow each episode's end.
    assert 0.8 * last_step < saved_size <= last_step
    assert not list((run_dir / "replay").glob("step_*.npz"))[1:], "only the latest buffer is kept"

    # The resume in this process (the kill above is what needs a real one): ~6 CPU s of imports fewer.
    result = run_in_process(command[1:], project, limit=300)
    assert result.returncode == 0, result.stderr
    assert f"at env step {last_step}" in result.stderr
    assert f"restored {saved_size} replay transitions" in result.stderr
    summary = read_json(run_dir / "train_summary.json")
    assert summary["env_steps"] == 16384
    assert load_checkpoint(list_checkpoints(run_dir / "checkpoints")[-1][1]).meta["updates"] > 0


def test_a_foreign_pickle_is_one_error_without_torch_s_protocol_warning(tmp_path: Path) -> None:
    """A file that opens like a pickle of a protocol torch does not know (the fault fuzzer's fake run folders): the
    one-line error, and no UserWarning that would reach the user's stderr beside it."""
    import warnings

    from rlcore.common.checkpoints import load_checkpoint
    from rlcore.common.errors import CheckpointError

    path = tmp_path / "step_0000000001.pt"
    path.write_bytes(b"\x80\x97 not a checkpoint at all")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with pytest.raises(CheckpointError, match="not a readable checkpoint"):
            load_checkpoint(path)
    assert not [w for w in caught if "pickle protocol" in str(w.message)], [str(w.message) for w in caught]
