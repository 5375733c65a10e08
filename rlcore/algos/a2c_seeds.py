"""A2C's update for N seeds at once (``train.seeds`` batched): :meth:`rlcore.algos.a2c.A2C.update`'s arithmetic on
stacked weights, each seed's statistics, clipping and optimizer state its own.

For each rollout (one per seed, stacked), as ``A2C.update`` does for one:
    advantages standardized over each seed's valid steps (normalize_advantage)
    per seed, masked means over its valid steps: L_policy = -E[log pi(a|s) A], L_value = E[(V(s) - R)^2], entropy
    one backward of the sum of the seeds' losses (seed k's gradient is its own loss's)
    gradient norms clipped per seed; a seed with a non-finite loss or norm skips the step (counted)
    one RMSprop (or Adam) step over the stacked weights for the seeds that take it

Equal to the unbatched update up to float32 summation order (masked sums over the whole rollout instead of sums over
the valid steps, batched matrix products) and the stacked optimizers' rounding (``rlcore.nets.stacked``).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from rlcore.algos.a2c import A2C, RMSPROP_ALPHA, A2CConfig
from rlcore.algos.seeds_batch import SeedsRollout, count_step, masked_mean
from rlcore.nets.stacked import StackedAdam, StackedOptimizer, StackedRMSprop
from rlcore.nets.stacked_actor_critic import StackedActorCritic
from rlcore.objectives.returns import explained_variance
from rlcore.objectives.schedules import scheduled


def stacked_optimizer(algorithms: Sequence[A2C], stacked: StackedActorCritic) -> StackedOptimizer:
    """``algo.optimizer`` over the stacked weights (RMSprop, or Adam) with each seed's own state."""
    cfg = algorithms[0].config
    optimizer: StackedOptimizer
    if cfg.optimizer == "adam":
        optimizer = StackedAdam(stacked.parameters(), stacked.count, eps=cfg.optimizer_eps)
    else:
        optimizer = StackedRMSprop(stacked.parameters(), stacked.count, alpha=RMSPROP_ALPHA, eps=cfg.optimizer_eps)
    optimizer.load_seed_state_dicts([algorithm.optimizer.state_dict() for algorithm in algorithms])
    return optimizer


def update_seeds(
    algorithms: Sequence[A2C],
    stacked: StackedActorCritic,
    optimizer: StackedOptimizer,
    rollout: SeedsRollout,
    progress: Sequence[float],
    generators: Sequence[torch.Generator],
) -> list[dict[str, float]]:
    """One A2C step of every seed on its rollout (``algorithms[k]`` is seed k's A2C, whose counters are advanced as
    its own update would); returns each seed's metrics, those ``A2C.update`` returns. ``progress[k]`` in [0, 1]
    drives seed k's learning rate; ``generators`` are unused (A2C draws nothing without grad_accumulation)."""
    cfg = algorithms[0].config
    assert isinstance(cfg, A2CConfig)
    lrs = [scheduled(cfg.lr, cfg.lr_schedule, p) for p in progress]
    for group in optimizer.param_groups:
        group["lr"] = torch.tensor(lrs, dtype=torch.float64)

    mask = rollout.valid.reshape(stacked.count, -1).float()  # (N, M)
    valid_counts = mask.sum(1)
    counts = valid_counts.clamp(min=1)
    advantages = rollout.advantages
    if cfg.normalize_advantage:  # over each seed's valid steps; the std of one sample is NaN: left as is
        mean = masked_mean(advantages, mask, counts).unsqueeze(1)
        std = ((advantages - mean).square() * mask).sum(1).div((counts - 1).clamp(min=1)).sqrt().unsqueeze(1)
        advantages = torch.where((valid_counts > 1).unsqueeze(1), (advantages - mean) / (std + 1e-8), advantages)

    features = stacked.features(rollout.obs)
    dist = stacked.distribution(stacked.scores(features))
    policy_loss = -masked_mean(dist.log_prob(rollout.actions) * advantages, mask, counts)
    value_loss = masked_mean((rollout.returns - stacked.values(features)).square(), mask, counts)
    entropy = masked_mean(dist.entropy(), mask, counts)
    losses = policy_loss + cfg.vf_coef * value_loss - cfg.ent_coef * entropy  # (N,)

    optimizer.zero_grad(set_to_none=True)
    losses.sum().backward()
    applied = torch.isfinite(losses.detach()) & (valid_counts > 0)  # no valid step: the unbatched mean is NaN
    if cfg.max_grad_norm is not None:
        applied &= torch.isfinite(stacked.stacked.clip_grad_norms_(cfg.max_grad_norm))
    optimizer.step(active=applied)
    for algorithm, stepped in zip(algorithms, applied.tolist(), strict=True):
        count_step(algorithm, stepped)

    diagnostics = torch.stack([policy_loss, value_loss, entropy], dim=1).detach().tolist()
    metrics = []
    for k in range(stacked.count):
        valid = rollout.valid_indices(k)
        metrics.append(
            {
                "policy_loss": diagnostics[k][0],
                "value_loss": diagnostics[k][1],
                "entropy": diagnostics[k][2],
                "explained_variance": explained_variance(rollout.values[k][valid], rollout.returns[k][valid]),
                "learning_rate": lrs[k],
            }
        )
    return metrics
