"""A resumed run's reward scaler: statistics restored, running return zeroed (issue 25, finding 4).

The trainer restarts every episode on resume, so the discounted return the scaler accumulates must start again at 0
(SB3's VecNormalize zeroes its ``returns`` on load); the running variance of the returns stays. Checked in real
resumed PPO runs for ``algo.normalize_rewards`` and for an episodic reward signal that normalizes its reward (RND),
which load their scalers through the same ``RewardScaler`` state-dict path.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from conftest import PROJECT

from rlcore.common.checkpoints import list_checkpoints, load_checkpoint
from rlcore.objectives.reward_scaling import RewardScaler
from rlcore.params import load_params
from rlcore.trainers import train

SMALL = [
    "env.num_envs=4",
    "algo.n_steps=32",
    "algo.batch_size=64",
    "algo.n_epochs=1",
    "train.max_steps=512",
    "train.eval_every=256",
    "train.eval_episodes=2",
    "train.target_return=null",
    "train.progress_bar=off",
]
CASES = {
    "normalize_rewards": (["algo.normalize_rewards=true"], ("reward_scaler",)),
    "episodic-rnd": (
        ["algo.reward_signals={extrinsic: {strength: 1.0}, rnd: {strength: 0.5, episodic: true}}"],
        ("reward_signals", "rnd", "networks", "reward_scaler."),
    ),
}


def _saved_scaler(algorithm_state: dict[str, Any], path: tuple[str, ...]) -> dict[str, torch.Tensor]:
    """The scaler's tensors in a checkpoint's algorithm state (``path``: the keys to it; a last key ending in a dot
    is the prefix of a flattened module's entries)."""
    state: Any = algorithm_state
    for key in path[:-1]:
        state = state[key]
    if path[-1].endswith("."):
        return {k.removeprefix(path[-1]): v for k, v in state.items() if k.startswith(path[-1])}
    return state[path[-1]]


@pytest.mark.parametrize("case", list(CASES))
def test_a_resumed_run_goes_into_its_fresh_episodes_with_a_zero_running_return(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, case: str
):
    """CartPole (reward 1 per step), 4 envs x 32 steps per rollout, a checkpoint every 256 env steps. Resumed from
    the first checkpoint, where episodes were under way (their partial returns saved), the scaler's
    first rollout starts from a zero running return and the saved statistics."""
    overrides, path = CASES[case]
    params = load_params(PROJECT / "params.yaml", [*SMALL, *overrides])
    train(params, tmp_path)
    checkpoints = list_checkpoints(tmp_path / "checkpoints")
    assert [step for step, _ in checkpoints] == [256, 512]
    saved = _saved_scaler(load_checkpoint(checkpoints[0][1]).tensors["algorithm"], path)
    assert saved["running_return"].shape == (4,) and bool((saved["running_return"] != 0).any())

    (tmp_path / "train_summary.json").unlink()
    checkpoints[1][1].unlink()
    entering: list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]] = []
    scale = RewardScaler.scale

    def watched(self: RewardScaler, *args: Any) -> torch.Tensor:
        statistics = self.return_statistics
        entering.append((self.running_return.clone(), statistics.var.clone(), statistics.count.clone()))
        return scale(self, *args)

    monkeypatch.setattr(RewardScaler, "scale", watched)
    summary = train(params, tmp_path)  # resumes from the first checkpoint
    assert summary["env_steps"] == 512
    running_return, var, count = entering[0]
    assert torch.equal(running_return, torch.zeros(4, dtype=torch.float64))  # was the saved partial sums
    assert torch.equal(var, saved["return_statistics.var"]) and torch.equal(count, saved["return_statistics.count"])
