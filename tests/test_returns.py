"""Return estimators (GAE, n-step) against values computed by hand."""

import pytest
import torch

from rlcore.objectives.returns import gae, n_step_returns


def test_gae_matches_a_hand_computed_example_with_termination_and_truncation():
    # Env 0: one episode that terminates at t=2 (no value after it).
    # Env 1: an episode truncated at t=1 (bootstrapped from V(final obs) = 5), then a new one at t=2.
    rewards = torch.tensor([[1.0, 1.0], [1.0, 1.0], [1.0, 0.0]])
    values = torch.tensor([[0.5, 1.0], [0.4, 2.0], [0.3, 3.0]])
    next_values = torch.tensor([[0.4, 2.0], [0.3, 5.0], [0.2, 4.0]])
    terminated = torch.tensor([[False, False], [False, False], [True, False]])
    episode_end = torch.tensor([[False, False], [False, True], [True, False]])

    advantages, returns = gae(rewards, values, next_values, terminated, episode_end, gamma=0.9, lam=0.8)

    # delta_t = r + 0.9 * (1 - term) * V' - V ;  A_t = delta_t + 0.72 * (1 - end) * A_{t+1}
    expected = torch.tensor(
        [
            [0.86 + 0.72 * (0.87 + 0.72 * 0.7), 1.8 + 0.72 * 3.5],
            [0.87 + 0.72 * 0.7, 3.5],
            [0.7, 0.6],
        ]
    )
    assert advantages == pytest.approx(expected, abs=1e-6)
    assert returns == pytest.approx(expected + values, abs=1e-6)


def test_gae_with_lambda_one_and_no_episode_end_is_the_discounted_return_minus_value():
    rewards = torch.tensor([[1.0], [2.0], [3.0]])
    values = torch.zeros(3, 1)
    next_values = torch.zeros(3, 1)
    never = torch.zeros(3, 1, dtype=torch.bool)
    advantages, _ = gae(rewards, values, next_values, never, never, gamma=0.5, lam=1.0)
    assert advantages[:, 0].tolist() == pytest.approx([1 + 0.5 * 2 + 0.25 * 3, 2 + 0.5 * 3, 3])


def test_n_step_returns_match_a_hand_computed_example_with_termination_and_truncation():
    # The rollout of the GAE example: env 0 terminates at t=2; env 1 is truncated at t=1 (V(final obs) = 5).
    rewards = torch.tensor([[1.0, 1.0], [1.0, 1.0], [1.0, 0.0]])
    values = torch.tensor([[0.5, 1.0], [0.4, 2.0], [0.3, 3.0]])
    next_values = torch.tensor([[0.4, 2.0], [0.3, 5.0], [0.2, 4.0]])
    terminated = torch.tensor([[False, False], [False, False], [True, False]])
    episode_end = torch.tensor([[False, False], [False, True], [True, False]])

    advantages, targets = n_step_returns(rewards, values, next_values, terminated, episode_end, gamma=0.9, n=2)

    expected = torch.tensor(
        [
            [1 + 0.9 * 1 + 0.81 * 0.3, 1 + 0.9 * 1 + 0.81 * 5.0],  # env 1's window stops at its truncation
            [1 + 0.9 * 1, 1 + 0.9 * 5.0],  # env 0: the window ends at the termination, no bootstrap
            [1.0, 0 + 0.9 * 4.0],  # the rollout's last step bootstraps from V(s_T)
        ]
    )
    assert targets == pytest.approx(expected, abs=1e-6)
    assert advantages == pytest.approx(expected - values, abs=1e-6)


def test_one_step_returns_are_the_td_targets_of_gae_with_lambda_zero():
    generator = torch.Generator().manual_seed(0)
    rewards, values, next_values = (torch.randn(6, 3, generator=generator) for _ in range(3))
    terminated = torch.rand(6, 3, generator=generator) < 0.2
    episode_end = terminated | (torch.rand(6, 3, generator=generator) < 0.2)
    _, td_targets = gae(rewards, values, next_values, terminated, episode_end, gamma=0.9, lam=0.0)
    _, one_step = n_step_returns(rewards, values, next_values, terminated, episode_end, gamma=0.9, n=1)
    assert one_step == pytest.approx(td_targets, abs=1e-6)
