"""Non-finite losses are skipped (never applied), counted, and a run that only diverges stops with a clear error."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from conftest import PROJECT
from gymnasium import spaces

from rlcore.algos.ppo import PPO, PPOConfig
from rlcore.config.sections import PolicyConfig
from rlcore.nets.policies import ActorCritic
from rlcore.params import load_params
from rlcore.stages import train_stage
from rlcore.trainers.session import MAX_CONSECUTIVE_SKIPS, DivergenceError


def test_a_non_finite_loss_is_skipped_and_counted_and_the_weights_stay_as_they_were():
    policy = ActorCritic(spaces.Box(-1, 1, (3,)), spaces.Discrete(2), PolicyConfig(hidden_sizes=[8]))
    algorithm = PPO(policy, PPOConfig())
    before = [p.detach().clone() for p in policy.parameters()]
    loss = policy.value(torch.zeros(4, 3)).sum() * float("nan")
    assert algorithm.optimizer_step(algorithm.optimizer, loss, policy.parameters(), 0.5) is False
    assert algorithm.skipped_steps == 1 and algorithm.consecutive_skips == 1
    assert all(torch.equal(a, b) for a, b in zip(before, policy.parameters(), strict=True))
    assert algorithm.optimizer_step(algorithm.optimizer, policy.value(torch.zeros(4, 3)).sum(), policy.parameters())
    assert algorithm.consecutive_skips == 0 and algorithm.skipped_steps == 1


def test_a_run_whose_losses_are_all_non_finite_stops_with_one_clear_error(tmp_path: Path):
    params = load_params(
        PROJECT / "params.yaml",
        [
            "env.wrappers=[{wrapper: nonfinite_wrappers.HugeReward}]",  # finite rewards, overflowing losses
            "train.max_steps=200000",
            "train.eval_every=1024",
            "train.eval_episodes=2",
            "train.target_return=null",
            "train.progress_bar=off",
        ],
    )
    with pytest.raises(DivergenceError, match=rf"{MAX_CONSECUTIVE_SKIPS} updates in a row had a non-finite loss"):
        train_stage(params, tmp_path)
    checkpoints = sorted((tmp_path / "runs" / params.name / "checkpoints").glob("step_*.pt"))
    assert checkpoints, "the checkpoints written before the stop are kept"
    assert not (tmp_path / "runs" / params.name / "train_summary.json").exists()  # not a finished run
