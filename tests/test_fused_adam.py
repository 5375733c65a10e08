"""FusedAdam's direct fused step against torch's fused Adam and AdamW: bitwise the same weights and state."""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn

from rlcore.algos.fused_adam import FusedAdam


def _net() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(4, 64), nn.ReLU(), nn.Linear(64, 2))


def _bits(x: torch.Tensor) -> torch.Tensor:
    return x.detach().reshape(-1).view(torch.int32)


ADAMW = {"lr": 1e-3, "weight_decay": 0.01, "decoupled_weight_decay": True}


@pytest.mark.parametrize("options", [{"lr": 2.3e-3}, ADAMW])
def test_fused_adam_steps_bitwise_as_torchs_fused_adam_and_round_trips_its_state(options: dict[str, object]) -> None:
    ours_net, theirs_net = _net(), _net()
    ours = FusedAdam(ours_net.parameters(), **options)
    theirs = torch.optim.Adam(theirs_net.parameters(), fused=True, **options)  # type: ignore[arg-type]
    g = torch.Generator().manual_seed(1)
    for step in range(30):
        x = torch.randn(64, 4, generator=g)
        for net, optimizer in ((ours_net, ours), (theirs_net, theirs)):
            optimizer.zero_grad(set_to_none=True)
            net(x).square().mean().backward()
            optimizer.step()
        if step == 10:  # a checkpoint's round trip: the direct step reads the loaded state
            ours.load_state_dict(copy.deepcopy(theirs.state_dict()))
    for mine, other in zip(ours_net.parameters(), theirs_net.parameters(), strict=True):
        assert torch.equal(_bits(mine), _bits(other))
    for mine, other in zip(ours.state.values(), theirs.state.values(), strict=True):
        assert all(torch.equal(_bits(mine[key]), _bits(other[key])) for key in ("step", "exp_avg", "exp_avg_sq"))
    assert ours._fused_calls() is not None  # the steps after the first took the direct path
    ours.zero_grad()
    assert all(param.grad is None for param in ours_net.parameters())


def test_fused_adam_runs_registered_hooks_through_torchs_step() -> None:
    net = _net()
    optimizer = FusedAdam(net.parameters(), lr=1e-3)
    calls: list[str] = []
    optimizer.register_step_post_hook(lambda *_: calls.append("post"))
    for _ in range(2):
        optimizer.zero_grad()
        net(torch.ones(1, 4)).sum().backward()
        optimizer.step()
    assert calls == ["post", "post"]


def test_fused_adam_leaves_a_grad_scalers_step_to_torch() -> None:
    """Under ``train.precision: fp16`` a GradScaler hands the fused optimizer its scale and overflow flag as attributes
    (``_step_supports_amp_scaling``): the direct step would ignore them, so torch's step takes it."""
    net = _net()
    optimizer = FusedAdam(net.parameters(), lr=1e-3)
    for _ in range(2):
        optimizer.zero_grad()
        net(torch.ones(1, 4)).sum().backward()
        optimizer.step()
    assert optimizer._fused_calls() is not None
    optimizer.grad_scale, optimizer.found_inf = torch.tensor(2.0), torch.tensor(0.0)  # type: ignore[attr-defined]
    assert optimizer._fused_calls() is None
