"""The select stage: the best checkpoint on the validation scores, scored on the test episodes, saved and reported.

Selection reads ``reports/<name>/evaluations.json`` (the evaluate stage's validation episodes); the selected policy
alone is then evaluated on ``eval.test_episodes`` test episodes that no other stage runs (``rlcore.common.seeds``): the
reported score. Choosing the best of N checkpoints on the same episodes it is reported on would overstate it. A
two-player game's selected model also plays the test episodes against each of ``eval.opponents``.
"""

from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from rlcore.common.checkpoints import Checkpoint, load_checkpoint, save_checkpoint
from rlcore.common.errors import RLCoreError
from rlcore.common.files import check_target, read_json, remove_stale, sha256_file, write_json
from rlcore.common.seeds import describe
from rlcore.common.stage_paths import Layout
from rlcore.config.sections import Params
from rlcore.envs.settings import describe_parameters
from rlcore.evaluation.aggregate import aggregate
from rlcore.evaluation.elo import plot_elo_curve
from rlcore.evaluation.evaluator import SCORE_KEYS, EvalResult, episode_cap
from rlcore.evaluation.plots import plot_performance_profile, plot_seed_curves
from rlcore.evaluation.report import (
    ReportContent,
    baseline_words,
    plot_baseline_comparison,
    plot_learning_curve,
    plot_settings,
    read_curve,
    seeds_words,
    write_report,
)
from rlcore.evaluation.selection import headline_scores, select_best, view_scores
from rlcore.evaluation.video import record_episode
from rlcore.registry import policy_from_checkpoint
from rlcore.stages.baseline import RunScores, improvement, improvement_words, read_baseline
from rlcore.stages.evaluators import against_opponents, close_all, declared_settings, evaluators_for, under_settings
from rlcore.stages.seeds import run_seeds, seed_layouts
from rlcore.stages.shared import STEP_KEYS, check_trained_on, checkpoint_words

log = logging.getLogger("rlcore")

VALIDATION_KEYS = ("metric", "value", "episodes", "mean_return", "iqm_return", "ci95_low", "ci95_high")
"""What ``reports/<name>/metrics.json`` keeps of the validation score selection used (and ``setting``, when one is
chosen)."""


@dataclass(frozen=True)
class ScoresOnTest:
    """The selected policy on the test episodes: under the training distribution, their seeds, under each of
    ``eval.settings`` (the same seeds), and (the selected model only) against each of ``eval.opponents``."""

    result: EvalResult
    seeds: range
    settings: dict[str, EvalResult]
    opponents: dict[str, EvalResult] = dataclasses.field(default_factory=dict)


@dataclass(frozen=True)
class Selected:
    """The candidate of ``evaluations.json`` selection chose, why, its checkpoint, and its test scores."""

    entry: dict[str, Any]
    reason: str
    checkpoint: Checkpoint
    test: ScoresOnTest


def select_stage(params: Params, root: Path) -> Path:
    """Pick the best checkpoint on the validation scores, then score it on the test episodes (the module docstring).

    Writes ``models/<name>/{policy.pt,selection.json}``, ``reports/<name>/{metrics.json,report.md,learning_curve.png}``
    (with ``select.baseline_run``: ``reports/<name>/baseline_comparison.png``, and when either run has seeds
    ``metrics.json``'s ``baseline``, P(this run > the baseline) over seeds).
    """
    torch.set_num_threads(params.torch_threads)
    layout = Layout(root, params.name)
    for output in layout.select_outputs:  # a folder or a pipe in the way is refused before any test episode
        check_target(output)
    baseline = _read_baseline(params, root)
    evaluations = _read_evaluations(params, layout)
    seeds = run_seeds(params)
    if seeds is not None:
        return _select_seeds(params, root, evaluations, seeds, baseline)
    selected = _against_opponents(params, _select_and_test(params, root, evaluations))
    run = RunScores(
        params.name,
        {0: float(selected.test.result.scores()["mean_return"])},  # one run: its seed is not reported
        several=False,
        curve=layout.learning_curve_tsv,
        curve_seed=None,
    )
    comparison = _compare(run, baseline)
    _save_policy(layout.best_policy, selected.checkpoint)
    selection = _selection_record(params, evaluations, selected)
    write_json(layout.selection, selection)
    metrics = {**_metrics_record(params, selected, selection), **comparison.metrics}
    write_json(layout.metrics, metrics)
    write_json(layout.scores, headline_scores(metrics))
    _write_report(params, root, layout, evaluations, selected, selection, comparison)
    return layout.best


def _write_report(
    params: Params,
    root: Path,
    layout: Layout,
    evaluations: dict[str, Any],
    selected: Selected,
    selection: dict[str, Any],
    comparison: Comparison,
    seed_lines: list[str] | None = None,
) -> None:
    """``reports/<name>/report.md`` and its pictures; ``layout`` is the selected run's (with ``train.seeds``: its
    seed's), whose learning curve and train summary the report shows."""
    content = ReportContent(
        name=params.name,
        env_id=evaluations["env_id"],
        algo=selected.checkpoint.algo,
        selection=selection,
        candidates=evaluations["candidates"],
        summary=read_json(layout.train_summary) if layout.train_summary.is_file() else None,
        plot_name=layout.learning_curve_png.name,
    )
    _plot_learning_curve(layout, content, selected.entry)
    settings_plot = _plot_settings(layout, content)
    elo_plot = _plot_elo(params, layout, content)
    video = _record_video(params, selected, layout.episode_gif) if params.eval.video else None
    what = f"{content.algo} on {content.env_id}"
    baseline = _baseline_lines(params, root, what, content.summary, comparison)
    video_name = video.name if video else None
    write_report(
        layout.report,
        dataclasses.replace(
            content,
            video_name=video_name,
            settings_plot=settings_plot,
            baseline=baseline,
            seeds=seed_lines,
            elo_plot=elo_plot,
        ),
    )
    log.info("selected %s", selected.reason)


def _select_seeds(
    params: Params, root: Path, evaluations: dict[str, Any], seeds: list[int], baseline: RunScores | None
) -> Path:
    """``train.seeds``: each seed's best checkpoint on validation, scored on the test episodes; ``models/<name>/`` is
    the seed whose selected checkpoint is best on validation (ties: the earlier checkpoint, then the seed listed
    first); ``metrics.json`` and ``selection.json`` add each seed's scores and their aggregate over seeds."""
    layout = Layout(root, params.name)
    per_seed: dict[int, Selected] = {}
    for seed in seeds:
        candidates = [entry for entry in evaluations["candidates"] if entry.get("train_seed") == seed]
        if not candidates:
            raise RLCoreError(f"{layout.evaluations}: no checkpoint of seed {seed}; run `rlcore evaluate` again")
        per_seed[seed] = _select_and_test(params, root, {**evaluations, "candidates": candidates})
    best_entry, _ = select_best(
        [chosen.entry for chosen in per_seed.values()], params.select.metric, params.select.setting
    )
    best_seed = int(best_entry["train_seed"])
    chosen = per_seed[best_seed]
    value = view_scores(chosen.entry, params.select.setting)[params.select.metric]
    order = "lowest" if params.select.metric.endswith("_loss") else "highest"
    metric = params.select.metric
    reason = (
        f"seed {best_seed} has the {order} validation {metric} ({value:.2f}) of {len(seeds)} seeds; {chosen.reason}"
    )
    selected = _against_opponents(params, dataclasses.replace(chosen, reason=reason))
    seed_records = {str(seed): _seed_record(params, evaluations, one) for seed, one in per_seed.items()}
    scores = {seed: float(one.test.result.scores()["mean_return"]) for seed, one in per_seed.items()}
    seed_layout = Layout(root, params.name, seed=best_seed)
    run = RunScores(params.name, scores, several=True, curve=seed_layout.learning_curve_tsv, curve_seed=best_seed)
    comparison = _compare(run, baseline)
    across = aggregate(scores, params.train.target_return)
    # `dvc metrics show` leaves lists out: each interval also as two numbers.
    for key, (low, high) in [(key, value) for key, value in across.items() if key.endswith("_ci95")]:
        across[f"{key}_low"], across[f"{key}_high"] = low, high
    _save_policy(layout.best_policy, selected.checkpoint)
    selection = {
        **_selection_record(params, evaluations, selected),
        "train_seed": best_seed,
        "per_seed": seed_records,
        "aggregate": across,
    }
    write_json(layout.selection, selection)
    metrics = {
        **_metrics_record(params, selected, selection),
        "train_seed": best_seed,
        "per_seed": seed_records,
        "aggregate": across,
        **comparison.metrics,
    }
    write_json(layout.metrics, metrics)
    write_json(layout.scores, headline_scores(metrics))
    title = f"{selected.checkpoint.algo} on {evaluations['env_id']} ({params.name}, {len(seeds)} seeds)"
    curves = {
        seed: read_curve(seed_layout.learning_curve_tsv) for seed, seed_layout in seed_layouts(params, root).items()
    }
    unit = str(best_entry.get("step_unit", "env_steps")).replace("_", " ")
    plot_seed_curves(
        curves, layout.seed_curves_png, title=title, x_label=unit, y_label="periodic evaluation mean return"
    )
    plot_performance_profile({params.name: scores}, layout.performance_profile_png, title=f"{title}: test episodes")
    lines = seeds_words(
        across, seed_records, best_seed, layout.seed_curves_png.name, layout.performance_profile_png.name
    )
    # The learning curve and the table of checkpoints are the exported seed's.
    of_best = {**evaluations, "candidates": [c for c in evaluations["candidates"] if c["train_seed"] == best_seed]}
    _write_report(params, root, seed_layout, of_best, selected, selection, comparison, lines)
    return layout.best


def _seed_record(params: Params, evaluations: dict[str, Any], selected: Selected) -> dict[str, Any]:
    """What ``metrics.json`` and ``selection.json`` keep of one seed: its selected checkpoint, the validation
    score selection used and its test scores."""
    validation = _validation_record(params, evaluations, selected.entry)
    return {
        "checkpoint": selected.entry["checkpoint"],
        **{key: selected.entry[key] for key in STEP_KEYS},
        "validation": {key: validation[key] for key in ("metric", "value") if key in validation},
        "test": {
            key: selected.test.result.scores()[key]
            for key in ("mean_return", "iqm_return", "ci95_low", "ci95_high", "episodes")
        },
    }


def _read_evaluations(params: Params, layout: Layout) -> dict[str, Any]:
    """``reports/<name>/evaluations.json``, refused when it was evaluated on another env or under other
    ``eval.settings``."""
    if not layout.evaluations.is_file():
        raise RLCoreError(f"{layout.evaluations}: not found; run `rlcore evaluate` first")
    evaluations: dict[str, Any] = read_json(layout.evaluations)
    if evaluations["env_id"] != params.env.id:
        raise RLCoreError(
            f"{layout.evaluations}: evaluated on {evaluations['env_id']}, params say env.id {params.env.id}; "
            "run `rlcore evaluate` again"
        )
    if evaluations.get("train_seeds") != run_seeds(params):
        raise RLCoreError(
            f"{layout.evaluations}: evaluated for other train.seeds than the params declare; run `rlcore evaluate` "
            "again"
        )
    if evaluations.get("settings", []) != declared_settings(params):
        raise RLCoreError(
            f"{layout.evaluations}: evaluated under other eval.settings than the params declare; "
            "run `rlcore evaluate` again"
        )
    return evaluations


def _select_and_test(params: Params, root: Path, evaluations: dict[str, Any]) -> Selected:
    """Select on ``select.metric`` (under ``select.setting``), load that checkpoint (unchanged since it was
    evaluated) and score it on the test episodes."""
    best, reason = select_best(evaluations["candidates"], params.select.metric, params.select.setting)
    source = root / best["checkpoint"]
    if sha256_file(source) != best["sha256"]:
        raise RLCoreError(f"{source}: changed since it was evaluated; run `rlcore evaluate` again")
    checkpoint = load_checkpoint(source)
    test = _test_scores(params, checkpoint)
    what = checkpoint_words(source, best.get("train_seed"))
    log.info("test score of %s: %s", what, test.result.summary())
    for name, result in test.settings.items():
        log.info("test score of %s under %s: %s", what, name, result.summary())
    return Selected(best, reason, checkpoint, test)


def _test_scores(params: Params, checkpoint: Checkpoint) -> ScoresOnTest:
    """The checkpoint's score on the test episodes, their seeds, and its score under each of ``eval.settings``."""
    check_trained_on(checkpoint, params.env.id)
    evaluators = evaluators_for(params, "test")
    try:
        policy = policy_from_checkpoint(checkpoint)
        return ScoresOnTest(
            evaluators[None].evaluate(policy), evaluators[None].seeds, under_settings(evaluators, policy)
        )
    finally:
        close_all(evaluators)


def _against_opponents(params: Params, selected: Selected) -> Selected:
    """``selected`` with its test scores against each of ``eval.opponents`` (the same test episodes)."""
    if not params.eval.opponents:
        return selected
    policy = policy_from_checkpoint(selected.checkpoint)
    opponents = against_opponents(params, policy)
    for name, result in opponents.items():
        log.info("test score of the selected model against %s: %s", name, result.summary())
    return dataclasses.replace(selected, test=dataclasses.replace(selected.test, opponents=opponents))


def _save_policy(path: Path, checkpoint: Checkpoint) -> None:
    """The selected policy alone: weights and metadata, no optimizer or RNG state."""
    save_checkpoint(
        path,
        checkpoint.algo,
        checkpoint.step,
        checkpoint.step_unit,
        meta=checkpoint.meta,
        tensors={"policy": checkpoint.tensors["policy"]},
    )


def _selection_record(params: Params, evaluations: dict[str, Any], selected: Selected) -> dict[str, Any]:
    """``models/<name>/selection.json``: what was selected and why, its validation and test scores (and under each
    of ``eval.settings``, and against each of ``eval.opponents``), and the evaluation settings."""
    best, test = selected.entry, selected.test
    settings = {
        setting.name: {
            "parameters": describe_parameters(setting.parameters),
            "validation": best["settings"][setting.name],
            "test": test.settings[setting.name].scores(),
        }
        for setting in params.eval.settings
    }
    paths = params.eval.opponents or {}
    opponents = {name: {"opponent": paths[name], "test": result.scores()} for name, result in test.opponents.items()}
    return {
        "checkpoint": best["checkpoint"],
        "sha256": best["sha256"],
        **{key: best[key] for key in STEP_KEYS},
        "metric": params.select.metric,
        "reason": selected.reason,
        "validation": _validation_record(params, evaluations, best),
        "test": {**test.result.scores(), "seeds": describe(test.seeds)},
        **({"settings": settings} if settings else {}),
        **({"opponents": opponents} if opponents else {}),
        "eval_settings": {
            "episodes": evaluations["episodes"],
            "test_episodes": params.eval.test_episodes,
            "deterministic": params.eval.deterministic,
            "seed": params.eval.seed,
            "max_episode_steps": params.eval.max_episode_steps,
        },
    }


def _validation_record(params: Params, evaluations: dict[str, Any], best: dict[str, Any]) -> dict[str, Any]:
    """The validation score selection used: ``select.metric`` under ``select.setting``, and the episodes' seeds."""
    metric, chosen = params.select.metric, params.select.setting
    chosen_scores = view_scores(best, chosen)
    return {
        "metric": metric,
        "value": chosen_scores[metric],
        "setting": chosen,
        **{key: chosen_scores[key] for key in SCORE_KEYS if key in chosen_scores},
        "seeds": evaluations.get("seeds"),
    }


def _metrics_record(params: Params, selected: Selected, selection: dict[str, Any]) -> dict[str, Any]:
    """``reports/<name>/metrics.json``: the test scores, how far the model trained, and a short view of the validation
    score, of the test scores under each of ``eval.settings`` and of the outcomes against each of ``eval.opponents``
    (``outcomes_by_opponent``)."""
    best, validation, settings = selected.entry, selection["validation"], selection.get("settings", {})
    by_opponent = {name: entry["test"]["outcomes"] for name, entry in selection.get("opponents", {}).items()}
    validation_keys = VALIDATION_KEYS if params.select.setting is None else ("setting", *VALIDATION_KEYS)
    return {
        **selected.test.result.scores(),
        **{key: best[key] for key in STEP_KEYS},
        "checkpoint": best["checkpoint"],
        "validation": {key: validation[key] for key in validation_keys if key in validation},
        # Test scores of the selected model under each of eval.settings (the same test episode seeds).
        **({"settings": {name: _short_scores(entry["test"]) for name, entry in settings.items()}} if settings else {}),
        # Outcomes of the selected model against each of eval.opponents (the same test episode seeds).
        **({"outcomes_by_opponent": by_opponent} if by_opponent else {}),
    }


def _short_scores(scores: dict[str, Any]) -> dict[str, Any]:
    """What ``reports/<name>/metrics.json`` keeps of a setting's test scores."""
    return {key: scores[key] for key in ("mean_return", "ci95_low", "ci95_high", "episodes")}


def _plot_learning_curve(layout: Layout, content: ReportContent, best: dict[str, Any]) -> None:
    """``reports/<name>/learning_curve.png``: training's periodic evaluations, every candidate, the selection's test
    score."""
    lessons = (content.summary or {}).get("curriculum", {}).get("started")
    plot_learning_curve(
        layout.learning_curve_tsv,
        content.candidates,
        best,
        content.selection["test"],
        title=f"{content.algo} on {content.env_id} ({content.name})",
        target=layout.learning_curve_png,
        lessons=lessons,
    )


def _plot_elo(params: Params, layout: Layout, content: ReportContent) -> str | None:
    """``reports/<name>/elo.png``, the learner's self-play ELO rating over training (``env.self_play``; removed
    otherwise): its name, or None."""
    target = layout.elo_png
    remove_stale(target)
    tsv = layout.run_dir / "dvclive" / "plots" / "metrics" / "train" / "self_play_elo.tsv"
    if params.env.self_play is None or not tsv.is_file():
        return None
    steps, ratings = read_curve(tsv, "self_play_elo")
    plot_elo_curve(steps, ratings, f"{content.name}: self-play ELO of the learner", target, params.env.self_play.elo_k)
    return target.name


def _plot_settings(layout: Layout, content: ReportContent) -> str | None:
    """``reports/<name>/settings.png`` when ``eval.settings`` are declared (removed otherwise); its name, or None."""
    remove_stale(layout.settings_png)  # a chart of settings no longer declared
    if not content.selection.get("settings"):
        return None
    title = f"{content.algo} on {content.env_id} ({content.name}): test episodes"
    plot_settings(content.selection, title, layout.settings_png)
    return layout.settings_png.name


def _record_video(params: Params, selected: Selected, path: Path) -> Path | None:
    """``eval.video``: the selected model's first test episode (its seed, the evaluation's cap) as a GIF."""
    cap = episode_cap(params.env, params.eval.max_episode_steps)
    policy = policy_from_checkpoint(selected.checkpoint)
    seed = selected.test.seeds.start
    return record_episode(params.env, policy, seed, params.eval.deterministic, max_steps=cap, path=path)


@dataclass(frozen=True)
class Comparison:
    """The comparison with ``select.baseline_run``: both runs (None: no baseline named) and P(X > Y) (None: one seed
    against one seed)."""

    run: RunScores | None = None
    baseline: RunScores | None = None
    improvement: dict[str, Any] | None = None

    @property
    def metrics(self) -> dict[str, Any]:
        """What ``reports/<name>/metrics.json`` adds: ``baseline``, P(X > Y) over seeds, when it was computed."""
        return {} if self.improvement is None else {"baseline": self.improvement}


def _read_baseline(params: Params, root: Path) -> RunScores | None:
    """``select.baseline_run``'s curve and scores (``rlcore.stages.baseline``), read before any test episode runs:
    a bad baseline is refused first. None when no baseline is named."""
    name = params.select.baseline_run
    if name is None:
        return None
    if name == params.name:
        raise RLCoreError(f"select.baseline_run: {name!r} is this run (name); name another run")
    return read_baseline(root, name, needs_scores=run_seeds(params) is not None)


def _compare(run: RunScores, baseline: RunScores | None) -> Comparison:
    """P(this run > the baseline) when either run has seeds."""
    return Comparison() if baseline is None else Comparison(run, baseline, improvement(run, baseline))


def _baseline_lines(
    params: Params, root: Path, what: str, summary: dict[str, Any] | None, comparison: Comparison
) -> list[str] | None:
    """This run's learning curve (with ``train.seeds``, the selected seed's) beside the baseline's (with seeds, its
    exported seed's) in ``reports/<name>/baseline_comparison.png``, and the report's lines on it and on P(X > Y); None
    when no baseline is named."""
    layout = Layout(root, params.name)
    remove_stale(layout.baseline_png)  # a chart of a baseline no longer named
    run, baseline = comparison.run, comparison.baseline
    if run is None or baseline is None:
        return None
    threshold = params.train.target_return
    unit = ((summary or {}).get("step_unit") or "env_steps").replace("_", " ")
    started = " (warm start)" if (summary or {}).get("initialized_from") else ""
    curves = {f"{run.label}{started}": run.curve, baseline.label: baseline.curve}
    title = f"{what}: {params.name} and {baseline.name}"
    reached = plot_baseline_comparison(curves, threshold, unit, title, layout.baseline_png)
    lines = baseline_words(reached, threshold, unit, layout.baseline_png.name)
    if comparison.improvement is not None:
        lines += improvement_words(run, baseline, comparison.improvement)
    return lines
