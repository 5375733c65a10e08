"""ES steps as OpenAI's ``es_distributed`` does (issue 25, finding 2).

OpenAI's ``es.py``: ``g = batched_weighted_sum(F+ - F-, eps) / returns_n2.size`` (the number of rollouts, 2 per
pair), then ``optimizer.update(-g + l2coeff * theta)``; ``optimizers.py``: SGD ``v = m v + (1 - m) x`` from
``v = 0``, ``step = -stepsize v``; Adam with ``a = stepsize sqrt(1 - b2^t) / (1 - b1^t)``, ``step = -a m / (sqrt(v) +
eps)``. The optimizers by hand (numbers in the tests), ES's whole iteration against a NumPy transcription of those
lines, and the optimizer state through a checkpoint round trip.
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
from conftest import PROJECT
from torch.nn.utils import parameters_to_vector

from rlcore.algos.es import ES
from rlcore.params import load_params
from rlcore.population.noise import noise_rows, noise_table
from rlcore.population.tasks import PairResults

ES_PRESET = PROJECT / "configs" / "es-cartpole.yaml"

# Two iterations of 3 antithetic pairs, distinct returns; their centered ranks (rank / 5 - 0.5) by hand.
RETURNS = [np.array([[10.0, 0.0], [3.0, 7.0], [5.0, 1.0]]), np.array([[1.0, 2.0], [6.0, 4.0], [0.0, 9.0]])]
WEIGHTS = [np.array([1.0, -0.4, 0.4]), np.array([-0.2, 0.2, -1.0])]
"""F+ - F- per pair: 10 -> 0.5, 0 -> -0.5; 3 -> -0.1, 7 -> 0.3; 5 -> 0.1, 1 -> -0.3 (and likewise the second)."""


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
