"""Export: ONNX and torch.export programs agree with torch on raw observations, normalization included."""

from pathlib import Path

import numpy as np
import onnxruntime
import pytest
import torch
from conftest import PROJECT, QUICK

from rlcore.checkpoints import load_checkpoint
from rlcore.config import EnvConfig
from rlcore.export import parity_observations
from rlcore.io import read_json
from rlcore.params import load_params
from rlcore.registry import policy_from_checkpoint
from rlcore.stages import evaluate_stage, export_stage, select_stage, train_stage


def _pipeline(root: Path, overrides: list[str]) -> None:
    params = load_params(PROJECT / "params.yaml", [*QUICK, "train.progress_bar=off", *overrides])
    for stage in (train_stage, evaluate_stage, select_stage, export_stage):
        stage(params, root)


@pytest.mark.parametrize(
    "env_overrides",
    [["env.id=CartPole-v1"], ["env.id=Pendulum-v1", "train.max_steps=2048", "env.num_envs=4"]],
    ids=["discrete", "box"],
)
def test_onnx_matches_torch_on_1000_raw_observations_with_normalization_inside(tmp_path: Path, env_overrides):
    _pipeline(tmp_path, [*env_overrides, "policy.normalize_obs=true", "export.parity_observations=1000"])
    checkpoint = load_checkpoint(tmp_path / "models" / "best" / "policy.pt")
    policy = policy_from_checkpoint(checkpoint)
    normalizer = policy.obs_normalizer
    assert normalizer.enabled and normalizer.count.item() > 100  # real statistics, not the identity

    meta = checkpoint.meta["params"]["env"]
    obs = parity_observations(EnvConfig.model_validate(meta), policy, 1000, seed=12345)  # fresh observations
    session = onnxruntime.InferenceSession(str(tmp_path / "export" / "policy.onnx"), providers=["CPUExecutionProvider"])
    action, scores = session.run(["action", "scores"], {"obs": obs})
    with torch.no_grad():
        expected_scores = policy.act_scores(torch.as_tensor(obs)).numpy()
    assert np.max(np.abs(scores - expected_scores)) <= 1e-5
    if policy.discrete:
        assert action.dtype == np.int64 and action.shape == (1000,)
        assert np.array_equal(action, expected_scores.argmax(-1))
    else:
        assert action.shape == (1000, 1) and np.all(np.abs(action) <= 2.0)  # clipped to Pendulum's bounds

    # The graph really contains the normalizer: without it the outputs differ.
    normalizer.enabled = False
    with torch.no_grad():
        unnormalized = policy.act_scores(torch.as_tensor(obs)).numpy()
    assert np.max(np.abs(scores - unnormalized)) > 1e-3

    program = torch.export.load(tmp_path / "export" / "policy.pt2").module()
    with torch.no_grad():
        _, pt2_scores = program(torch.as_tensor(obs))
    assert np.max(np.abs(pt2_scores.numpy() - expected_scores)) <= 1e-5

    card = read_json(tmp_path / "export" / "model_card.json")
    assert card["parity"]["observations"] == 1000 and card["parity"]["onnx_max_abs_diff"] <= 1e-5
    assert card["env"]["id"] == meta["id"]
    assert card["evaluation"]["mean_return"] == read_json(tmp_path / "reports" / "metrics.json")["mean_return"]
    for key in ("observation_space", "action_space", "algorithm", "params", "git", "command", "created", "files"):
        assert key in card


@pytest.mark.parametrize(
    "preset",
    [
        "dqn-cartpole.yaml",
        pytest.param("sac-pendulum.yaml", marks=pytest.mark.slow),
        pytest.param("sac-discrete-cartpole.yaml", marks=pytest.mark.slow),
    ],
)
def test_off_policy_exports_match_torch_greedy_actions(tmp_path: Path, preset: str):
    params = load_params(
        PROJECT / "configs" / preset,
        [
            "train.max_steps=1200",
            "train.eval_every=600",
            "train.eval_episodes=2",
            "algo.learning_starts=400",
            "eval.episodes=2",
            "train.target_return=null",
            "train.progress_bar=off",
        ],
    )
    for stage in (train_stage, evaluate_stage, select_stage, export_stage):
        stage(params, tmp_path)
    policy = policy_from_checkpoint(load_checkpoint(tmp_path / "models" / "best" / "policy.pt"))
    obs = parity_observations(params.env, policy, 500, seed=7)
    session = onnxruntime.InferenceSession(str(tmp_path / "export" / "policy.onnx"), providers=["CPUExecutionProvider"])
    action, scores = session.run(["action", "scores"], {"obs": obs})
    with torch.no_grad():
        expected_action = policy.deterministic_action(torch.as_tensor(obs)).numpy()
        expected_scores = policy.act_scores(torch.as_tensor(obs)).numpy()
    assert np.max(np.abs(scores - expected_scores)) <= 1e-5
    if policy.discrete:
        assert np.array_equal(action, expected_action)
    else:  # SAC squashes into the bounds: the exported action is the tanh-squashed mean, within [-2, 2]
        assert np.max(np.abs(action - expected_action)) <= 1e-5 and np.all(np.abs(action) <= 2.0)
    assert read_json(tmp_path / "export" / "model_card.json")["algorithm"] == params.algo.name
