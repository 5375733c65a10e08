"""A2C (issue 13): its preset learns CartPole-v1; one update's loss terms equal a hand computation; the n-step
estimator, when chosen, gives the advantages."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import PROJECT, outputs
from gymnasium import spaces

from rlcore.algos.a2c import A2C, A2CConfig
from rlcore.common.files import read_json
from rlcore.config.sections import PolicyConfig
from rlcore.data.rollouts import RolloutBuffer
from rlcore.objectives.returns import gae, n_step_returns
from rlcore.params import load_params
from rlcore.stages import evaluate_stage, select_stage, train_stage

OBS_SPACE = spaces.Box(-np.inf, np.inf, (2,), np.float32)


@pytest.mark.slow
def test_a2c_preset_reaches_475_on_cartpole_within_100k_steps_seed_0(tmp_path: Path):
    # configs/a2c-cartpole.yaml, seed 0, a budget of 100k env steps (it stops at the first periodic evaluation of
    # 500); the selected model's test score (100 held-out deterministic episodes) is what counts.
    params = load_params(
        PROJECT / "configs" / "a2c-cartpole.yaml", ["seed=0", "train.max_steps=100000", "train.progress_bar=off"]
    )
    train_stage(params, tmp_path)
    evaluate_stage(params, tmp_path)
    select_stage(params, tmp_path)
    metrics = read_json(outputs(tmp_path).metrics)
    assert metrics["episodes"] == 100
    assert metrics["env_steps"] <= 100_000
    assert metrics["mean_return"] >= 475, metrics


def set_weights(layer: torch.nn.Module, weight: list[list[float]], bias: list[float]) -> None:
    assert isinstance(layer, torch.nn.Linear)
    with torch.no_grad():
        layer.weight.copy_(torch.tensor(weight))
        layer.bias.copy_(torch.tensor(bias))


def tiny_a2c(**config: object) -> A2C:
    """A2C on 2-D observations and two actions, one hidden layer of 2 tanh units, fixed weights."""
    algo = A2CConfig(**config)  # type: ignore[arg-type]
    policy = A2C.make_policy(OBS_SPACE, spaces.Discrete(2), PolicyConfig(hidden_sizes=[2]), algo)
    set_weights(policy.actor[0], [[0.5, -0.3], [0.2, 0.8]], [0.1, -0.1])
    set_weights(policy.actor[2], [[1.0, -1.0], [0.5, 0.25]], [0.0, 0.2])
    set_weights(policy.critic.net[0], [[-0.4, 0.6], [0.3, 0.1]], [0.0, 0.05])
    set_weights(policy.critic.net[2], [[1.5, -0.5]], [0.25])
    return A2C(policy, algo)


def test_one_update_returns_the_hand_computed_policy_value_and_entropy_terms():
    algorithm = tiny_a2c(n_steps=2, ent_coef=0.01, normalize_advantage=False)
    rollout = RolloutBuffer(2, 2, (2,), (), torch.int64)
    rollout.obs.copy_(torch.tensor([[[1.0, -1.0], [0.5, 2.0]], [[-1.5, 0.0], [3.0, 3.0]]]))
    rollout.actions.copy_(torch.tensor([[0, 1], [1, 0]]))
    rollout.values.copy_(torch.tensor([[0.1, -0.2], [0.4, 7.0]]))
    rollout.advantages.copy_(torch.tensor([[1.0, -0.5], [2.0, 9.9]]))
    rollout.returns.copy_(torch.tensor([[0.3, 1.2], [-0.7, 50.0]]))
    rollout.valid[1, 1] = False  # an autoreset step: its (absurd) numbers must not count

    obs = torch.tensor([[1.0, -1.0], [0.5, 2.0], [-1.5, 0.0]])
    actions = torch.tensor([0, 1, 1])
    advantages, returns, old_values = torch.tensor([1.0, -0.5, 2.0]), torch.tensor([0.3, 1.2, -0.7]), [0.1, -0.2, 0.4]
    w1, b1 = torch.tensor([[0.5, -0.3], [0.2, 0.8]]), torch.tensor([0.1, -0.1])
    w2, b2 = torch.tensor([[1.0, -1.0], [0.5, 0.25]]), torch.tensor([0.0, 0.2])
    logits = torch.tanh(obs @ w1.T + b1) @ w2.T + b2
    log_probs = logits - torch.logsumexp(logits, dim=1, keepdim=True)
    v1, c1 = torch.tensor([[-0.4, 0.6], [0.3, 0.1]]), torch.tensor([0.0, 0.05])
    values = torch.tanh(obs @ v1.T + c1) @ torch.tensor([1.5, -0.5]) + 0.25

    expected_policy_loss = -(log_probs[torch.arange(3), actions] * advantages).mean()
    expected_value_loss = ((returns - values) ** 2).mean()
    expected_entropy = -(log_probs.exp() * log_probs).sum(dim=1).mean()
    residuals = returns - torch.tensor(old_values)
    expected_explained_variance = 1 - residuals.var() / returns.var()

    metrics = algorithm.update(rollout, progress=0.0, generator=torch.Generator().manual_seed(0))
    assert metrics["policy_loss"] == pytest.approx(expected_policy_loss.item(), abs=1e-6)
    assert metrics["value_loss"] == pytest.approx(expected_value_loss.item(), abs=1e-6)
    assert metrics["entropy"] == pytest.approx(expected_entropy.item(), abs=1e-6)
    assert metrics["explained_variance"] == pytest.approx(expected_explained_variance.item(), abs=1e-6)
    assert metrics["learning_rate"] == 7e-4
    assert algorithm.gradient_steps == 1


def test_optimizer_is_rmsprop_as_in_the_paper_unless_adam_is_chosen():
    rmsprop = tiny_a2c().optimizer
    assert isinstance(rmsprop, torch.optim.RMSprop)
    assert rmsprop.param_groups[0]["alpha"] == 0.99 and rmsprop.param_groups[0]["eps"] == 1e-5
    assert isinstance(tiny_a2c(optimizer="adam").optimizer, torch.optim.Adam)


def rollout_with_episode_ends(n_steps: int) -> RolloutBuffer:
    """Random rewards and values, filled as the trainer does (next value = the next step's value, except at an
    episode's end); a terminated and a truncated episode, and the autoreset step after the truncation."""
    generator = torch.Generator().manual_seed(3)
    rollout = RolloutBuffer(n_steps, 3, (2,), (), torch.int64)
    rollout.rewards.copy_(torch.randn(n_steps, 3, generator=generator))
    rollout.values.copy_(torch.randn(n_steps, 3, generator=generator))
    rollout.next_values[:-1] = rollout.values[1:]
    rollout.next_values[-1] = torch.randn(3, generator=generator)
    rollout.terminated[1, 0] = rollout.episode_end[1, 0] = True
    rollout.episode_end[2, 1] = True
    rollout.next_values[2, 1] = 5.0  # the value of the truncated episode's last observation
    rollout.valid[3, 1] = False
    rollout.rewards[3, 1] = 0.0
    return rollout


def test_n_step_estimator_gives_the_n_step_returns_with_n_the_rollout_length():
    rollout = rollout_with_episode_ends(n_steps=6)
    algorithm = tiny_a2c(n_steps=6, advantage_estimator="n_step", gamma=0.9)
    advantages, targets = algorithm.advantages(rollout)
    args = (rollout.rewards, rollout.values, rollout.next_values, rollout.terminated, rollout.episode_end, 0.9)
    expected_advantages, expected_targets = n_step_returns(*args, 6)
    assert torch.equal(advantages, expected_advantages)
    assert torch.equal(targets, expected_targets)
    gae_advantages, _ = gae(*args, 0.95)  # what the default estimator would have given
    assert not torch.allclose(advantages, gae_advantages)


def test_default_estimator_is_gae_with_the_configured_lambda():
    rollout = rollout_with_episode_ends(n_steps=6)
    advantages, _ = tiny_a2c(n_steps=6, gae_lambda=0.8).advantages(rollout)
    args = (rollout.rewards, rollout.values, rollout.next_values, rollout.terminated, rollout.episode_end, 0.99)
    assert torch.equal(advantages, gae(*args, 0.8)[0])
