"""``cli_support.run_in_process`` reads a command as a real ``rlcore`` process would show it, and leaves the test
process as it found it (the suite runs many commands in one process)."""

from __future__ import annotations

import argparse
import logging
import os
import random
import shutil
import sys
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from cli_support import run_in_process
from conftest import PROJECT

import rlcore.cli


@pytest.fixture
def project(tmp_path: Path) -> Path:
    shutil.copy(PROJECT / "params.yaml", tmp_path / "params.yaml")
    return tmp_path


def test_stderr_holds_warnings_and_native_writes_as_a_process_shows_them(
    project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    load = rlcore.cli.load

    def noisy_load(args: argparse.Namespace) -> Any:
        warnings.warn("shown by a real process", UserWarning, stacklevel=1)
        warnings.warn("hidden by Python's default filters", DeprecationWarning, stacklevel=1)
        os.write(2, b"written by native code\n")
        return load(args)

    monkeypatch.setattr(rlcore.cli, "load", noisy_load)
    outcome = run_in_process(["train", "--set", "algo.lr=-0.1"], project)
    assert outcome.returncode == 2, outcome
    lines = outcome.stderr.splitlines()
    assert len(lines) == 4, outcome  # the warning's two lines, the error, the native line
    assert "UserWarning: shown by a real process" in lines[0]
    assert lines[2].startswith("error: ") and "algo.lr" in lines[2], outcome
    assert lines[3] == "written by native code"
    assert "DeprecationWarning" not in outcome.stderr


def process_state() -> tuple[Any, ...]:
    logger = logging.getLogger("rlcore")
    return logger.level, list(logger.handlers), torch.get_num_threads(), Path.cwd(), dict(os.environ), list(sys.argv)


@pytest.mark.slow
def test_a_run_stopped_by_the_time_limit_leaves_the_process_as_it_was(project: Path) -> None:
    before = process_state()
    rng = (torch.random.get_rng_state(), np.random.get_state(), random.getstate())
    # -q sets the logger's level, torch_threads=2 the thread count, training seeds torch and NumPy; 8 s stop it
    # (with no target return: the default PPO solves CartPole and exits 0 in ~2.4 s on a quiet machine).
    args = [
        "-q",
        "train",
        "--set",
        "torch_threads=2",
        "--set",
        "train.max_steps=100000000",
        "--set",
        "name=long",
        "--set",
        "train.target_return=null",
    ]  # fmt: skip (PPO reaches 500 on CartPole in ~2 s otherwise)
    outcome = run_in_process(args, project, limit=8)
    assert outcome.hung and outcome.returncode < 0, outcome
    # The run's checkpoints folder is made after the session seeded the generators and set the thread count.
    assert (project / "runs" / "long" / "checkpoints").is_dir(), f"stopped before it changed anything: {outcome!r}"
    assert process_state() == before
    draws = (torch.rand(3), np.random.random(3), random.random())  # the generators go on where they were
    torch.random.set_rng_state(rng[0])
    np.random.set_state(rng[1])
    random.setstate(rng[2])
    assert torch.equal(torch.rand(3), draws[0])
    assert np.array_equal(np.random.random(3), draws[1])
    assert random.random() == draws[2]
