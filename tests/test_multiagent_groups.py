"""Groups of agents (issue 29, ``policy.groups``): each group's rows go to its own policy, which reads its agents'
columns (``rlcore.envs.agent_groups``, ``rlcore.nets.grouped``); each group trains with its own optimizer
(``rlcore.trainers.on_policy``: a group is a member of the loop); checkpoints hold every group, a resumed run
continues it, and the export stage writes one model per group (``rlcore.stages.export_groups``)."""

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

import rlcore.trainers.on_policy_runs as on_policy_runs
import rlcore.trainers.session as session_module
from rlcore.algos.ppo import PPO
from rlcore.common.checkpoints import load_checkpoint
from rlcore.common.errors import ConfigError
from rlcore.envs.vector import make_vector_env
from rlcore.evaluation.evaluator import Evaluator
from rlcore.nets.grouped import GroupedActorCritic
from rlcore.params import validate_params
from rlcore.registry import build_policy, policy_from_checkpoint
from rlcore.stages.evaluate import evaluate_stage
from rlcore.stages.export import export_stage
from rlcore.stages.select import select_stage
from rlcore.trainers import train

TEAMS = "pettingzoo:test_multiagent_groups:teams_env"
"""This module's three-agent env (the tests folder is on the path when pytest runs)."""
GROUPS = {"red": ["red_*"], "blue": ["blue_0"]}


class TeamsEnv:
    """Agents ``red_0``, ``red_1`` observe [step, seed digit, 10 + agent index] (3 values) and earn 1 per step;
    ``blue_0`` observes [step, -1] (2 values) and earns 3 per step. Every agent is truncated at step 4; actions are
    Discrete(2) and do not matter."""

    metadata = {"name": "teams_v0"}

    def __init__(self) -> None:
        self.possible_agents = ["red_0", "blue_0", "red_1"]
        self.agents: list[str] = []
        self.steps, self.seed_digit = 0, 0.0
        self.max_cycles = 4
        self.unwrapped = self

    def observation_space(self, agent: str) -> spaces.Space:
        return spaces.Box(-100.0, 100.0, (3 if agent.startswith("red") else 2,), np.float32)

    def action_space(self, agent: str) -> spaces.Space:
        return spaces.Discrete(2)

    def _obs(self) -> dict[str, np.ndarray]:
        return {
            "red_0": np.array([self.steps, self.seed_digit, 10], np.float32),
            "blue_0": np.array([self.steps, -1], np.float32),
            "red_1": np.array([self.steps, self.seed_digit, 11], np.float32),
        }

    def reset(self, seed: int | None = None, options: Any = None) -> tuple[dict[str, Any], dict[str, Any]]:
        if seed is not None:
            self.seed_digit = float(seed % 10)
        self.agents, self.steps = list(self.possible_agents), 0
        return self._obs(), {agent: {} for agent in self.agents}

    def step(self, actions: dict[str, Any]) -> tuple[dict[str, Any], ...]:
        self.steps += 1
        rewards = {agent: 3.0 if agent == "blue_0" else 1.0 for agent in self.agents}
        done = {agent: False for agent in self.agents}
        truncated = {agent: self.steps >= 4 for agent in self.agents}
        observations = self._obs()
        if self.steps >= 4:
            self.agents = []
        return observations, rewards, done, truncated, {agent: {} for agent in observations}

    def close(self) -> None:
        pass


def teams_env() -> TeamsEnv:
    return TeamsEnv()


def _tree(**train_keys: Any) -> dict[str, Any]:
    return {
        "name": "teams",
        "env": {"id": TEAMS, "num_envs": 2},
        "policy": {"hidden_sizes": [8], "groups": GROUPS},
        "algo": {"name": "ppo", "n_steps": 8, "batch_size": 16, "n_epochs": 2},
        "train": {"max_steps": 96, "eval_every": 48, "log_every": 48, "eval_episodes": 2, "progress_bar": False}
        | train_keys,
        "eval": {"episodes": 2, "test_episodes": 2, "return_reduction": "blue"},
        "export": {"parity_observations": 8},
    }


def test_rows_are_padded_and_each_group_reads_its_agents_columns() -> None:
    """Hand-checked: blue's 2 values are padded to red's 3, the env's one-hot follows; red's policy reads 3 values
    then the one-hot within red (red_0 -> [1, 0], red_1 -> [0, 1]); blue's reads 2 values then [1]."""
    params = validate_params(_tree())
    env = make_vector_env(params.env, 2)
    obs, _ = env.reset(seed=7)
    assert env.single_observation_space.shape == (6,)
    np.testing.assert_array_equal(obs[1], [0, -1, 0, 0, 1, 0])  # blue_0 of copy 0: padded, then its one-hot
    env.close()
    policy = _policy(params)
    red_rows, blue_rows = policy.group_rows(6)
    assert red_rows.tolist() == [0, 2, 3, 5] and blue_rows.tolist() == [1, 4]
    obs_t = torch.as_tensor(obs)
    red = policy.member_obs(obs_t, 0, red_rows)
    np.testing.assert_array_equal(red[:2].numpy(), [[0, 7, 10, 1, 0], [0, 7, 11, 0, 1]])
    np.testing.assert_array_equal(red[2:, 1].numpy(), [8, 8])  # copy 1 is reset with seed + 1
    np.testing.assert_array_equal(policy.member_obs(obs_t, 1, blue_rows).numpy(), [[0, -1, 1]] * 2)


def _policy(params: Any) -> GroupedActorCritic:
    env = make_vector_env(params.env, 1)
    policy = build_policy(
        "ppo", env.single_observation_space, env.single_action_space, params.policy, params.algo, params.env
    )
    env.close()
    assert isinstance(policy, GroupedActorCritic)
    return policy


def test_each_group_acts_with_its_own_policy() -> None:
    """Red's policy made to always pick 1 and blue's 0: every red row acts 1, every blue row 0."""
    policy = _policy(validate_params(_tree()))
    for name, action in (("red", 1), ("blue", 0)):
        with torch.no_grad():
            bias = policy.members[name].actor[-1].bias
            bias.copy_(torch.tensor([0.0, 50.0] if action else [50.0, 0.0]))
    actions, _ = policy.act(torch.zeros(9, 6), None, deterministic=True)
    assert actions.tolist() == [1, 0, 1] * 3


def test_group_returns_and_a_group_as_the_return_reduction() -> None:
    """4 steps: red agents earn 4 each, blue 12; the score under return_reduction: blue is blue's mean, 12."""
    params = validate_params(_tree())
    evaluator = Evaluator(params.env, episodes=3, seed=0, return_reduction="blue", groups=params.policy.groups)
    result = evaluator.evaluate(_policy(params))
    evaluator.close()
    assert result.returns == [12.0] * 3
    assert result.group_returns == {"red": [4.0] * 3, "blue": [12.0] * 3}
    assert result.scores()["group_mean_returns"] == {"red": 4.0, "blue": 12.0}
    assert result.agent_returns == {"red_0": [4.0] * 3, "blue_0": [12.0] * 3, "red_1": [4.0] * 3}


def test_rollout_rows_reach_their_groups_algorithm(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each group's update sees only its agents' rows: red's rollouts hold 2 agents x 2 copies with reward 1, blue's
    1 x 2 with reward 3, each at its own width."""
    seen: dict[int, list[tuple[tuple[int, ...], set[float]]]] = {}
    original = PPO.update

    def recording(self: PPO, rollout: Any, progress: float, generator: torch.Generator) -> dict[str, float]:
        seen.setdefault(id(self), []).append((tuple(rollout.obs.shape), set(rollout.rewards.unique().tolist())))
        return original(self, rollout, progress, generator)

    monkeypatch.setattr(PPO, "update", recording)
    train(validate_params(_tree(max_steps=48)), tmp_path / "run")
    shapes = sorted(calls[0] for calls in seen.values())
    assert shapes == [((8, 2, 3), {0.0, 3.0}), ((8, 4, 5), {0.0, 1.0})]  # 0: the reset step after each episode


def test_a_group_with_zero_advantages_does_not_move(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Blue's advantages zeroed, with no value loss and no entropy bonus: its loss has no gradient, so its weights
    and optimizer stay as they started while red's actor moves (each group has its own optimizer)."""
    original = PPO.advantages
    started: dict[str, dict[str, torch.Tensor]] = {}

    def zero_for_blue(self: PPO, rollout: Any) -> tuple[torch.Tensor, torch.Tensor]:
        if rollout.obs.shape[-1] == 3:  # blue's width: 2 values and its one-hot
            return torch.zeros_like(rollout.values), rollout.values.clone()
        return original(self, rollout)

    members = on_policy_runs.Run._members

    def snapshot(self: on_policy_runs.Run, obs_dtype: torch.dtype) -> Any:
        started.update({k: v.clone() for k, v in self.session.policy.state_dict().items()})
        return members(self, obs_dtype)

    monkeypatch.setattr(PPO, "advantages", zero_for_blue)
    monkeypatch.setattr(on_policy_runs.Run, "_members", snapshot)
    algo = {"name": "ppo", "n_steps": 8, "batch_size": 16, "vf_coef": 0.0, "ent_coef": 0.0}
    params = validate_params(_tree(max_steps=48) | {"algo": algo})
    train(params, tmp_path / "run")
    checkpoint = load_checkpoint(tmp_path / "run" / "checkpoints" / "step_0000000048.pt")
    final = checkpoint.tensors["policy"]
    moved = {name for name, tensor in final.items() if not torch.equal(tensor, started[name])}
    assert moved and all(name.startswith("members.red.") for name in moved), moved
    assert any(name.startswith("members.red.actor") for name in moved)
    optimizers = checkpoint.tensors["algorithm"]["groups"]
    assert set(optimizers) == {"red", "blue"}
    assert all(state["exp_avg"].abs().max() == 0 for state in optimizers["blue"]["optimizer"]["state"].values())


def test_a_collapsed_entropy_is_warned_once_per_group_naming_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Grouped runs log ``<group>/entropy``; with the collapse threshold above any entropy of Discrete(2) (ln 2 =
    0.69 nats), each group is warned about once (two updates), by name, in the run's summary."""
    monkeypatch.setattr(session_module, "ENTROPY_COLLAPSE", 10.0)
    summary = train(validate_params(_tree(max_steps=64)), tmp_path / "run")
    warnings = [w for w in summary["warnings"] if "entropy collapsed" in w]
    assert len(warnings) == 2, summary["warnings"]
    assert warnings[0].startswith("group red's policy entropy collapsed to 0.")
    assert warnings[1].startswith("group blue's policy entropy collapsed to 0.")


def test_a_resumed_grouped_run_ends_as_the_uninterrupted_one(tmp_path: Path) -> None:
    whole = train(validate_params(_tree()), tmp_path / "whole")
    train(validate_params(_tree(max_steps=48)), tmp_path / "cut")
    resumed = train(validate_params(_tree()), tmp_path / "cut")
    assert resumed["evaluations"] == [
        {**e, "wall_seconds": r["wall_seconds"]}
        for e, r in zip(whole["evaluations"], resumed["evaluations"], strict=True)
    ]
    last = [load_checkpoint(tmp_path / run / "checkpoints" / "step_0000000096.pt") for run in ("whole", "cut")]
    for name, tensor in last[0].tensors["policy"].items():
        assert torch.equal(tensor, last[1].tensors["policy"][name]), name


@pytest.mark.slow  # a whole pipeline: train, evaluate, select, export
def test_export_writes_one_model_per_group(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    params = validate_params(_tree(max_steps=48))
    train(params, tmp_path / "runs" / "teams")
    evaluate_stage(params, tmp_path)
    select_stage(params, tmp_path)
    export_stage(params, tmp_path)
    index = json.loads((outputs(tmp_path).export / "model_card.json").read_text())
    assert {name: entry["agents"] for name, entry in index["groups"].items()} == {
        "red": ["red_0", "red_1"],
        "blue": ["blue_0"],
    }
    policy = policy_from_checkpoint(load_checkpoint(outputs(tmp_path).best_policy))
    assert isinstance(policy, GroupedActorCritic)
    for name, width in (("red", 5), ("blue", 3)):
        card = json.loads((outputs(tmp_path).export / name / "model_card.json").read_text())
        assert card["group"]["agents"] == index["groups"][name]["agents"]
        assert card["observation_space"]["shape"] == [width]
        session = onnxruntime.InferenceSession(str(outputs(tmp_path).export / name / "policy.onnx"))
        obs = np.random.default_rng(0).normal(size=(4, width)).astype(np.float32)
        (action, *_) = session.run(None, {"obs": obs})
        expected = policy.members[name].deterministic_action(torch.as_tensor(obs))  # type: ignore[operator]
        np.testing.assert_array_equal(action, expected.numpy())
    rows = np.random.default_rng(1).normal(size=(6, 6)).astype(np.float32)
    rows[:, 3:] = np.eye(3, dtype=np.float32)[[0, 1, 2, 2, 1, 0]]  # the env's one-hot: red_0, blue_0, red_1, ...
    rows[[1, 4], 2] = 0.0  # blue's padding
    whole = onnxruntime.InferenceSession(str(outputs(tmp_path).export / "policy.onnx"))
    (action, *_) = whole.run(None, {"obs": rows})
    red, blue = (policy.members[n].deterministic_action for n in ("red", "blue"))  # type: ignore[operator]
    columns = {"red": [0, 1, 2, 3, 5], "blue": [0, 1, 4]}
    expected = [
        int((blue if agent == 1 else red)(torch.as_tensor(rows[i : i + 1, columns["blue" if agent == 1 else "red"]])))
        for i, agent in enumerate([0, 1, 2, 2, 1, 0])
    ]
    assert action.tolist() == expected


@pytest.mark.parametrize(
    ("change", "fragments"),
    [
        ({"groups": {"red": ["red_*"], "blue": ["green_*"]}}, ("policy.groups.blue:", "'green_*'", "no agent")),
        ({"groups": {"red": ["red_*"]}}, ("policy.groups:", "blue_0", "no group")),
        ({"groups": {"red": ["red_*"], "all": ["*"]}}, ("policy.groups:", "two groups")),
        ({"groups": {"mixed": ["*"]}}, ("policy.groups.mixed:", "different")),
        ({"groups": None}, ("env.id:", "different observation spaces")),
    ],
)
def test_bad_groups_are_refused_in_one_line(change: dict[str, Any], fragments: tuple[str, ...]) -> None:
    tree = _tree()
    tree["policy"].update(change)
    with pytest.raises(ConfigError) as error:
        validate_params(tree)
    message = str(error.value)
    assert "\n" not in message and all(fragment in message for fragment in fragments), message


def test_unknown_group_as_return_reduction_is_refused() -> None:
    tree = _tree()
    tree["eval"]["return_reduction"] = "green"
    with pytest.raises(ConfigError, match=r"eval.return_reduction: .*red, blue\), got 'green'"):
        validate_params(tree)
