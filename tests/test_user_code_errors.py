"""Errors from the user's code (an env, a wrapper of ``env.wrappers``, ``env.parameters_adapter``), through the real
``rlcore`` command: exit 2, exactly one ``error:`` line that names the key (``env.wrappers.0.wrapper``) or the env and
the step, with the exception's own ``Type: message``; no traceback on the terminal, the traceback in the run's
``error.log`` (``runs/error.log`` when the params did not load). For PPO, DQN, ES and IMPALA, whose workers and
actors run in other processes."""

from __future__ import annotations

import importlib.util
import os
import pickle
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from cli_support import Outcome, assert_refused, run_in_process
from conftest import PROJECT, sets

from rlcore.common.errors import UserCodeError, describe_exception

HOSTILE = """
import multiprocessing
import os
import signal
import sys
import time

import gymnasium as gym
import numpy as np
from gymnasium import spaces

CONSTANT = 3


def not_an_env(env):
    return 42


class RaisesInInit(gym.Wrapper):
    def __init__(self, env, only_in_children=False):
        super().__init__(env)
        if not only_in_children or multiprocessing.current_process().name != "MainProcess":
            raise RuntimeError("the wrapper cannot start")


class RaisesInStep(gym.Wrapper):
    def __init__(self, env, after=20):
        super().__init__(env)
        self.after, self.steps = after, 0

    def step(self, action):
        self.steps += 1
        if self.steps > self.after:
            raise RuntimeError("the wrapper broke at step %d" % self.steps)
        return self.env.step(action)


class ExitsInReset(gym.Wrapper):
    def reset(self, **kwargs):
        sys.exit(3)


class ExitsInStep(gym.Wrapper):
    def __init__(self, env, after=20):
        super().__init__(env)
        self.after, self.steps = after, 0

    def step(self, action):
        self.steps += 1
        if self.steps > self.after:
            sys.exit(3)
        return self.env.step(action)


class HangsInStep(gym.Wrapper):
    def step(self, action):
        time.sleep(3600)


class EndsItsProcess(gym.Wrapper):
    def step(self, action):
        os._exit(0)


class KillsItsProcess(gym.Wrapper):
    def reset(self, **kwargs):
        os.kill(os.getpid(), signal.SIGKILL)


class CrashingEnv(gym.Env):
    observation_space = spaces.Box(-1.0, 1.0, (2,), np.float32)
    action_space = spaces.Discrete(2)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.steps = 0
        return np.zeros(2, np.float32), {}

    def step(self, action):
        self.steps += 1
        if self.steps > 5:
            raise FloatingPointError("the simulator crashed mid-episode")
        return np.zeros(2, np.float32), 1.0, False, False, {}


if "Crashing-v0" not in gym.registry:
    gym.register("Crashing-v0", entry_point=CrashingEnv, max_episode_steps=50)
"""

MODULES = {
    "hostile_wrappers": HOSTILE,
    "raises_at_import": "import math\n\nRATIO = 1 / (math.pi - math.pi)\n",
    "syntax_error": "def wrap(env:\n    return env\n",
}

SMALL = ["name=uc", "train.progress_bar=off", "train.target_return=null"]


@pytest.fixture
def hostile(tmp_path: Path) -> Iterator[Path]:
    """A project holding the hostile modules: the command run in it imports them, and so do the processes a run
    spawns (the project folder, ``rlcore.common.project``); this process cannot."""
    for name in ("params.yaml", "dvc.yaml", ".dvcignore", "prefect.toml"):
        (tmp_path / name).write_bytes((PROJECT / name).read_bytes())
    for module, text in MODULES.items():
        (tmp_path / f"{module}.py").write_text(text)
        assert importlib.util.find_spec(module) is None
    yield tmp_path
    for module in MODULES:
        sys.modules.pop(module, None)


def rlcore_train(root: Path, *overrides: str, params: str = "params.yaml") -> Outcome:
    return run_in_process(["train", "--params", str(PROJECT / params), *sets([*SMALL, *overrides])], root, limit=120)


def logged_traceback(root: Path, log: str, *fragments: str) -> str:
    text = (root / log).read_text()
    assert "Traceback (most recent call last)" in text
    for fragment in fragments:
        assert fragment in text, f"{fragment!r} not in {log}"
    return text


@pytest.mark.parametrize(
    ("wrapper", "fragments", "log"),
    [
        (
            "raises_at_import.Wrap",
            [
                "env.wrappers.0.wrapper",
                "importing module 'raises_at_import' raised ZeroDivisionError",
                "(at raises_at_import.py:3)",
            ],
            "runs/error.log",
        ),
        (
            "syntax_error.wrap",
            ["env.wrappers.0.wrapper", "importing module 'syntax_error' raised SyntaxError", "syntax_error.py, line 1"],
            "runs/error.log",
        ),
        ("hostile_wrappers.CONSTANT", ["env.wrappers.0.wrapper", "is an int, not a wrapper class or function"], None),
        ("hostile_wrappers.not_an_env", ["env.wrappers.0.wrapper", "returned int (42), not a gymnasium env"], None),
        (
            "hostile_wrappers.RaisesInInit",
            ["env.wrappers.0.wrapper", "RaisesInInit raised when built: RuntimeError: the wrapper cannot start"],
            "runs/error.log",  # built in its load-time test (rlcore.envs.user_code), before the run folder
        ),
    ],
    ids=["raises-at-import", "syntax-error", "constant", "returns-a-non-env", "raises-in-init"],
)
def test_a_hostile_wrapper_is_one_error_line_naming_its_key_with_the_traceback_in_the_log(
    hostile: Path, wrapper: str, fragments: list[str], log: str | None
):
    line = assert_refused(rlcore_train(hostile, f"env.wrappers=[{{wrapper: {wrapper}}}]"), *fragments)
    if log is not None:
        assert line.endswith(f"(traceback in {log})"), line
        logged_traceback(hostile, log, wrapper.partition(".")[0])


TEST_RESET = "while taking a test reset and step of CartPole-v1"


@pytest.mark.parametrize(
    ("wrappers", "fragment"),
    [
        ("[{wrapper: hostile_wrappers.ExitsInReset}]", "0.wrapper: hostile_wrappers.ExitsInReset called sys.exit(3)"),
        (
            "[{wrapper: gymnasium.wrappers.ClipReward, kwargs: {max_reward: 1}}, "
            "{wrapper: hostile_wrappers.HangsInStep}]",
            "1.wrapper: hostile_wrappers.HangsInStep did not finish within 1 s (env.user_code_timeout_seconds)",
        ),
        (
            "[{wrapper: hostile_wrappers.EndsItsProcess}]",
            "0.wrapper: hostile_wrappers.EndsItsProcess ended its process",
        ),
        (
            "[{wrapper: hostile_wrappers.KillsItsProcess}]",
            "0.wrapper: hostile_wrappers.KillsItsProcess crashed its process",
        ),
    ],
    ids=["sys-exit", "hangs", "os-exit", "sigkill"],
)
def test_a_wrapper_that_exits_hangs_or_kills_its_process_is_refused_at_load_naming_its_key(
    hostile: Path, wrappers: str, fragment: str
):
    """Its test reset and step run in a child process bounded by env.user_code_timeout_seconds (1 s here): the
    command lives on to say what the wrapper did, before any run folder exists."""
    outcome = rlcore_train(hostile, f"env.wrappers={wrappers}", "env.user_code_timeout_seconds=1")
    assert_refused(outcome, f"env.wrappers.{fragment}", TEST_RESET)
    assert not (hostile / "runs" / "uc").exists()


def test_a_wrapper_that_calls_sys_exit_mid_training_is_one_error_line_naming_the_env_and_the_step(hostile: Path):
    """It passes its load-time test (one step), then exits at step 21: one line, exit 2, not rlcore exiting 3."""
    wrapper = "env.wrappers=[{wrapper: hostile_wrappers.ExitsInStep, kwargs: {after: 20}}]"
    outcome = rlcore_train(hostile, wrapper, "train.max_steps=4096")
    assert_refused(outcome, "env.id: CartPole-v1 (or one of env.wrappers) raised in step 21: SystemExit: 3")


def test_a_wrong_wrapper_kwarg_is_refused_under_that_wrappers_kwargs(hostile: Path):
    outcome = rlcore_train(
        hostile,
        "env.wrappers=[{wrapper: gymnasium.wrappers.ClipReward}, {wrapper: hostile_wrappers.RaisesInStep, "
        "kwargs: {afterr: 3}}]",
    )
    assert_refused(outcome, "env.wrappers.1.kwargs:", "unexpected keyword argument 'afterr'", "(env, after=20)")


def test_a_parameters_adapter_that_raises_at_import_is_one_error_line(hostile: Path):
    outcome = rlcore_train(hostile, "env.parameters_adapter=raises_at_import:adapt", "env.parameters={length: 0.5}")
    assert_refused(outcome, "env.parameters_adapter:", "ZeroDivisionError", "(traceback in runs/error.log)")
    logged_traceback(hostile, "runs/error.log", "raises_at_import.py")


STEP_FAILURES = {
    "ppo": ("params.yaml", ["train.max_steps=4096"]),
    "dqn": ("configs/dqn-cartpole.yaml", ["train.max_steps=4096", "algo.learning_starts=100"]),
    "es": ("configs/es-cartpole.yaml", ["algo.runner=local", "algo.num_workers=1"]),
    "impala": ("configs/impala-cartpole.yaml", ["algo.runner=local", "algo.num_actors=1"]),
}


@pytest.mark.serial  # ES's workers and IMPALA's actors are processes
@pytest.mark.parametrize("family", list(STEP_FAILURES))
def test_a_wrapper_that_raises_mid_training_is_one_error_line_naming_the_env_and_the_step(hostile: Path, family: str):
    params, overrides = STEP_FAILURES[family]
    wrapper = "env.wrappers=[{wrapper: hostile_wrappers.RaisesInStep, kwargs: {after: 20}}]"
    outcome = rlcore_train(hostile, wrapper, *overrides, params=params)
    line = assert_refused(
        outcome,
        "env.id: CartPole-v1 (or one of env.wrappers) raised in step 21: RuntimeError: the wrapper broke at step 21",
        "(traceback in runs/uc/error.log)",
    )
    assert len(line) < 300, line
    logged_traceback(hostile, "runs/uc/error.log", "hostile_wrappers.py", "RaisesInStep")


@pytest.mark.serial  # an actor process
def test_a_wrapper_that_raises_only_in_impalas_actor_processes_is_one_error_line(hostile: Path):
    wrapper = "env.wrappers=[{wrapper: hostile_wrappers.RaisesInInit, kwargs: {only_in_children: true}}]"
    overrides = ["algo.runner=local", "algo.num_actors=1"]
    outcome = rlcore_train(hostile, wrapper, *overrides, params="configs/impala-cartpole.yaml")
    assert_refused(outcome, "env.wrappers.0.wrapper: hostile_wrappers.RaisesInInit raised when built: RuntimeError")
    logged_traceback(hostile, "runs/uc/error.log", "hostile_wrappers.py")


def test_an_env_that_raises_mid_episode_is_one_error_line_naming_it_and_the_step(hostile: Path):
    outcome = rlcore_train(hostile, "env.id=hostile_wrappers:Crashing-v0", "train.max_steps=4096")
    assert_refused(
        outcome,
        "env.id: hostile_wrappers:Crashing-v0 raised in step 6: FloatingPointError: the simulator crashed mid-episode",
    )
    logged_traceback(hostile, "runs/uc/error.log", "hostile_wrappers.py", "in step")


def test_an_exceptions_message_is_kept_to_one_short_line_and_its_details_survive_pickling():
    try:
        raise RuntimeError("first line\n" + "x" * 2000)
    except RuntimeError as exc:
        error = UserCodeError.raised("env.id: Some-v0 raised in step 3", exc)
    assert "\n" not in str(error) and len(str(error)) < 400
    assert str(error).startswith("env.id: Some-v0 raised in step 3: RuntimeError: first line xxx")
    assert "Traceback" in error.details and "first line" in error.details
    copy = pickle.loads(pickle.dumps(error))
    assert (str(copy), copy.details) == (str(error), error.details)
    assert describe_exception(KeyError()) == "KeyError"


def test_an_env_that_raises_during_evaluate_is_one_error_line(hostile: Path):
    trained = rlcore_train(hostile, "train.max_steps=1024", "train.eval_every=1024", "train.eval_episodes=2")
    assert trained.returncode == 0, trained
    wrapper = "env.wrappers=[{wrapper: hostile_wrappers.RaisesInStep, kwargs: {after: 5}}]"
    args = ["evaluate", "--params", str(PROJECT / "params.yaml"), *sets([*SMALL, wrapper, "eval.episodes=2"])]
    outcome = run_in_process(args, hostile, limit=120)
    assert_refused(outcome, "env.id: CartPole-v1 (or one of env.wrappers) raised in step 6: RuntimeError")
    logged_traceback(hostile, "runs/uc/error.log", "RaisesInStep")


def test_the_load_time_check_of_user_code_works_when_the_process_holds_over_1024_descriptors(tmp_path: Path) -> None:
    """A long-lived process (a test session, a sweep driver) reaches descriptor numbers past select()'s FD_SETSIZE
    (1024): the check's pipe must still be read (it was refused: "filedescriptor out of range in select()")."""
    import resource

    from rlcore.envs.user_code import UserCode, run_bounded

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < 1200:
        pytest.skip(f"the descriptor limit is {hard}")
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, 1200), hard))
    held = [os.open(tmp_path, os.O_RDONLY) for _ in range(1100)]
    try:
        run_bounded(lambda: None, [UserCode("env.opponent", "mine:player", "playing its test game")], seconds=30)
        with pytest.raises(ValueError, match=r"env\.opponent: mine:player called sys\.exit\(3\)"):
            run_bounded(
                lambda: sys.exit(3), [UserCode("env.opponent", "mine:player", "playing its test game")], seconds=30
            )
    finally:
        for fd in held:
            os.close(fd)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
