"""PPO's update for N seeds at once (``train.seeds`` batched): :meth:`rlcore.algos.ppo.PPO.update`'s arithmetic on
stacked weights, each seed's minibatches, statistics, clipping and stops its own.

For each rollout (one per seed, stacked), as ``PPO.update`` does for one:
    for epoch in 1..K:
        each seed not stopped draws its minibatch order from its own generator
        for step j:        (the seeds with a j-th minibatch; the others sit the step out)
            the minibatches padded to the longest, a mask (N, B) marks each seed's own samples
            the approximate KL per seed; a seed above 1.5 * target_kl stops for the rest of the update
            per seed (masked means over its own samples): advantages normalized, L_clip, L_value, entropy
            one backward of the sum of the seeds' losses (seed k's gradient is its own loss's)
            gradient norms clipped per seed; a seed with a non-finite loss or norm skips the step (counted)
            one Adam step for the seeds that take it (StackedAdam's ``active`` mask: the others keep their weights)

Seeds differ in their valid step counts (autoreset steps are left out), so in the sizes and numbers of their
minibatches: the padding and the per-step mask handle that. Learning rate and clip range follow each seed's own
progress. Equal to the unbatched update up to float32 summation order (masked sums, batched matrix products) and
StackedAdam's rounding (``rlcore.nets.stacked``). The supported configurations: ``rlcore.trainers.on_policy_seeds``.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from rlcore.algos.ppo import PPO, PPOConfig, clipped_surrogate
from rlcore.algos.seeds_batch import SeedsRollout, count_step, masked_mean, padded
from rlcore.data.rollouts import shuffled_minibatches
from rlcore.nets.stacked import StackedAdam, StackedOptimizer
from rlcore.nets.stacked_actor_critic import StackedActorCritic
from rlcore.objectives.returns import explained_variance
from rlcore.objectives.schedules import scheduled


def stacked_optimizer(algorithms: Sequence[PPO], stacked: StackedActorCritic) -> StackedAdam:
    """One Adam over the stacked weights with each seed's own state (``algorithms[k].optimizer``'s)."""
    group = algorithms[0].optimizer.param_groups[0]
    betas = (float(group["betas"][0]), float(group["betas"][1]))
    optimizer = StackedAdam(stacked.parameters(), stacked.count, betas=betas, eps=float(group["eps"]))
    optimizer.load_seed_state_dicts([algorithm.optimizer.state_dict() for algorithm in algorithms])
    return optimizer


def update_seeds(
    algorithms: Sequence[PPO],
    stacked: StackedActorCritic,
    optimizer: StackedOptimizer,
    rollout: SeedsRollout,
    progress: Sequence[float],
    generators: Sequence[torch.Generator],
) -> list[dict[str, float]]:
    """One PPO update of every seed on its rollout (``algorithms[k]`` is seed k's PPO, whose config is shared and
    whose counters — gradient and skipped steps — are advanced as its own update would); returns each seed's
    metrics, those ``PPO.update`` returns. ``progress[k]`` in [0, 1] drives seed k's schedules."""
    cfg = algorithms[0].config
    assert isinstance(cfg, PPOConfig)
    count = stacked.count
    lrs = [scheduled(cfg.lr, cfg.lr_schedule, p) for p in progress]
    clips = [scheduled(cfg.clip_range, cfg.clip_range_schedule, p) for p in progress]
    for group in optimizer.param_groups:
        group["lr"] = torch.tensor(lrs, dtype=torch.float64)
    clip = torch.tensor(clips, dtype=torch.float64).unsqueeze(1)  # (N, 1)
    rows = torch.arange(count).unsqueeze(1)

    totals = torch.zeros(count, 4)  # policy loss, value loss, entropy, clip fraction
    minibatches = torch.zeros(count)
    approx_kl = torch.zeros(count)
    stopped = [False] * count
    epochs_done = [0] * count
    for _ in range(cfg.n_epochs):
        orders = [
            [] if stopped[k] else list(shuffled_minibatches(rollout.valid[k], cfg.batch_size, generators[k]))
            for k in range(count)
        ]
        for j in range(max(len(order) for order in orders)):
            batches = [order[j] if j < len(order) else None for order in orders]
            idx, mask = padded(batches)
            counts = mask.sum(1).clamp(min=1)
            present = torch.tensor([batch is not None for batch in batches])
            features = stacked.features(rollout.obs[rows, idx])
            dist = stacked.distribution(stacked.scores(features))
            log_ratio = dist.log_prob(rollout.actions[rows, idx]) - rollout.log_probs[rows, idx]
            ratio = log_ratio.exp()
            with torch.no_grad():
                kl = masked_mean((ratio - 1) - log_ratio, mask, counts)  # Schulman's low-variance estimator
                approx_kl = torch.where(present, kl, approx_kl)
            if cfg.target_kl is not None:
                over = present & (kl > 1.5 * cfg.target_kl)
                for k in torch.nonzero(over).flatten().tolist():
                    stopped[k] = True
                present &= ~over
                mask = mask * present.unsqueeze(1)

            adv = rollout.advantages[rows, idx]
            if cfg.normalize_advantage:  # over each seed's own minibatch; the std of one sample is NaN: left as is
                mean = masked_mean(adv, mask, counts).unsqueeze(1)
                std = ((adv - mean).square() * mask).sum(1).div((counts - 1).clamp(min=1)).sqrt().unsqueeze(1)
                adv = torch.where((counts > 1).unsqueeze(1), (adv - mean) / (std + 1e-8), adv)
            policy_loss = -masked_mean(clipped_surrogate(ratio, adv, clip, cfg.dual_clip), mask, counts)
            values = stacked.values(features)
            old_values, returns = rollout.values[rows, idx], rollout.returns[rows, idx]
            if cfg.clip_range_vf is not None:
                values = old_values + (values - old_values).clamp(-cfg.clip_range_vf, cfg.clip_range_vf)
            value_loss = masked_mean((returns - values).square(), mask, counts)
            entropy = masked_mean(dist.entropy(), mask, counts)
            losses = policy_loss + cfg.vf_coef * value_loss - cfg.ent_coef * entropy  # (N,)

            optimizer.zero_grad(set_to_none=True)
            (losses * present).sum().backward()
            applied = present & torch.isfinite(losses.detach())
            if cfg.max_grad_norm is not None:
                applied &= torch.isfinite(stacked.stacked.clip_grad_norms_(cfg.max_grad_norm))
            optimizer.step(active=applied)
            for k, (took, stepped) in enumerate(zip(present.tolist(), applied.tolist(), strict=True)):
                if took:
                    count_step(algorithms[k], stepped)
            with torch.no_grad():
                clipped = masked_mean(((ratio - 1).abs() > clip.float()).float(), mask, counts)
                diagnostics = torch.stack([policy_loss, value_loss, entropy, clipped], dim=1).detach()
                totals += diagnostics * present.unsqueeze(1)
                minibatches += present
        for k in range(count):
            epochs_done[k] += not stopped[k]

    means = (totals / minibatches.clamp(min=1).unsqueeze(1)).tolist()
    kls = approx_kl.tolist()
    metrics = []
    for k in range(count):
        valid = rollout.valid_indices(k)
        metrics.append(
            {
                "policy_loss": means[k][0],
                "value_loss": means[k][1],
                "entropy": means[k][2],
                "clip_fraction": means[k][3],
                "approx_kl": kls[k],
                "explained_variance": explained_variance(rollout.values[k][valid], rollout.returns[k][valid]),
                "learning_rate": lrs[k],
                "clip_range": clips[k],
                "epochs": float(epochs_done[k]),
            }
        )
    return metrics
