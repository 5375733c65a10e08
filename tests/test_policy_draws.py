"""Acting's fast paths against what they replace: an actor-critic's draw (``ActorCritic.draw_of``) against its
``torch.distributions`` distribution's ``sample()`` and ``log_prob``, and the MLP's layer-function forward
(``rlcore.nets.blocks.MLP``) against ``nn.Sequential``'s — equal bitwise, since they are the same ops in the same
order on the same random stream."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from gymnasium import spaces
from torch import nn

from rlcore.config.sections import PolicyConfig
from rlcore.nets.blocks import mlp
from rlcore.nets.central_critic import CentralizedActorCritic
from rlcore.nets.recurrent import actor_critic

BOX_OBS = spaces.Box(-np.inf, np.inf, (5,), np.float32)
ACTION_SPACES = {
    "discrete": spaces.Discrete(4),
    "box": spaces.Box(-1.0, 1.0, (3,), np.float32),
    "multi-discrete": spaces.MultiDiscrete([3, 2]),
    "multi-binary": spaces.MultiBinary(3),
}


@pytest.mark.parametrize("kind", list(ACTION_SPACES))
def test_an_actor_critics_draw_is_its_distributions_sample_and_log_prob(kind: str) -> None:
    torch.manual_seed(0)
    policy = actor_critic(BOX_OBS, ACTION_SPACES[kind], PolicyConfig(hidden_sizes=[32, 32]), None)
    with torch.no_grad():
        if kind == "box":
            policy.log_std.fill_(-0.3)  # not the initial 0: the std's arithmetic is checked too
        features = policy.features(torch.randn(16, 5))
        torch.manual_seed(7)
        actions, log_probs = policy.draw_of(features)
        torch.manual_seed(7)
        distribution = policy.distribution_of(features)
        expected = distribution.sample()
        assert torch.equal(actions, expected)
        assert torch.equal(log_probs, distribution.log_prob(expected))
        assert log_probs.shape == (16,)


def test_a_masked_draw_never_chooses_an_illegal_action_and_matches_the_masked_distribution() -> None:
    torch.manual_seed(0)
    policy = actor_critic(BOX_OBS, spaces.Discrete(4), PolicyConfig(hidden_sizes=[32]), None)
    mask = torch.tensor([[True, False, True, False]] * 64)
    with torch.no_grad():
        features = policy.features(torch.randn(64, 5))
        torch.manual_seed(3)
        actions, log_probs = policy.draw_of(features, mask)
        torch.manual_seed(3)
        distribution = policy.distribution_of(features, mask)
        assert torch.equal(actions, distribution.sample())
        assert torch.equal(log_probs, distribution.log_prob(actions))
    assert set(actions.tolist()) <= {0, 2}


def test_a_centralized_critics_actor_draws_from_its_own_features_only() -> None:
    """MAPPO's training rows carry the critic's inputs after the actor's features: the draw reads the actor's part, as
    its distribution does."""
    torch.manual_seed(0)
    policy = CentralizedActorCritic(BOX_OBS, spaces.Discrete(3), PolicyConfig(hidden_sizes=[16]), critic_width=6)
    with torch.no_grad():
        features = policy.features(torch.randn(8, 5 + 6))  # a training row: actor observation, then critic input
        assert features.shape == (8, policy.feature_dim + 6)
        torch.manual_seed(5)
        actions, log_probs = policy.draw_of(features)
        torch.manual_seed(5)
        distribution = policy.distribution_of(features)
        assert torch.equal(actions, distribution.sample())
        assert torch.equal(log_probs, distribution.log_prob(actions))
        alone = policy.features(torch.randn(8, 5))  # acting rows: the actor's observation only
        assert torch.equal(policy.actor_scores_of(alone), policy.actor(alone))


def test_the_mlps_forward_and_gradients_are_nn_sequentials() -> None:
    torch.manual_seed(0)
    for activation in ("tanh", "relu", "elu"):
        network = mlp(5, [16, 16], 3, activation, out_gain=0.01)
        sequential = nn.Sequential(*network)  # the same modules, called one by one
        x = torch.randn(8, 5)
        out, expected = network(x), sequential(x)
        assert torch.equal(out, expected)
        grads = torch.autograd.grad(out.square().sum(), list(network.parameters()))
        expected_grads = torch.autograd.grad(expected.square().sum(), list(sequential.parameters()))
        assert all(torch.equal(a, b) for a, b in zip(grads, expected_grads, strict=True))
        # torch.func reads the weights it is given, as for a module's own (the stacked seeds' path)
        doubled = {name: 2 * value for name, value in network.named_parameters()}
        functional = torch.func.functional_call(network, doubled, (x,))
        assert torch.equal(functional, torch.func.functional_call(sequential, doubled, (x,)))
        assert not torch.equal(functional, out)
