"""Return and advantage estimators over (T, N) rollouts, parts an on-policy algorithm chooses from, and how well
values predict the returns (:func:`explained_variance`, a logged diagnostic).

GAE and n-step returns are on-policy; V-trace corrects for a behaviour policy that lags the target policy
(IMPALA's actors, several epochs over one rollout) with truncated importance weights.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import torch
from torch.distributions import Distribution


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


class VTraceReturns(NamedTuple):
    """What :func:`vtrace` returns, each (T, N) and detached."""

    vs: torch.Tensor
    """V-trace value targets v_s: what the value function regresses onto."""
    pg_advantages: torch.Tensor
    """rho_bar_t * (r_t + gamma * (1 - terminated_t) * v_{s,t+1} - V(s_t)): what the policy gradient weighs
    grad log pi(a_t | s_t) with."""


def vtrace(
    log_rhos: torch.Tensor,
    rewards: torch.Tensor,
    values: torch.Tensor,
    next_values: torch.Tensor,
    terminated: torch.Tensor,
    episode_end: torch.Tensor,
    gamma: float,
    rho_clip: float = 1.0,
    c_clip: float = 1.0,
) -> VTraceReturns:
    """V-trace targets and policy-gradient advantages (Espeholt et al., 2018, IMPALA, eq. 1 and section 4.2).

    Args:
        log_rhos: (T, N) log pi(a_t | s_t) - log mu(a_t | s_t), target over behaviour policy
            (see :func:`log_importance_weights`, :func:`vtrace_log_rhos_from_logits`).
        rewards, values, next_values, terminated, episode_end: (T, N), as for :func:`gae`.
        rho_clip: rho_bar, the truncation of the weights in the TD errors and the policy-gradient advantages; it
            sets which value function v_s estimates (V^pi at infinity, closer to V^mu below 1). ``math.inf``: no clip.
        c_clip: c_bar, the truncation of the trace coefficients; it sets how fast the trace is cut (the variance).

    With rho_t = exp(log_rhos_t), rho_bar_t = min(rho_clip, rho_t), c_t = min(c_clip, rho_t):

        delta_t = rho_bar_t * (r_t + gamma * (1 - terminated_t) * V(s_{t+1}) - V(s_t))
        v_t - V(s_t) = delta_t + gamma * (1 - episode_end_t) * c_t * (v_{t+1} - V(s_{t+1}))

    computed backwards over T (vectorized over N). The trace stops at an episode end: after a termination the
    bootstrap is zero, after a truncation it is ``next_values`` (the value of the episode's last observation), and
    nothing flows in from the next episode. On-policy (log_rhos = 0) with both clips >= 1, v_t is the n-step return
    to the rollout's end or the episode's end (GAE with lambda = 1). Tensors are computed without gradients.
    """
    with torch.no_grad():
        rhos = log_rhos.detach().exp().to(values.dtype)
        clipped_rhos = rhos.clamp(max=rho_clip)
        cs = rhos.clamp(max=c_clip)
        not_terminal = 1.0 - terminated.to(values.dtype)
        continues = 1.0 - episode_end.to(values.dtype)
        values, next_values, rewards = values.detach(), next_values.detach(), rewards.detach()

        deltas = clipped_rhos * (rewards + gamma * not_terminal * next_values - values)
        vs_minus_values = torch.zeros_like(values)
        running = torch.zeros_like(values[0])
        for t in range(values.shape[0] - 1, -1, -1):
            running = deltas[t] + gamma * continues[t] * cs[t] * running
            vs_minus_values[t] = running
        vs = vs_minus_values + values

        # v_{s,t+1}: the next step's target inside the episode, else the bootstrap value (zeroed by not_terminal).
        next_vs = next_values.clone()
        next_vs[:-1] = torch.where(episode_end[:-1], next_values[:-1], vs[1:])
        pg_advantages = clipped_rhos * (rewards + gamma * not_terminal * next_vs - values)
    return VTraceReturns(vs=vs, pg_advantages=pg_advantages)


def log_importance_weights(
    target: Distribution, behaviour_log_probs: torch.Tensor, actions: torch.Tensor
) -> torch.Tensor:
    """log pi(a) - log mu(a) for ``actions`` under the ``target`` policy, given the behaviour policy's stored
    log-probabilities (the rollout's ``log_probs``).

    Shapes follow the distribution's batch shape, (T * N,) or (T, N): ``actions`` as ``target.log_prob`` takes them,
    ``behaviour_log_probs`` and the result of that batch shape. Gradients flow through the target's log-probabilities
    (:func:`vtrace` detaches its input; a ratio-based loss may want them).
    """
    return target.log_prob(actions) - behaviour_log_probs


def vtrace_log_rhos_from_logits(
    behaviour_logits: torch.Tensor,
    target_logits: torch.Tensor,
    actions: torch.Tensor,
    nvec: Sequence[int],
) -> torch.Tensor:
    """log pi(a) - log mu(a) for categorical (``nvec = (n,)``) and multi-discrete (``nvec = (n_1, ..., n_k)``) actions.

    Args:
        behaviour_logits, target_logits: (..., sum(nvec)) the k sub-actions' logits concatenated along the last dim.
        actions: (..., k) int64 sub-action indices; for a single categorical also (...).
        nvec: the number of choices of each sub-action.

    Returns:
        (...) the log importance weights, summed over the sub-actions (they are independent given the state).
        Gradients flow through both logits.
    """
    sizes = [int(n) for n in nvec]
    if not sizes or any(n < 1 for n in sizes):
        raise ValueError(f"nvec: expected a non-empty list of positive sizes, got {list(nvec)}")
    if behaviour_logits.shape != target_logits.shape or target_logits.shape[-1] != sum(sizes):
        raise ValueError(
            f"logits: expected behaviour and target logits of one shape (..., {sum(sizes)}) for nvec {sizes}, "
            f"got {tuple(behaviour_logits.shape)} and {tuple(target_logits.shape)}"
        )
    if len(sizes) == 1 and actions.shape == target_logits.shape[:-1]:
        actions = actions.unsqueeze(-1)
    if actions.shape != (*target_logits.shape[:-1], len(sizes)):
        raise ValueError(
            f"actions: expected shape {(*target_logits.shape[:-1], len(sizes))} for nvec {sizes}, "
            f"got {tuple(actions.shape)}"
        )
    log_rhos = torch.zeros(target_logits.shape[:-1], dtype=target_logits.dtype, device=target_logits.device)
    pairs = zip(behaviour_logits.split(sizes, dim=-1), target_logits.split(sizes, dim=-1), strict=True)
    for k, (behaviour, target) in enumerate(pairs):
        taken = actions[..., k : k + 1].long()
        log_pi = torch.log_softmax(target, dim=-1).gather(-1, taken).squeeze(-1)
        log_mu = torch.log_softmax(behaviour, dim=-1).gather(-1, taken).squeeze(-1)
        log_rhos = log_rhos + (log_pi - log_mu)
    return log_rhos


def explained_variance(predictions: torch.Tensor, targets: torch.Tensor) -> float:
    """1 - Var[targets - predictions] / Var[targets]: 1 is perfect, 0 no better than a constant (and 0 where the
    variance is undefined: fewer than two targets)."""
    if targets.numel() < 2:
        return 0.0
    target_var = targets.var()
    if target_var.item() == 0:
        return 0.0
    return float(1 - (targets - predictions).var() / target_var)
