"""PPO learns CartPole-v1 with the default params; the same seed gives the same run."""

from pathlib import Path

import pytest
import torch
from conftest import PROJECT, outputs

from rlcore.common.checkpoints import list_checkpoints, load_checkpoint
from rlcore.common.files import read_json
from rlcore.params import load_params
from rlcore.stages import evaluate_stage, select_stage, train_stage


@pytest.mark.slow
def test_ppo_reaches_475_on_cartpole_within_100k_steps_seed_0(tmp_path: Path):
    # The default params.yaml, seed 0, a budget of 100k env steps; the selected model's test score
    # (100 deterministic episodes that neither training nor selection ran) is what counts.
    params = load_params(PROJECT / "params.yaml", ["seed=0", "train.max_steps=100000", "train.progress_bar=off"])
    train_stage(params, tmp_path)
    evaluate_stage(params, tmp_path)
    select_stage(params, tmp_path)
    metrics = read_json(outputs(tmp_path).metrics)
    assert metrics["episodes"] == 100 and metrics["validation"]["episodes"] == 10
    assert metrics["env_steps"] <= 100_000
    assert metrics["mean_return"] >= 475, metrics


def test_same_params_and_seed_give_identical_metrics_and_weights(tmp_path: Path):
    overrides = ["train.max_steps=3072", "train.eval_every=1024", "train.target_return=null", "train.progress_bar=off"]
    params = load_params(PROJECT / "params.yaml", overrides)
    summaries, weights = [], []
    for run in ("a", "b"):
        train_stage(params, tmp_path / run)
        summaries.append(read_json(tmp_path / run / "runs" / params.name / "train_summary.json")["evaluations"])
        _, last = list_checkpoints(tmp_path / run / "runs" / params.name / "checkpoints")[-1]
        weights.append(load_checkpoint(last).tensors["policy"])
    strip = [[{k: v for k, v in e.items() if k != "wall_seconds"} for e in s] for s in summaries]
    assert strip[0] == strip[1]
    assert weights[0].keys() == weights[1].keys()
    for key in weights[0]:
        assert torch.equal(weights[0][key], weights[1][key]), key
