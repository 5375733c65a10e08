"""DQN on PettingZoo Parallel envs (issue 29): independent learners with one shared Q-network, every agent's
transition a row of the one replay buffer (``rlcore.trainers.off_policy``); early leavers add no rows; the same seed
trains the same network; ``train.seeds`` batch their gradient steps as single-agent DQN's do.

No learning test: on simple_spread (3 agents, Discrete(5)), DQN's defaults at 30,000 agent steps (about 9 minutes on
the busy 2-core machine) scored -27.5 over 50 greedy episodes against uniformly random actions' -27.7 over 100; with
lr 5e-4, batch 128, learning_starts 1000 and epsilon annealed over 30 % of 60,000 steps: -26.2 at 30,000 steps and
-38.7 at 60,000. No cheap budget tells learning from chance (PPO's slow test needs 60,000 steps for a margin of 2)."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from test_multiagent import TinyParallelEnv
from test_seeds_batched_offline import checkpoints

from rlcore.common.checkpoints import load_checkpoint
from rlcore.common.errors import ConfigError
from rlcore.evaluation.evaluator import Evaluator
from rlcore.params import validate_params
from rlcore.registry import policy_from_checkpoint
from rlcore.stages import train_stage
from rlcore.trainers import train
from rlcore.trainers.off_policy import Collector
from rlcore.trainers.session import TrainingSession
from rlcore.trainers.sources import ReplaySource

RECORDING = "pettingzoo:test_multiagent_dqn:recording_env"


class RecordingEnv(TinyParallelEnv):
    """test_multiagent's two-agent env (``b`` terminates at its 2nd step with reward 3 per step, ``a`` is truncated
    at step 4 with reward 1 per step; observations [own step count, seed digit]) that keeps the actions it got."""

    def __init__(self) -> None:
        super().__init__(max_cycles=4)
        self.received: list[dict[str, int]] = []

    def step(self, actions: dict[str, Any]) -> tuple[dict[str, Any], ...]:
        self.received.append({agent: int(action) for agent, action in actions.items()})
        return super().step(actions)


def recording_env() -> RecordingEnv:
    return RecordingEnv()


def tiny_tree(**train_keys: Any) -> dict[str, Any]:
    return {
        "env": {"id": RECORDING, "num_envs": 1},
        "algo": {"name": "dqn", "learning_starts": 4, "batch_size": 4, "buffer_size": 64, "gamma": 0.5},
        "train": {"max_steps": 40, "eval_every": 40, "log_every": 40, "eval_episodes": 2, "progress_bar": False}
        | train_keys,
    }


def test_the_replay_holds_each_agents_transitions_and_none_after_it_leaves(tmp_path: Path) -> None:
    """Hand-checked, 6 vector steps of one copy (rows a, b): steps 1-2 both agents (b terminates at 2), steps 3-4 a
    alone (truncated at 4), step 5 resets the copy (no rows), step 6 both again: 8 transitions, each the agent's
    own observation (with its one-hot), the action the env got for it, its reward, its next observation, and a
    discount of gamma (0.5) except b's terminal step (0); a's truncation bootstraps."""
    params = validate_params(tiny_tree())
    with TrainingSession(params, tmp_path / "run", None, None, ReplaySource) as session:
        collector = Collector(session)
        for _ in range(6):
            collector.step()
        replay = session.source.replay
        env = session.source.env.envs[0]  # type: ignore[attr-defined]
        slots = replay.slots()
        stored = {
            "obs": replay.observation(replay.obs_write[slots]),
            "next_obs": replay.observation(replay.next_write[slots]),
            "actions": replay.actions[slots],
            "rewards": replay.rewards[slots],
            "discounts": replay.discounts[slots],
        }
        assert session.state.env_steps == 12  # agent steps: 2 rows x 6 vector steps
    assert len(replay) == 8
    digit = stored["obs"][0][1]
    a, b = [1.0, 0.0], [0.0, 1.0]
    expected_obs = [[0, a], [0, b], [1, a], [1, b], [2, a], [3, a], [0, a], [0, b]]
    np.testing.assert_array_equal(stored["obs"], [[count, digit, *one_hot] for count, one_hot in expected_obs])
    np.testing.assert_array_equal(stored["next_obs"], [[count + 1, digit, *hot] for count, hot in expected_obs])
    np.testing.assert_array_equal(stored["rewards"], [1, 3, 1, 3, 1, 1, 1, 3])
    np.testing.assert_array_equal(stored["discounts"], [0.5, 0.5, 0.5, 0.0, 0.5, 0.5, 0.5, 0.5])
    received = env.received  # per env step: the actions of the agents still in the episode
    assert [sorted(step) for step in received] == [["a", "b"]] * 2 + [["a"]] * 2 + [["a", "b"]]
    sent = [step[agent] for step in received for agent in sorted(step)]
    np.testing.assert_array_equal(stored["actions"], sent)


def test_the_same_seed_trains_the_same_shared_q_network(tmp_path: Path) -> None:
    runs = [train(validate_params(tiny_tree()), tmp_path / name) for name in ("one", "two")]
    assert _without_walls(runs[0]) == _without_walls(runs[1]) != []
    assert runs[0]["gradient_steps"] == runs[1]["gradient_steps"] > 0
    weights = [load_checkpoint(tmp_path / name / "checkpoints" / "step_0000000040.pt") for name in ("one", "two")]
    for name, tensor in weights[0].tensors["policy"].items():
        assert torch.equal(tensor, weights[1].tensors["policy"][name]), name


def _without_walls(summary: dict[str, Any]) -> list[dict[str, Any]]:
    return [{k: v for k, v in entry.items() if k != "wall_seconds"} for entry in summary["evaluations"]]


@pytest.mark.parametrize(("reduction", "score"), [("mean", 5.0), ("sum", 10.0), ("b", 6.0)])
def test_evaluation_scores_episodes_by_the_return_reduction(tmp_path: Path, reduction: str, score: float) -> None:
    """a earns 4 and b 6 per episode whatever the actions: the periodic evaluation's score is their reduction."""
    tree = tiny_tree()
    tree["eval"] = {"return_reduction": reduction}
    summary = train(validate_params(tree), tmp_path / reduction)
    assert summary["evaluations"][-1]["mean_return"] == score


def test_other_off_policy_algorithms_are_refused_naming_the_ones_that_work() -> None:
    tree = tiny_tree()
    tree["algo"] = {"name": "sac"}
    with pytest.raises(ConfigError, match=r"algo.name: sac does not train on multi-agent envs .*a2c, bc, dqn, ppo do"):
        validate_params(tree)


SPREAD = {
    "seed": 0,
    "name": "spread",
    "env": {
        "id": "pettingzoo:mpe2.simple_spread_v3",
        "kwargs": {"N": 3, "max_cycles": 25, "continuous_actions": False},
        "num_envs": 4,
    },
    "policy": {"hidden_sizes": [64, 64]},
    "algo": {"name": "dqn", "learning_starts": 300, "batch_size": 64, "target_update_interval": 100},
    "train": {"max_steps": 1200, "eval_every": 600, "log_every": 600, "eval_episodes": 2, "progress_bar": False},
}


def spread(**changes: Any) -> dict[str, Any]:
    tree = json.loads(json.dumps(SPREAD))
    for section, keys in changes.items():
        tree[section] = tree.get(section, {}) | keys if isinstance(keys, dict) else keys
    return tree


def test_dqn_trains_on_simple_spread_and_its_greedy_policy_has_per_agent_returns(tmp_path: Path) -> None:
    """simple_spread's actions are Discrete(5) (continuous_actions: false): 1,200 agent steps (400 per agent) with
    two periodic evaluations; the checkpoint's Q-network, evaluated greedily, scores each episode by the mean over
    its three agents and keeps every agent's return beside it."""
    params = validate_params(spread())
    summary = train(params, tmp_path / "spread")
    assert summary["env_steps"] == 1200 and summary["gradient_steps"] > 0 and len(summary["evaluations"]) == 2
    policy = policy_from_checkpoint(load_checkpoint(tmp_path / "spread" / "checkpoints" / "step_0000001200.pt"))
    evaluator = Evaluator(params.env, episodes=2, seed=0, max_parallel_envs=2, return_reduction="mean")
    result = evaluator.evaluate(policy)
    evaluator.close()
    assert sorted(result.agent_returns) == ["agent_0", "agent_1", "agent_2"]
    per_agent = np.array(list(result.agent_returns.values()))  # (agents, episodes)
    np.testing.assert_allclose(result.returns, per_agent.mean(axis=0), rtol=1e-12, atol=1e-12)


def test_train_seeds_batch_each_seeds_gradient_steps(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """``train.seeds: [0, 1]`` on simple_spread: the seeds train as one program, their gradient steps stacked (the
    log says so), and seed k is the run with ``seed: k`` trained alone: the same replay buffer (so the same actions in
    every step), the same step counts and RNG state, the Q-network within float32 summation order grown over 300
    Adam steps (measured: at most 1.5e-7, weights of scale ~1; over 600 steps seed 1 drifted to 7.5e-5: compared with
    rtol and atol 1e-4)."""
    seeds = {"seeds": [0, 1], "max_steps": 600, "eval_every": 600, "log_every": 600, "eval_episodes": 1}
    with caplog.at_level(logging.INFO, logger="rlcore"):
        train_stage(validate_params(spread(train=SPREAD["train"] | seeds)), tmp_path)
    assert "train.seeds: this program trains seeds 0-1 (stacked)" in caplog.text
    largest = 0.0
    for seed in (0, 1):
        alone = spread(train=SPREAD["train"] | seeds | {"seeds": None}, seed=seed, name=f"alone_{seed}")
        train_stage(validate_params(alone), tmp_path)
        batched, single = tmp_path / "runs" / "spread" / f"seed_{seed}", tmp_path / "runs" / f"alone_{seed}"
        (mine,) = checkpoints(batched)
        (theirs,) = checkpoints(single)
        for key in ("env_steps", "gradient_steps", "numpy_rng"):
            assert mine.meta[key] == theirs.meta[key], f"seed {seed} {key}"
        for name, tensor in mine.tensors["policy"].items():
            torch.testing.assert_close(tensor, theirs.tensors["policy"][name], rtol=1e-4, atol=1e-4, msg=name)
            largest = max(largest, float((tensor - theirs.tensors["policy"][name]).abs().max()))
        with (
            np.load(batched / "replay" / "step_0000000600.npz") as ours,
            np.load(single / "replay" / "step_0000000600.npz") as other,
        ):
            assert ours.files == other.files
            for key in ours.files:
                assert np.array_equal(ours[key], other[key]), f"seed {seed} replay {key}"
    assert largest > 0, "bitwise equal: is the batched trainer used at all?"
