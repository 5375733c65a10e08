"""ES steps as OpenAI's ``es_distributed`` does (issue 25, findings 2 and 3).

OpenAI's ``es.py``: ``g = batched_weighted_sum(F+ - F-, eps) / returns_n2.size`` (the number of rollouts, 2 per
pair), then ``optimizer.update(-g + l2coeff * theta)``; ``optimizers.py``: SGD ``v = m v + (1 - m) x`` from
``v = 0``, ``step = -stepsize v``; Adam with ``a = stepsize sqrt(1 - b2^t) / (1 - b1^t)``, ``step = -a m / (sqrt(v) +
eps)``. The optimizers by hand (numbers in the tests), ES's whole iteration against a NumPy transcription of those
lines, and the optimizer state through a checkpoint round trip.
"""

from __future__ import annotations

import io
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import torch
from conftest import PROJECT
from torch.nn.utils import parameters_to_vector

from rlcore.algos.es import ES
from rlcore.algos.es_optimizers import OpenAIAdam, OpenAISGD
from rlcore.algos.noise_table import noise_rows, noise_table
from rlcore.algos.population_tasks import PairResults
from rlcore.params import load_params

ES_PRESET = PROJECT / "configs" / "es-cartpole.yaml"

# Two iterations of 3 antithetic pairs, distinct returns; their centered ranks (rank / 5 - 0.5) by hand.
RETURNS = [np.array([[10.0, 0.0], [3.0, 7.0], [5.0, 1.0]]), np.array([[1.0, 2.0], [6.0, 4.0], [0.0, 9.0]])]
WEIGHTS = [np.array([1.0, -0.4, 0.4]), np.array([-0.2, 0.2, -1.0])]
"""F+ - F- per pair: 10 -> 0.5, 0 -> -0.5; 3 -> -0.1, 7 -> 0.3; 5 -> 0.1, 1 -> -0.3 (and likewise the second)."""


# --- the optimizers by hand ---------------------------------------------------------------------------------------


def _steps(optimizer_class: type[torch.optim.Optimizer], **kwargs: Any) -> list[list[float]]:
    """theta = (1, -2) in float64, stepped on the gradients (0.5, -0.25) then (-1, 0.5) at lr 0.1."""
    theta = torch.nn.Parameter(torch.tensor([1.0, -2.0], dtype=torch.float64))
    optimizer = optimizer_class([theta], lr=0.1, **kwargs)
    seen = []
    for gradient in ([0.5, -0.25], [-1.0, 0.5]):
        theta.grad = torch.tensor(gradient, dtype=torch.float64)
        optimizer.step()
        seen.append(theta.detach().tolist())
    return seen


def test_openai_sgd_averages_the_gradient_from_a_zero_velocity():
    # v1 = 0.1 * (0.5, -0.25) = (0.05, -0.025); theta1 = theta0 - 0.1 v1
    # v2 = 0.9 v1 + 0.1 * (-1, 0.5) = (-0.055, 0.0275); theta2 = theta1 - 0.1 v2
    first, second = _steps(OpenAISGD, momentum=0.9)
    assert first == pytest.approx([0.995, -1.9975], abs=1e-12)
    assert second == pytest.approx([1.0005, -2.00025], abs=1e-12)
    # torch's SGD with dampening starts its buffer at the gradient: a first step 10x OpenAI's
    torch_first, _ = _steps(torch.optim.SGD, momentum=0.9, dampening=0.9)
    assert torch_first == pytest.approx([0.95, -1.975], abs=1e-12)
    assert _steps(OpenAISGD, momentum=0.0)[0] == pytest.approx([0.95, -1.975], abs=1e-12)  # plain SGD


def test_openai_adam_folds_the_bias_correction_into_the_step_size():
    # t = 1: a = 0.1 sqrt(0.001) / 0.1; m = (0.05, -0.025), v = 0.001 (0.25, 0.0625); step = -a m / (sqrt(v) + 1e-8)
    # t = 2: a = 0.1 sqrt(1 - 0.999^2) / (1 - 0.9^2); m = (-0.055, 0.0275), v = (0.00124975, 0.0003124375)
    first, second = _steps(OpenAIAdam)
    assert first == pytest.approx([0.900000063246, -1.900000126491], abs=1e-11)
    assert second == pytest.approx([0.936610405593, -1.936610458483], abs=1e-11)
    # torch's Adam divides by sqrt(v_hat) + eps, i.e. its eps is sqrt(1 - beta2^t) times OpenAI's: within 2e-7
    torch_first, torch_second = _steps(torch.optim.Adam)
    assert torch_first == pytest.approx(first, abs=2e-7) and torch_first != pytest.approx(first, abs=1e-9)
    assert torch_second == pytest.approx(second, abs=1e-6)


# --- ES's iteration against OpenAI's lines ------------------------------------------------------------------------


def _es(*overrides: str) -> ES:
    params = load_params(ES_PRESET, ["algo.population_size=6", *overrides])
    env = gym.make("CartPole-v1")
    policy = ES.make_policy(env.observation_space, env.action_space, params.policy, params.algo)
    return ES(policy, params.algo)


def _tell(es: ES, iteration: int) -> np.ndarray:
    """One ES iteration with :data:`RETURNS`; the rows of noise it drew, (3, dim)."""
    tasks = es.ask(seed=iteration, first_env_seed=100)
    assert len(tasks) == 1 and len(tasks[0].offsets) == 3
    pairs = 3
    empty = np.zeros((pairs, 2, 4))
    results = [
        PairResults(0, RETURNS[iteration], np.ones((pairs, 2), np.int64), np.zeros((pairs, 2), bool), empty, empty)
    ]
    es.tell(tasks, results, 0.0)
    cfg = es.config
    return noise_rows(noise_table(cfg.noise_seed, cfg.noise_table_size), tasks[0].offsets, es.theta.numel()).astype(
        np.float64
    )


def _theta(es: ES) -> np.ndarray:
    return parameters_to_vector(es.policy.parameters()).detach().numpy().astype(np.float64)


class OpenAIReference:
    """OpenAI's master update, line for line in NumPy (float64): ``g /= returns_n2.size``, then ``optimizer.update(-g
    + config.l2coeff * theta)`` with its SGD or Adam."""

    def __init__(self, kind: str, stepsize: float, momentum: float, l2coeff: float) -> None:
        self.kind, self.stepsize, self.momentum, self.l2coeff = kind, stepsize, momentum, l2coeff
        self.t, self.v, self.m = 0, 0.0, 0.0

    def update(self, theta: np.ndarray, weights: np.ndarray, eps: np.ndarray) -> np.ndarray:
        g = weights @ eps
        g /= 2 * len(weights)  # returns_n2.size
        globalg = -g + self.l2coeff * theta
        self.t += 1
        if self.kind == "sgd":
            self.v = self.momentum * self.v + (1.0 - self.momentum) * globalg
            step = -self.stepsize * self.v
        else:
            a = self.stepsize * np.sqrt(1 - 0.999**self.t) / (1 - 0.9**self.t)
            self.m = 0.9 * self.m + (1 - 0.9) * globalg
            self.v = 0.999 * self.v + (1 - 0.999) * (globalg * globalg)
            step = -a * self.m / (np.sqrt(self.v) + 1e-08)
        return theta + step


def test_an_es_step_with_plain_sgd_is_openais_not_twice_it():
    es = _es("algo.optimizer=sgd", "algo.momentum=0", "algo.lr=1", "algo.weight_decay=0")
    before = _theta(es)
    eps = _tell(es, 0)
    step = _theta(es) - before
    openai = OpenAIReference("sgd", 1.0, 0.0, 0.0).update(before, WEIGHTS[0], eps) - before
    assert np.linalg.norm(step) / np.linalg.norm(openai) == pytest.approx(1.0, abs=1e-5)  # was 2.000
    assert np.allclose(step, openai, rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize(
    ("kind", "lr", "momentum"), [("sgd", 0.5, 0.9), ("adam", 0.06, 0.9)], ids=["sgd-momentum-0.9", "adam"]
)
def test_two_es_iterations_with_weight_decay_step_as_openais(kind: str, lr: float, momentum: float):
    es = _es(f"algo.optimizer={kind}", f"algo.lr={lr}", f"algo.momentum={momentum}", "algo.weight_decay=0.005")
    reference = OpenAIReference(kind, lr, momentum, 0.005)
    expected = _theta(es)
    for iteration in range(2):
        eps = _tell(es, iteration)
        expected = reference.update(expected, WEIGHTS[iteration], eps)
        assert np.allclose(_theta(es), expected, rtol=1e-5, atol=1e-6), f"iteration {iteration}"
    # the L2 term pulls towards 0: without it both iterations end elsewhere
    plain = _es(f"algo.optimizer={kind}", f"algo.lr={lr}", f"algo.momentum={momentum}", "algo.weight_decay=0")
    for iteration in range(2):
        _tell(plain, iteration)
    assert not np.allclose(_theta(plain), _theta(es), rtol=1e-5, atol=1e-6)


def _through_a_file(state: dict[str, Any]) -> dict[str, Any]:
    buffer = io.BytesIO()
    torch.save(state, buffer)
    buffer.seek(0)
    return torch.load(buffer, weights_only=True)


@pytest.mark.parametrize("kind", ["sgd", "adam"])
def test_the_optimizer_state_is_saved_and_a_resumed_es_steps_bitwise_as_an_uninterrupted_one(kind: str):
    whole = _es(f"algo.optimizer={kind}")
    _tell(whole, 0)
    resumed = _es(f"algo.optimizer={kind}")  # other initial weights: everything comes from the state
    state = _through_a_file(whole.state_dict())
    assert state["optimizer"]["state"][0]  # the velocity, or Adam's step and moments
    resumed.policy.load_state_dict(whole.policy.state_dict())
    resumed.load_state_dict(state)
    _tell(whole, 1)
    _tell(resumed, 1)
    assert torch.equal(resumed.theta.detach(), whole.theta.detach())
    for key, value in whole.optimizer.state_dict()["state"][0].items():
        assert torch.equal(resumed.optimizer.state_dict()["state"][0][key], value), key
