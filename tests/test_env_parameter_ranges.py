"""The valid ranges of known envs' parameters (``rlcore.envs.parameters.RANGES``): in step with the envs, refusing
at load every constant or sampler that can leave them, and refusing only what really breaks the physics."""

from __future__ import annotations

from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
from cli_support import run_in_process
from conftest import one_line_error

from rlcore.common.errors import UserCodeError
from rlcore.envs.config import EnvConfig
from rlcore.envs.parameters import RANGES, EnvParameters, catalogue, check_parameters
from rlcore.envs.settings import Constant, parse_sampler
from rlcore.envs.stepping import NonFiniteError, VectorStepper
from rlcore.envs.vector import make_vector_env

ENV_OF = {
    "gymnasium.envs.classic_control.cartpole.CartPoleEnv": "CartPole-v1",
    "gymnasium.envs.classic_control.pendulum.PendulumEnv": "Pendulum-v1",
    "gymnasium.envs.classic_control.mountain_car.MountainCarEnv": "MountainCar-v0",
    "gymnasium.envs.classic_control.continuous_mountain_car.Continuous_MountainCarEnv": "MountainCarContinuous-v0",
    "gymnasium.envs.classic_control.acrobot.AcrobotEnv": "Acrobot-v1",
}


@pytest.mark.parametrize("cls", sorted(RANGES))
def test_every_ranged_name_is_a_parameter_of_its_env_and_its_default_is_in_range(cls: str):
    env_id = ENV_OF[cls]
    found = catalogue(env_id, {})
    assert found.ranges == RANGES[cls]
    probe = gym.make(env_id)
    try:
        for name, valid in RANGES[cls].items():
            assert name in found.attributes or name in found.constructor, f"{env_id} has no parameter {name!r}"
            assert valid.admits(float(getattr(probe.unwrapped, name))), f"{env_id}'s default {name} is refused"
    finally:
        probe.close()


def _check(env_id: str, name: str, value: object) -> None:
    check_parameters(env_id, {}, None, {name: parse_sampler(value)}, "env.parameters")


@pytest.mark.parametrize(
    "env_id,name,value,message",
    [
        ("CartPole-v1", "length", 0, "env.parameters.length: CartPole-v1's 'length' must be > 0, got 0"),
        ("CartPole-v1", "masscart", -0.1, "must be > 0, got -0.1"),
        ("CartPole-v1", "masspole", {"sampler": "uniform", "low": 0.0, "high": 1.0}, "a uniform sampler from 0 to 1"),
        ("CartPole-v1", "length", {"sampler": "gaussian", "mean": 1.0, "std": 0.1}, "a gaussian sampler is unclipped"),
        (
            "CartPole-v1",
            "tau",
            {"sampler": "multirange_uniform", "intervals": [[0.01, 0.02], [-0.02, -0.01]]},
            "the interval [-0.02, -0.01]",
        ),
        ("Pendulum-v1", "m", 0.0, "Pendulum-v1's 'm' must be > 0, got 0"),
        ("Pendulum-v1", "l", -1.0, "Pendulum-v1's 'l' must be > 0, got -1"),
        ("Acrobot-v1", "LINK_MASS_2", 0.0, "must be > 0"),
        ("Acrobot-v1", "LINK_MOI", -1.0, "must be >= 0, got -1"),
        ("MountainCar-v0", "max_speed", 0.0, "must be > 0"),
    ],
)
def test_a_value_or_sampler_outside_the_range_is_refused_in_one_line(
    env_id: str, name: str, value: object, message: str
):
    with pytest.raises(ValueError, match=r"^env\.parameters\." + name) as caught:
        _check(env_id, name, value)
    assert message in str(caught.value) and "\n" not in str(caught.value)


@pytest.mark.parametrize(
    "env_id,name,value",
    [
        ("CartPole-v1", "length", {"sampler": "uniform", "low": 0.05, "high": 2.0}),
        ("CartPole-v1", "length", {"sampler": "gaussian", "mean": 1.0, "std": 0.0}),  # a constant
        ("CartPole-v1", "force_mag", {"sampler": "gaussian", "mean": 10.0, "std": 1.0}),  # no range: any finite
        ("CartPole-v1", "gravity", -9.8),  # gravity upwards: odd, not broken
        ("Pendulum-v1", "g", 0.0),
        ("Acrobot-v1", "LINK_MOI", 0.0),  # point masses
    ],
)
def test_values_in_range_and_parameters_without_one_are_accepted(env_id: str, name: str, value: object):
    _check(env_id, name, value)


@pytest.mark.parametrize(
    "env_id,parameters,error,message",
    [
        ("CartPole-v1", {"length": 0.0}, NonFiniteError, r"^CartPole-v1 \(sub-env 0, env step 0\): the env returned"),
        ("CartPole-v1", {"masscart": -0.1}, NonFiniteError, "non-finite observation"),  # masspole 0.1: total mass 0
        ("Pendulum-v1", {"m": 0.0}, UserCodeError, "raised in step 1: ZeroDivisionError"),  # Python floats: it raises
    ],
)
def test_what_the_ranges_refuse_really_breaks_the_physics(
    env_id: str, parameters: dict[str, float], error: type[Exception], message: str
):
    """Applied anyway (the run-time path, past the load check): CartPole's states turn non-finite, which the stepper
    refuses in one line; Pendulum divides by zero."""
    settings = EnvParameters(env_id, {}, {name: Constant(value=value) for name, value in parameters.items()})
    env = make_vector_env(EnvConfig(id=env_id), 2, settings)
    stepper = VectorStepper(env)
    actions = np.zeros(2, dtype=np.int64) if env_id == "CartPole-v1" else np.ones((2, 1), dtype=np.float32)
    try:
        with np.errstate(all="ignore"), pytest.raises(error, match=message):
            stepper.reset(seed=0)
            for _ in range(5):
                stepper.step(actions)
    finally:
        env.close()


ISSUE_COMMANDS = [
    (["train", "--set", "env.parameters={length: 0}"], "env.parameters.length: CartPole-v1's 'length' must be > 0"),
    (["train", "--set", "env.parameters={masscart: -0.1}"], "env.parameters.masscart: CartPole-v1's 'masscart'"),
    (
        [
            "train",
            "--set",
            "env.curriculum=[{name: a, parameters: {length: 1.0}, until: {measure: progress, threshold: 0.5}}, "
            "{name: b, parameters: {length: 0}}]",
        ],
        "env.curriculum.1.parameters.length: CartPole-v1's 'length' must be > 0, got 0",
    ),
    (
        ["evaluate", "--set", "eval.settings=[{name: neg, parameters: {masscart: -0.1}}]"],
        "eval.settings.0.parameters.masscart: CartPole-v1's 'masscart' must be > 0, got -0.1",
    ),
]


def test_the_issues_commands_are_refused_in_one_line_through_the_command(project: Path):
    """Before: a traceback from ``dist.sample()`` in training, a score of 500.0 from ``rlcore evaluate``."""
    for args, fragment in ISSUE_COMMANDS:
        one_line_error(run_in_process(args, project), fragment)
    assert not (project / "runs").exists()  # refused before anything is written
