"""Every PPO and A2C preset (``params.yaml`` and the files in ``configs/``) trains ``train.seeds: [0, 1]`` as one
program (``rlcore.trainers.on_policy``: the seeds' runs in lockstep, no "one after another"), each seed into its own
run folder with its checkpoint, on a tiny budget (:func:`budget`). For an
MLP presets (the seeds' networks stacked: CartPole, Hopper's reward normalization, RND's reward signals, Simple Spread's
agents as rows) and the LSTM and Taxi presets (each seed's own policy in turn), seed 1 ends as the one-seed run with
``seed: 1``: its weights within rtol 1e-4 and its evaluations equal (within a relative 1e-6 for Box actions, which
follow the weights' last bits).
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
import yaml
from conftest import PROJECT, preset_text
from test_presets_pipeline import skip_without_extra, tiny_budget

from rlcore.common.checkpoints import list_checkpoints, load_checkpoint
from rlcore.data.collection import CollectionPlan, collect_dataset
from rlcore.params import load_params
from rlcore.stages.train import train_stage

pytestmark = pytest.mark.slow  # every case trains two seeds of a preset (tiny budgets, still a training run)

ON_POLICY = sorted(
    preset
    for preset in ["params.yaml", *(f"configs/{path.name}" for path in (PROJECT / "configs").glob("*.yaml"))]
    if yaml.safe_load(preset_text(preset))["algo"]["name"] in ("ppo", "a2c")
)
COMPARED = {
    "params.yaml",
    "configs/ppo-hopper.yaml",  # stacked, Box actions, reward normalization
    "configs/ppo-rnd-mountaincar.yaml",  # stacked, each seed's reward signal
    "configs/ppo-simple-spread.yaml",  # stacked, an env's agents as rows
    "configs/ppo-lstm-cartpole-po.yaml",  # each seed's own recurrent policy in turn
    "configs/ppo-taxi-masked.yaml",  # each seed's own masked policy in turn
}
"""The presets whose seed 1 is compared with its one-seed run."""
QUICK = ["train.eval_episodes=1", "eval.max_episode_steps=50"]
ROLLOUT = 128
"""Env steps of a run's one rollout at most (vector steps x env copies)."""
SMALLER = {"configs/ppo-atari-pong.yaml": ["env.num_envs=2"]}
"""Fewer env copies where making and resetting them dominates (ALE loads its ROM at every reset: 0.3 s)."""


def budget(preset: str) -> list[str]:
    """One rollout of at most :data:`ROLLOUT` env steps (PPO; A2C: two updates), one evaluation episode of at most 50
    steps; the warm start and the BC regularizer's dataset of ``ppo-from-bc-cartpole`` replaced (the regularizer
    kept: see :func:`demonstrations`)."""
    tree = yaml.safe_load(preset_text(preset))
    for override in SMALLER.get(preset, []):
        key, value = override.split("=")
        tree["env"][key.removeprefix("env.")] = int(value)
    algo, copies = tree["algo"], tree["env"].get("num_envs", 1)
    steps = max(1, min(algo.get("n_steps", 128), ROLLOUT // copies))
    size = steps * copies if algo["name"] == "ppo" else 2 * steps * copies
    extra = [f"algo.n_steps={steps}", *(f"train.{key}={size}" for key in ("max_steps", "eval_every", "log_every"))]
    if preset == "configs/ppo-from-bc-cartpole.yaml":
        extra += ["train.init_from=null", "algo.behavioral_cloning.dataset=demonstrations.parquet"]
    return [*tiny_budget(tree), *QUICK, *SMALLER.get(preset, []), *extra]


def demonstrations(root: Path) -> None:
    """200 random CartPole transitions in ``root/demonstrations.parquet``: the BC regularizer's data."""
    env = load_params(PROJECT / "params.yaml").env
    plan = CollectionPlan(num_envs=1, steps=200, episodes=None, epsilon=0.0, deterministic=False, seed=0,
                          row_group_size=200)  # fmt: skip
    collect_dataset(root / "demonstrations.parquet", env, None, {"kind": "random"}, plan)


def train(root: Path, preset: str, overrides: list[str]) -> None:
    root.mkdir(parents=True)
    (root / "params.yaml").write_text(preset_text(preset))
    if "behavioral_cloning" in preset_text(preset):
        demonstrations(root)
    train_stage(load_params(root / "params.yaml", overrides), root)


def last_checkpoint(run_dir: Path) -> Any:
    found = list_checkpoints(run_dir / "checkpoints")
    assert found, f"{run_dir}: no checkpoint"
    return load_checkpoint(found[-1][1])


@pytest.mark.parametrize("preset", ON_POLICY)
def test_every_on_policy_preset_trains_its_seeds_as_one_program(
    preset: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    skip_without_extra(preset)
    with caplog.at_level(logging.INFO, logger="rlcore"):
        train(tmp_path / "seeds", preset, [*budget(preset), "train.seeds=[0, 1]"])
    assert "train.seeds: training seeds [0, 1] as one program" in caplog.text
    assert "one after another" not in caplog.text
    name = yaml.safe_load(preset_text(preset))["name"]
    runs = tmp_path / "seeds" / "runs" / name
    ours = [last_checkpoint(runs / f"seed_{seed}") for seed in (0, 1)]
    assert [checkpoint.meta["params"]["seed"] for checkpoint in ours] == [0, 1]
    if preset not in COMPARED:
        return
    train(tmp_path / "alone", preset, [*budget(preset), "seed=1"])
    alone = last_checkpoint(tmp_path / "alone" / "runs" / name)
    assert ours[1].meta["env_steps"] == alone.meta["env_steps"] > 0
    assert ours[1].meta["gradient_steps"] == alone.meta["gradient_steps"] > 0
    returns = [[entry["mean_return"] for entry in run.meta["evaluations"]] for run in (ours[1], alone)]
    assert returns[0] == pytest.approx(returns[1], rel=1e-6)
    mine, theirs = ours[1].tensors["policy"], alone.tensors["policy"]
    assert mine.keys() == theirs.keys()
    for key, tensor in mine.items():
        torch.testing.assert_close(tensor, theirs[key], rtol=1e-4, atol=1e-6, msg=key)
    assert not np.allclose(ours[0].tensors["policy"][key].numpy(), tensor.numpy())  # the two seeds differ
