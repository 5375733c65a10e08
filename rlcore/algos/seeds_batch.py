"""What the batched updates of N seeds (``train.seeds`` batched: ``ppo_seeds``, ``a2c_seeds``) share: the seeds'
rollouts stacked, masked means over each seed's own samples, and the per-seed bookkeeping of gradient steps."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

from rlcore.algos.base import Algorithm


@dataclass
class SeedsRollout:
    """N seeds' rollouts of T steps over E envs each, flattened per seed as ``RolloutBuffer.flat`` does (index
    t * E + e). Fields (N, T * E, ...) but ``valid`` (N, T, E): obs (N, M, obs_dim), actions (N, M) or (N, M, A),
    log_probs, values, advantages, returns (N, M)."""

    obs: torch.Tensor
    actions: torch.Tensor
    log_probs: torch.Tensor
    values: torch.Tensor
    advantages: torch.Tensor
    returns: torch.Tensor
    valid: torch.Tensor

    def valid_indices(self, k: int) -> torch.Tensor:
        """Seed ``k``'s trained-on steps as flat indices, (V_k,)."""
        return torch.nonzero(self.valid[k].reshape(-1), as_tuple=False).squeeze(-1)


def padded(batches: Sequence[torch.Tensor | None]) -> tuple[torch.Tensor, torch.Tensor]:
    """Index batches of different sizes (None: the seed has none) as (N, B_max) indices and a (N, B_max) float32
    mask of the real ones; padding repeats index 0 (a real sample, so every value stays finite)."""
    width = max((len(batch) for batch in batches if batch is not None), default=1)
    indices = torch.zeros(len(batches), width, dtype=torch.int64)
    mask = torch.zeros(len(batches), width)
    for k, batch in enumerate(batches):
        if batch is not None:
            indices[k, : len(batch)] = batch
            mask[k, : len(batch)] = 1.0
    return indices, mask


def masked_mean(x: torch.Tensor, mask: torch.Tensor, counts: torch.Tensor) -> torch.Tensor:
    """Mean over dim 1 of ``x`` (N, B) where ``mask`` (N, B) is 1, ``counts`` (N,) its row sums (>= 1): (N,)."""
    return (x * mask).sum(1) / counts


def count_step(algorithm: Algorithm[Any, Any], applied: bool) -> None:
    """What ``Algorithm.apply_gradients`` and an algorithm's update count for one gradient step of a seed (``applied``:
    taken, else skipped for a non-finite loss or gradient)."""
    algorithm.gradient_steps += 1
    if applied:
        algorithm.consecutive_skips = 0
    else:
        algorithm.skipped_steps += 1
        algorithm.consecutive_skips += 1
