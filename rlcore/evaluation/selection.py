"""Best-model selection over evaluated checkpoints, on the training distribution or under ``eval.settings``, and the
selected model's headline scores as ``dvc exp show`` reads them."""

from __future__ import annotations

from typing import Any

from rlcore.common.errors import RLCoreError
from rlcore.envs.settings import MEAN_OVER_SETTINGS


def mean_scores(scores: list[dict[str, Any]]) -> dict[str, Any]:
    """The mean of each number the score dicts all have (``mean_return``, ``ci95_low``, ...); a count the same in
    all of them (``episodes``) stays that integer."""
    keys = [key for key, value in scores[0].items() if isinstance(value, int | float) and not isinstance(value, bool)]
    mean: dict[str, Any] = {}
    for key in keys:
        values = [s[key] for s in scores if key in s]
        if len(values) == len(scores):
            same_count = all(isinstance(v, int) for v in values) and len(set(values)) == 1
            mean[key] = values[0] if same_count else sum(float(v) for v in values) / len(values)
    return mean


def view_scores(record: dict[str, Any], setting: str | None) -> dict[str, Any]:
    """The scores ``select.setting`` reads from an evaluation record (a candidate of ``evaluations.json``, or a
    selection's test record with its ``settings``): the record itself (null: the training distribution), one
    setting's scores, or their mean over the settings (``mean``)."""
    if setting is None:
        return record
    settings: dict[str, dict[str, Any]] = record.get("settings") or {}
    if setting == MEAN_OVER_SETTINGS:
        if not settings:
            raise RLCoreError("select.setting: mean: the evaluations hold no eval.settings; run `rlcore evaluate`")
        return mean_scores(list(settings.values()))
    if setting not in settings:
        raise RLCoreError(f"select.setting: {setting!r} is not in the evaluations; run `rlcore evaluate` again")
    return settings[setting]


def scores_on_test(selection: dict[str, Any]) -> dict[str, Any]:
    """A ``selection.json``'s test scores read where its validation was (``validation.setting``): what a sweep
    records beside the validation value it optimizes."""
    record = {**selection["test"], "settings": {n: e["test"] for n, e in selection.get("settings", {}).items()}}
    return view_scores(record, selection["validation"].get("setting"))


def describe_setting(setting: str | None) -> str:
    if setting is None:
        return ""
    return " (mean over eval.settings)" if setting == MEAN_OVER_SETTINGS else f" (under setting {setting!r})"


def select_best(
    candidates: list[dict[str, Any]], metric: str, setting: str | None = None
) -> tuple[dict[str, Any], str]:
    """The candidate with the highest ``metric`` (read where ``setting`` says: :func:`view_scores`); ties go to the
    earlier one (fewer env steps).

    Each candidate is a dict with at least ``checkpoint``, ``step`` (and ``step_unit``), ``episodes`` and ``metric``
    (and ``settings``: name -> scores, when selecting under a setting).
    Returns the winner and a one-sentence reason to write next to the selected model.
    """
    lower_is_better = metric.endswith("_loss")
    if not candidates:
        raise RLCoreError("no evaluated checkpoints to select from: run `rlcore evaluate` first")
    values = [view_scores(candidate, setting) for candidate in candidates]
    if any(metric not in value for value in values):
        raise RLCoreError(
            f"select.metric: {metric!r} is not in the evaluations (offline runs with a "
            "validation set have validation_loss and validation_accuracy)"
        )
    value_of = {id(candidate): value[metric] for candidate, value in zip(candidates, values, strict=True)}
    ordered = sorted(candidates, key=lambda c: c["step"])
    best = ordered[0]
    for candidate in ordered[1:]:
        better = (
            value_of[id(candidate)] < value_of[id(best)]
            if lower_is_better
            else value_of[id(candidate)] > value_of[id(best)]
        )
        if better:
            best = candidate
    ties = [c for c in ordered if value_of[id(c)] == value_of[id(best)] and c is not best]
    unit = str(best.get("step_unit", "env_steps")).replace("_", " ")
    order = "lowest" if lower_is_better else "highest"
    reason = (
        f"{best['checkpoint']} has the {order} {metric}{describe_setting(setting)} "
        f"({value_of[id(best)]:.2f}; {best['episodes']} validation episodes, "
        f"trained for {best['step']} {unit}) of {len(candidates)} evaluated checkpoints"
    )
    if ties:
        reason += f"; {len(ties)} later checkpoint(s) tied and the earliest was kept"
    return best, reason


HEADLINE_TEST_KEYS = ("mean_return", "iqm_return", "ci95_low", "ci95_high", "episodes")
"""The selected model's test scores that ``scores.json`` keeps (as ``test_<key>``)."""


def headline_scores(metrics: dict[str, Any]) -> dict[str, Any]:
    """``reports/<name>/scores.json``: ``metrics.json``'s headline numbers, flat, so that ``dvc exp show`` has one
    column for each and ``dvc exp show --json`` holds them as numbers: the selected model's test score (mean, IQM,
    95% interval, episodes), the validation score selection used, how far it trained, and with ``train.seeds`` the
    IQM over seeds with its interval and the number of seeds."""
    validation = metrics["validation"]
    flat: dict[str, Any] = {f"test_{key}": metrics[key] for key in HEADLINE_TEST_KEYS}
    flat[f"validation_{validation['metric']}"] = validation["value"]
    flat["step"] = metrics["step"]
    across = metrics.get("aggregate")
    if across is not None:
        flat["seeds"] = across["num_runs"]
        for key in ("iqm", "iqm_ci95_low", "iqm_ci95_high"):
            flat[f"seeds_{key}"] = across[key]
        flat["selected_seed"] = metrics["train_seed"]
    return flat
