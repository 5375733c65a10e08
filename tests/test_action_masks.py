"""Action masks (``env.action_mask``, issue 29): masked actions get probability 0 in acting, greedy evaluation, the
losses, DQN's targets, collection and export, and a policy never emits one (checked over many random states and
masks); masks the env gives wrongly are refused in one line; PPO learns Taxi with them."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import onnxruntime
import pytest
import torch
from conftest import PROJECT, outputs
from gymnasium import spaces

from rlcore.algos.bc import BC, BCConfig
from rlcore.algos.dqn import DQN, DQNConfig
from rlcore.common.errors import ConfigError
from rlcore.common.files import read_json
from rlcore.config.sections import PolicyConfig
from rlcore.data.collection import CollectionPlan, collect_dataset
from rlcore.data.reader import load_dataset
from rlcore.data.rollouts import RolloutBuffer
from rlcore.envs.action_masks import ActionMaskObservation, check_mask, mask_inputs, random_legal_actions
from rlcore.envs.config import EnvConfig
from rlcore.envs.observations import PackedDict, action_mask_slice
from rlcore.envs.vector import describe_space, make_vector_env, space_from_description
from rlcore.evaluation.export import NO_LEGAL_ACTION, ExportOptions, export_policy
from rlcore.nets.distributions import masked_categorical
from rlcore.nets.policies import ActorCritic, CategoricalActor, QPolicy
from rlcore.nets.policy import Policy
from rlcore.params import load_params
from rlcore.stages import evaluate_stage, select_stage, train_stage

N_ACTIONS = 6
TAXI = EnvConfig(id="Taxi-v4", action_mask="info")
SPACE = PackedDict(
    spaces.Dict({"action_mask": spaces.MultiBinary(N_ACTIONS), "observation": spaces.Discrete(500)}), action_mask=True
)
ACTIONS = spaces.Discrete(N_ACTIONS)
STATES = 4000


def random_states(seed: int, count: int = STATES) -> tuple[torch.Tensor, torch.Tensor]:
    """``count`` packed observations (random Taxi states, random masks with at least one legal action), and the
    masks (count, 6) bool."""
    rng = np.random.default_rng(seed)
    legal = rng.random((count, N_ACTIONS)) < rng.uniform(0.1, 0.9, (count, 1))
    legal[np.arange(count), rng.integers(0, N_ACTIONS, count)] |= ~legal.any(axis=1)
    obs = np.concatenate([legal, rng.integers(0, 500, (count, 1))], axis=1).astype(np.float32)
    return torch.as_tensor(obs), torch.as_tensor(legal)


def policies() -> list[Policy]:
    torch.manual_seed(0)
    config = PolicyConfig(hidden_sizes=[32])
    actor_critic = ActorCritic(SPACE, ACTIONS, config)
    with torch.no_grad():  # sharp logits: an unmasked policy would choose masked actions often
        actor_critic.actor[-1].weight.mul_(300.0)
    return [actor_critic, QPolicy(SPACE, ACTIONS, config), CategoricalActor(SPACE, ACTIONS, config)]


def legal(actions: torch.Tensor, masks: torch.Tensor) -> bool:
    return bool(masks[torch.arange(len(actions)), actions].all())


# --- the distribution ----------------------------------------------------------------------------------------------


def test_masked_categorical_matches_a_hand_computed_case() -> None:
    """logits (1, 2, 3, 0), legal (yes, no, yes, no): probabilities e/(e+e^3), 0, e^3/(e+e^3), 0; the entropy sums
    over the two legal actions only and is finite."""
    dist = masked_categorical(torch.tensor([[1.0, 2.0, 3.0, 0.0]]), torch.tensor([[True, False, True, False]]))
    z = math.e + math.e**3
    p0, p2 = math.e / z, math.e**3 / z
    torch.testing.assert_close(dist.probs, torch.tensor([[p0, 0.0, p2, 0.0]]), rtol=1e-6, atol=1e-7)
    assert dist.probs[0, 1].item() == 0.0 and dist.probs[0, 3].item() == 0.0  # exactly
    entropy = dist.entropy()
    assert torch.isfinite(entropy).all()
    assert entropy.item() == pytest.approx(-(p0 * math.log(p0) + p2 * math.log(p2)), rel=1e-6)
    assert dist.log_prob(torch.tensor([2])).item() == pytest.approx(3.0 - math.log(z), rel=1e-6)


def test_masked_entropy_has_finite_gradients_that_skip_masked_logits() -> None:
    logits = torch.tensor([[0.5, -1.0, 2.0]], requires_grad=True)
    masked_categorical(logits, torch.tensor([[True, True, False]])).entropy().sum().backward()
    assert logits.grad is not None and torch.isfinite(logits.grad).all()
    assert logits.grad[0, 2].item() == 0.0


# --- a policy never emits a masked action ----------------------------------------------------------------------------


@pytest.mark.parametrize("index", [0, 1, 2], ids=["actor-critic", "q-values", "categorical-actor"])
def test_policy_never_emits_a_masked_action_over_random_states_and_masks(index: int) -> None:
    policy = policies()[index]
    obs, masks = random_states(seed=index)
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        assert legal(policy.act(obs, None, deterministic=True)[0], masks)
        assert legal(policy.act(obs, None, deterministic=False, generator=generator)[0], masks)
        if isinstance(policy, QPolicy):  # epsilon-greedy exploration draws legal random actions
            assert legal(policy.sample_action(obs, generator, epsilon=1.0), masks)
        else:
            assert legal(policy.distribution(obs).sample(), masks)


def test_without_the_mask_the_same_policy_does_choose_masked_actions() -> None:
    """The check above can fail: with the mask flag off, the sharp actor-critic picks illegal actions."""
    policy = policies()[0]
    unmasked = ActorCritic(PackedDict(SPACE.dict_space), ACTIONS, PolicyConfig(hidden_sizes=[32]))
    unmasked.load_state_dict(policy.state_dict())
    obs, masks = random_states(seed=0)
    with torch.no_grad():
        assert not legal(unmasked.act(obs, None, deterministic=True)[0], masks)


def test_random_legal_actions_are_uniform_over_the_legal_ones() -> None:
    rng = np.random.default_rng(0)
    masks = np.tile(np.array([[True, False, True, False, False, True]]), (30_000, 1))
    actions, log_probs = random_legal_actions(masks, rng)
    counts = np.bincount(actions, minlength=N_ACTIONS)
    assert counts[[1, 3, 4]].sum() == 0
    np.testing.assert_allclose(counts[[0, 2, 5]] / len(actions), 1 / 3, atol=0.01)
    np.testing.assert_allclose(log_probs, -math.log(3), rtol=1e-6)


# --- the losses read the mask the action was chosen under ----------------------------------------------------------


def test_a_rollout_gives_the_update_the_acting_time_masks_and_log_probs() -> None:
    """What PPO's and A2C's updates compute from a stored rollout (its features and its masks) are the log-probs the
    actions were sampled with; without the mask they would differ."""
    policy = policies()[0]
    obs, masks = random_states(seed=3, count=64)
    rollout = RolloutBuffer(8, 8, (N_ACTIONS + 1,), (), torch.int64)
    with torch.no_grad():
        dist = policy.distribution(obs)
        actions = dist.sample()
        rollout.obs[:] = obs.reshape(8, 8, -1)
        rollout.actions[:] = actions.reshape(8, 8)
        idx = torch.arange(64)
        stored = rollout.action_mask(policy, idx)
        assert stored is not None and torch.equal(stored, masks)
        features = rollout.features(policy, idx)
        relearned = policy.distribution_of(features, stored).log_prob(rollout.flat("actions"))
        unmasked = policy.distribution_of(features, None).log_prob(rollout.flat("actions"))
    torch.testing.assert_close(relearned, dist.log_prob(actions), rtol=1e-5, atol=1e-5)
    assert not torch.allclose(unmasked, relearned, rtol=1e-3, atol=1e-3)


# --- DQN ---------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("double_dqn", [False, True])
def test_dqn_target_maxes_over_the_next_states_legal_actions(double_dqn: bool) -> None:
    """Q(s, .) = (10, 1, 2, 3, 4, 5) everywhere; the next state forbids action 0, so the target is
    r + discount * 5 (not 10): Huber(1 - 2.5) = 1.0 for the taken action 1 with r = 0, discount 0.5."""
    policy = QPolicy(SPACE, ACTIONS, PolicyConfig(hidden_sizes=[8]))
    with torch.no_grad():
        policy.q[-1].weight.zero_()
        policy.q[-1].bias.copy_(torch.tensor([10.0, 1.0, 2.0, 3.0, 4.0, 5.0]))
    algo = DQN(policy, DQNConfig(lr=1e-9, double_dqn=double_dqn))
    obs = torch.tensor([[1, 1, 1, 1, 1, 1, 7]], dtype=torch.float32)
    next_obs = torch.tensor([[0, 1, 1, 1, 1, 1, 8]], dtype=torch.float32)
    batch = {
        "obs": obs,
        "actions": torch.tensor([1]),
        "rewards": torch.tensor([0.0]),
        "next_obs": next_obs,
        "discounts": torch.tensor([0.5]),
    }
    assert algo.update(batch, 0.0)["loss"] == pytest.approx(1.0, rel=1e-5)


# --- the env side: masks carried as an observation key, checked ---------------------------------------------------


def test_taxi_masks_travel_packed_with_the_observation() -> None:
    env = make_vector_env(TAXI, 2)
    space = env.single_observation_space
    assert action_mask_slice(space) == (0, N_ACTIONS)
    obs, info = env.reset(seed=0)
    inner = make_vector_env(EnvConfig(id="Taxi-v4"), 2)
    raw, raw_info = inner.reset(seed=0)
    np.testing.assert_array_equal(obs[:, :N_ACTIONS], raw_info["action_mask"])
    np.testing.assert_array_equal(obs[:, N_ACTIONS], raw)
    assert space_from_description(describe_space(space)) == space
    env.close()
    inner.close()


@pytest.mark.parametrize(
    ("mask", "fragment"),
    [
        (np.ones(5, np.int8), "of shape (5,); expected (6,)"),
        (np.ones(6, np.float32), "of dtype float32"),
        (np.array([0, 1, 2, 0, 0, 0]), "= [0, 1, 2, 0, 0, 0]"),
        (np.zeros(6, np.int8), "no legal action"),
    ],
)
def test_a_wrong_mask_is_refused_in_one_line_naming_the_env(mask: np.ndarray, fragment: str) -> None:
    with pytest.raises(ConfigError) as raised:
        check_mask("Taxi-v4", "info['action_mask'] at step", mask, N_ACTIONS, terminated=False)
    message = str(raised.value)
    assert "\n" not in message and message.startswith("env.action_mask: Taxi-v4") and fragment in message


def test_a_terminal_observation_may_have_no_legal_action() -> None:
    assert check_mask("env", "here", np.zeros(3, np.int8), 3, terminated=True).tolist() == [0, 0, 0]


def test_masks_need_a_discrete_action_space() -> None:
    with pytest.raises(ConfigError, match=r"env.action_mask: Pendulum-v1 has a Box action space"):
        make_vector_env(EnvConfig(id="Pendulum-v1", action_mask="info"), 1)


def test_observation_masks_come_from_a_dict_observations_key() -> None:
    """PettingZoo's classic games: ``{"observation", "action_mask"}`` Dicts; the mask key may be an int8 Box."""
    import gymnasium as gym

    class Board(gym.Env):
        observation_space = spaces.Dict(
            {"observation": spaces.Box(0, 1, (3, 3, 2), np.int8), "action_mask": spaces.Box(0, 1, (9,), np.int8)}
        )
        action_space = spaces.Discrete(9)

        def reset(self, *, seed=None, options=None):  # type: ignore[no-untyped-def]
            super().reset(seed=seed)
            return self._obs(), {}

        def step(self, action):  # type: ignore[no-untyped-def]
            return self._obs(), 0.0, False, False, {}

        def _obs(self) -> dict[str, np.ndarray]:
            mask = (self.np_random.random(9) < 0.5).astype(np.int8)
            mask[0] = 1
            return {"observation": np.zeros((3, 3, 2), np.int8), "action_mask": mask}

    wrapped = ActionMaskObservation(Board(), "observation", "board")
    obs, _ = wrapped.reset(seed=0)
    assert obs["action_mask"].dtype == np.int8 and obs["action_mask"][0] == 1
    assert isinstance(wrapped.observation_space["action_mask"], spaces.MultiBinary)
    with pytest.raises(ConfigError, match="without an 'action_mask' key"):
        ActionMaskObservation(gym.make("Taxi-v4"), "observation", "Taxi-v4")


# --- collection, BC, export ----------------------------------------------------------------------------------------


def test_collection_stores_the_mask_and_bc_learns_under_it(tmp_path: Path) -> None:
    """Random collection draws legal actions only; the dataset's observations hold the mask, and a BC policy built
    from the dataset's spaces applies it (its loss is finite, its greedy actions legal)."""
    path = tmp_path / "taxi.parquet"
    plan = CollectionPlan(num_envs=4, steps=600, episodes=None, epsilon=0.0, deterministic=False, seed=0,
                          row_group_size=256)  # fmt: skip
    collect_dataset(path, TAXI, None, {"kind": "random"}, plan)
    env = make_vector_env(TAXI, 1)
    data = load_dataset(path, env.single_observation_space, env.single_action_space, TAXI.id)
    env.close()
    masks = data.obs[:, :N_ACTIONS] > 0
    assert masks.shape == (len(data), N_ACTIONS) and masks.any(axis=1).all()
    assert masks[np.arange(len(data)), data.actions].all()
    observation_space = space_from_description(data.metadata["observation_space"])
    bc = BC(BC.make_policy(observation_space, ACTIONS, PolicyConfig(hidden_sizes=[16]), BCConfig()), BCConfig())
    obs, actions = torch.as_tensor(data.obs), torch.as_tensor(data.actions)
    loss = bc.update({"obs": obs, "actions": actions}, 0.0)["loss"]
    assert math.isfinite(loss)
    with torch.no_grad():
        assert legal(bc.policy.deterministic_action(obs), torch.as_tensor(masks))


@pytest.mark.slow
def test_exported_onnx_takes_the_mask_and_never_chooses_a_masked_action(tmp_path: Path) -> None:
    """Both exported graphs choose legal actions only, and -1 (``NO_LEGAL_ACTION``, on the model card) for a row
    whose mask allows nothing (the argmax of all-minimum scores would be action 0, an illegal one)."""
    policy = policies()[0].eval()
    env = make_vector_env(TAXI, 1)
    meta = {
        "spaces": {"observation": describe_space(env.single_observation_space), "action": describe_space(ACTIONS)},
        "params": {"env": TAXI.model_dump(mode="json")},
    }
    env.close()
    result = export_policy(policy, meta, tmp_path, ExportOptions(True, True, 200, 1e-5, 1e-4, 18))
    assert list(result.interface["inputs"]) == ["obs", "action_mask"]
    assert "action_mask" in result.interface["inputs"]["action_mask"]
    session = onnxruntime.InferenceSession(str(tmp_path / "policy.onnx"), providers=["CPUExecutionProvider"])
    assert [(i.name, i.type) for i in session.get_inputs()] == [
        ("obs", "tensor(int64)"),
        ("action_mask", "tensor(bool)"),
    ]
    packed, masks = random_states(seed=7)
    inputs = mask_inputs(SPACE)
    assert inputs is not None
    obs, mask = inputs.split(packed.numpy())
    actions, _ = session.run(None, {"obs": obs, "action_mask": mask})
    assert legal(torch.as_tensor(actions), masks)
    loaded = torch.export.load(tmp_path / "policy.pt2").module()
    assert legal(loaded(torch.as_tensor(obs), torch.as_tensor(mask))[0], masks)
    none_legal = mask.copy()
    none_legal[[0, 3]] = False
    onnx_actions, _ = session.run(None, {"obs": obs, "action_mask": none_legal})
    exported_actions = loaded(torch.as_tensor(obs), torch.as_tensor(none_legal))[0].numpy()
    for chosen in (onnx_actions, exported_actions):
        assert chosen[0] == chosen[3] == NO_LEGAL_ACTION == -1
        assert np.array_equal(np.delete(chosen, [0, 3]), np.delete(actions, [0, 3]))
    assert "-1 in a row whose action_mask allows no action" in result.interface["outputs"]["action"]


# --- learning ----------------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_ppo_with_masks_learns_taxi_within_its_budget_seed_0(tmp_path: Path) -> None:
    """The preset configs/ppo-taxi-masked.yaml, seed 0, within its budget of 500k env steps, stopped at its first
    periodic evaluation (50 greedy episodes every 20,480 env steps: every other one of the preset's) scoring at
    least the test's threshold 5 rather than the preset's target 7.5: the selected model's test score (100
    deterministic episodes; an optimal policy averages about 8) is at least 5, and every greedy action it took was
    legal (an illegal pickup or drop-off costs -10, which a mean of 5 over 100 episodes would not survive). Unmasked,
    the same preset stayed at -200 through 300k (benchmarks/ppo_taxi_masked.py runs both at the preset's target)."""
    # Measured 2026-11-30 (budget 500k): periodic evaluations -200 to -171 through 123k, -80.4 at 143,360, 1.38 at
    # 163,840, 7.04 at 184,320, which stops it; the selected checkpoint (184,320, validation 7.28) tests 7.61. The
    # training up to a stop is the same whatever the evaluations (a stop only ends it after one; they draw nothing
    # from its generators). 34 s for the three stages at load ~2. No wall-clock cap: the preset's 600 s stopped
    # training at 100k env steps on a machine at load 10.
    overrides = ["seed=0", "train.progress_bar=off", "train.max_wall_seconds=null", "train.target_return=5.0"]
    overrides += ["train.eval_every=20480", "train.log_every=20480"]
    params = load_params(PROJECT / "configs" / "ppo-taxi-masked.yaml", overrides)
    train_stage(params, tmp_path)
    evaluate_stage(params, tmp_path)
    select_stage(params, tmp_path)
    metrics = read_json(outputs(tmp_path).metrics)
    budget = params.train.max_steps + params.env.num_envs * params.algo.n_steps
    assert metrics["episodes"] == 100 and metrics["env_steps"] <= budget
    assert metrics["mean_return"] >= 5.0, metrics
