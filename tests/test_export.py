"""Export: ONNX and torch.export programs agree with torch on raw observations, normalization included."""

from pathlib import Path

import gymnasium as gym
import numpy as np
import onnxruntime
import pytest
import torch
from conftest import PROJECT, QUICK, outputs
from torch import nn

from rlcore.common.checkpoints import load_checkpoint
from rlcore.common.errors import ConfigError
from rlcore.common.files import read_json
from rlcore.config.sections import MemoryConfig, PolicyConfig
from rlcore.envs.config import EnvConfig
from rlcore.envs.vector import describe_space
from rlcore.evaluation.export import ExportError, ExportOptions, export_policy, parity_inputs, parity_observations
from rlcore.nets.policies import QPolicy
from rlcore.nets.policy import Policy
from rlcore.nets.recurrent import RecurrentActorCritic
from rlcore.params import load_params
from rlcore.registry import policy_from_checkpoint
from rlcore.stages import evaluate_stage, export_stage, select_stage, train_stage


def _pipeline(root: Path, overrides: list[str]) -> None:
    params = load_params(PROJECT / "params.yaml", [*QUICK, "train.progress_bar=off", *overrides])
    for stage in (train_stage, evaluate_stage, select_stage, export_stage):
        stage(params, root)


@pytest.mark.parametrize(
    "env_overrides",
    # Budgets that give the normalizer real statistics (the parity does not depend on how well the policy plays).
    [["env.id=CartPole-v1", "train.max_steps=1024"], ["env.id=Pendulum-v1", "train.max_steps=2048", "env.num_envs=4"]],
    ids=["discrete", "box"],
)
def test_onnx_matches_torch_on_1000_raw_observations_with_normalization_inside(tmp_path: Path, env_overrides):
    _pipeline(tmp_path, [*env_overrides, "policy.normalize_obs=true", "export.parity_observations=1000"])
    checkpoint = load_checkpoint(outputs(tmp_path).best_policy)
    policy = policy_from_checkpoint(checkpoint)
    normalizer = policy.obs_normalizer
    assert normalizer.enabled and normalizer.count.item() > 100  # real statistics, not the identity

    meta = checkpoint.meta["params"]["env"]
    obs = parity_observations(EnvConfig.model_validate(meta), policy, 1000, seed=12345)  # fresh observations
    onnx = outputs(tmp_path).export / "policy.onnx"
    session = onnxruntime.InferenceSession(str(onnx), providers=["CPUExecutionProvider"])
    action, scores = session.run(["action", "scores"], {"obs": obs})
    with torch.no_grad():
        expected_scores = policy.act_scores(torch.as_tensor(obs)).numpy()
    np.testing.assert_allclose(scores, expected_scores, rtol=1e-4, atol=1e-5)
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

    program = torch.export.load(outputs(tmp_path).export / "policy.pt2").module()
    with torch.no_grad():
        _, pt2_scores = program(torch.as_tensor(obs))
    np.testing.assert_allclose(pt2_scores.numpy(), expected_scores, rtol=1e-4, atol=1e-5)

    card = read_json(outputs(tmp_path).export / "model_card.json")
    parity = card["parity"]
    assert parity["observations"] == 1000 and (parity["atol"], parity["rtol"]) == (1e-5, 1e-4)
    assert parity["onnx_max_abs_diff"] <= 1e-5 and parity["torch_export_max_abs_diff"] <= 1e-5
    assert {"onnx_max_rel_diff", "torch_export_max_rel_diff"} <= parity.keys()
    assert card["env"]["id"] == meta["id"]
    assert card["evaluation"]["mean_return"] == read_json(outputs(tmp_path).metrics)["mean_return"]
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
    policy = policy_from_checkpoint(load_checkpoint(outputs(tmp_path).best_policy))
    obs = parity_observations(params.env, policy, 500, seed=7)
    onnx = outputs(tmp_path).export / "policy.onnx"
    session = onnxruntime.InferenceSession(str(onnx), providers=["CPUExecutionProvider"])
    action, scores = session.run(["action", "scores"], {"obs": obs})
    with torch.no_grad():
        expected_action = policy.deterministic_action(torch.as_tensor(obs)).numpy()
        expected_scores = policy.act_scores(torch.as_tensor(obs)).numpy()
    np.testing.assert_allclose(scores, expected_scores, rtol=1e-4, atol=1e-5)
    if policy.discrete:
        assert np.array_equal(action, expected_action)
    else:  # SAC squashes into the bounds: the exported action is the tanh-squashed mean, within [-2, 2]
        assert np.max(np.abs(action - expected_action)) <= 1e-5 and np.all(np.abs(action) <= 2.0)
    assert read_json(outputs(tmp_path).export / "model_card.json")["algorithm"] == params.algo.name


# --- the parity rule: |exported - torch| <= parity_atol + parity_rtol * |torch| per element ----------------------

OBSERVATION_SPACE = gym.spaces.Box(-np.inf, np.inf, (4,), dtype=np.float32)
META = {
    "spaces": {"observation": describe_space(OBSERVATION_SPACE), "action": describe_space(gym.spaces.Discrete(2))},
    "params": {"env": EnvConfig(id="CartPole-v1").model_dump(mode="json")},
}
PARITY_OBSERVATIONS = 300
# The recurrent actor's last layer starts at gain 0.01 (DQN's Q head at 1): these put both kinds' scores (before the
# shift) near 10-50 (large) and 1e-3 (tiny).
LARGE = {"feed-forward": 100.0, "recurrent": 10_000.0}
TINY = {"feed-forward": 0.01, "recurrent": 1.0}


class ExportedOnly(nn.Module):
    """Multiplies by ``factor`` only in an exported graph (torch.export and the ONNX exporter trace through
    ``torch.compiler.is_exporting``): a real mismatch between the exported model and torch."""

    def __init__(self, factor: float) -> None:
        super().__init__()
        self.factor = factor

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * self.factor if torch.compiler.is_exporting() else x


def scaled_policy(kind: str, scale: float, shift: float = 0.0, exported_factor: float | None = None) -> Policy:
    """A seeded CartPole policy whose score layer (DQN's Q head, or the recurrent actor's logits) is scaled by
    ``scale`` with ``shift`` added to its bias; ``exported_factor``: the exported graph's scores differ by it."""
    torch.manual_seed(0)
    policy: Policy
    if kind == "feed-forward":
        policy = QPolicy(OBSERVATION_SPACE, gym.spaces.Discrete(2), PolicyConfig(hidden_sizes=[64, 64]))
        head = policy.q
    else:
        config = PolicyConfig(hidden_sizes=[64], memory=MemoryConfig(type="lstm", size=32))
        policy = RecurrentActorCritic(OBSERVATION_SPACE, gym.spaces.Discrete(2), config)
        head = policy.actor
    with torch.no_grad():
        head[-1].weight.mul_(scale)
        head[-1].bias.mul_(scale).add_(shift)
    if exported_factor is not None:
        head.append(ExportedOnly(exported_factor))
    return policy.eval()


def torch_scores(policy: Policy) -> np.ndarray:
    inputs = parity_inputs(EnvConfig(id="CartPole-v1"), policy, PARITY_OBSERVATIONS, seed=0)
    state = torch.as_tensor(inputs["state"]) if "state" in inputs else None
    with torch.no_grad():
        return policy.greedy(torch.as_tensor(inputs["obs"]), state)[1].numpy()


@pytest.mark.parametrize("kind", ["feed-forward", "recurrent"])
def test_outputs_in_the_hundreds_pass_the_rule_the_old_absolute_tolerance_failed(tmp_path: Path, kind: str):
    """The DQN preset's bug: Q-values near 100 failed `max |diff| <= 1e-5` at export. Scores in the hundreds here
    (float32's spacing there is 3e-5), for ONNX and torch.export, with and without a recurrent state."""
    policy = scaled_policy(kind, scale=LARGE[kind], shift=300.0)
    scores = torch_scores(policy)
    assert np.abs(scores).min() >= 100 and np.abs(scores).max() < 1000

    result = export_policy(policy, META, tmp_path, ExportOptions(True, True, PARITY_OBSERVATIONS, 1e-5, 1e-4, 18))
    parity = result.parity
    assert set(result.files) == {"policy.onnx", "policy.pt2"}
    # onnxruntime sums in another order than torch: the old absolute rule (1e-5) fails on these outputs ...
    assert parity["onnx_max_abs_diff"] > 1e-5
    # ... which are a few float32 steps apart: relative 1e-7, far inside rtol.
    assert parity["onnx_max_abs_diff"] <= 1e-4 * np.abs(scores).max()
    assert parity["torch_export_max_abs_diff"] <= 1e-4 * np.abs(scores).max()
    assert (parity["atol"], parity["rtol"]) == (1e-5, 1e-4)
    # The card says how much of the allowance the worst element used (at most 1: passed).
    assert 0 < parity["onnx_max_allowed_fraction"] <= 1 and 0 <= parity["torch_export_max_allowed_fraction"] <= 1


@pytest.mark.parametrize("exported", ["policy.onnx", "policy.pt2"])
@pytest.mark.parametrize("kind", ["feed-forward", "recurrent"])
def test_tiny_outputs_still_catch_a_real_mismatch(tmp_path: Path, kind: str, exported: str):
    """Scores near 1e-3, and an exported graph whose scores are 5% off torch's (5e-5 at the largest): the rule's
    relative term adds almost nothing there, its absolute term (1e-5) is what catches it."""
    scores = torch_scores(scaled_policy(kind, TINY[kind]))
    assert 5e-4 <= np.abs(scores).max() <= 5e-3
    policy = scaled_policy(kind, TINY[kind], exported_factor=1.05)
    onnx, torch_export = exported == "policy.onnx", exported == "policy.pt2"
    # The one line names the file, the worst element, its absolute and relative differences, and the keys.
    message = rf"^{exported}: scores\[\d+, \d\]: \|exported - torch\| = \S+ \(relative \S+, torch \S+\) exceeds "
    message += r"export.parity_atol 1e-05 \+ export.parity_rtol 0.0001 x \|torch\|$"
    with pytest.raises(ExportError, match=message):
        export_policy(policy, META, tmp_path, ExportOptions(onnx, torch_export, PARITY_OBSERVATIONS, 1e-5, 1e-4, 18))
    assert list(tmp_path.iterdir()) == []  # the failed export left nothing behind


def test_parity_tolerance_is_read_as_parity_atol_and_not_beside_it(tmp_path: Path):
    """A params file of before the rule had a relative term (its absolute tolerance ``export.parity_tolerance``)
    still loads: the old key is the absolute term, the relative term its default."""
    text = (PROJECT / "configs" / "dqn-cartpole.yaml").read_text()
    assert "  parity_atol: 1.0e-5\n  parity_rtol: 1.0e-4\n" in text
    old = tmp_path / "old.yaml"
    old.write_text(text.replace("  parity_atol: 1.0e-5\n  parity_rtol: 1.0e-4\n", "  parity_tolerance: 2.0e-5\n"))
    params = load_params(old)
    assert (params.export.parity_atol, params.export.parity_rtol) == (2e-5, 1e-4)
    assert "parity_tolerance" not in params.model_dump()["export"]
    with pytest.raises(ConfigError, match="export.parity_tolerance: the old name of export.parity_atol"):
        load_params(old, ["export.parity_atol=1e-5"])
