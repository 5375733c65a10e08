"""A bad search space, through ``rlcore sweep`` (its entry point, run in this process by
``cli_support.run_in_process``): one line ``error: ...``, exit 2, and no trial started.

No trial started means no study storage (``.optuna/``) and no trial folder (``runs/``) exists afterwards.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from cli_support import run_in_process
from conftest import sets
from test_errors import one_line_error

CASES = {
    "low_above_high": (
        "{algo: {lr: {type: float, low: 0.1, high: 0.01}}}",
        "sweep.space.algo.lr: low (0.1) > high (0.01)",
    ),
    "log_range_from_zero": (
        "{algo: {lr: {type: float, low: 0.0, high: 0.01, log: true}}}",
        "sweep.space.algo.lr: log range needs low > 0, got low 0",
    ),
    "unknown_params_key": (
        "{algo: {lrr: {type: float, low: 0.001, high: 0.01}}}",
        "sweep.space.algo.lrr: unknown params key (did you mean 'algo.lr'?)",
    ),
    "empty_categorical": (
        "{policy.activation: {type: categorical, choices: []}}",
        "sweep.space.policy.activation: empty categorical",
    ),
    "float_range_on_an_int_key": (
        "{algo: {n_steps: {type: float, low: 16, high: 64}}}",
        # The range's low end first: a whole float (16.0) is refused for an integer key as 34.336 is.
        "sweep.space.algo.n_steps: float value 16.0 does not fit: algo.n_steps: expected an integer, got a float",
    ),
    "string_choice_on_a_float_key": (
        "{algo: {lr: {type: categorical, choices: [0.001, fast]}}}",
        "sweep.space.algo.lr: categorical value fast does not fit: algo.lr: input should be a valid number",
    ),
    "a_whole_section": (
        "{algo: {type: float, low: 0.1, high: 0.2}}",
        "sweep.space.algo: is a section, not a value",
    ),
}


@pytest.mark.parametrize("space, message", CASES.values(), ids=CASES.keys())
def test_bad_search_space_is_one_line_error_before_any_trial(project: Path, space: str, message: str) -> None:
    result = run_in_process(["sweep", "--no-flow", *sets([f"sweep.space={space}"])], project)
    one_line_error(result, "error: params.yaml: " + message)
    assert not (project / ".optuna").exists()
    assert not (project / "runs").exists()


def test_unknown_sampler_option_is_one_line_error_with_a_suggestion(project: Path) -> None:
    result = run_in_process(["sweep", "--no-flow", "--set", "sweep.sampler_options={n_startup_trial: 3}"], project)
    one_line_error(
        result, "sweep.sampler_options: TPESampler takes no 'n_startup_trial' (did you mean 'n_startup_trials'?)"
    )
    assert not (project / ".optuna").exists()


def test_unknown_env_id_in_sweep_envs_is_one_line_error_before_any_trial(project: Path) -> None:
    envs = "sweep.envs=[{id: CartPole-v1, target: 500}, {id: CartPole-v9, target: 500}]"
    result = run_in_process(["sweep", "--no-flow", "--set", envs], project)
    message = "sweep.envs.1.id: unknown gymnasium env id 'CartPole-v9' (did you mean 'CartPole-v1'?)"
    one_line_error(result, "error: params.yaml: " + message)
    assert not (project / ".optuna").exists()
