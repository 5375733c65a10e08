"""GAE against values computed by hand."""

import pytest
import torch

from rlcore.returns import gae


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
