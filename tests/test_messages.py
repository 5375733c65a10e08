"""What rlcore tells its user: numbers with the digits that matter, and the truth about an interrupted run."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from cli_support import run_in_process
from conftest import PROJECT, QUICK, sets

from rlcore.common.numbers import decimals_for, score, score_with_interval
from rlcore.stages.export import parity_words


@pytest.mark.parametrize(
    ("value", "shown"),
    [
        (500.0, "500.0"),
        (143.27, "143.3"),
        (42.46, "42.5"),
        (8.234, "8.23"),
        (0.91, "0.910"),
        (-0.184, "-0.184"),
        (0.001234, "0.00123"),
        (0.0, "0.0"),
        (-1234.5, "-1234.5"),
        (float("nan"), "nan"),
    ],
)
def test_a_score_keeps_three_significant_digits_and_at_least_one_decimal(value: float, shown: str):
    assert score(value) == shown


def test_an_interval_prints_with_its_value_s_decimals_and_never_as_a_point_it_is_not():
    # One decimal hid a reward of 0.91 and its interval ("0.9 (95% CI 0.9 to 0.9)").
    assert score_with_interval(0.91, 0.905, 0.915) == ("0.910", "0.905", "0.915")
    assert score_with_interval(500.0, 497.9, 500.0) == ("500.0", "497.9", "500.0")
    assert score_with_interval(500.0, 500.0, 500.0) == ("500.0", "500.0", "500.0")
    assert score_with_interval(8.23, 7.7, 8.8) == ("8.23", "7.70", "8.80")
    # Ends that differ in the fifth digit of a large return: as many decimals as tell them apart.
    assert score_with_interval(499.97, 499.96, 499.98) == ("499.97", "499.96", "499.98")
    assert decimals_for(float("inf")) == 1


@pytest.fixture
def interruptible(tmp_path: Path) -> Path:
    shutil.copy(PROJECT / "params.yaml", tmp_path / "params.yaml")
    return tmp_path


INTERRUPTIBLE = [*QUICK, "train.max_steps=2048", "env.num_envs=4", "env.wrappers=[{wrapper: interrupting_env.CtrlC}]"]


def test_an_interrupt_before_the_first_checkpoint_says_a_re_run_starts_over(
    interruptible: Path, monkeypatch: pytest.MonkeyPatch
):
    monkeypatch.setenv("RLCORE_TEST_CTRL_C", "step:20")
    interrupted = run_in_process(["train", *sets(INTERRUPTIBLE)], interruptible)
    assert interrupted.returncode == 130, interrupted.stderr
    assert (
        "interrupted: runs/quick: no checkpoint was written yet, so a re-run of the same command starts over"
        in interrupted.stderr.splitlines()
    )
    assert not list((interruptible / "runs" / "quick").glob("checkpoints/step_*.pt"))


def test_an_interrupt_after_a_checkpoint_names_the_step_the_re_run_resumes_from(
    interruptible: Path, monkeypatch: pytest.MonkeyPatch
):
    monkeypatch.setenv("RLCORE_TEST_CTRL_C", "checkpoint")
    interrupted = run_in_process(["train", *sets(INTERRUPTIBLE)], interruptible)
    assert interrupted.returncode == 130, interrupted.stderr
    line = next(line for line in interrupted.stderr.splitlines() if line.startswith("interrupted:"))
    assert line == (
        "interrupted: runs/quick: its checkpoint at 1,024 env steps is kept; re-run the same command to resume from it"
    )
    monkeypatch.delenv("RLCORE_TEST_CTRL_C")
    resumed = run_in_process(["train", *sets(INTERRUPTIBLE)], interruptible, limit=120)
    assert resumed.returncode == 0, resumed.stderr
    assert "from step_0000001024.pt at env step 1024" in resumed.stderr


def test_the_export_parity_line_reads_as_a_sentence():
    parity = {
        "observations": 200,
        "atol": 1e-5,
        "rtol": 1e-4,
        "onnx_max_abs_diff": 2.4e-7,
        "onnx_max_allowed_fraction": 0.0031,
        "torch_export_max_abs_diff": 0.0,
        "torch_export_max_allowed_fraction": 0.0,
    }
    assert parity_words(parity) == (
        "the ONNX and torch.export models matched the torch policy on 200 observations (largest difference 2.4e-07, "
        "0.31% of what export.parity_atol 1e-05 and export.parity_rtol 0.0001 allow)"
    )
