"""Best-model selection over evaluated checkpoints."""

from __future__ import annotations

from typing import Any

from rlcore.errors import RLCoreError


def select_best(candidates: list[dict[str, Any]], metric: str) -> tuple[dict[str, Any], str]:
    """The candidate with the highest ``metric``; ties go to the earlier one (fewer env steps).

    Each candidate is a dict with at least ``checkpoint``, ``step`` (and ``step_unit``), ``episodes`` and ``metric``.
    Returns the winner and a one-sentence reason to write next to the selected model.
    """
    lower_is_better = metric.endswith("_loss")
    if not candidates:
        raise RLCoreError("no evaluated checkpoints to select from: run `rlcore evaluate` first")
    if any(metric not in candidate for candidate in candidates):
        raise RLCoreError(
            f"select.metric: {metric!r} is not in the evaluations (offline runs with a "
            "validation set have validation_loss and validation_accuracy)"
        )
    ordered = sorted(candidates, key=lambda c: c["step"])
    best = ordered[0]
    for candidate in ordered[1:]:
        if (candidate[metric] < best[metric]) if lower_is_better else (candidate[metric] > best[metric]):
            best = candidate
    ties = [c for c in ordered if c[metric] == best[metric] and c is not best]
    unit = str(best.get("step_unit", "env_steps")).replace("_", " ")
    reason = (
        f"{best['checkpoint']} has the {'lowest' if lower_is_better else 'highest'} {metric} "
        f"({best[metric]:.2f}; {best['episodes']} validation episodes, "
        f"trained for {best['step']} {unit}) of {len(candidates)} evaluated checkpoints"
    )
    if ties:
        reason += f"; {len(ties)} later checkpoint(s) tied and the earliest was kept"
    return best, reason
