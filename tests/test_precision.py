"""Gradient accumulation (``algo.grad_accumulation``), mixed precision (``train.precision``) and ``train.device``."""

from __future__ import annotations

from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import torch
from conftest import PROJECT
from test_memory import collect, recurrent_policy

from rlcore.actions import action_layout
from rlcore.algos.a2c import A2C, A2CConfig
from rlcore.algos.base import Algorithm
from rlcore.algos.ppo import PPO, PPOConfig
from rlcore.buffers import RolloutBuffer
from rlcore.config import EnvConfig, PolicyConfig
from rlcore.envs import make_vector_env
from rlcore.errors import ConfigError
from rlcore.observations import obs_tensor
from rlcore.params import load_params
from rlcore.policies import ActorCritic
from rlcore.stepping import VectorStepper


def feed_forward_rollout(policy: ActorCritic, steps: int, envs: int) -> RolloutBuffer:
    """A real CartPole rollout sampled from ``policy`` (autoreset steps included, so valid steps are not a round
    number)."""
    env = make_vector_env(EnvConfig(id="CartPole-v1"), envs)
    stepper = VectorStepper(env)
    stepper.reset(0)
    shape, dtype = action_layout(env.single_action_space)
    rollout = RolloutBuffer(steps, envs, (4,), shape, dtype)
    with torch.no_grad():
        for t in range(steps):
            obs = obs_tensor(stepper.obs)
            dist = policy.distribution(obs)
            action = dist.sample()
            rollout.obs[t], rollout.actions[t], rollout.log_probs[t] = obs, action, dist.log_prob(action)
            step = stepper.step(action.numpy())
            rollout.valid[t] = torch.as_tensor(step.valid)
    env.close()
    return rollout


def filled(rollout: RolloutBuffer) -> RolloutBuffer:
    generator = torch.Generator().manual_seed(7)
    rollout.advantages = torch.randn(rollout.rewards.shape, generator=generator)
    rollout.returns = torch.randn(rollout.rewards.shape, generator=generator) * 5 + 10
    return rollout


def gradients_of_the_first_step(algorithm: Algorithm, rollout: RolloutBuffer) -> list[torch.Tensor]:
    """The first update's gradient of every parameter, read back from Adam's first moment (m_1 = (1 - beta1) g)."""
    algorithm.update(rollout, 0.0, torch.Generator().manual_seed(3))
    assert algorithm.gradient_steps == 1
    optimizer = algorithm.optimizer  # type: ignore[attr-defined]
    return [optimizer.state[p]["exp_avg"] / 0.1 for p in algorithm.policy.parameters()]


def assert_same_step(full: Algorithm, accumulated: Algorithm, rollout: RolloutBuffer) -> None:
    want, got = gradients_of_the_first_step(full, rollout), gradients_of_the_first_step(accumulated, rollout)
    for a, b in zip(want, got, strict=True):
        assert torch.allclose(a, b, rtol=1e-5, atol=1e-7), (a - b).abs().max()
    for a, b in zip(full.policy.parameters(), accumulated.policy.parameters(), strict=True):
        assert torch.allclose(a, b, atol=1e-6)


@pytest.mark.parametrize("recurrent", [False, True], ids=["mlp", "lstm"])
def test_ppo_accumulating_two_half_batches_takes_the_step_of_the_full_batch(recurrent: bool):
    def build(batch_size: int, k: int) -> PPO:
        torch.manual_seed(0)
        if recurrent:
            policy = recurrent_policy(sequence_length=8)
        else:
            policy = ActorCritic(gym.spaces.Box(-np.inf, np.inf, (4,)), gym.spaces.Discrete(2), PolicyConfig())
        return PPO(policy, PPOConfig(batch_size=batch_size, n_epochs=1, grad_accumulation=k, max_grad_norm=None))

    probe = build(2, 1)
    if recurrent:
        rollout = filled(collect(probe.policy, steps=32, envs=4)[0])  # 16 sequences of 8 steps
        with torch.no_grad():
            rollout.log_probs[:] = -0.69
        full, half = 128, 64  # all 16 sequences, or two minibatches of 8
    else:
        rollout = filled(feed_forward_rollout(probe.policy, steps=16, envs=8))
        valid = int(rollout.valid.sum())
        assert valid % 2 == 1 or valid < 128, "autoreset steps should make the valid count irregular"
        full, half = valid, (valid + 1) // 2  # one minibatch of all valid steps, or two of about half
    assert_same_step(build(full, 1), build(half, 2), rollout)


def test_a2c_accumulating_two_parts_takes_the_step_of_the_whole_batch():
    def build(k: int) -> A2C:
        torch.manual_seed(0)
        policy = ActorCritic(gym.spaces.Box(-np.inf, np.inf, (4,)), gym.spaces.Discrete(2), PolicyConfig())
        return A2C(policy, A2CConfig(optimizer="adam", grad_accumulation=k, normalize_advantage=True))

    rollout = filled(feed_forward_rollout(build(1).policy, steps=16, envs=8))
    assert_same_step(build(1), build(2), rollout)


def test_accumulation_changes_the_step_when_the_halves_are_not_weighted():
    """The comparison above can fail: two unweighted half-batch losses sum to twice the gradient."""
    torch.manual_seed(0)
    policy = ActorCritic(gym.spaces.Box(-np.inf, np.inf, (4,)), gym.spaces.Discrete(2), PolicyConfig())
    rollout = filled(feed_forward_rollout(policy, steps=16, envs=8))
    unclipped = {"optimizer": "adam", "max_grad_norm": None}  # clipping would hide a doubled gradient
    algorithm = A2C(policy, A2CConfig(**unclipped, grad_accumulation=2))
    whole = A2C(ActorCritic(policy.observation_space, gym.spaces.Discrete(2), PolicyConfig()), A2CConfig(**unclipped))
    whole.policy.load_state_dict(policy.state_dict())
    original = algorithm.accumulate
    algorithm.accumulate = lambda loss: original(loss * 2)  # type: ignore[method-assign]
    want, got = gradients_of_the_first_step(whole, rollout), gradients_of_the_first_step(algorithm, rollout)
    assert not all(torch.allclose(a, b, rtol=1e-5, atol=1e-7) for a, b in zip(want, got, strict=True))


def test_fp16_and_unavailable_cuda_are_refused_in_one_line():
    if torch.cuda.is_available():
        pytest.skip("this machine has a CUDA GPU")
    with pytest.raises(ConfigError, match=r"train\.device: cuda, but torch sees no CUDA GPU on this machine"):
        load_params(PROJECT / "params.yaml", ["train.device=cuda"])
    with pytest.raises(ConfigError, match=r"train\.precision: fp16 needs CUDA .* use bf16"):
        load_params(PROJECT / "params.yaml", ["train.precision=fp16"])
    with pytest.raises(ConfigError, match=r"train\.device: expected 'auto', 'cpu' or 'cuda'|train\.device: input"):
        load_params(PROJECT / "params.yaml", ["train.device=tpu"])


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_cuda_training_is_refused_until_it_is_implemented():
    with pytest.raises(ConfigError, match=r"train\.device: cuda training is not implemented yet"):
        load_params(PROJECT / "params.yaml", ["train.device=cuda"])


@pytest.mark.parametrize("recurrent", [False, True], ids=["mlp", "lstm-burn-in"])
def test_bf16_runs_the_losses_in_bfloat16_and_keeps_the_weights_float32(recurrent: bool):
    from rlcore.compute import Precision

    torch.manual_seed(0)
    if recurrent:
        policy = recurrent_policy(sequence_length=8, burn_in=2)
        rollout = filled(collect(policy, steps=32, envs=4)[0])
    else:
        policy = ActorCritic(gym.spaces.Box(-np.inf, np.inf, (4,)), gym.spaces.Discrete(2), PolicyConfig())
        rollout = filled(feed_forward_rollout(policy, steps=16, envs=8))
    algorithm = PPO(policy, PPOConfig(batch_size=64, n_epochs=1))
    algorithm.compute_in(Precision("bf16"))
    seen: list[torch.dtype] = []
    policy.actor.register_forward_hook(lambda module, inputs, output: seen.append(output.dtype))
    metrics = algorithm.update(rollout, 0.0, torch.Generator().manual_seed(0))
    assert seen and set(seen) == {torch.bfloat16}
    assert all(p.dtype == torch.float32 for p in policy.parameters())
    assert all(np.isfinite(value) for value in metrics.values())


@pytest.mark.slow
def test_bf16_ppo_reaches_475_on_cartpole_within_100k_steps_seed_0(tmp_path: Path):
    """The default params with ``train.precision: bf16``, seed 0, 100k env steps: the selected model's test score.
    Measured 2026-11-25: stops at a periodic 500 after 61k steps (fp32: 12k), 16.5 s of training against fp32's
    2.4 s: autocast's casts cost more than bf16 saves on 64-unit MLPs on a CPU (benchmarks/README.md)."""
    from rlcore.io import read_json
    from rlcore.stages import evaluate_stage, select_stage, train_stage

    params = load_params(
        PROJECT / "params.yaml", ["seed=0", "train.max_steps=100000", "train.progress_bar=off", "train.precision=bf16"]
    )
    for stage in (train_stage, evaluate_stage, select_stage):
        stage(params, tmp_path)
    metrics = read_json(tmp_path / "reports" / "metrics.json")
    assert metrics["mean_return"] >= 475, metrics


def test_a_non_finite_loss_among_accumulated_ones_skips_the_whole_step_and_only_that_one():
    torch.manual_seed(0)
    policy = ActorCritic(gym.spaces.Box(-1, 1, (3,)), gym.spaces.Discrete(2), PolicyConfig(hidden_sizes=[8]))
    algorithm = PPO(policy, PPOConfig())
    before = [p.detach().clone() for p in policy.parameters()]
    algorithm.optimizer.zero_grad(set_to_none=True)
    assert algorithm.accumulate(policy.value(torch.ones(4, 3)).sum())
    assert not algorithm.accumulate(policy.value(torch.ones(4, 3)).sum() * float("nan"))
    assert algorithm.apply_gradients(algorithm.optimizer, policy.parameters(), 0.5) is False
    assert algorithm.skipped_steps == 1
    assert all(torch.equal(a, b) for a, b in zip(before, policy.parameters(), strict=True))
    algorithm.optimizer.zero_grad(set_to_none=True)
    assert algorithm.accumulate(policy.value(torch.ones(4, 3)).sum())
    assert algorithm.apply_gradients(algorithm.optimizer, policy.parameters(), 0.5) is True
    assert algorithm.consecutive_skips == 0
