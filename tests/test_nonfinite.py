"""A NaN or infinite observation, reward or action is an error naming the env, the sub-env and the step, never a
result: one check where every family steps its envs (``rlcore.envs.stepping``) and in evaluation
(``rlcore.evaluation.evaluator``),
and through the command one ``error:`` line, exit status 2, the finished run it would have replaced untouched."""

from __future__ import annotations

import hashlib
import re
import shutil
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
from cli_support import run_in_process
from conftest import QUICK, sets

from rlcore.config.sections import PolicyConfig
from rlcore.envs.config import EnvConfig
from rlcore.envs.parameters import EnvParameters
from rlcore.envs.settings import Constant
from rlcore.envs.stepping import NonFiniteError, VectorStepper
from rlcore.envs.vector import make_vector_env
from rlcore.evaluation.evaluator import Evaluator
from rlcore.nets.policies import ActorCritic

TESTS = Path(__file__).parent


def _wrapped(wrapper: str, env_id: str = "CartPole-v1", **kwargs: object) -> EnvConfig:
    return EnvConfig.model_validate(
        {"id": env_id, "wrappers": [{"wrapper": f"nonfinite_wrappers.{wrapper}", "kwargs": kwargs}]}
    )


def test_the_stepper_refuses_a_nan_observation_naming_the_env_the_sub_env_and_the_step():
    env = make_vector_env(_wrapped("NaNObservationAfter", steps=3), 2)
    stepper = VectorStepper(env)
    try:
        stepper.reset(seed=0, env_steps=100)  # a trainer's count so far
        stepper.step(np.zeros(2, dtype=np.int64))
        stepper.step(np.zeros(2, dtype=np.int64))
        with pytest.raises(
            NonFiniteError,
            match=r"^CartPole-v1 \(sub-env 0, env step 104\): the env returned a "
            r"non-finite observation \[nan, nan, nan, nan\]",
        ):
            stepper.step(np.zeros(2, dtype=np.int64))
    finally:
        env.close()


@pytest.mark.parametrize(
    "wrapper,what", [("NaNReward", "reward [nan]"), ("InfReward", "reward [inf]"), ("NaNObservation", "observation")]
)
def test_the_stepper_refuses_non_finite_rewards_and_reset_observations(wrapper: str, what: str):
    env = make_vector_env(_wrapped(wrapper), 3)
    stepper = VectorStepper(env, owner="actor 2")
    try:
        with pytest.raises(NonFiniteError, match=re.escape("of actor 2, ") + ".*" + re.escape(f"non-finite {what}")):
            stepper.reset(seed=0)
            stepper.step(np.zeros(3, dtype=np.int64))
    finally:
        env.close()


def test_the_stepper_refuses_a_non_finite_action_before_the_env_sees_it():
    env = make_vector_env(EnvConfig(id="Pendulum-v1"), 2)
    stepper = VectorStepper(env)
    try:
        stepper.reset(seed=0)
        with pytest.raises(
            NonFiniteError,
            match=r"Pendulum-v1 \(sub-env 1, env step 0\): the policy chose a "
            r"non-finite action \[nan\]",
        ):
            stepper.step(np.array([[0.5], [np.nan]], dtype=np.float32))
    finally:
        env.close()


def _policy(env: EnvConfig) -> ActorCritic:
    probe = gym.make(env.id)
    try:
        return ActorCritic(probe.observation_space, probe.action_space, PolicyConfig(hidden_sizes=[8]))
    finally:
        probe.close()


def test_evaluation_refuses_broken_physics_naming_the_setting_the_episode_and_its_step():
    env = EnvConfig(id="CartPole-v1")
    # masscart -0.1 with the default masspole 0.1: a total mass of 0 (range checks at load refuse it; this is the
    # run-time check behind them, for what they cannot see).
    broken = EnvParameters("CartPole-v1", {}, {"masscart": Constant(value=-0.1)})
    evaluator = Evaluator(env, episodes=4, seed=1000, settings=broken, label="eval setting 'neg'")
    try:
        with pytest.raises(
            NonFiniteError,
            match=r"^CartPole-v1 \(eval setting 'neg', episode seed 1000 \(sub-env 0\), "
            r"episode step 1\): the env returned a non-finite observation",
        ):
            evaluator.evaluate(_policy(env))
    finally:
        evaluator.close()


def test_an_evaluation_return_that_overflows_is_an_error_not_a_score():
    env = _wrapped("HugeReward", scale=1e308)  # finite rewards; 2 of them sum to more than float64 holds
    evaluator = Evaluator(env, episodes=2, seed=0)
    try:
        with pytest.raises(NonFiniteError, match=r"the episode's return is inf \(its rewards are finite"):
            evaluator.evaluate(_policy(env))
    finally:
        evaluator.close()


# --- through the command --------------------------------------------------------------------------------------------


def _with_wrappers(project: Path) -> None:
    """The wrappers beside the params, as a user's project holds them (this process imports them from tests/)."""
    shutil.copy(TESTS / "nonfinite_wrappers.py", project / "nonfinite_wrappers.py")


def _hashes(folder: Path) -> dict[str, str]:
    return {
        path.relative_to(folder).as_posix(): hashlib.sha256(path.read_bytes()).hexdigest()
        for path in sorted(folder.rglob("*"))
        if path.is_file() and path.name != ".lock"
    }


def _error_line(result) -> str:  # type: ignore[no-untyped-def]
    """Exit 2, no traceback, one ``error:`` line (with ``-q`` the only line)."""
    assert result.returncode == 2, f"exit status {result.returncode}\n{result.stdout}\n{result.stderr}"
    assert "Traceback" not in result.stderr + result.stdout, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    return lines[0]


def test_an_infinite_reward_stops_training_in_one_line_and_the_finished_run_stays(project: Path):
    """The issue's command: PPO stopped with ``reached target return 500 (eval mean inf)``, exit status 0."""
    _with_wrappers(project)
    finished = run_in_process(["train", *sets(QUICK)], project, limit=300)
    assert finished.returncode == 0, finished
    run = project / "runs" / "quick"
    before = _hashes(run)
    result = run_in_process(
        [
            "-q",
            "train",
            "--replace",  # the finished run, trained without the wrapper, may be replaced (it stays: training fails)
            *sets([*QUICK, "train.target_return=500", "env.wrappers=[{wrapper: nonfinite_wrappers.InfReward}]"]),
        ],
        project,
        limit=300,
    )
    line = _error_line(result)
    assert "CartPole-v1 (sub-env 0, env step 0): the env returned a non-finite reward [inf]" in line, line
    assert _hashes(run) == before


def test_a_run_shorter_than_the_divergence_window_with_nan_rewards_exits_non_zero(project: Path):
    """NaN rewards skip every update (too few to stop as diverged) and evaluated to ``eval nan``, exit status 0."""
    _with_wrappers(project)
    result = run_in_process(
        [
            "-q",
            "train",
            *sets([*QUICK, "train.max_steps=1024", "env.wrappers=[{wrapper: nonfinite_wrappers.NaNReward}]"]),
        ],
        project,
        limit=300,
    )
    assert "non-finite reward [nan]" in _error_line(result)
    assert not (project / "runs" / "quick" / "train_summary.json").exists()
