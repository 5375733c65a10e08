"""Return and advantage estimators over (T, N) rollouts: parts an on-policy algorithm chooses from."""

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


def n_step_returns(
    rewards: torch.Tensor,
    values: torch.Tensor,
    next_values: torch.Tensor,
    terminated: torch.Tensor,
    episode_end: torch.Tensor,
    gamma: float,
    n: int,
) -> tuple[torch.Tensor, torch.Tensor]:
    """n-step returns (Mnih et al., 2016, A3C/A2C) over a (T, N) rollout; arguments as for :func:`gae`.

    The window of step t ends at e = the first of: step t + n - 1, the rollout's last step, the step
    that ends the episode. Then

        G_t = sum_{i=t}^{e} gamma^(i-t) r_i + gamma^(e-t+1) * (1 - terminated_e) * V(s_{e+1})

    (a truncated episode bootstraps from the value of its last observation). Returns advantages
    G_t - V(s_t) and the targets G_t, each (T, N). ``n = 1`` is the one-step TD target.
    """
    steps = values.shape[0]
    not_terminal = 1.0 - terminated.to(values.dtype)
    targets = torch.zeros_like(values)
    for t in range(steps):
        total = torch.zeros_like(values[0])
        discount = 1.0
        open_window = torch.ones_like(values[0], dtype=torch.bool)
        last = min(t + n, steps) - 1
        for i in range(t, last + 1):
            closes = open_window & (episode_end[i] | (i == last))
            total = total + open_window * discount * rewards[i]
            total = total + closes * discount * gamma * not_terminal[i] * next_values[i]
            open_window = open_window & ~closes
            discount *= gamma
        targets[t] = total
    return targets - values, targets
