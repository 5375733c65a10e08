"""A centralized critic (issue 29, ``policy.critic: centralized``, MAPPO): the value function reads the env's global
``state()`` and the agent's one-hot (``rlcore.nets.central_critic``, ``rlcore.trainers.critic_rows``); the actor,
and so the exported model, reads the agent's observation only."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime
import pytest
import torch
from conftest import outputs
from gymnasium import spaces

from rlcore.common.errors import ConfigError
from rlcore.envs.vector import make_vector_env
from rlcore.nets.central_critic import CentralizedActorCritic
from rlcore.params import validate_params
from rlcore.registry import build_policy
from rlcore.stages.evaluate import evaluate_stage
from rlcore.stages.export import export_stage
from rlcore.stages.select import select_stage
from rlcore.trainers import train

STATEFUL = "pettingzoo:test_multiagent_central_critic:state_env"
"""This module's two-agent env with a global state (the tests folder is on the path when pytest runs)."""


class StateEnv:
    """Agents ``a`` and ``b`` observe [step] only; the global state is [seed digit, step, 5]. Each agent earns 1
    per step; both are truncated at step 3. Actions are Discrete(2) and do not matter."""

    metadata = {"name": "state_v0"}

    def __init__(self, with_state: bool = True) -> None:
        self.possible_agents = ["a", "b"]
        self.agents: list[str] = []
        self.steps, self.seed_digit, self.max_cycles = 0, 0.0, 3
        self.unwrapped = self
        self.with_state = with_state

    def observation_space(self, agent: str) -> spaces.Space:
        return spaces.Box(-100.0, 100.0, (1,), np.float32)

    def action_space(self, agent: str) -> spaces.Space:
        return spaces.Discrete(2)

    def state(self) -> np.ndarray:
        if not self.with_state:
            raise NotImplementedError("no global state")
        return np.array([self.seed_digit, self.steps, 5], np.float32)

    def reset(self, seed: int | None = None, options: Any = None) -> tuple[dict[str, Any], dict[str, Any]]:
        if seed is not None:
            self.seed_digit = float(seed % 10)
        self.agents, self.steps = list(self.possible_agents), 0
        return {agent: np.array([0], np.float32) for agent in self.agents}, {agent: {} for agent in self.agents}

    def step(self, actions: dict[str, Any]) -> tuple[dict[str, Any], ...]:
        self.steps += 1
        observations = {agent: np.array([self.steps], np.float32) for agent in self.agents}
        truncated = {agent: self.steps >= 3 for agent in self.agents}
        rewards = {agent: 1.0 for agent in self.agents}
        if self.steps >= 3:
            self.agents = []
        return observations, rewards, dict.fromkeys(truncated, False), truncated, {a: {} for a in observations}

    def close(self) -> None:
        pass


def state_env(with_state: bool = True) -> StateEnv:
    return StateEnv(with_state)


def _tree(**change: Any) -> dict[str, Any]:
    return {
        "name": "mappo",
        "env": {"id": STATEFUL, "num_envs": 2},
        "policy": {"hidden_sizes": [8], "critic": "centralized"},
        "algo": {"name": "ppo", "n_steps": 6, "batch_size": 12, "n_epochs": 2},
        "train": {"max_steps": 48, "eval_every": 24, "log_every": 24, "eval_episodes": 2, "progress_bar": False},
        "eval": {"episodes": 2, "test_episodes": 2},
        "export": {"parity_observations": 8},
    } | change


def test_critic_inputs_are_each_copys_state_and_the_agents_one_hot() -> None:
    """Hand-checked after a reset with seed 7 and one step: copy i's state [7 + i, 1, 5], then a's or b's one-hot."""
    env = make_vector_env(validate_params(_tree()).env, 2)
    env.reset(seed=7)
    env.step(np.zeros(4, dtype=np.int64))
    expected = [[7, 1, 5, 1, 0], [7, 1, 5, 0, 1], [8, 1, 5, 1, 0], [8, 1, 5, 0, 1]]
    np.testing.assert_array_equal(env.unwrapped.critic_inputs(), np.array(expected, np.float32))
    env.close()


def test_the_critic_reads_the_state_and_the_actor_the_observation_only() -> None:
    """Two training rows with one observation and different states: one action distribution, two values."""
    params = validate_params(_tree())
    env = make_vector_env(params.env, 1)
    policy = build_policy(
        "ppo", env.single_observation_space, env.single_action_space, params.policy, params.algo, params.env
    )
    env.close()
    assert isinstance(policy, CentralizedActorCritic) and policy.critic_width == 5
    obs = torch.tensor([[2.0, 1.0, 0.0]] * 2)  # [step, one-hot of a]
    rows = torch.cat([obs, torch.tensor([[7.0, 2.0, 5.0, 1.0, 0.0], [3.0, 2.0, 5.0, 1.0, 0.0]])], dim=1)
    with torch.no_grad():
        features = policy.features(rows)
        values = policy.value_of(features)
        logits = policy.distribution_of(features).logits
    assert values[0] != values[1]
    torch.testing.assert_close(logits[0], logits[1], rtol=0, atol=0)
    torch.testing.assert_close(policy.act_scores(obs), policy.actor(policy.features(obs)), rtol=0, atol=0)


@pytest.mark.slow  # a whole pipeline: train, evaluate, select, export
def test_a_short_run_exports_the_actor_only(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    params = validate_params(_tree())
    summary = train(params, tmp_path / "runs" / "mappo")
    assert (
        summary["gradient_steps"] > 0 and summary["evaluations"][-1]["mean_return"] == 3.0
    )  # 3 steps of 1 each, mean over agents
    evaluate_stage(params, tmp_path)
    select_stage(params, tmp_path)
    export_stage(params, tmp_path)
    card = json.loads((outputs(tmp_path).export / "model_card.json").read_text())
    assert card["observation_space"]["shape"] == [3]  # [step, one-hot]: no state
    session = onnxruntime.InferenceSession(str(outputs(tmp_path).export / "policy.onnx"))
    assert [tuple(i.shape)[1:] for i in session.get_inputs()] == [(3,)]


def test_an_env_without_a_state_is_refused() -> None:
    with pytest.raises(ConfigError, match=r"policy.critic: centralized needs the env's global state\(\).*no global"):
        validate_params(_tree(env={"id": STATEFUL, "kwargs": {"with_state": False}}))
