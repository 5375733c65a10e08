"""Multi-agent envs (issue 29): a PettingZoo Parallel env's agents as rows of a vector env (``rlcore.envs.multiagent``),
episodes scored by ``eval.return_reduction`` (``rlcore.envs.return_reduction``), and PPO with one shared policy on MPE
simple_spread."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from gymnasium import spaces

from rlcore.common.checkpoints import load_checkpoint
from rlcore.config.sections import PolicyConfig
from rlcore.envs.config import EnvConfig
from rlcore.envs.return_reduction import reduce_returns
from rlcore.envs.stepping import VectorStepper
from rlcore.envs.vector import make_vector_env
from rlcore.evaluation.evaluator import Evaluator
from rlcore.params import load_params, validate_params
from rlcore.registry import algorithm_class
from rlcore.trainers import train

PROJECT = Path(__file__).resolve().parents[1]
TINY = "pettingzoo:test_multiagent:tiny_parallel_env"
"""This module's two-agent env (the tests folder is on the path when pytest runs)."""


class TinyParallelEnv:
    """Two agents, ``a`` and ``b``, whose observations are [own step count, the seed's last digit]. Agent ``b``
    terminates at its 2nd step with reward 3 per step; agent ``a`` is truncated at step ``max_cycles`` (4) with
    reward 1 per step. Actions are Discrete(2) and do not matter."""

    metadata = {"name": "tiny_v0"}

    def __init__(self, max_cycles: int = 4) -> None:
        self.possible_agents = ["a", "b"]
        self.agents: list[str] = []
        self.max_cycles = max_cycles
        self.steps = 0
        self.seed_digit = 0.0
        self.unwrapped = self

    def observation_space(self, agent: str) -> spaces.Space:
        return spaces.Box(-100.0, 100.0, (2,), np.float32)

    def action_space(self, agent: str) -> spaces.Space:
        return spaces.Discrete(2)

    def _obs(self) -> dict[str, np.ndarray]:
        return {agent: np.array([self.steps, self.seed_digit], np.float32) for agent in self.agents}

    def reset(self, seed: int | None = None, options: Any = None) -> tuple[dict[str, Any], dict[str, Any]]:
        if seed is not None:
            self.seed_digit = float(seed % 10)
        self.agents, self.steps = list(self.possible_agents), 0
        return self._obs(), {agent: {} for agent in self.agents}

    def step(self, actions: dict[str, Any]) -> tuple[dict[str, Any], ...]:
        assert set(actions) == set(self.agents), (actions, self.agents)
        self.steps += 1
        rewards = {agent: {"a": 1.0, "b": 3.0}[agent] for agent in self.agents}
        terminated = {agent: agent == "b" and self.steps == 2 for agent in self.agents}
        truncated = {agent: agent == "a" and self.steps >= self.max_cycles for agent in self.agents}
        observations = self._obs()
        self.agents = [agent for agent in self.agents if not (terminated[agent] or truncated[agent])]
        return observations, rewards, terminated, truncated, {agent: {} for agent in observations}

    def close(self) -> None:
        pass


def tiny_parallel_env(max_cycles: int = 4) -> TinyParallelEnv:
    return TinyParallelEnv(max_cycles)


class JoiningParallelEnv(TinyParallelEnv):
    """Agents ``a``, ``b``, ``c``; only ``a`` at reset. ``b`` joins after step 1 (in its observations), acts at steps
    2 and 3 and terminates at step 3 with reward 3 per step; ``c`` never joins; ``a`` earns 1 per step and is
    truncated at step 4."""

    def __init__(self) -> None:
        super().__init__()
        self.possible_agents = ["a", "b", "c"]

    def reset(self, seed: int | None = None, options: Any = None) -> tuple[dict[str, Any], dict[str, Any]]:
        observations, infos = super().reset(seed, options)
        self.agents = ["a"]
        return {"a": observations["a"]}, {"a": infos["a"]}

    def step(self, actions: dict[str, Any]) -> tuple[dict[str, Any], ...]:
        assert set(actions) == set(self.agents), (actions, self.agents)
        self.steps += 1
        rewards = {agent: {"a": 1.0, "b": 3.0}[agent] for agent in self.agents}
        terminated = {agent: agent == "b" and self.steps == 3 for agent in self.agents}
        truncated = {agent: agent == "a" and self.steps >= 4 for agent in self.agents}
        self.agents = [agent for agent in self.agents if not (terminated[agent] or truncated[agent])]
        if self.steps == 1:
            self.agents.append("b")
        present = sorted({*rewards, *self.agents})
        observations = {agent: np.array([self.steps, self.seed_digit], np.float32) for agent in present}
        return observations, rewards, terminated, truncated, {agent: {} for agent in observations}


def joining_parallel_env() -> JoiningParallelEnv:
    return JoiningParallelEnv()


JOINING = "pettingzoo:test_multiagent:joining_parallel_env"


def test_an_agent_absent_at_reset_acts_from_the_step_after_it_joins() -> None:
    """Rows a, b, c: b joins after step 1 and acts at steps 2-3, c never acts (a zero observation); step 5 resets."""
    env = make_vector_env(EnvConfig(id=JOINING), num_envs=1)
    stepper = VectorStepper(env)
    stepper.reset(seed=0)
    np.testing.assert_array_equal(stepper.obs[1], [0, 0, 0, 1, 0])  # b, absent: zeros, then its one-hot
    seen = [stepper.step(np.zeros(3, dtype=np.int64)) for _ in range(5)]
    valid = [step.valid.tolist() for step in seen]
    assert valid == [[True, False, False], [True, True, False], [True, True, False], [True, False, False]] + [
        [False, False, False]
    ]
    np.testing.assert_array_equal(np.array([step.rewards for step in seen])[:, 1], [0, 3, 3, 0, 0])
    env.close()


@pytest.mark.parametrize(("reduction", "score"), [("mean", 5.0), ("sum", 10.0), ("min", 4.0), ("max", 6.0), ("c", 0)])
def test_evaluation_scores_the_agents_that_acted_including_one_that_joined_late(reduction: str, score: float) -> None:
    """a earns 1 for 4 steps, b (absent at reset) 3 for 2 steps, c never acts: each episode scores over a and b
    only, and lasts 4 steps, cut by a's time limit."""
    env = EnvConfig(id=JOINING)
    space = make_vector_env(env, 1).single_observation_space
    ppo = algorithm_class("ppo")
    policy = ppo.make_policy(space, spaces.Discrete(2), PolicyConfig(), ppo.Config(name="ppo"))
    evaluator = Evaluator(env, episodes=3, seed=0, max_parallel_envs=2, return_reduction=reduction)
    result = evaluator.evaluate(policy)
    evaluator.close()
    assert result.returns == [score] * 3 and result.lengths == [4] * 3 and result.truncated == 3
    assert result.agent_returns == {"a": [4.0] * 3, "b": [6.0] * 3, "c": [0.0] * 3}


def test_each_agent_of_each_copy_is_a_row_with_its_one_hot_and_seeded_per_copy() -> None:
    env = make_vector_env(EnvConfig(id=TINY), num_envs=2)
    assert env.num_envs == 4 and env.single_observation_space.shape == (4,)
    obs, _ = env.reset(seed=7)
    # rows: (copy 0, a), (copy 0, b), (copy 1, a), (copy 1, b); [steps, seed digit, one-hot of a, one-hot of b]
    expected = [[0, 7, 1, 0], [0, 7, 0, 1], [0, 8, 1, 0], [0, 8, 0, 1]]
    np.testing.assert_array_equal(obs, np.array(expected, np.float32))
    env.close()


def test_an_agent_that_leaves_early_is_no_transition_until_its_copy_resets() -> None:
    """Hand-checked: b terminates at step 2, a is truncated at step 4, step 5 resets the copy."""
    env = make_vector_env(EnvConfig(id=TINY), num_envs=1)
    stepper = VectorStepper(env)
    stepper.reset(seed=0)
    seen = [stepper.step(np.zeros(2, dtype=np.int64)) for _ in range(6)]
    valid = [step.valid.tolist() for step in seen]
    assert valid == [[True, True], [True, True], [True, False], [True, False], [False, False], [True, True]]
    assert [step.terminated.tolist() for step in seen][1] == [False, True]
    assert [step.truncated.tolist() for step in seen][3] == [True, False]
    assert [step.ended.tolist() for step in seen] == [[False, False], [False, True], [False, False], [True, False]] + [
        [False, False]
    ] * 2
    rewards = np.array([step.rewards for step in seen])
    np.testing.assert_array_equal(rewards[:, 1], [3, 3, 0, 0, 0, 3])  # nothing after b left, nor at the reset
    np.testing.assert_array_equal(seen[2].next_obs[1][:2], [2, 0])  # b's row repeats its last observation
    np.testing.assert_array_equal(seen[4].next_obs[:, 0], [0, 0])  # the reset step's observations are fresh
    env.close()


def test_return_reduction_over_agents_and_by_name() -> None:
    returns = np.array([[1.0, 2.0, 6.0], [-1.0, 0.0, 4.0]])
    agents = ("x", "y", "z")
    expected = {"mean": [3.0, 1.0], "sum": [9.0, 3.0], "min": [1.0, -1.0], "max": [6.0, 4.0], "y": [2.0, 0.0]}
    for reduction, scores in expected.items():
        np.testing.assert_allclose(reduce_returns(returns, agents, reduction), scores, rtol=1e-12, atol=0)
    with pytest.raises(ValueError, match="eval.return_reduction: .*'w'"):
        reduce_returns(returns, agents, "w")


@pytest.mark.parametrize(("reduction", "score"), [("mean", 5.0), ("sum", 10.0), ("min", 4.0), ("b", 6.0)])
def test_evaluation_scores_an_episode_by_its_agents_returns(reduction: str, score: float) -> None:
    """a earns 1 for 4 steps, b 3 for 2: the episode lasts 4 steps (its longest agent), cut by a's time limit."""
    env = EnvConfig(id=TINY)
    policy = algorithm_class("ppo").make_policy(
        make_vector_env(env, 1).single_observation_space,
        spaces.Discrete(2),
        PolicyConfig(),
        algorithm_class("ppo").Config(name="ppo"),
    )
    evaluator = Evaluator(env, episodes=3, seed=0, max_parallel_envs=2, return_reduction=reduction)
    result = evaluator.evaluate(policy)
    evaluator.close()
    assert result.returns == [score] * 3 and result.lengths == [4] * 3 and result.truncated == 3
    assert result.agent_returns == {"a": [4.0] * 3, "b": [6.0] * 3}
    assert result.scores()["agent_mean_returns"] == {"a": 4.0, "b": 6.0}


@pytest.mark.parametrize("algo", ["ppo", "a2c"])
def test_ppo_and_a2c_train_on_agents_that_leave_early(algo: str, tmp_path: Path) -> None:
    """b leaves at step 2 of 4: its rows of steps 3 and 4 and every reset step are no transitions; the run trains
    on the rest (3 of every 5 vector steps of a's rows, 2 of b's) and its periodic evaluation scores episodes."""
    tree = {
        "env": {"id": TINY, "num_envs": 2},
        "algo": {"name": algo, "n_steps": 10, **({"batch_size": 20} if algo == "ppo" else {})},
        "train": {"max_steps": 80, "eval_every": 80, "log_every": 80, "eval_episodes": 2, "progress_bar": False},
    }
    summary = train(validate_params(tree), tmp_path / algo)
    assert summary["env_steps"] == 80 and summary["gradient_steps"] > 0
    assert summary["evaluations"][-1]["mean_return"] == 5.0  # (4 x 1 + 2 x 3) / 2, whatever the actions


SPREAD = {
    "seed": 0,
    "name": "spread",
    "env": {
        "id": "pettingzoo:mpe2.simple_spread_v3",
        "kwargs": {"N": 3, "max_cycles": 25, "continuous_actions": False},
        "num_envs": 8,
    },
    "policy": {"hidden_sizes": [64, 64]},
    "algo": {"name": "ppo", "lr": 0.0007, "n_steps": 50, "batch_size": 400, "n_epochs": 5, "ent_coef": 0.01},
    "train": {"max_steps": 2400, "eval_every": 1200, "log_every": 1200, "eval_episodes": 5, "progress_bar": False},
    "eval": {"max_parallel_envs": 50},
}


def _spread(tmp_path: Path, name: str, **budget: Any) -> dict[str, Any]:
    tree = json.loads(json.dumps(SPREAD))
    tree["train"].update(budget)
    return train(validate_params(tree), tmp_path / name)


def _scores(summary: dict[str, Any]) -> list[tuple[int, float, float]]:
    return [(e["env_steps"], e["mean_return"], e["std_return"]) for e in summary["evaluations"]]


def test_the_same_seed_trains_the_same_shared_policy(tmp_path: Path) -> None:
    first, second = _spread(tmp_path, "one"), _spread(tmp_path, "two")
    assert _scores(first) == _scores(second) and len(_scores(first)) == 2
    assert first["gradient_steps"] == second["gradient_steps"] > 0
    weights = [load_checkpoint(tmp_path / name / "checkpoints" / "step_0000002400.pt") for name in ("one", "two")]
    for name, tensor in weights[0].tensors["policy"].items():
        assert torch.equal(tensor, weights[1].tensors["policy"][name]), name


def random_actions_score(env: EnvConfig, episodes: int, seed: int) -> float:
    """The mean over episodes of the mean over agents of the return of uniformly random actions."""
    vector_env = make_vector_env(env, episodes)
    vector_env.reset(seed=seed)
    vector_env.action_space.seed(seed)
    totals = np.zeros(vector_env.num_envs)
    for _ in range(25):  # max_cycles: every episode ends at step 25
        _, rewards, _, _, _ = vector_env.step(vector_env.action_space.sample())
        totals += rewards
    vector_env.close()
    return float(totals.reshape(episodes, -1).mean(axis=1).mean())


@pytest.mark.slow
def test_ppo_on_simple_spread_beats_a_random_policy(tmp_path: Path) -> None:
    """The preset at 60k agent steps (about a minute): the shared policy's mean return over agents (50
    periodic-evaluation episodes) beats uniformly random actions' (about -27.7 over 100 episodes) by at least 2.
    Random actions keep the agents near their start; a poor greedy policy drifts away and scores far worse."""
    overrides = ["train.max_steps=60000", "train.eval_every=60000", "train.log_every=60000", "train.eval_episodes=50"]
    params = load_params(PROJECT / "configs" / "ppo-simple-spread.yaml", [*overrides, "train.progress_bar=false"])
    summary = train(params, tmp_path / "learn")
    random_score = random_actions_score(params.env, episodes=100, seed=10**6)
    learned = summary["evaluations"][-1]["mean_return"]
    assert learned > random_score + 2, (learned, random_score)
