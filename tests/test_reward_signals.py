"""Reward signals (``algo.reward_signals``, issue 17): the formulas on hand-computed cases, the per-signal GAE and
its combination, the state a resume needs, and the one-line refusals. Learning runs: ``test_reward_signal_runs.py``."""

from __future__ import annotations

import copy
import io
import math
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import torch
from conftest import PROJECT
from gymnasium import spaces

from rlcore.algos.ppo import PPO, PPOConfig
from rlcore.common.errors import ConfigError
from rlcore.config.sections import PolicyConfig
from rlcore.data.rollouts import RolloutBuffer
from rlcore.data.writer import DatasetWriter
from rlcore.envs.vector import describe_space
from rlcore.nets.policies import ActorCritic
from rlcore.params import load_params
from rlcore.reward_signals.config import GAILConfig, RewardSignalsConfig
from rlcore.reward_signals.curiosity import forward_error
from rlcore.reward_signals.gail import GAIL, gail_reward, gradient_penalty
from rlcore.reward_signals.inputs import action_features, inverse_loss
from rlcore.reward_signals.rnd import RND, rnd_reward
from rlcore.reward_signals.signal import SignalBatch, signal_advantages
from rlcore.reward_signals.signal_set import combine_advantages

CARTPOLE_OBS = gym.make("CartPole-v1").observation_space
CARTPOLE_ACTIONS = spaces.Discrete(2)
EXPERT_GAINS = np.array([0.1, 0.5, 3.0, 1.0])
"""A hand-written CartPole-v1 controller, push right when 0.1 x + 0.5 x' + 3 theta + theta' > 0: 500 on every
episode of seeds 0-19."""


def write_cartpole_expert(path: Path, episodes: int, seed: int = 0) -> dict:
    """``episodes`` episodes of :data:`EXPERT_GAINS`' controller on CartPole-v1 (reset seeds ``seed``, ``seed + 1``,
    ...), written with the project's dataset writer."""
    env = gym.make("CartPole-v1")
    metadata = {
        "env": {"id": "CartPole-v1"},
        "observation_space": describe_space(env.observation_space),
        "action_space": describe_space(env.action_space),
        "policy": {"kind": "hand-written controller"},
    }
    writer = DatasetWriter(path, env.observation_space, env.action_space, metadata)
    for episode in range(episodes):
        obs, _ = env.reset(seed=seed + episode)
        columns: dict[str, list] = {name: [] for name in ("obs", "actions", "rewards", "next_obs", "ends", "cuts")}
        ended = False
        while not ended:
            action = int(EXPERT_GAINS @ obs > 0)
            next_obs, reward, terminated, truncated, _ = env.step(action)
            for name, value in zip(columns, (obs, action, reward, next_obs, terminated, truncated), strict=True):
                columns[name].append(value)
            obs, ended = next_obs, terminated or truncated
        writer.add_episode(*(np.asarray(values) for values in columns.values()), None)
    env.close()
    return writer.close()


def make_ppo(signals: dict | None, observation_space: spaces.Space = CARTPOLE_OBS, **algo) -> PPO:
    torch.manual_seed(0)
    config = PPOConfig(n_steps=4, batch_size=8, n_epochs=1, reward_signals=signals, **algo)
    policy = ActorCritic(observation_space, CARTPOLE_ACTIONS, PolicyConfig(hidden_sizes=[16]))
    return PPO(policy, config)


def rollout_of(steps: int = 4, envs: int = 3, seed: int = 0) -> tuple[RolloutBuffer, torch.Tensor]:
    """A filled rollout of random CartPole-like observations and actions, an episode end in env 0 at step 1 (its
    autoreset step 2 invalid), and the observation after the last step."""
    generator = torch.Generator().manual_seed(seed)
    rollout = RolloutBuffer(steps, envs, (4,), (), torch.int64)
    rollout.obs.copy_(torch.randn(steps, envs, 4, generator=generator))
    rollout.actions.copy_(torch.randint(2, (steps, envs), generator=generator))
    rollout.rewards.fill_(1.0)
    rollout.terminated[1, 0] = rollout.episode_end[1, 0] = True
    rollout.valid[2, 0] = False
    rollout.rewards[2, 0] = 0.0
    rollout.advantages.copy_(torch.randn(steps, envs, generator=generator))
    return rollout, torch.randn(envs, 4, generator=generator)


# --- formulas --------------------------------------------------------------------------------------------------------


def test_rnd_reward_is_the_mean_over_outputs_of_the_squared_prediction_error():
    predicted = torch.tensor([[1.0, 2.0], [0.0, 0.0]])
    target = torch.tensor([[0.0, 0.0], [3.0, 4.0]])
    assert torch.allclose(rnd_reward(predicted, target), torch.tensor([2.5, 12.5]))


def test_rnd_reads_observations_normalized_by_its_own_statistics_and_clipped():
    config = RewardSignalsConfig.model_validate({"rnd": {"obs_clip": 5.0}}).rnd
    assert config is not None
    torch.manual_seed(0)
    rnd = RND(config, CARTPOLE_OBS, lambda: ActorCritic(CARTPOLE_OBS, CARTPOLE_ACTIONS, PolicyConfig()).new_encoder())
    rnd.obs_normalizer.update(torch.tensor([[0.0, 1.0, 2.0, 3.0], [2.0, 1.0, -2.0, 3.0]]))  # mean (1, 1, 0, 3)
    obs = torch.tensor([[3.0, 1.0, 2.0, 1000.0]])
    std = torch.sqrt(torch.tensor([1.0, 0.0, 4.0, 0.0]) + 1e-8)
    normalized = ((obs - torch.tensor([1.0, 1.0, 0.0, 3.0])) / std).clamp(-5, 5)  # (2, 0, 1, 5): the last clipped
    assert torch.allclose(normalized, torch.tensor([[2.0, 0.0, 1.0, 5.0]]))
    expected = (rnd.predictor(normalized) - rnd.target(normalized)).square().mean(dim=-1)
    assert torch.allclose(rnd.prediction_error(obs), expected)


def test_rnd_reward_decays_on_visited_observations_and_stays_high_on_novel_ones():
    config = RewardSignalsConfig.model_validate({"rnd": {"lr": 1e-3, "epochs": 1}}).rnd
    assert config is not None
    torch.manual_seed(0)
    rnd = RND(config, CARTPOLE_OBS, lambda: ActorCritic(CARTPOLE_OBS, CARTPOLE_ACTIONS, PolicyConfig()).new_encoder())
    generator = torch.Generator().manual_seed(0)
    visited = torch.randn(512, 4, generator=generator) * 0.1
    novel = visited + torch.tensor([3.0, 0.0, 0.0, 0.0])
    rnd.obs_normalizer.update(torch.cat([visited, novel]))
    before = rnd.prediction_error(visited).mean().item()
    for _ in range(200):
        loss = rnd.prediction_error(visited).mean()
        rnd.optimizer.zero_grad()
        loss.backward()
        rnd.optimizer.step()
    after_visited, after_novel = rnd.prediction_error(visited).mean().item(), rnd.prediction_error(novel).mean().item()
    assert after_visited < 0.05 * before
    assert after_novel > 10 * after_visited


def test_gail_reward_is_minus_log_one_minus_d():
    logits = torch.tensor([0.0, math.log(3.0), -math.log(3.0), 60.0])  # D = 1/2, 3/4, 1/4, ~1
    expected = torch.tensor([math.log(2.0), math.log(4.0), math.log(4.0 / 3.0), 60.0])
    assert torch.allclose(gail_reward(logits), expected, atol=1e-6)


def test_gradient_penalty_of_a_linear_discriminator_is_the_squared_gap_of_its_weight_norm_to_one():
    # logit(o, a) = 3 o_0 + 4 a_1: the gradient is (3, 0 | 0, 4) everywhere, norm 5, penalty (5 - 1)^2 = 16.
    w_obs, w_act = torch.tensor([3.0, 0.0]), torch.tensor([0.0, 4.0])

    def logit(obs: torch.Tensor, act: torch.Tensor | None) -> torch.Tensor:
        assert act is not None
        return obs @ w_obs + act @ w_act

    expert, policy = (torch.randn(5, 2), torch.randn(5, 2)), (torch.randn(5, 2), torch.randn(5, 2))
    assert gradient_penalty(logit, expert, policy, torch.rand(5)).item() == pytest.approx(16.0)


def test_gradient_penalty_is_taken_at_the_interpolated_inputs():
    # logit(o) = |o|^2 / 2: the gradient is o itself, taken at u * expert + (1 - u) * policy.
    def logit(obs: torch.Tensor, act: torch.Tensor | None) -> torch.Tensor:
        return 0.5 * obs.square().sum(dim=1)

    expert = (torch.tensor([[2.0, 0.0], [2.0, 0.0]]), None)
    policy = (torch.tensor([[0.0, 0.0], [0.0, 0.0]]), None)
    # u = 1/2: o = (1, 0), norm 1, penalty 0; u = 1: o = (2, 0), norm 2, penalty 1. The mean: 1/2.
    assert gradient_penalty(logit, expert, policy, torch.tensor([0.5, 1.0])).item() == pytest.approx(0.5, abs=1e-5)


def test_gail_penalizes_its_discriminators_logit_gradient_with_one_coefficient_per_pair():
    """Issue 25, finding 6: the penalty the docstring names (Kostrikov et al., 2019), on GAIL's own discriminator.
    Hidden ReLU units h_0 = x_0 + 2 x_1 + 2 a_0 + 10 (always on) and h_1 = 4 x_3 (on where x_3 > 0), logit
    h_0 + h_1: the logit's gradient is (1, 2, 0, 0 | 2, 0), norm 3, penalty 4, where x_3 < 0, and
    (1, 2, 0, 4 | 2, 0), norm 5, penalty 16, where x_3 > 0. ML-Agents' penalty on D = sigmoid(logit) would scale
    the gradient by D (1 - D) <= 1/4; per-element mixing would give each element its own coefficient."""
    policy_net = ActorCritic(CARTPOLE_OBS, CARTPOLE_ACTIONS, PolicyConfig(hidden_sizes=[16]))
    config = GAILConfig(dataset="unused.parquet", hidden_sizes=[2])
    expert_data = (torch.zeros(1, 4), torch.zeros(1, dtype=torch.int64))
    gail = GAIL(config, CARTPOLE_OBS, CARTPOLE_ACTIONS, policy_net.new_encoder, expert_data)
    hidden, out = [m for m in gail.discriminator.head.modules() if isinstance(m, torch.nn.Linear)]
    with torch.no_grad():
        hidden.weight.copy_(torch.tensor([[1.0, 2.0, 0.0, 0.0, 2.0, 0.0], [0.0, 0.0, 0.0, 4.0, 0.0, 0.0]]))
        hidden.bias.copy_(torch.tensor([10.0, 0.0]))
        out.weight.copy_(torch.tensor([[1.0, 1.0]]))
        out.bias.zero_()
    # Fresh statistics (mean 0, var 1): the normalized observations are the raw ones.
    expert = gail._inputs(torch.tensor([[0.1, 0.2, 0.0, 1.0]] * 3), torch.tensor([0, 1, 0]))
    policy = gail._inputs(torch.tensor([[0.3, -0.1, 0.0, -3.0]] * 3), torch.tensor([1, 0, 1]))
    # x_3 = 4 u - 3: u = 1/2 -> -1 (penalty 4), u = 1 -> 1 (16), u = 0 -> -3 (4). The mean: 8.
    penalty = gradient_penalty(gail.logits, expert, policy, torch.tensor([0.5, 1.0, 0.0]))
    assert penalty.item() == pytest.approx(8.0, rel=1e-6)


def test_curiosity_forward_error_is_half_the_squared_distance_of_the_encodings():
    assert torch.allclose(forward_error(torch.tensor([[1.0, 2.0]]), torch.tensor([[0.0, 0.0]])), torch.tensor([2.5]))


def test_actions_become_one_hot_per_sub_action_bits_or_values():
    assert action_features(torch.tensor([1, 0]), spaces.Discrete(3)).tolist() == [[0, 1, 0], [1, 0, 0]]
    multi = spaces.MultiDiscrete([2, 3])
    assert action_features(torch.tensor([[1, 2]]), multi).tolist() == [[0, 1, 0, 0, 1]]
    assert action_features(torch.tensor([[1, 0, 1]]), spaces.MultiBinary(3)).tolist() == [[1, 0, 1]]
    box = spaces.Box(-1, 1, (2,))
    assert action_features(torch.tensor([[0.5, -0.25]]), box).tolist() == [[0.5, -0.25]]


def test_inverse_loss_is_the_actions_negative_log_likelihood():
    scores = torch.tensor([[0.0, math.log(3.0)]])  # p = (1/4, 3/4)
    assert inverse_loss(scores, torch.tensor([1]), spaces.Discrete(2)).item() == pytest.approx(-math.log(0.75))
    multi = inverse_loss(torch.zeros(1, 5), torch.tensor([[0, 2]]), spaces.MultiDiscrete([2, 3]))
    assert multi.item() == pytest.approx(math.log(2.0) + math.log(3.0))
    box = inverse_loss(torch.tensor([[1.0, 0.0]]), torch.tensor([[0.0, 2.0]]), spaces.Box(-3, 3, (2,)))
    assert box.item() == pytest.approx(0.5 * (1.0 + 4.0))


# --- per-signal GAE and the combination ---------------------------------------------------------------------------

# One env, three steps: an episode ends (terminated) at step 0, step 1 is its autoreset step (reward 0), step 2 is
# the next episode's first. gamma = 1/2, lambda = 1.
REWARDS = torch.tensor([[1.0], [0.0], [2.0]])
VALUES = torch.tensor([[0.5], [0.25], [1.0]])
NEXT_VALUES = torch.tensor([[0.25], [1.0], [2.0]])
ENDS = torch.tensor([[True], [False], [False]])
VALID = torch.tensor([[True], [False], [True]])


def test_an_episodic_signal_stops_at_the_episode_end():
    # delta = (1 + 0 - 0.5, -, 2 + 0.5 * 2 - 1) = (0.5, -, 2); A_0 = delta_0 (the episode ended at step 0: nothing
    # flows back across it); the autoreset step 1 carries no advantage.
    advantages, returns = signal_advantages(REWARDS, VALUES, NEXT_VALUES, ENDS, ENDS, VALID, 0.5, 1.0, episodic=True)
    assert torch.allclose(advantages, torch.tensor([[0.5], [0.0], [2.0]]))
    assert torch.allclose(returns, advantages + VALUES)


def test_a_non_episodic_signal_runs_on_across_the_episode_end():
    # The autoreset step is skipped: delta_0 = 1 + 0.5 * V(s'_0) - 0.5 = 1 + 0.5 * 1 - 0.5 = 1, A_0 = 1 + 0.5 * A_2.
    advantages, _ = signal_advantages(REWARDS, VALUES, NEXT_VALUES, ENDS, ENDS, VALID, 0.5, 1.0, episodic=False)
    assert torch.allclose(advantages, torch.tensor([[2.0], [0.0], [2.0]]))


def test_non_episodic_advantages_chain_the_last_step_to_the_next_episodes_first_observation_with_one_gamma():
    """Issue 25, finding 5. gamma = lambda = 1/2, T = 5, N = 2. Env 0 terminates at step 1 (step 2 its autoreset
    row: obs s_final, next obs s'_0), env 1 is truncated on the rollout's last step. V(s_final) = 7 and 9, and env
    1's V(last observation) = 5, must not enter anything."""
    rewards = torch.tensor([[1.0, 1.0], [2.0, 1.0], [0.0, 1.0], [3.0, 1.0], [4.0, 1.0]])
    values = torch.tensor([[0.5, 1.0], [1.0, 1.0], [9.0, 1.0], [2.0, 1.0], [1.5, 1.0]])
    next_values = torch.tensor([[1.0, 1.0], [7.0, 1.0], [2.0, 1.0], [1.5, 1.0], [0.25, 5.0]])
    terminated = torch.zeros(5, 2, dtype=torch.bool)
    terminated[1, 0] = True
    episode_end = terminated.clone()
    episode_end[4, 1] = True
    valid = torch.ones(5, 2, dtype=torch.bool)
    valid[2, 0] = False
    advantages, returns = signal_advantages(
        rewards, values, next_values, terminated, episode_end, valid, 0.5, 0.5, episodic=False
    )
    # Env 0, backwards: A_4 = 4 + 0.5 * 0.25 - 1.5 = 2.625; A_3 = (3 + 0.5 * 1.5 - 2) + 0.25 * A_4 = 2.40625;
    # A_2 = 0 (autoreset row); A_1 = (2 + 0.5 * V(s'_0) - 1) + 0.25 * A_3 with V(s'_0) = 2 (the autoreset row's next
    # value) = 2.6015625; A_0 = (1 + 0.5 * 1 - 0.5) + 0.25 * A_1 = 1.650390625.
    # Env 1: its last step bootstraps from the mean V of the rollout's next-episode first observations (env 0's
    # s'_0: 2): A_4 = 1 + 0.5 * 2 - 1 = 1; then A_t = 0.5 + 0.25 * A_{t+1}: 0.75, 0.6875, 0.671875, 0.66796875.
    expected = torch.tensor(
        [[1.650390625, 0.66796875], [2.6015625, 0.671875], [0.0, 0.6875], [2.40625, 0.75], [2.625, 1.0]]
    )
    torch.testing.assert_close(advantages, expected, rtol=0, atol=1e-6)
    torch.testing.assert_close(returns, expected + values, rtol=0, atol=1e-6)


def test_a_signals_advantages_are_zero_on_autoreset_steps():
    algorithm = make_ppo({"rnd": {}, "curiosity": {"episodic": True}})
    assert algorithm.reward_signals is not None
    rollout, last_obs = rollout_of()  # env 0: the episode ends at step 1, step 2 is its autoreset step
    batch = SignalBatch.of(rollout, last_obs)
    for name, signal in algorithm.reward_signals.signals.items():
        advantages, _ = signal.learn(batch, 0.95, torch.Generator().manual_seed(0))
        assert advantages[2, 0] == 0.0, name
        assert bool((advantages[batch.valid] != 0).all()), name


def test_advantages_are_combined_with_the_signals_strengths():
    extrinsic = torch.tensor([[1.0, -2.0]])
    signals = [(0.5, torch.tensor([[4.0, 0.0]])), (2.0, torch.tensor([[1.0, 1.0]]))]
    # 0.1 * (1, -2) + 0.5 * (4, 0) + 2 * (1, 1) = (4.1, 1.8)
    assert torch.allclose(combine_advantages(0.1, extrinsic, signals), torch.tensor([[4.1, 1.8]]))


def test_the_set_gives_the_policy_the_weighted_sum_of_the_extrinsic_and_each_signals_gae():
    algorithm = make_ppo({"extrinsic": {"strength": 0.5}, "rnd": {"strength": 2.0}, "curiosity": {"strength": 3.0}})
    signals = algorithm.reward_signals
    assert signals is not None
    rollout, last_obs = rollout_of()
    alone = copy.deepcopy(signals.signals)  # each signal on its own, from the same state and generator stream
    combined, metrics = signals.learn(rollout, last_obs, rollout.advantages, torch.Generator().manual_seed(1))
    generator = torch.Generator().manual_seed(1)
    batch = SignalBatch.of(rollout, last_obs)
    rnd_advantages, _ = alone["rnd"].learn(batch, algorithm.config.gae_lambda, generator)
    curiosity_advantages, _ = alone["curiosity"].learn(batch, algorithm.config.gae_lambda, generator)
    expected = 0.5 * rollout.advantages + 2.0 * rnd_advantages + 3.0 * curiosity_advantages
    assert torch.allclose(combined, expected)
    assert {"rnd/reward", "rnd/predictor_loss", "rnd/value_loss", "curiosity/forward_loss"} <= metrics.keys()
    assert all(math.isfinite(value) for value in metrics.values())


def test_signal_rewards_are_zero_on_autoreset_steps_and_next_observations_follow_the_rollout():
    rollout, last_obs = rollout_of()
    batch = SignalBatch.of(rollout, last_obs)
    assert torch.equal(batch.next_obs[:-1], rollout.obs[1:]) and torch.equal(batch.next_obs[-1], last_obs)
    algorithm = make_ppo({"rnd": {}})
    assert algorithm.reward_signals is not None
    rnd = algorithm.reward_signals.signals["rnd"]
    raw = torch.where(batch.valid.reshape(-1), rnd.rewards(batch), 0.0).reshape(batch.shape)
    assert raw[2, 0] == 0.0 and bool((raw[batch.valid] > 0).all())


# --- state, export, defaults ---------------------------------------------------------------------------------------


def test_signals_networks_optimizers_and_statistics_survive_a_state_dict_round_trip():
    signals_config = {"rnd": {}, "curiosity": {}}
    original = make_ppo(signals_config)
    assert original.reward_signals is not None
    rollout, last_obs = rollout_of()
    original.reward_signals.learn(rollout, last_obs, rollout.advantages, torch.Generator().manual_seed(0))
    buffer = io.BytesIO()
    torch.save(original.state_dict(), buffer)
    buffer.seek(0)
    resumed = make_ppo(signals_config)
    resumed.load_state_dict(torch.load(buffer, weights_only=True))
    assert resumed.reward_signals is not None
    for name, signal in original.reward_signals.signals.items():
        twin = resumed.reward_signals.signals[name]
        for key, value in signal.state_dict().items():
            if key == "reward_scaler.running_return":  # a resumed run restarts its episodes: their return starts at 0
                assert not twin.state_dict()[key].any() and value.any(), f"{name}.{key}"
                signal.reward_scaler.running_return.zero_()  # as at a resume, for the comparison below
                continue
            assert torch.equal(value, twin.state_dict()[key]), f"{name}.{key}"
        assert twin.optimizer.state_dict()["state"], f"{name}: the optimizer's moments came back"
    # And they go on identically.
    rollout, last_obs = rollout_of(seed=1)
    a = original.reward_signals.learn(rollout, last_obs, rollout.advantages, torch.Generator().manual_seed(3))
    b = resumed.reward_signals.learn(rollout, last_obs, rollout.advantages, torch.Generator().manual_seed(3))
    assert torch.equal(a[0], b[0]) and a[1] == b[1]


def test_without_reward_signals_nothing_is_built_or_saved():
    ppo = make_ppo(None)
    assert ppo.reward_signals is None
    assert "reward_signals" not in ppo.state_dict()  # checkpoints of earlier runs still load


def test_signal_networks_are_not_part_of_the_policy():
    with_signals, without = make_ppo({"rnd": {}, "curiosity": {}}), make_ppo(None)
    assert with_signals.policy.state_dict().keys() == without.policy.state_dict().keys()


# --- refusals ------------------------------------------------------------------------------------------------------


def load(*overrides: str):
    return load_params(PROJECT / "configs" / "ppo-cartpole.yaml", list(overrides))


def test_reward_signals_are_refused_for_algorithms_outside_the_on_policy_family():
    with pytest.raises(ConfigError, match=r"algo\.reward_signals") as error:
        load("algo={name: dqn, reward_signals: {rnd: {}}}")
    assert "\n" not in str(error.value)


def test_extrinsic_gamma_other_than_algo_gamma_is_refused_in_one_line():
    with pytest.raises(ConfigError, match=r"algo\.reward_signals\.extrinsic\.gamma.*algo\.gamma") as error:
        load("algo.reward_signals={extrinsic: {gamma: 0.5}}")
    assert "\n" not in str(error.value)
    assert load("algo.reward_signals={extrinsic: {gamma: 0.99}}").algo.reward_signals is not None  # = algo.gamma


def test_every_strength_zero_is_refused():
    with pytest.raises(ConfigError, match="strength"):
        load("algo.reward_signals={extrinsic: {strength: 0}}")


def test_gail_needs_a_dataset_key():
    with pytest.raises(ConfigError, match=r"algo\.reward_signals\.gail\.dataset"):
        load("algo.reward_signals={gail: {}}")


def test_a_missing_gail_dataset_is_refused_naming_the_key_and_file(tmp_path: Path):
    with pytest.raises(ConfigError, match=r"algo\.reward_signals\.gail\.dataset: .*nowhere\.parquet"):
        make_ppo({"gail": {"dataset": str(tmp_path / "nowhere.parquet")}})


def test_a_gail_dataset_of_other_spaces_is_refused_naming_both(tmp_path: Path):
    path = tmp_path / "expert.parquet"
    write_cartpole_expert(path, 1)
    pendulum_like = spaces.Box(-8.0, 8.0, (3,), np.float32)
    with pytest.raises(ConfigError, match=r"gail\.dataset: .*observation space") as error:
        make_ppo({"gail": {"dataset": str(path)}}, observation_space=pendulum_like)
    assert "\n" not in str(error.value)


def test_gail_uses_the_first_max_episodes_episodes_and_refuses_more_than_the_file_holds(tmp_path: Path):
    path = tmp_path / "expert.parquet"
    write_cartpole_expert(path, 3)
    ppo = make_ppo({"gail": {"dataset": str(path), "max_episodes": 2}})
    assert ppo.reward_signals is not None
    assert len(ppo.reward_signals.signals["gail"].expert_obs) == 1000  # two episodes of 500 steps
    with pytest.raises(ConfigError, match=r"gail\.max_episodes: 4, but .* holds 3 episodes"):
        make_ppo({"gail": {"dataset": str(path), "max_episodes": 4}})


# --- through the trainer -------------------------------------------------------------------------------------------

SHORT_RUN = [
    "train.max_steps=2048",
    "train.eval_every=1024",
    "train.log_every=1024",
    "train.eval_episodes=1",
    "train.target_return=null",
    "train.progress_bar=off",
]


def checkpoint_state(run: Path) -> dict:
    from rlcore.common.checkpoints import list_checkpoints, load_checkpoint

    return load_checkpoint(list_checkpoints(run / "checkpoints")[-1][1]).tensors


def test_same_params_and_seed_give_identical_signal_networks_and_curves(tmp_path: Path):
    from rlcore.stages import train_stage

    params = load("algo.reward_signals={rnd: {}, curiosity: {}}", *SHORT_RUN)
    states = []
    for run in ("a", "b"):
        train_stage(params, tmp_path / run)
        states.append(checkpoint_state(tmp_path / run / "runs" / params.name)["algorithm"]["reward_signals"])
    for name in ("rnd", "curiosity"):
        for key, value in states[0][name]["networks"].items():
            assert torch.equal(value, states[1][name]["networks"][key]), f"{name}.{key}"
    curve = tmp_path / "a" / "runs" / params.name / "dvclive" / "plots" / "metrics" / "train"
    assert (curve / "rnd" / "reward.tsv").is_file() and (curve / "curiosity" / "inverse_loss.tsv").is_file()


@pytest.mark.parametrize(
    "overrides",
    [
        pytest.param(["algo={name: a2c}"], id="a2c"),
        # batch_size 64: eight 8-step sequences per minibatch (at 4, one each: 1280 updates of 2048 steps, ~5 s)
        pytest.param(["policy.memory={type: lstm, size: 16, sequence_length: 8}", "algo.batch_size=64"], id="ppo-lstm"),
    ],
)
def test_a2c_and_recurrent_ppo_train_with_reward_signals(tmp_path: Path, overrides: list[str]):
    from rlcore.stages import train_stage

    params = load(*overrides, "algo.reward_signals={extrinsic: {strength: 0.5}, curiosity: {}}", *SHORT_RUN)
    train_stage(params, tmp_path)
    state = checkpoint_state(tmp_path / "runs" / params.name)
    assert state["algorithm"]["reward_signals"]["curiosity"]["optimizer"]["state"]
    assert not any(key.startswith(("curiosity", "value_net")) for key in state["policy"])
