"""Offline learning from collected datasets: BC imitates an expert; TD3+BC and IQL improve on medium data."""

from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import torch
import yaml
from conftest import PROJECT, outputs, preset_text
from gymnasium import spaces

from rlcore.algos.iql import IQL, IQLConfig, returns_reward_scale
from rlcore.common.checkpoints import list_checkpoints, load_checkpoint
from rlcore.common.files import read_json
from rlcore.config.sections import Params, PolicyConfig
from rlcore.data.reader import OfflineData, load_dataset, read_metadata
from rlcore.params import load_params, validate_params
from rlcore.stages import collect_stage, evaluate_stage, select_stage, train_stage

pytestmark = pytest.mark.slow


def offline_params(**changes: Any) -> Params:
    """offline.yaml with some keys changed: a dict merges into its section, except ``algo`` which replaces it."""
    tree = yaml.safe_load(preset_text("offline.yaml"))  # with params.yaml's keys it inherits (base)
    for key, value in changes.items():
        tree[key] = {**tree[key], **value} if isinstance(value, dict) and key != "algo" else value
    tree["train"]["progress_bar"] = "off"
    return validate_params(tree)


def train_and_score(params: Params, root: Path) -> float:
    for stage in (train_stage, evaluate_stage, select_stage):
        stage(params, root)
    return read_json(outputs(root, params.name).metrics)["mean_return"]


def test_bc_on_20k_transitions_from_a_475_policy_reaches_475_on_cartpole(tmp_path: Path):
    # The expert: PPO with the default params (seed 0), scored by the evaluate stage.
    online = load_params(PROJECT / "params.yaml", ["seed=0", "train.progress_bar=off"])
    for stage in (train_stage, evaluate_stage, select_stage):
        stage(online, tmp_path)
    assert read_json(outputs(tmp_path).metrics)["mean_return"] >= 475

    # 20k transitions sampled from it (seed 2000000), then BC: seed 0, at most 5000 gradient steps of batch 256.
    params = offline_params(
        collect={"policy": "models/ppo-cartpole/policy.pt", "steps": 20_000, "row_group_size": 2000},
        train={"max_steps": 5000, "eval_every": 500, "target_return": 500},
    )
    dataset = collect_stage(params, tmp_path)
    assert read_metadata(dataset)["transitions"] >= 20_000
    assert train_and_score(params, tmp_path) >= 475

    # The same BC streaming the file through a shuffle buffer of 3 of its 10 row groups (dataset.in_memory: false).
    streamed = offline_params(
        name="bc-streamed",
        dataset={"path": str(dataset), "in_memory": False, "buffer_transitions": 6000},
        train={"max_steps": 5000, "eval_every": 500, "target_return": 500},
    )
    assert train_and_score(streamed, tmp_path / "streamed") >= 475

    # Discrete IQL on the same data, same budget.
    iql = offline_params(
        name="iql-cartpole",
        collect={"policy": "models/ppo-cartpole/policy.pt", "steps": 20_000},
        dataset={"path": str(dataset)},
        algo={"name": "iql"},
        train={"max_steps": 5000, "eval_every": 500, "target_return": 500},
    )
    assert train_and_score(iql, tmp_path / "iql") >= 475


def test_iql_actor_learning_rate_follows_the_papers_cosine_to_zero():
    observation_space, action_space = spaces.Box(-8.0, 8.0, (3,)), spaces.Box(-2.0, 2.0, (1,))
    config = IQLConfig(lr=1e-3, batch_size=8)
    iql = IQL(IQL.make_policy(observation_space, action_space, PolicyConfig(hidden_sizes=[8]), config), config)
    generator = torch.Generator().manual_seed(0)
    batch = {
        "obs": torch.rand(8, 3, generator=generator),
        "actions": torch.rand(8, 1, generator=generator) * 4 - 2,
        "rewards": -torch.rand(8, generator=generator),
        "next_obs": torch.rand(8, 3, generator=generator),
        "terminated": torch.zeros(8, dtype=torch.bool),
    }
    for progress, expected in [(0.0, 1e-3), (0.25, 1e-3 * (1 + 2**-0.5) / 2), (0.5, 5e-4), (1.0, 0.0)]:
        iql.update(batch, progress)
        assert iql.actor_optimizer.param_groups[0]["lr"] == pytest.approx(expected, rel=1e-9, abs=1e-15)
        assert iql.critic_optimizer.param_groups[0]["lr"] == 1e-3  # the critics and V keep lr


def test_returns_reward_scale_is_episode_length_over_the_spread_of_complete_returns():
    # Episodes: 4 steps returning -4 (time limit), 4 steps returning -12, 2 steps terminated returning -1, and
    # 1 step cut short by the end of a collection (return -50: not a complete episode, left out).
    rewards = np.array([-1, -1, -1, -1, -3, -3, -3, -3, -0.5, -0.5, -50], dtype=np.float32)
    episode_id = np.array([0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 3])
    terminated = np.zeros(11, dtype=bool)
    terminated[9] = True
    truncated = np.zeros(11, dtype=bool)
    truncated[[3, 7, 10]] = True
    data = OfflineData(np.zeros((11, 3)), np.zeros((11, 1)), rewards, np.zeros((11, 3)), terminated, truncated,
                       episode_id, {})  # fmt: skip
    assert returns_reward_scale(data) == pytest.approx(4 / (-1 - -12))


def test_td3bc_and_iql_beat_bc_by_100_on_a_medium_pendulum_dataset(tmp_path: Path):
    # The behaviour policy: SAC (configs/sac-pendulum.yaml, seed 0) stopped part-way; its checkpoint whose
    # periodic evaluation lies in [-900, -400] is "medium". Since the warm-up fix (issue 11) SAC-Pendulum passes
    # that range between env steps 3000 (-986) and 3250 (-409): the checkpoint at 3125 scores -563. It is the only
    # one evaluated: its weights are bitwise those of a run evaluated every 125 steps (checked 2026-11-29), without
    # the 24 evaluations on the way (benchmarks/iql_vs_bc_pendulum.py still makes them).
    sac = load_params(
        PROJECT / "configs" / "sac-pendulum.yaml",
        [
            "seed=0",
            "train.max_steps=3125",
            "train.eval_every=3125",
            "train.target_return=null",
            "train.progress_bar=off",
        ],
    )
    train_stage(sac, tmp_path)
    medium = [
        path
        for _, path in list_checkpoints(tmp_path / "runs" / sac.name / "checkpoints")
        if -900 <= load_checkpoint(path).meta["evaluation"]["mean_return"] <= -400
    ]
    assert medium, "no checkpoint of the partly trained SAC scores between -900 and -400"
    behaviour = medium[-1].relative_to(tmp_path).as_posix()

    env = {"id": "Pendulum-v1", "num_envs": 1}
    train = {"max_steps": 6000, "eval_every": 1000, "target_return": None}
    bc = offline_params(
        name="bc-pendulum",
        env=env,
        train=train,
        collect={"policy": behaviour, "steps": 50_000, "num_envs": 8},
        algo={"name": "bc", "lr": 1e-3, "batch_size": 256, "loss": "mse"},
    )
    dataset = collect_stage(bc, tmp_path)
    behaviour_return = read_metadata(dataset)["episode_return"]["mean"]
    bc = offline_params(
        name="bc-pendulum",
        env=env,
        train=train,
        dataset={"path": str(dataset)},
        algo={"name": "bc", "lr": 1e-3, "batch_size": 256, "loss": "mse"},
    )
    td3bc = offline_params(
        name="td3bc-pendulum",
        env=env,
        train=train,
        dataset={"path": str(dataset)},
        policy={"normalize_obs": True, "hidden_sizes": [128, 128], "activation": "relu"},
        algo={"name": "td3bc", "alpha": 10.0},
    )

    # The paper's reward normalization: returns span the episode length (0.128 here). Without it Pendulum's
    # advantages are ~8x those beta = 3 was tuned for, the clipped weights a noisy filter (benchmarks/README.md).
    pendulum = gym.make("Pendulum-v1")
    reward_scale = returns_reward_scale(
        load_dataset(dataset, pendulum.observation_space, pendulum.action_space, "Pendulum-v1")
    )
    iql = offline_params(
        name="iql-pendulum",
        env=env,
        train=train,
        dataset={"path": str(dataset)},
        policy={"normalize_obs": True, "hidden_sizes": [128, 128], "activation": "relu"},
        # lr 1e-3: 3e-4 needs far more than 6000 steps
        algo={"name": "iql", "beta": 3.0, "lr": 1e-3, "reward_scale": reward_scale},
    )

    # Seed 0, 6000 gradient steps of batch 256 each; scores are the evaluate stage's (10 held-out episodes).
    bc_score = train_and_score(bc, tmp_path / "bc")
    td3bc_score = train_and_score(td3bc, tmp_path / "td3bc")
    iql_score = train_and_score(iql, tmp_path / "iql")
    scores = {"behaviour": behaviour_return, "bc": bc_score, "td3bc": td3bc_score, "iql": iql_score}
    # Measured (2026-11-22, before issue 11's SAC and evaluation changes) over collect seeds 2000000, 1, 2: behaviour
    # -591/-553/-561, BC -319/-320/-605, TD3+BC -217/-175/-189, IQL -198/-234/-224. After them (behaviour = the
    # SAC checkpoint at 3125 env steps, test scores): behaviour -703, BC -447, TD3+BC -281, IQL -526 with raw
    # rewards; IQL with the paper's reward scale and cosine actor schedule: see the README's IQL vs BC table.
    assert td3bc_score >= bc_score + 100, scores
    assert iql_score >= bc_score + 100, scores
