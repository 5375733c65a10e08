"""What rlcore tells its user: numbers with the digits that matter, and the truth about an interrupted run."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from cli_support import run_in_process
from conftest import PROJECT, QUICK, sets

from rlcore.common.numbers import decimals_for, interval_decimals, score, score_with_interval
from rlcore.evaluation.evaluator import EvalResult
from rlcore.evaluation.report import candidates_table
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


def test_an_interval_never_reads_as_a_point_it_is_not():
    # One decimal hid a reward of 0.91 and its interval ("0.9 (95% CI 0.9 to 0.9)").
    assert score_with_interval(0.91, 0.905, 0.915) == ("0.910", "0.905", "0.915")
    assert score_with_interval(500.0, 497.9, 500.0) == ("500.0", "497.9", "500.0")
    assert score_with_interval(500.0, 500.0, 500.0) == ("500.0", "500.0", "500.0")
    assert score_with_interval(8.23, 7.7, 8.8) == ("8.23", "7.70", "8.80")
    # Ends that differ in the fifth digit of a large return: as many decimals as tell them apart.
    assert score_with_interval(499.97, 499.96, 499.98) == ("499.97", "499.96", "499.98")
    assert decimals_for(float("inf")) == 1


@pytest.mark.parametrize(
    ("value", "low", "high", "shown"),
    [
        # The value's own decimals printed -0.0500 beside -0.3000: the largest magnitude (0.3) sets them.
        (-0.05, -0.3, 0.2, ("-0.050", "-0.300", "0.200")),
        (0.05, -0.3, 0.2, ("0.050", "-0.300", "0.200")),
        # A small mean between large ends: the ends' magnitude, not the mean's.
        (0.4, -120.0, 130.0, ("0.4", "-120.0", "130.0")),
        (3.0, 2.5, 12.0, ("3.0", "2.5", "12.0")),
        # Ends that the largest magnitude's decimals would collapse get more, up to the cap.
        (0.91, 0.905, 0.915, ("0.910", "0.905", "0.915")),
        (0.5, 0.5 - 1e-9, 0.5 + 1e-9, ("0.500000", "0.500000", "0.500000")),
        # A non-finite end takes no part in the magnitude.
        (0.05, float("nan"), 0.2, ("0.050", "nan", "0.200")),
    ],
)
def test_an_interval_takes_the_decimals_of_its_largest_magnitude(
    value: float, low: float, high: float, shown: tuple[str, str, str]
):
    assert score_with_interval(value, low, high) == shown


def test_an_evaluation_summary_prints_its_iqm_with_the_interval_s_decimals():
    # Mean -0.05, IQM -0.0175, interval about -0.176..0.069 (seeded bootstrap): all with 0.176's three decimals.
    result = EvalResult.from_episodes([-0.3, -0.1, -0.05, 0.0, 0.08, 0.1, 0.2, -0.33], [5] * 8)
    assert interval_decimals(result.mean_return, result.ci95_low, result.ci95_high) == 3
    assert result.summary() == "-0.050 (95% CI -0.176 to 0.069; IQM -0.018) over 8 episodes"


def test_a_candidate_row_prints_its_mean_interval_and_iqm_with_one_count_of_decimals():
    candidate = {
        "checkpoint": "checkpoints/step_1000.pt",
        "step": 1000,
        "mean_return": -0.05,
        "ci95_low": -0.3,
        "ci95_high": 0.2,
        "iqm_return": -0.0175,
        "std_return": 0.2,
        "min_return": -0.33,
        "max_return": 0.2,
    }
    row = candidates_table([candidate], selected="checkpoints/step_1000.pt").splitlines()[-1]
    assert [cell.strip() for cell in row.strip("|").split("|")][2:5] == ["-0.050", "[-0.300, 0.200]", "-0.018"]


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
