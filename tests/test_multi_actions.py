"""MultiDiscrete and MultiBinary actions (issue 13): the distributions, the action conventions, space descriptions,
datasets, export, the refusals of algorithms that cannot act in them, and PPO learning in them.

The env is ``tests/multi_action_env.py``: a random target per sub-action every step, reward 1 only when every
sub-action hits its target, 20-step episodes (optimum 20).
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import multi_action_env
import numpy as np
import onnxruntime
import pyarrow.parquet as pq
import pytest
import torch
from cli_support import run_in_process
from conftest import PROJECT, QUICK, one_line_error, outputs, sets
from gymnasium import spaces
from torch.distributions import Categorical

from rlcore.common.checkpoints import load_checkpoint
from rlcore.common.errors import ConfigError
from rlcore.common.files import read_json
from rlcore.config.sections import PolicyConfig
from rlcore.data.collection import CollectionPlan, collect_dataset
from rlcore.data.reader import iter_dataset, load_dataset
from rlcore.data.schema import DatasetError
from rlcore.data.writer import DatasetWriter
from rlcore.envs.actions import action_layout, random_actions, to_env_actions
from rlcore.envs.config import EnvConfig
from rlcore.envs.vector import check_spaces, describe_space, make_vector_env, space_from_description
from rlcore.nets.distributions import MultiBernoulli, MultiCategorical
from rlcore.nets.policies import ActorCritic
from rlcore.nets.policy import action_dim
from rlcore.params import load_params
from rlcore.registry import check_action_space, policy_from_checkpoint
from rlcore.stages import collect_stage, evaluate_stage, export_stage, select_stage, train_stage

TESTS = Path(__file__).resolve().parent
ENV = f"multi_action_env:{multi_action_env.ENV_ID}"
NVEC = (3, 3, 2)
OBS = spaces.Box(0.0, 1.0, (8,), np.float32)
MULTI_DISCRETE = spaces.MultiDiscrete(NVEC)
MULTI_BINARY = spaces.MultiBinary(4)
BINARY_KWARGS = "env.kwargs={action: multi_binary, sizes: [2, 2, 2, 2]}"
OFFSET_KWARGS = "env.kwargs={sizes: [3, 3, 2], start: [1, -1, 5]}"


# --- distributions ---------------------------------------------------------------------------------------------


def test_multi_categorical_log_prob_and_entropy_are_sums_over_its_categoricals():
    logits = torch.tensor([[0.5, -1.0, 2.0, 0.0, 0.3, -0.2, 1.5, -1.5], [0.0] * 8])
    actions = torch.tensor([[2, 0, 1], [1, 2, 0]])
    dist = MultiCategorical(logits, NVEC)
    parts = [Categorical(logits=chunk) for chunk in (logits[:, :3], logits[:, 3:6], logits[:, 6:])]
    expected_log_prob = sum(part.log_prob(actions[:, i]) for i, part in enumerate(parts))
    expected_entropy = sum(part.entropy() for part in parts)
    assert torch.allclose(dist.log_prob(actions), expected_log_prob)
    assert torch.allclose(dist.entropy(), expected_entropy)
    # Uniform logits (row 1): every one of the 3 * 3 * 2 joint actions has probability 1/18.
    assert dist.log_prob(actions)[1].item() == pytest.approx(-math.log(18), abs=1e-6)
    assert dist.entropy()[1].item() == pytest.approx(math.log(18), abs=1e-6)


def test_multi_categorical_samples_b_by_k_int64_and_its_mode_is_each_sub_actions_argmax():
    logits = torch.tensor([[0.5, -1.0, 2.0, 0.0, 0.3, -0.2, 1.5, -1.5]]).repeat(1000, 1)
    dist = MultiCategorical(logits, NVEC)
    samples = dist.sample()
    assert samples.shape == (1000, 3) and samples.dtype == torch.int64
    assert samples.min() >= 0 and torch.all(samples.max(dim=0).values == torch.tensor([2, 2, 1]))
    assert dist.mode[0].tolist() == [2, 1, 0]
    assert dist.log_prob(samples).shape == dist.entropy().shape == (1000,)
    # The first sub-action's frequencies follow its own softmax.
    frequencies = torch.bincount(samples[:, 0], minlength=3) / 1000
    assert torch.allclose(frequencies, torch.softmax(logits[0, :3], dim=0), atol=0.05)


def test_multi_bernoulli_hand_computed_log_prob_entropy_and_greedy():
    dist = MultiBernoulli(torch.tensor([[0.0, math.log(3.0), -1.0]]))  # p(bit = 1): 0.5, 0.75, sigmoid(-1)
    p3 = 1 / (1 + math.e)
    log_prob = math.log(0.5) + math.log(0.25) + math.log(1 - p3)  # action (1, 0, 0)
    assert dist.log_prob(torch.tensor([[1, 0, 0]])).item() == pytest.approx(log_prob, abs=1e-6)

    def h(p: float) -> float:
        return -p * math.log(p) - (1 - p) * math.log(1 - p)

    assert dist.entropy().item() == pytest.approx(math.log(2) + h(0.75) + h(p3), abs=1e-6)
    assert dist.mode.tolist() == [[0, 1, 0]]  # logit > 0; a logit of exactly 0 is 0
    samples = MultiBernoulli(torch.zeros(10, 4)).sample()
    assert samples.shape == (10, 4) and samples.dtype == torch.int64 and set(samples.unique().tolist()) <= {0, 1}


@pytest.mark.parametrize("action_space", [MULTI_DISCRETE, MULTI_BINARY], ids=["multi_discrete", "multi_binary"])
def test_actor_critic_acts_one_int64_row_per_observation(action_space):
    policy = ActorCritic(OBS, action_space, PolicyConfig())
    k = int(action_space.shape[0])
    obs = torch.rand(5, 8)
    assert policy.act_scores(obs).shape == (5, action_dim(action_space))
    greedy = policy.deterministic_action(obs)
    assert greedy.shape == (5, k) and greedy.dtype == torch.int64
    assert torch.equal(greedy, policy.distribution(obs).mode)  # type: ignore[attr-defined]
    first = policy.sample_action(obs, torch.Generator().manual_seed(3))
    again = policy.sample_action(obs, torch.Generator().manual_seed(3))
    assert first.shape == (5, k) and first.dtype == torch.int64 and torch.equal(first, again)
    assert not hasattr(policy, "log_std")  # no Gaussian parameter for integer actions


# --- the action conventions ------------------------------------------------------------------------------------


def test_action_width_and_stored_layout_per_space():
    assert action_dim(MULTI_DISCRETE) == 8 and action_layout(MULTI_DISCRETE) == ((3,), torch.int64)
    assert action_dim(MULTI_BINARY) == 4 and action_layout(MULTI_BINARY) == ((4,), torch.int64)
    assert action_layout(spaces.Discrete(5)) == ((), torch.int64)
    assert action_layout(spaces.Box(-1.0, 1.0, (2, 3))) == ((6,), torch.float32)


def test_to_env_actions_offsets_by_start_and_casts_to_the_space_dtype():
    space = spaces.MultiDiscrete([3, 4], start=[1, -2], dtype=np.int32)
    env_actions = to_env_actions(torch.tensor([[0, 0], [2, 3]]), space)
    assert env_actions.dtype == np.int32 and env_actions.tolist() == [[1, -2], [3, 1]]
    assert all(space.contains(row) for row in env_actions)
    bits = to_env_actions(np.array([[1, 0, 1, 1]]), MULTI_BINARY)
    assert bits.dtype == MULTI_BINARY.dtype == np.int8 and MULTI_BINARY.contains(bits[0])


def test_random_actions_are_uniform_per_sub_action():
    actions = random_actions(MULTI_DISCRETE, 18_000, np.random.default_rng(0))
    assert actions.shape == (18_000, 3) and actions.dtype == np.int64
    for i, n in enumerate(NVEC):
        frequencies = np.bincount(actions[:, i], minlength=n) / len(actions)
        assert len(frequencies) == n and np.allclose(frequencies, 1 / n, atol=0.02), (i, frequencies)
    bits = random_actions(MULTI_BINARY, 4_000, np.random.default_rng(0))
    assert bits.shape == (4_000, 4) and set(np.unique(bits)) == {0, 1} and abs(bits.mean() - 0.5) < 0.02


# --- spaces ----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "space",
    [spaces.MultiDiscrete([3, 4, 2], start=[1, -2, 0], dtype=np.int32), spaces.MultiDiscrete(NVEC), MULTI_BINARY],
    ids=["multi_discrete_start_int32", "multi_discrete", "multi_binary"],
)
def test_space_description_is_json_and_round_trips(space):
    description = json.loads(json.dumps(describe_space(space)))
    rebuilt = space_from_description(description)
    assert rebuilt == space and rebuilt.dtype == space.dtype


def test_multi_dimensional_multi_binary_and_multi_discrete_are_refused_in_one_line():
    with pytest.raises(ConfigError, match=r"^env.id: X has a 2-D MultiBinary action space \(shape \(2, 3\)\); "):
        check_spaces("X", OBS, spaces.MultiBinary([2, 3]))
    with pytest.raises(ConfigError, match=r"rlcore supports 1-D MultiDiscrete and MultiBinary actions$"):
        check_spaces("X", OBS, spaces.MultiDiscrete([[2, 3], [4, 5]]))


def test_the_test_env_builds_and_pays_only_when_every_sub_action_hits():
    env = make_vector_env(EnvConfig(id=ENV, kwargs={"start": [1, -1, 5]}), 2)
    obs, _ = env.reset(seed=0)
    targets = np.stack([obs[:, :3].argmax(1), obs[:, 3:6].argmax(1), obs[:, 6:].argmax(1)], axis=1)
    right = to_env_actions(targets, env.single_action_space)
    wrong = to_env_actions((targets + [0, 0, 1]) % NVEC, env.single_action_space)
    _, rewards, *_ = env.step(np.stack([right[0], wrong[1]]))
    assert rewards.tolist() == [1.0, 0.0]
    env.close()


# --- refusals --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("algo", ["dqn", "sac", "bc", "td3bc", "iql"])
@pytest.mark.parametrize("action_space", [MULTI_DISCRETE, MULTI_BINARY], ids=["multi_discrete", "multi_binary"])
def test_algorithms_that_cannot_act_in_multi_spaces_refuse_them_in_one_line(algo, action_space):
    with pytest.raises(ConfigError) as refused:
        check_action_space(algo, ENV, action_space)
    message = str(refused.value)
    assert "\n" not in message and message.startswith(f"algo.name: {algo} needs a ")
    assert message.endswith(f"action space, but {ENV} has {action_space}")


def test_dqn_on_a_multi_discrete_env_is_refused_by_the_command_before_any_output(project: Path):
    result = run_in_process(
        [
            "train",
            "--params",
            str(PROJECT / "configs" / "dqn-cartpole.yaml"),
            *sets([f"env.id={ENV}", "env.num_envs=1"]),
        ],
        project,
    )
    one_line_error(result, "algo.name: dqn needs a Discrete action space", ENV, "MultiDiscrete([3 3 2])")
    assert not (project / "runs").exists()


# --- the pipeline: train, select, export, collect --------------------------------------------------------------


def _pipeline(root: Path, overrides: list[str]) -> None:
    params = load_params(
        PROJECT / "params.yaml",
        [
            *QUICK,
            "train.progress_bar=off",
            f"env.id={ENV}",
            "train.max_steps=2048",
            "env.num_envs=8",
            *overrides,
        ],
    )
    # collect rolls out the run's own selected model, models/quick/policy.pt (collect.policy: null)
    for stage in (train_stage, evaluate_stage, select_stage, export_stage, collect_stage):
        stage(params, root)


@pytest.mark.parametrize("kwargs", [OFFSET_KWARGS, BINARY_KWARGS], ids=["multi_discrete_start", "multi_binary"])
def test_exported_policy_returns_one_int64_action_row_per_observation_matching_torch(tmp_path: Path, kwargs):
    _pipeline(tmp_path, [kwargs, "collect.steps=200"])
    checkpoint = load_checkpoint(outputs(tmp_path).best_policy)
    policy = policy_from_checkpoint(checkpoint)
    action_space = space_from_description(checkpoint.meta["spaces"]["action"])
    k = int(action_space.shape[0])
    obs = np.eye(8, dtype=np.float32)[np.random.default_rng(0).integers(0, 8, (300, 1))].reshape(300, 8)
    obs = np.concatenate([obs, np.random.default_rng(1).random((100, 8), dtype=np.float32)])
    with torch.no_grad():
        expected_scores = policy.act_scores(torch.as_tensor(obs)).numpy()
        expected_action = policy.deterministic_action(torch.as_tensor(obs)).numpy()

    onnx = outputs(tmp_path).export / "policy.onnx"
    session = onnxruntime.InferenceSession(str(onnx), providers=["CPUExecutionProvider"])
    action, scores = session.run(["action", "scores"], {"obs": obs})
    assert action.dtype == np.int64 and action.shape == (400, k)
    assert np.max(np.abs(scores - expected_scores)) <= 1e-5 and np.array_equal(action, expected_action)
    if isinstance(action_space, spaces.MultiDiscrete):
        split = np.split(scores, np.cumsum(NVEC)[:-1], axis=1)
        assert np.array_equal(action, np.stack([chunk.argmax(1) for chunk in split], axis=1))
    else:
        assert np.array_equal(action, (scores > 0).astype(np.int64))
    pt2_action, pt2_scores = torch.export.load(outputs(tmp_path).export / "policy.pt2").module()(torch.as_tensor(obs))
    assert pt2_action.dtype == torch.int64 and np.array_equal(pt2_action.numpy(), expected_action)
    assert np.max(np.abs(pt2_scores.detach().numpy() - expected_scores)) <= 1e-5

    card = read_json(outputs(tmp_path).export / "model_card.json")
    assert card["action_space"] == describe_space(action_space)
    assert f"int64 (batch, {k})" in card["interface"]["outputs"]["action"]
    assert card["parity"]["onnx_max_abs_diff"] <= 1e-5

    # The collected dataset: one int64 row per transition, each sub-action an index from 0, and the rewards
    # are those of these actions (the offset by start was applied when stepping, not stored).
    data = load_dataset(tmp_path / "data" / "dataset.parquet", OBS, action_space, ENV)
    column = pq.read_schema(tmp_path / "data" / "dataset.parquet").field("action").type
    assert str(column) == f"fixed_size_list<element: int64>[{k}]"
    assert data.actions.shape == (len(data), k) and data.actions.dtype == np.int64
    sizes = NVEC if isinstance(action_space, spaces.MultiDiscrete) else (2, 2, 2, 2)
    blocks = np.split(data.obs, np.cumsum(sizes)[:-1], axis=1)
    targets = np.stack([block.argmax(1) for block in blocks], axis=1)
    assert np.array_equal(data.rewards, np.all(data.actions == targets, axis=1).astype(np.float32))
    assert data.rewards.mean() > 1 / 18  # better than random after 2048 steps (the policy has learnt something)


def test_random_multi_discrete_collection_round_trips_through_the_dataset(tmp_path: Path):
    env = EnvConfig(id=ENV, kwargs={"start": [1, -1, 5]})
    path = tmp_path / "random.parquet"
    metadata = collect_dataset(path, env, None, {"kind": "random"}, CollectionPlan(4, 300, None, 0.0, False, 7, 128))
    assert metadata["action_space"] == describe_space(spaces.MultiDiscrete(NVEC, start=[1, -1, 5]))
    action_space = space_from_description(metadata["action_space"])
    data = load_dataset(path, OBS, action_space, ENV)
    assert len(data) == 300 and data.actions.shape == (300, 3) and data.actions.dtype == np.int64
    assert np.all(data.actions >= 0) and np.all(data.actions < np.array(NVEC))
    chunks = list(iter_dataset(path, OBS, action_space, ENV))
    assert len(chunks) == 3 and np.array_equal(np.concatenate([c.actions for c in chunks]), data.actions)
    log_probs = pq.read_table(path, columns=["log_prob"]).column("log_prob").to_numpy()
    assert np.allclose(log_probs, -math.log(18))


def test_a_sub_action_out_of_range_is_refused_naming_it(tmp_path: Path):
    path = tmp_path / "bad.parquet"
    writer = DatasetWriter(path, OBS, MULTI_DISCRETE, {"env": {"id": ENV, "kwargs": {}}})
    obs = np.zeros((2, 8), np.float32)
    actions = np.array([[0, 1, 1], [2, 3, 0]])  # sub-action 1 has 3 choices: 3 is out of range
    writer.add_episode(obs, actions, np.zeros(2), obs, np.array([False, True]), np.zeros(2, bool), None)
    writer.close()
    with pytest.raises(DatasetError, match=r"action \[2, 3, 0\] has sub-action 1 = 3, outside 0..2 .* \(row 1\)"):
        load_dataset(path, OBS, MULTI_DISCRETE, ENV)
    with pytest.raises(DatasetError, match=r"column 'action' has type .*, but .* has MultiBinary actions"):
        load_dataset(path, OBS, MULTI_BINARY, ENV)


# --- learning --------------------------------------------------------------------------------------------------


RL_ZOO_DISCOUNT = ["algo.gamma=0.98", "algo.gae_lambda=0.8"]
"""The discount these 20-step tasks' thresholds were measured with (params.yaml's until 2026-11-30; its 0.99 / 0.95
scores 18.96 on the multi-discrete targets at this budget)."""


def _learn(root: Path, overrides: list[str]) -> dict:
    params = load_params(
        PROJECT / "params.yaml",
        ["seed=0", f"env.id={ENV}", "train.max_steps=16384", "train.eval_every=2048", "train.target_return=null",
         "train.progress_bar=off", *RL_ZOO_DISCOUNT, *overrides],
    )  # fmt: skip
    train_stage(params, root)
    evaluate_stage(params, root)
    select_stage(params, root)
    return read_json(outputs(root).metrics)


@pytest.mark.slow
def test_ppo_scores_19_of_20_on_multi_discrete_targets_within_16k_steps_seed_0(tmp_path: Path):
    # nvec (3, 3, 2): a random policy scores 20/18 per episode; 20 needs all three sub-actions right every step.
    # The default params.yaml (PPO) with RL Zoo's CartPole discount, seed 0, 16,384 env steps; the selected model's
    # test score counts.
    metrics = _learn(tmp_path, [])
    assert metrics["env_steps"] <= 16_384
    assert metrics["mean_return"] >= 19, metrics


@pytest.mark.slow
def test_ppo_scores_19_of_20_on_multi_binary_targets_within_16k_steps_seed_0(tmp_path: Path):
    # 4 bits: a random policy scores 20/16 per episode.
    metrics = _learn(tmp_path, [BINARY_KWARGS])
    assert metrics["env_steps"] <= 16_384
    assert metrics["mean_return"] >= 19, metrics
