"""Every off-policy and offline preset (DQN, SAC in ``configs/``; BC in ``offline.yaml``, and IQL on its dataset)
trains ``train.seeds`` as one program (issue 39): the log says so and how its members step (stacked, or each its own
network: MinAtar's CNN, IQL), never one after another; each seed's folder holds its checkpoint; and seed 1 equals
the one-seed run with ``seed: 1`` within rtol 1e-4 (a stacked case and an each-its-own case). Budgets:
``tiny_budget``'s, shorter."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest
import torch
import yaml
from conftest import preset_text
from test_presets_pipeline import skip_without_extra, tiny_budget

from rlcore.common.checkpoints import list_checkpoints, load_checkpoint
from rlcore.params import load_params
from rlcore.stages import collect_stage, train_stage

pytestmark = pytest.mark.slow  # every case trains two seeds of a preset (tiny budgets, still a training run)

FORMS = {
    "configs/dqn-cartpole.yaml": "stacked",
    "configs/dqn-minatar-breakout.yaml": "each its own network",
    "configs/sac-discrete-cartpole.yaml": "stacked",
    "configs/sac-pendulum.yaml": "stacked",
    "configs/sac-halfcheetah.yaml": "stacked",
    "offline.yaml": "stacked",
    "offline.yaml:iql": "each its own network",
}
"""Each preset (``file:algorithm``: that algorithm in its place) and the form its two seeds step in."""
COMPARED = ("configs/dqn-cartpole.yaml", "configs/dqn-minatar-breakout.yaml")
"""The cases whose seed 1 is compared with the one-seed run."""
SHORTER = {"sac": ["train.max_steps=350", "train.eval_every=350", "train.log_every=350"]}
"""SAC: 50 gradient steps past the warm-up of 300 (DQN's and BC's tiny budgets are short enough)."""


def preset_tree(case: str) -> dict[str, Any]:
    """The case's preset, its algorithm replaced for ``file:algorithm`` (at that algorithm's defaults)."""
    preset, _, algorithm = case.partition(":")
    tree: dict[str, Any] = yaml.safe_load(preset_text(preset))
    if algorithm:
        tree["algo"] = {"name": algorithm, "batch_size": 64}
    return tree


def project(case: str, root: Path) -> Path:
    """``root`` with the case's preset; for offline.yaml, a random policy's dataset where it reads one."""
    preset = case.partition(":")[0]
    (root / "configs").mkdir(parents=True)
    (root / preset).write_text(yaml.safe_dump(preset_tree(case), sort_keys=False))
    if preset == "offline.yaml":
        collect_stage(load_params(root / preset, ["collect.policy=random", "collect.steps=1000"]), root)
    return root


def overrides(case: str) -> list[str]:
    tree = preset_tree(case)
    return [*tiny_budget(tree), *SHORTER.get(tree["algo"]["name"], []), "train.eval_episodes=1"]


def last_checkpoint(run_dir: Path) -> Any:
    checkpoints = list_checkpoints(run_dir / "checkpoints")
    assert checkpoints, f"{run_dir}: no checkpoint"
    return load_checkpoint(checkpoints[-1][1])


@pytest.mark.parametrize("case", list(FORMS))
def test_the_seeds_of_a_preset_train_as_one_program(
    case: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    preset = case.partition(":")[0]
    skip_without_extra(preset)
    root = project(case, tmp_path)
    with caplog.at_level(logging.INFO, logger="rlcore"):
        params = load_params(root / preset, [*overrides(case), "train.seeds=[0, 1]"])
        train_stage(params, root)
    assert f"train.seeds: 2 seeds trained as one program, {FORMS[case]} (seed 0, seed 1)" in caplog.text
    assert "one after another" not in caplog.text
    seeds = [last_checkpoint(root / "runs" / params.name / f"seed_{seed}") for seed in (0, 1)]
    if case not in COMPARED:
        return
    train_stage(load_params(root / preset, [*overrides(case), "seed=1", "name=alone"]), root)
    alone = last_checkpoint(root / "runs" / "alone")
    assert seeds[1].meta["gradient_steps"] == alone.meta["gradient_steps"] > 0
    for key, tensor in alone.tensors["policy"].items():
        torch.testing.assert_close(seeds[1].tensors["policy"][key], tensor, rtol=1e-4, atol=1e-6, msg=key)
