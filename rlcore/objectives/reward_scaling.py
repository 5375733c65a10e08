"""Reward scaling by the running standard deviation of the discounted return (SB3's ``VecNormalize``, rl8).

Per env, a running discounted return that restarts with every episode,

    R_t = gamma * R_{t-1} * (1 - episode_end_{t-1}) + r_t,

feeds a running variance (parallel Welford over every valid step seen so far); rewards are then divided by
``sqrt(Var[R] + eps)`` and optionally clipped. The return's scale, not the reward's, is what the value function
has to fit, so this keeps value targets near unit scale whatever the env's reward units. Rewards are not
centred: shifting them would change which policy is optimal where episodes can end early.

The scaler is training-time state of an algorithm (saved in its checkpoints), never part of the policy:
an evaluated or exported policy acts on observations and never sees a reward. A resumed run restarts every episode,
so loading keeps the statistics and zeroes the running return.
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import nn

from rlcore.nets.blocks import ObsNormalizer


class RewardScaler(nn.Module):
    """Scales (T, N) rollout rewards; its statistics and per-env running return are buffers (saved; loading restores
    the statistics and zeroes the return)."""

    running_return: torch.Tensor

    def __init__(self, gamma: float, clip: float | None, epsilon: float = 1e-8) -> None:
        super().__init__()
        self.gamma = gamma
        self.clip = clip
        self.epsilon = epsilon
        # The same parallel Welford merge as the observation normalizer's, over scalars (shape ()).
        self.return_statistics = ObsNormalizer((), clip=math.inf, enabled=True, epsilon=epsilon)
        # (N,) R of the step before the next rollout; empty until the first rollout tells the number of envs.
        self.register_buffer("running_return", torch.zeros(0, dtype=torch.float64))

    @torch.no_grad()
    def scale(self, rewards: torch.Tensor, episode_end: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
        """Scaled copy of ``rewards``; merges this rollout's returns into the statistics first (call once per rollout).

        Args:
            rewards: (T, N) env rewards (0 on autoreset steps).
            episode_end: (T, N) bool, an episode ended at step t: R restarts after it.
            valid: (T, N) bool, False on autoreset steps: they belong to no episode, leave R unchanged and
                do not enter the statistics.

        Returns:
            (T, N) ``clip(r_t / sqrt(Var[R] + eps))`` in the dtype of ``rewards``; the input is left untouched.
        """
        num_envs = rewards.shape[1]
        if self.running_return.shape != (num_envs,):  # the first rollout (or a changed number of envs)
            self.running_return = torch.zeros(num_envs, dtype=torch.float64)
        rewards64 = rewards.to(torch.float64)
        returns = torch.empty_like(rewards64)
        running = self.running_return
        for t in range(rewards.shape[0]):
            running = torch.where(valid[t], self.gamma * running + rewards64[t], running)
            returns[t] = running
            running = torch.where(episode_end[t], 0.0, running)
        self.running_return.copy_(running)
        if bool(valid.any()):
            self.return_statistics.update(returns[valid])
        scaled = rewards64 / torch.sqrt(self.return_statistics.var + self.epsilon)
        if self.clip is not None:
            scaled = scaled.clamp(-self.clip, self.clip)
        return scaled.to(rewards.dtype)

    def _load_from_state_dict(self, state_dict: dict[str, Any], prefix: str, *args: Any, **kwargs: Any) -> None:
        # The running return's length is the number of envs, unknown at construction: take the saved one's.
        saved = state_dict.get(prefix + "running_return")
        if isinstance(saved, torch.Tensor):
            self.running_return = torch.zeros_like(saved, dtype=torch.float64)
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)
        # Loaded only on resume, where the trainer restarts every episode: a new episode's return starts at 0, not
        # at the interrupted one's partial sum (SB3's VecNormalize zeroes its returns on load too). The statistics
        # stay.
        self.running_return.zero_()
