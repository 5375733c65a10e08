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


PENDULUM = {"id": "Pendulum-v1", "num_envs": 1}
NETS = {"normalize_obs": True, "hidden_sizes": [128, 128], "activation": "relu"}
NO_STOPS = {"target_return": None, "max_wall_seconds": None}  # params.yaml's 600 s cut IQL short at load ~13


@pytest.fixture(scope="module")
def medium_pendulum(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The medium Pendulum dataset and BC's score on it, made once for the comparisons below.

    The behaviour policy: SAC (configs/sac-pendulum.yaml, seed 0, with the preset's settings before its 2026-11-30
    retune: lr 1e-3, 1-step returns, 1000 warm-up steps, which learn slowly enough to stop in the middle) stopped
    part-way; its checkpoint whose periodic evaluation lies in [-900, -400] is "medium". Since the warm-up fix
    (issue 11) SAC-Pendulum passes that range between env steps 3000 (-986) and 3250 (-409): the checkpoint at 3125
    scores -563. It is the only one evaluated: its weights are bitwise those of a run evaluated every 125 steps
    (checked 2026-11-29). 50k transitions collected from it (8 envs, collect seed 2000000) score -703 per episode.

    BC (MSE, lr 1e-3, seed 0): 6000 gradient steps of batch 256, a checkpoint every 1000, the best of the six on 10
    validation episodes scored on 100 test episodes: the strongest BC of the budget (its checkpoints swing between
    -885 and -449 on validation, measured 2026-11-29: the best, at 3000, tests -447)."""
    root = tmp_path_factory.mktemp("medium-pendulum")
    sac = load_params(
        PROJECT / "configs" / "sac-pendulum.yaml",
        [
            "seed=0",
            "algo.lr=0.001",
            "algo.n_step=1",
            "algo.learning_starts=1000",
            "train.max_steps=3125",
            "train.eval_every=3125",
            "train.target_return=null",
            "train.progress_bar=off",
        ],
    )
    train_stage(sac, root)
    medium = [
        path
        for _, path in list_checkpoints(root / "runs" / sac.name / "checkpoints")
        if -900 <= load_checkpoint(path).meta["evaluation"]["mean_return"] <= -400
    ]
    assert medium, "no checkpoint of the partly trained SAC scores between -900 and -400"
    behaviour = medium[-1].relative_to(root).as_posix()
    bc_algo = {"name": "bc", "lr": 1e-3, "batch_size": 256, "loss": "mse"}
    bc_train = {"max_steps": 6000, "eval_every": 1000, **NO_STOPS}
    collect = {"policy": behaviour, "steps": 50_000, "num_envs": 8}
    dataset = collect_stage(offline_params(name="bc-pendulum", env=PENDULUM, collect=collect, algo=bc_algo), root)
    bc = offline_params(name="bc-pendulum", env=PENDULUM, train=bc_train, dataset={"path": str(dataset)}, algo=bc_algo)
    return {
        "root": root,
        "dataset": dataset,
        "behaviour": read_metadata(dataset)["episode_return"]["mean"],
        "bc": train_and_score(bc, root / "bc"),
    }


def test_td3bc_beats_bc_by_100_on_a_medium_pendulum_dataset(medium_pendulum: dict[str, Any]):
    """TD3+BC (alpha 10, [128, 128] relu, normalized observations, seed 0) after 6000 gradient steps: its one
    checkpoint, at the end, scored on 100 test episodes. Its validation climbs the whole budget (2026-11-29, every
    1000 steps: -1202, -1039, -906, -618, -405, -271; at lr 1e-3, 3000 steps reach only -869): the last checkpoint
    is the one select-best picked from six, and half the budget scores below the behaviour."""
    td3bc = offline_params(
        name="td3bc-pendulum",
        env=PENDULUM,
        train={"max_steps": 6000, "eval_every": 6000, **NO_STOPS},
        dataset={"path": str(medium_pendulum["dataset"])},
        policy=NETS,
        algo={"name": "td3bc", "alpha": 10.0},
    )
    score = train_and_score(td3bc, medium_pendulum["root"] / "td3bc")
    scores = {"behaviour": medium_pendulum["behaviour"], "bc": medium_pendulum["bc"], "td3bc": score}
    # Measured 2026-11-29: behaviour -703, BC -447, TD3+BC -281 (over seeds: benchmarks/iql_vs_bc_pendulum.py).
    assert score >= medium_pendulum["bc"] + 100, scores


def test_iql_beats_bc_by_100_on_a_medium_pendulum_dataset(medium_pendulum: dict[str, Any]):
    """IQL (beta 3, lr 1e-3, [128, 128] relu, normalized observations, seed 0) after 6000 gradient steps: its one
    checkpoint, at the end of the actor's cosine schedule, scored on 100 test episodes. Measured 2026-11-29: -242;
    its validation every 1000 steps of the same run -867, -854, -586, -346, -266; shorter runs (the schedule
    shortened with them) test -666 at 3000 and -424 at 4000, neither 100 above BC."""
    # The paper's reward normalization: returns span the episode length (0.128 here). Without it Pendulum's
    # advantages are ~8x those beta = 3 was tuned for, the clipped weights a noisy filter (benchmarks/README.md).
    pendulum = gym.make("Pendulum-v1")
    dataset = medium_pendulum["dataset"]
    reward_scale = returns_reward_scale(
        load_dataset(dataset, pendulum.observation_space, pendulum.action_space, "Pendulum-v1")
    )
    iql = offline_params(
        name="iql-pendulum",
        env=PENDULUM,
        train={"max_steps": 6000, "eval_every": 6000, **NO_STOPS},
        dataset={"path": str(dataset)},
        policy=NETS,
        algo={"name": "iql", "beta": 3.0, "lr": 1e-3, "reward_scale": reward_scale},  # lr 3e-4 needs far more steps
    )
    score = train_and_score(iql, medium_pendulum["root"] / "iql")
    scores = {"behaviour": medium_pendulum["behaviour"], "bc": medium_pendulum["bc"], "iql": score}
    assert score >= medium_pendulum["bc"] + 100, scores
