"""Return and advantage estimators."""

from __future__ import annotations

import torch


def gae(
    rewards: torch.Tensor,
    values: torch.Tensor,
    next_values: torch.Tensor,
    terminated: torch.Tensor,
    episode_end: torch.Tensor,
    gamma: float,
    lam: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Generalized advantage estimation (Schulman et al., 2016), over a (T, N) rollout.

    Args:
        rewards: (T, N) reward r_t of the transition s_t -> s_{t+1}.
        values: (T, N) V(s_t).
        next_values: (T, N) V(s_{t+1}); for a truncated episode, the value of its last observation,
            so time limits are bootstrapped instead of treated as terminal.
        terminated: (T, N) bool, s_{t+1} is terminal: no value after it.
        episode_end: (T, N) bool, terminated or truncated: advantages do not flow across it.

    Returns:
        advantages (T, N) and value targets (T, N) = advantages + values.

    delta_t = r_t + gamma * (1 - terminated_t) * V(s_{t+1}) - V(s_t)
    A_t = delta_t + gamma * lam * (1 - episode_end_t) * A_{t+1}
    """
    not_terminal = 1.0 - terminated.to(values.dtype)
    continues = 1.0 - episode_end.to(values.dtype)
    deltas = rewards + gamma * not_terminal * next_values - values
    advantages = torch.zeros_like(values)
    running = torch.zeros_like(values[0])
    for t in range(values.shape[0] - 1, -1, -1):
        running = deltas[t] + gamma * lam * continues[t] * running
        advantages[t] = running
    return advantages, advantages + values
