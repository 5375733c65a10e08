"""PPO's optional extras (issue 13): the dual-clip surrogate (Ye et al., 2020) and reward scaling by the running
standard deviation of the discounted return (SB3's VecNormalize). Both are off by default."""

from __future__ import annotations

import io
import math
from typing import Any

import numpy as np
import pytest
import torch
from conftest import PROJECT
from gymnasium import spaces
from pydantic import ValidationError

from rlcore.algos.ppo import PPO, PPOConfig, clipped_surrogate
from rlcore.common.errors import ConfigError
from rlcore.config.sections import PolicyConfig
from rlcore.data.rollouts import RolloutBuffer
from rlcore.objectives.returns import gae
from rlcore.objectives.reward_scaling import RewardScaler
from rlcore.params import load_params

# --- dual clip -----------------------------------------------------------------------------------------------------

RATIOS = torch.tensor([5.0, 2.0, 0.5, 1.5, 0.9])
ADVANTAGES = torch.tensor([-1.0, -1.0, -1.0, 2.0, 1.0])


def test_clipped_surrogate_without_dual_clip_is_ppos_min_of_the_two_surrogates():
    # min(r A, clip(r, 0.8, 1.2) A): -5 vs -1.2; -2 vs -1.2; -0.5 vs -0.8; 3 vs 2.4; 0.9 vs 0.9.
    expected = torch.tensor([-5.0, -2.0, -0.8, 2.4, 0.9])
    assert torch.allclose(clipped_surrogate(RATIOS, ADVANTAGES, 0.2, None), expected)


def test_dual_clip_bounds_negative_advantages_below_by_c_times_a():
    # c = 3: max(min(...), 3 A) where A < 0: -5 becomes -3; -2 and -0.8 are above -3 and stay; A > 0 is untouched.
    expected = torch.tensor([-3.0, -2.0, -0.8, 2.4, 0.9])
    assert torch.allclose(clipped_surrogate(RATIOS, ADVANTAGES, 0.2, 3.0), expected)


def test_dual_clip_must_exceed_one_and_the_error_names_the_key():
    with pytest.raises(ValidationError):
        PPOConfig(dual_clip=1.0)
    with pytest.raises(ConfigError, match=r"algo\.dual_clip: must be > 1") as error:
        load_params(PROJECT / "configs" / "ppo-cartpole.yaml", ["algo.dual_clip=0.5"])
    assert "\n" not in str(error.value)


# --- reward scaling ------------------------------------------------------------------------------------------------


def small_rollout() -> RolloutBuffer:
    """Two envs, three steps. Env 0: rewards 1, 2, 3 in one episode. Env 1: reward 2 ends an episode, then the
    autoreset step (reward 0, invalid), then reward 4 in the next episode."""
    rollout = RolloutBuffer(3, 2, (2,), (), torch.int64)
    rollout.rewards.copy_(torch.tensor([[1.0, 2.0], [2.0, 0.0], [3.0, 4.0]]))
    rollout.terminated[0, 1] = rollout.episode_end[0, 1] = True
    rollout.valid[1, 1] = False
    return rollout


def test_rewards_are_divided_by_the_std_of_the_running_discounted_return():
    scaler = RewardScaler(gamma=0.5, clip=None)
    rollout = small_rollout()
    scaled = scaler.scale(rollout.rewards, rollout.episode_end, rollout.valid)
    # R, env 0: 1, 0.5 * 1 + 2 = 2.5, 0.5 * 2.5 + 3 = 4.25; env 1: 2 (episode ends), -, 0 + 4 = 4 (a new episode).
    # The five valid returns: mean 2.75, population variance (1.75^2 + 0.25^2 + 1.5^2 + 0.75^2 + 1.25^2) / 5 = 1.5.
    assert scaler.return_statistics.var.item() == pytest.approx(1.5, abs=1e-6)
    assert scaler.return_statistics.count.item() == pytest.approx(5.0)  # the autoreset step is not counted
    assert torch.allclose(scaled, rollout.rewards / math.sqrt(1.5), atol=1e-6)
    assert scaled[1, 1] == 0.0
    assert scaler.running_return.tolist() == [4.25, 4.0]


def test_running_return_restarts_after_an_episode_end_and_carries_across_rollouts():
    scaler = RewardScaler(gamma=0.5, clip=None)
    first = small_rollout()
    first.episode_end[2, 0] = True  # env 0's episode ends at the rollout's last step; env 1's goes on
    scaler.scale(first.rewards, first.episode_end, first.valid)
    assert scaler.running_return.tolist() == [0.0, 4.0]

    second = RolloutBuffer(1, 2, (2,), (), torch.int64)
    second.rewards.copy_(torch.tensor([[1.0, 1.0]]))
    scaler.scale(second.rewards, second.episode_end, second.valid)
    assert scaler.running_return.tolist() == [1.0, 0.5 * 4.0 + 1.0]


def test_scaled_rewards_are_clipped_to_reward_clip():
    scaler = RewardScaler(gamma=0.5, clip=0.5)
    rollout = small_rollout()
    scaled = scaler.scale(rollout.rewards, rollout.episode_end, rollout.valid)
    assert torch.allclose(scaled, (rollout.rewards / math.sqrt(1.5)).clamp(-0.5, 0.5), atol=1e-6)


def make_ppo(seed: int = 0, **config: Any) -> PPO:
    algo = PPOConfig(n_steps=3, gamma=0.5, gae_lambda=0.9, **config)
    torch.manual_seed(seed)
    observation_space = spaces.Box(-np.inf, np.inf, (2,), np.float32)
    policy = PPO.make_policy(observation_space, spaces.Discrete(2), PolicyConfig(hidden_sizes=[8]), algo)
    return PPO(policy, algo)


def test_ppo_advantages_use_scaled_rewards_and_leave_the_rollouts_rewards_as_the_env_gave_them():
    ppo = make_ppo(normalize_rewards=True, reward_clip=None)
    rollout = small_rollout()
    rollout.values.copy_(torch.tensor([[0.5, -0.5], [1.0, 0.0], [0.25, 0.75]]))
    rollout.next_values[:-1] = rollout.values[1:]
    rollout.next_values[-1] = torch.tensor([0.1, 0.2])
    env_rewards = rollout.rewards.clone()

    advantages, targets = ppo.advantages(rollout)

    assert torch.equal(rollout.rewards, env_rewards)
    args = (rollout.values, rollout.next_values, rollout.terminated, rollout.episode_end, 0.5, 0.9)
    expected_advantages, expected_targets = gae(env_rewards / math.sqrt(1.5), *args)
    assert torch.allclose(advantages, expected_advantages, atol=1e-6)
    assert torch.allclose(targets, expected_targets, atol=1e-6)


def through_a_file(state: dict[str, Any]) -> dict[str, Any]:
    buffer = io.BytesIO()
    torch.save(state, buffer)
    buffer.seek(0)
    return torch.load(buffer, weights_only=True)


def test_reward_statistics_survive_a_state_dict_round_trip_and_the_running_return_restarts():
    original = make_ppo(normalize_rewards=True)
    original.advantages(small_rollout())
    resumed = make_ppo(seed=1, normalize_rewards=True)
    resumed.load_state_dict(through_a_file(original.state_dict()))
    assert original.reward_scaler is not None and resumed.reward_scaler is not None
    for key, value in original.reward_scaler.state_dict().items():
        if key != "running_return":
            assert torch.equal(resumed.reward_scaler.state_dict()[key], value), key
    # A resumed run restarts its episodes: their returns start at 0, not at the interrupted ones' [4.25, 4.0].
    assert original.reward_scaler.running_return.tolist() == [4.25, 4.0]
    assert resumed.reward_scaler.running_return.tolist() == [0.0, 0.0]

    # The next rollout is scaled as by the original scaler had its episodes ended at the checkpoint.
    original.reward_scaler.running_return.zero_()
    rollout = small_rollout()
    rollout.rewards[2] = torch.tensor([-1.0, 6.0])
    assert torch.equal(original.advantages(rollout)[0], resumed.advantages(rollout)[0])


def test_exported_policy_carries_no_reward_statistics():
    with_scaling, without = make_ppo(normalize_rewards=True), make_ppo()
    with_scaling.advantages(small_rollout())
    assert with_scaling.policy.state_dict().keys() == without.policy.state_dict().keys()
    assert "reward_scaler" in with_scaling.state_dict()


def test_extras_are_off_by_default_and_add_nothing_to_the_saved_state():
    ppo = make_ppo()
    assert ppo.config.dual_clip is None and ppo.config.normalize_rewards is False
    assert ppo.reward_scaler is None
    assert "reward_scaler" not in ppo.state_dict()  # checkpoints of earlier runs still load
