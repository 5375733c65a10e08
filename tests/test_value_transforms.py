"""Value transforms (signed sqrt), two-hot projections and the value head (scalar and categorical)."""

import copy

import pytest
import torch
from pydantic import ValidationError

from rlcore.common.validation_errors import describe_validation_error
from rlcore.nets.blocks import mlp
from rlcore.nets.value_transforms import (
    ValueHead,
    ValueHeadConfig,
    scalar_to_two_hot,
    signed_sqrt,
    signed_sqrt_inverse,
    two_hot_to_scalar,
)


def _log_grid(dtype: torch.dtype) -> torch.Tensor:
    """-1e6 .. -1e-12, 0, 1e-12 .. 1e6, log-spaced."""
    positive = torch.logspace(-12, 6, 1000, dtype=torch.float64)
    return torch.cat([-positive.flip(0), torch.zeros(1, dtype=torch.float64), positive]).to(dtype)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_signed_sqrt_inverse_recovers_x_over_a_log_grid(dtype: torch.dtype):
    x = _log_grid(dtype)
    recovered = signed_sqrt_inverse(signed_sqrt(x))
    assert recovered.dtype == dtype
    torch.testing.assert_close(recovered, x, rtol=1e-5, atol=1e-12)


def test_signed_sqrt_matches_its_definition_and_the_closed_form_inverse():
    x = torch.tensor([-1e4, -3.0, -0.5, 0.0, 0.5, 3.0, 1e4], dtype=torch.float64)
    h = torch.sign(x) * (torch.sqrt(x.abs() + 1) - 1) + 1e-3 * x
    torch.testing.assert_close(signed_sqrt(x), h)
    closed_form = torch.sign(h) * (((torch.sqrt(1 + 4e-3 * (h.abs() + 1 + 1e-3)) - 1) / 2e-3) ** 2 - 1)
    torch.testing.assert_close(signed_sqrt_inverse(h), closed_form, rtol=1e-9, atol=1e-9)
    # h(3) = sqrt(4) - 1 + 0.003 = 1.003
    assert signed_sqrt(torch.tensor(3.0)).item() == pytest.approx(1.003)


def test_signed_sqrt_is_odd_and_increasing():
    x = _log_grid(torch.float64)
    h = signed_sqrt(x)
    torch.testing.assert_close(signed_sqrt(-x), -h, rtol=0, atol=0)
    assert (h.diff() > 0).all()
    assert (signed_sqrt_inverse(h).diff() > 0).all()


def _support() -> torch.Tensor:
    return torch.linspace(-10.0, 10.0, 21, dtype=torch.float64)


def test_two_hot_round_trip_is_exact_inside_the_support():
    support = _support()
    generator = torch.Generator().manual_seed(0)
    x = torch.cat([torch.rand(200, generator=generator, dtype=torch.float64) * 20 - 10, support])
    probs = scalar_to_two_hot(x, support)
    torch.testing.assert_close(two_hot_to_scalar(probs, support), x, rtol=0, atol=1e-6)
    on_atoms = probs[200:]
    assert torch.equal(on_atoms, torch.eye(21, dtype=torch.float64))


def test_two_hot_clips_scalars_outside_the_support_to_its_ends():
    support = _support()
    probs = scalar_to_two_hot(torch.tensor([-1e3, -10.5, 10.5, 1e9], dtype=torch.float64), support)
    assert two_hot_to_scalar(probs, support).tolist() == [-10.0, -10.0, 10.0, 10.0]
    assert probs[0, 0] == 1 and probs[-1, -1] == 1


def test_two_hot_rows_sum_to_one_on_at_most_two_neighbouring_atoms():
    support = _support()
    x = torch.randn(50, 7, generator=torch.Generator().manual_seed(1), dtype=torch.float64) * 8
    probs = scalar_to_two_hot(x, support)
    assert probs.shape == (50, 7, 21)
    torch.testing.assert_close(probs.sum(-1), torch.ones(50, 7, dtype=torch.float64))
    assert (probs >= 0).all()
    nonzero = probs > 0
    assert (nonzero.sum(-1) <= 2).all()
    first = nonzero.float().argmax(-1)
    last = 20 - nonzero.flip(-1).float().argmax(-1)
    assert ((last - first) <= 1).all()


def test_two_hot_splits_weight_by_distance_to_the_atoms():
    # 2.5 between atoms 2 and 3 (indices 12 and 13): weights 0.5 each; -7.25: 0.75 on -7, 0.25 on -8.
    probs = scalar_to_two_hot(torch.tensor([2.5, -7.25], dtype=torch.float64), _support())
    assert probs[0, 12].item() == 0.5 and probs[0, 13].item() == 0.5
    assert probs[1, 3].item() == 0.75 and probs[1, 2].item() == 0.25


def test_categorical_head_fits_regression_targets_within_two_percent():
    # Seed 0, 64 inputs, targets uniform in [-500, 500], 300 full-batch Adam steps at lr 1e-2 (about 0.4 s).
    # Measured: worst error 2.2 reward units; every target within 2% (+0.5 absolute near zero) with a 2x margin.
    generator = torch.Generator().manual_seed(0)
    features = torch.randn(64, 8, generator=generator)
    targets = torch.rand(64, generator=generator) * 1000 - 500
    torch.manual_seed(0)
    config = ValueHeadConfig(type="categorical", transform="signed_sqrt", bins=51, low=-25, high=25)
    head = ValueHead(8, [64, 64], "tanh", config)
    optimizer = torch.optim.Adam(head.parameters(), lr=1e-2)
    for _ in range(300):
        loss = head.loss(features, targets)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()

    with torch.no_grad():
        values = head(features)
    assert values.shape == (64,)
    assert ((values - targets).abs() <= 0.02 * targets.abs() + 0.5).all()


def test_scalar_head_without_transform_is_the_plain_critic_bitwise():
    torch.manual_seed(0)
    head = ValueHead(5, [16, 16], "tanh", ValueHeadConfig())
    torch.manual_seed(0)
    critic = mlp(5, [16, 16], 1, "tanh", out_gain=1.0)
    assert all(
        torch.equal(a, b) for a, b in zip(head.net.state_dict().values(), critic.state_dict().values(), strict=True)
    )
    assert list(head.state_dict()) == [f"net.{key}" for key in critic.state_dict()]
    generator = torch.Generator().manual_seed(1)
    features, returns, old_values = (torch.randn(32, 5, generator=generator), *torch.randn(2, 32, generator=generator))

    values = critic(features).squeeze(-1)
    assert torch.equal(head(features), values)
    assert torch.equal(head.loss(features, returns), (returns - values).square().mean())
    clipped = old_values + (values - old_values).clamp(-0.2, 0.2)  # rlcore's PPO (and SB3's) value clipping
    assert torch.equal(head.loss(features, returns, old_values, clip_range=0.2), (returns - clipped).square().mean())

    reference = copy.deepcopy(critic)
    head.loss(features, returns, old_values, clip_range=0.2).backward()
    reference_values = old_values + (reference(features).squeeze(-1) - old_values).clamp(-0.2, 0.2)
    (returns - reference_values).square().mean().backward()
    for ours, theirs in zip(head.net.parameters(), reference.parameters(), strict=True):
        assert ours.grad is not None and theirs.grad is not None and torch.equal(ours.grad, theirs.grad)


def test_scalar_head_with_transform_regresses_and_clips_in_transformed_units():
    torch.manual_seed(0)
    head = ValueHead(3, [8], "tanh", ValueHeadConfig(transform="signed_sqrt"))
    features = torch.randn(10, 3)
    targets, old_values = torch.randn(10) * 100, torch.randn(10) * 100
    out = head.net(features).squeeze(-1)
    torch.testing.assert_close(head(features), signed_sqrt_inverse(out))
    torch.testing.assert_close(head.loss(features, targets), (signed_sqrt(targets) - out).square().mean())
    old = signed_sqrt(old_values)
    clipped = old + (out - old).clamp(-0.1, 0.1)
    torch.testing.assert_close(
        head.loss(features, targets, old_values, clip_range=0.1), (signed_sqrt(targets) - clipped).square().mean()
    )


def test_categorical_head_loss_is_the_cross_entropy_against_two_hot_targets():
    torch.manual_seed(0)
    config = ValueHeadConfig(type="categorical", bins=11, low=-5, high=5)
    head = ValueHead(3, [8], "relu", config)
    features, targets = torch.randn(4, 3), torch.tensor([-7.0, -0.5, 2.0, 4.25])
    logits = head.net(features)
    two_hot = scalar_to_two_hot(targets, torch.linspace(-5, 5, 11))
    expected = -(two_hot * logits.log_softmax(-1)).sum(-1).mean()
    torch.testing.assert_close(head.loss(features, targets), expected)
    torch.testing.assert_close(head.loss(features, targets, targets, clip_range=0.1), expected)  # clip ignored
    torch.testing.assert_close(head(features), (logits.softmax(-1) * torch.linspace(-5, 5, 11)).sum(-1))
    assert all(key.startswith("net.") for key in head.state_dict())  # the support comes from the config


def test_clipped_scalar_loss_needs_old_values():
    head = ValueHead(2, [4], "tanh", ValueHeadConfig())
    with pytest.raises(ValueError, match="old_values: required when clip_range is given"):
        head.loss(torch.zeros(3, 2), torch.zeros(3), clip_range=0.2)


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"bins": 1}, "bins: must be >= 2, got 1"),
        ({"low": 5.0, "high": 5.0}, "high: must be > low (5.0), got 5.0"),
        ({"low": 10.0, "high": -10.0}, "high: must be > low (10.0), got -10.0"),
        ({"epsilon": 0.0}, "epsilon: must be > 0.0, got 0.0"),
        ({"type": "quantile"}, "type: "),
    ],
)
def test_value_head_config_errors_are_one_line_naming_the_key(values: dict, message: str):
    with pytest.raises(ValidationError) as caught:
        ValueHeadConfig(**values)
    text = describe_validation_error(caught.value, ValueHeadConfig)
    assert "\n" not in text
    assert text.startswith(message)


# --- value heads inside the on-policy critics ---------------------------------------------------------------------


def test_checkpoints_written_before_value_heads_still_load():
    """Critics used to be a bare MLP (``critic.<i>.*``); a value head holds the same MLP as ``critic.net.<i>.*``."""
    import numpy as np
    from gymnasium import spaces

    from rlcore.config.sections import PolicyConfig
    from rlcore.nets.policies import ActorCritic

    observation_space, action_space = spaces.Box(-1, 1, (4,), np.float32), spaces.Discrete(2)
    torch.manual_seed(0)
    saved = ActorCritic(observation_space, action_space, PolicyConfig())
    old_style = {key.replace("critic.net.", "critic."): value for key, value in saved.state_dict().items()}
    assert "critic.0.weight" in old_style and not any(key.startswith("critic.net.") for key in old_style)
    torch.manual_seed(1)
    loaded = ActorCritic(observation_space, action_space, PolicyConfig())
    loaded.load_state_dict(old_style)
    obs = torch.randn(8, 4)
    assert torch.equal(loaded.value(obs), saved.value(obs))


@pytest.mark.slow
def test_ppo_with_a_categorical_value_head_solves_cartpole_seed_0(tmp_path):
    # The PPO preset with a 101-bin categorical critic over [0, 100] (CartPole's discounted returns at gamma 0.99 stay
    # below 1 / (1 - 0.99) = 100), seed 0, up to 100k env steps: the selected model's 100 test episodes score at least
    # 300 (a random policy about 22; a critic that does not learn leaves PPO near 100). Measured with the preset's
    # gamma 0.99 (2026-11-30, AVX-512 EPYC): 499.3 / 499.8 / 440.1 on seeds 0 / 1 / 2 (selected at 16k / 12k / 4k env
    # steps). Before, with gamma 0.98 and [0, 60]: 500.0 on seeds 0 and 1 (2026-11-2x); 387.8 / 500.0 / 455.3 on
    # seeds 0 / 1 / 2 (2026-11-28, an AVX512-FP16 Xeon), where seed 0 peaked at 12k env steps and then fell to about
    # 120 for good: the categorical critic is less stable than the scalar one here (not investigated yet).
    from conftest import PROJECT, outputs

    from rlcore.common.files import read_json
    from rlcore.params import load_params
    from rlcore.stages import evaluate_stage, select_stage, train_stage

    head = ["algo.value_head.type=categorical", "algo.value_head.low=0", "algo.value_head.high=100"]
    params = load_params(
        PROJECT / "configs" / "ppo-cartpole.yaml",
        [*head, "algo.value_head.bins=101", "train.max_steps=100000", "train.progress_bar=off"],
    )
    train_stage(params, tmp_path)
    evaluate_stage(params, tmp_path)
    select_stage(params, tmp_path)
    assert read_json(outputs(tmp_path).metrics)["mean_return"] >= 300
