"""The evaluations of N policies side by side (the seeds of a batched run, ``rlcore.trainers.on_policy_acting``):
every policy's own :class:`Evaluator` and episodes, one batched forward pass per step for all of them.

Policy ``k`` is evaluated on evaluator ``k``'s episodes exactly as ``evaluators[k].evaluate(policy_k)`` does it
(the same :class:`EpisodeBatch` bookkeeping, seeds, step cap, truncation, errors), so its result is the same as
long as ``act`` gives each policy's deterministic actions. The batches of every evaluator run together (batch ``b``
of all evaluators at once); an evaluator whose batch is over is no longer stepped while the others finish theirs.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import torch

from rlcore.evaluation.evaluator import BatchOutcome, EpisodeBatch, EvalResult, Evaluator

BatchedAct = Callable[[torch.Tensor], torch.Tensor]
"""Observations of N policies (N, B, *obs_shape) float32 -> each policy's deterministic actions (N, B) or
(N, B, action_dim) (row k: policy k's ``act(obs[k], None, True)``)."""


def evaluation_mismatch(evaluators: Sequence[Evaluator]) -> str | None:
    """Why ``evaluators`` cannot run together, or None: each must be deterministic, single-agent, with the same
    number of episodes per batch and batches."""
    first = evaluators[0]
    for k, evaluator in enumerate(evaluators):
        if not evaluator.deterministic:
            return f"evaluator {k} samples its actions (only deterministic evaluations batch)"
        if evaluator.agents:
            return f"evaluator {k} is multi-agent"
        if (evaluator.episodes, evaluator.batch) != (first.episodes, first.batch):
            return (
                f"evaluator {k} runs {evaluator.episodes} episodes in batches of {evaluator.batch}, evaluator 0 "
                f"{first.episodes} in batches of {first.batch}"
            )
    return None


@torch.no_grad()
def evaluate_together(evaluators: Sequence[Evaluator], act: BatchedAct) -> list[EvalResult]:
    """Evaluator ``k``'s result for the policy ``act`` gives row ``k`` of, for every ``k``; a ``ValueError`` when
    :func:`evaluation_mismatch` says they cannot run together."""
    problem = evaluation_mismatch(evaluators)
    if problem is not None:
        raise ValueError(f"evaluators: {problem}")
    outcomes: list[list[BatchOutcome]] = [[] for _ in evaluators]
    for b in range(len(evaluators[0].batch_seeds)):
        batches = [EpisodeBatch(evaluator, evaluator.batch_seeds[b]) for evaluator in evaluators]
        while not all(batch.done for batch in batches):
            obs = torch.as_tensor(np.stack([batch.obs for batch in batches]), dtype=torch.float32)  # (N, B, ...)
            for batch, batch_actions in zip(batches, act(obs).numpy(), strict=True):
                if not batch.done:
                    batch.step(batch_actions)
        for seen, batch in zip(outcomes, batches, strict=True):
            seen.append(batch.outcome())
    return [evaluator.score(seen) for evaluator, seen in zip(evaluators, outcomes, strict=True)]
