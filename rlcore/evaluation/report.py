"""Human-readable outputs of a run: the markdown report with its tables, and its PNG plots (the learning curve,
beside a baseline run's, and the test scores under each of ``eval.settings``)."""

from __future__ import annotations

import csv
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rlcore.common.files import write_text
from rlcore.common.numbers import decimals_for, interval_decimals, score, score_with_interval
from rlcore.evaluation.plots import new_figure


def read_curve(tsv: Path, column: str = "mean_return") -> tuple[list[int], list[float]]:
    """(env steps, values) from a dvclive TSV; empty lists if the file does not exist."""
    if not tsv.is_file():
        return [], []
    steps, values = [], []
    with open(tsv, newline="") as handle:
        for row in csv.DictReader(handle, delimiter="\t"):
            steps.append(int(float(row["step"])))
            values.append(float(row[column]))
    return steps, values


def plot_learning_curve(
    tsv: Path,
    candidates: list[dict[str, Any]],
    selected: dict[str, Any],
    test: dict[str, Any] | None,
    title: str,
    target: Path,
    lessons: list[dict[str, Any]] | None = None,
) -> None:
    """Periodic-evaluation returns during training, each checkpoint's validation score (the evaluate stage), the
    selected model's test score with its 95% interval, and where each curriculum lesson started (``lessons``:
    ``[{lesson, step}, ...]``, the train summary's)."""
    steps, values = read_curve(tsv)
    with new_figure(target) as (_, ax):
        if steps:
            ax.plot(steps, values, marker=".", label="periodic evaluation (mean return)")
        ax.errorbar(
            [c["step"] for c in candidates],
            [c["mean_return"] for c in candidates],
            yerr=[c["std_return"] for c in candidates],
            fmt="o",
            capsize=3,
            alpha=0.8,
            label="validation, evaluate stage (mean ± std)",
        )
        ax.scatter(
            [selected["step"]],
            [selected["mean_return"]],
            s=160,
            facecolors="none",
            edgecolors="red",
            linewidths=2,
            label="selected",
            zorder=5,
        )
        if test is not None:
            mean = test["mean_return"]
            ax.errorbar(
                [selected["step"]],
                [mean],
                yerr=[[mean - test["ci95_low"]], [test["ci95_high"] - mean]],
                fmt="D",
                color="black",
                capsize=5,
                label=f"test, selected model (mean, 95% CI; {test['episodes']} episodes)",
                zorder=6,
            )
        for number, start in enumerate(lessons or []):
            ax.axvline(
                start["step"], color="gray", linestyle="--", linewidth=1, label="lesson starts" if number == 0 else None
            )
            ax.annotate(
                f" {start['lesson']}", (start["step"], 1.0), xycoords=("data", "axes fraction"), va="top", fontsize=7
            )
        ax.set_xlabel(_unit(selected))
        ax.set_ylabel("episode return")
        ax.set_title(title)
        ax.grid(alpha=0.3)
        ax.legend(loc="lower right", fontsize=8)


def first_reaching(steps: list[int], values: list[float], threshold: float | None) -> int | None:
    """The first step whose value is at least ``threshold`` (None: never, or no threshold)."""
    if threshold is None:
        return None
    return next((step for step, value in zip(steps, values, strict=True) if value >= threshold), None)


def plot_baseline_comparison(
    curves: dict[str, Path], threshold: float | None, unit: str, title: str, target: Path
) -> dict[str, int | None]:
    """Periodic-evaluation returns of several runs in one chart (``curves``: label -> dvclive TSV), with
    ``threshold`` (``train.target_return``) as a line; returns each run's first step at or above it."""
    reached: dict[str, int | None] = {}
    with new_figure(target) as (_, ax):
        for label, tsv in curves.items():
            steps, values = read_curve(tsv)
            reached[label] = first_reaching(steps, values, threshold)
            ax.plot(steps, values, marker=".", label=label)
        if threshold is not None:
            ax.axhline(threshold, color="gray", linestyle="--", linewidth=1, label=f"target {threshold:g}")
        ax.set_xlim(left=0)
        ax.set_xlabel(unit)
        ax.set_ylabel("periodic evaluation, mean return")
        ax.set_title(title)
        ax.grid(alpha=0.3)
        ax.legend(loc="lower right", fontsize=8)
    return reached


def baseline_words(reached: dict[str, int | None], threshold: float | None, unit: str, plot: str) -> list[str]:
    """The report's lines on the comparison with ``select.baseline_run``."""
    lines = ["Beside the baseline run (`select.baseline_run`), periodic evaluations of both:", ""]
    if threshold is not None:
        parts = [
            f"`{label}` {'never' if step is None else f'after {step:,} {unit}'}" for label, step in reached.items()
        ]
        lines += [f"First periodic evaluation at or above {threshold:g}: " + "; ".join(parts) + ".", ""]
    return [*lines, f"![learning curves beside the baseline]({plot})", ""]


@dataclass(frozen=True)
class ReportContent:
    """What ``reports/<name>/report.md`` is written from: the run, its selection record and candidates, the train
    summary (None when absent), and the names of the pictures beside the report (None: not drawn)."""

    name: str
    env_id: str
    algo: str
    selection: dict[str, Any]
    candidates: list[dict[str, Any]]
    summary: dict[str, Any] | None
    plot_name: str
    video_name: str | None = None
    settings_plot: str | None = None
    baseline: list[str] | None = None
    """The report's lines on ``select.baseline_run`` (:func:`baseline_words`), or None when no baseline is named."""
    seeds: list[str] | None = None
    """With ``train.seeds``: the report's lines on the seeds and their aggregate (:func:`seeds_words`)."""
    elo_plot: str | None = None
    """With ``env.self_play``: the learner's ELO curve beside the report (``rlcore.evaluation.elo``)."""


def write_report(target: Path, content: ReportContent) -> None:
    """``reports/<name>/report.md``: the test score with its interval, the validation score selection used (and which
    is which), how training went (and when each curriculum lesson started), the learning curve (and ``video_name``,
    a video of the first test episode, when recorded), the scores under ``eval.settings`` (a table and
    ``settings_plot``), the comparison with a baseline run (``baseline``) and every candidate's validation scores."""
    selection, summary = content.selection, content.summary
    # Several seeds: the aggregate over them leads, then the selected seed's scores.
    lines = [f"# Run `{content.name}`: {content.algo} on {content.env_id}", "", *(content.seeds or [])]
    lines += _score_lines(selection)
    if summary:
        lines += _training_lines(summary)
    lines += [f"![learning curve]({content.plot_name})", ""]
    if content.elo_plot:
        lines += [
            "Self-play: the learner's ELO rating against its snapshots over training (`env.self_play`, K "
            "`env.self_play.elo_k` as the legend says; games against the latest policy and fixed opponents unrated):",
            "",
            f"![self-play ELO]({content.elo_plot})",
            "",
        ]
    if summary and summary.get("initialized_from"):
        source = summary["initialized_from"]
        lines += [f"Initialized from `{source['path']}` (sha256 `{source['sha256'][:16]}…`, `train.init_from`).", ""]
    lines += content.baseline or []
    if content.video_name:
        lines += [f"The selected model's first test episode: ![first test episode]({content.video_name})", ""]
    if selection.get("settings"):
        lines += [
            "Scores under `eval.settings` (each setting's parameters on top of the env's defaults; the same test "
            "and validation episode seeds as the training distribution):",
            "",
            settings_table(selection),
            "",
        ]
        if content.settings_plot:
            lines += [f"![scores under eval.settings]({content.settings_plot})", ""]
    lines += [
        "Validation scores of every checkpoint:",
        "",
        candidates_table(content.candidates, selection["checkpoint"]),
        "",
        f"Exported model: `export/{content.name}/policy.onnx`, `policy.pt2`, card `model_card.json` "
        "(after the export stage).",
        "",
    ]
    write_text(target, "\n".join(lines))


def seeds_words(
    across: dict[str, Any], per_seed: dict[str, dict[str, Any]], best_seed: int, curves_plot: str, profile_plot: str
) -> list[str]:
    """The head of the report of a run of several seeds (``train.seeds``): the aggregate of the seeds' test mean
    returns first (``rlcore.evaluation.aggregate``: IQM, mean, median, optimality gap, 95% stratified bootstrap
    intervals), each seed's validation and test score, their learning curves with the IQM band and the performance
    profile; what follows in the report is ``best_seed``'s (the exported one)."""
    iqm, low, high = score_with_interval(across["iqm"], *across["iqm_ci95"])
    mean, mean_low, mean_high = score_with_interval(across["mean"], *across["mean_ci95"])
    median, median_low, median_high = score_with_interval(across["median"], *across["median_ci95"])
    gap = ""
    if across.get("optimality_gap") is not None:
        value, gap_low, gap_high = score_with_interval(across["optimality_gap"], *across["optimality_gap_ci95"])
        gap = f", optimality gap to {across['target']:g}: {value} [{gap_low}, {gap_high}]"
    lines = [
        f"**Test score over {across['num_runs']} seeds: IQM {iqm}** mean return, 95% CI [{low}, {high}] "
        f"(stratified bootstrap over runs, {across['bootstrap']['resamples']} resamples; each seed's selected "
        f"checkpoint on the test episodes); mean {mean} [{mean_low}, {mean_high}], median {median} "
        f"[{median_low}, {median_high}]{gap}.",
        "",
        "| seed | selected checkpoint | validation | test mean return | test 95% CI |",
        "|---|---|---|---|---|",
    ]
    for seed, record in per_seed.items():
        test, validation = record["test"], record["validation"]
        test_mean, test_low, test_high = score_with_interval(test["mean_return"], test["ci95_low"], test["ci95_high"])
        lines.append(
            f"| {seed} | `{record['checkpoint']}` | {validation['metric']} {score(validation['value'])} | "
            f"{test_mean} | [{test_low}, {test_high}] |"
        )
    return [
        *lines,
        "",
        f"![every seed's learning curve and their IQM]({curves_plot})",
        "",
        f"![performance profile of the seeds' test scores]({profile_plot})",
        "",
        f"## The selected seed: {best_seed}",
        "",
        f"Seed {best_seed}'s selected checkpoint is best on validation among the seeds: it is the exported model. "
        f"What follows is seed {best_seed}'s (`runs/<name>/seed_{best_seed}/`).",
        "",
    ]


def _rates(of: dict[str, Any]) -> str:
    """Win, draw, loss and win-or-draw rates of a set of games with their 95% Wilson intervals (``game_outcomes``)."""
    if not of["episodes"]:
        return "no episodes"
    parts = [
        f"{name.replace('_or_', ' or ')} {of[f'{name}_rate']:.2f} [{of[f'{name}_ci95'][0]:.2f}, "
        f"{of[f'{name}_ci95'][1]:.2f}]"
        for name in ("win", "draw", "loss", "win_or_draw")
    ]
    return ", ".join(parts) + f" ({of['episodes']} episodes)"


def _outcome_lines(outcomes: dict[str, Any] | None, opponents: dict[str, Any] | None) -> list[str]:
    """A two-player game's test outcomes against its opponent, and a table of those against each of
    ``eval.opponents`` (``opponents``: name -> ``{opponent, test}``): win/draw/loss rates, 95% Wilson intervals, by
    seat."""
    if outcomes is None:
        return []
    lines = [
        f"**Against the opponent** (rates, 95% Wilson intervals): {_rates(outcomes)}; moving first: "
        f"{_rates(outcomes['first'])}; moving second: {_rates(outcomes['second'])}.",
        "",
    ]
    if opponents:
        lines += [
            "Against each of `eval.opponents`, on the same test episodes (rates, 95% Wilson intervals):",
            "",
            "| opponent | import path | all games | moving first | moving second |",
            "|---|---|---|---|---|",
        ]
        for name, entry in opponents.items():
            of = entry["test"]["outcomes"]
            lines.append(
                f"| {name} | `{entry['opponent']}` | {_rates(of)} | {_rates(of['first'])} | {_rates(of['second'])} |"
            )
        lines.append("")
    return lines


def _score_lines(selection: dict[str, Any]) -> list[str]:
    """The report's head: the test score, the validation score selection used, and which checkpoint and why."""
    test, validation = selection["test"], selection["validation"]
    places = interval_decimals(test["mean_return"], test["ci95_low"], test["ci95_high"])
    mean, low, high, iqm = (score(test[key], places) for key in ("mean_return", "ci95_low", "ci95_high", "iqm_return"))
    valid_mean, valid_low, valid_high = score_with_interval(
        validation["mean_return"], validation["ci95_low"], validation["ci95_high"]
    )
    return [
        f"**Test score: {mean}** mean return, 95% CI [{low}, {high}], IQM {iqm}, over "
        f"{test['episodes']} test episodes (std {score(test['std_return'])}, min {score(test['min_return'])}, max "
        f"{score(test['max_return'])}; {test['truncated']} truncated).",
        "",
        *_outcome_lines(test.get("outcomes"), selection.get("opponents")),
        f"**Validation score: {score(validation['value'])}** {validation['metric']}{_setting_words(validation)} "
        f"(mean return {valid_mean}, 95% CI [{valid_low}, {valid_high}], "
        f"over {validation['episodes']} validation episodes).",
        "",
        "The checkpoint was selected on the validation episodes and is reported on test episodes that neither "
        "training, its periodic evaluations nor selection ran (the best of several checkpoints, scored on the "
        "episodes that chose it, would look better than it is).",
        "",
        f"**Selected:** `{selection['checkpoint']}`, after {selection['step']:,} {_unit(selection)}. "
        f"Why: {selection['reason']}.",
        "",
    ]


def _training_lines(summary: dict[str, Any]) -> list[str]:
    """How training went (the train summary): its length and speed, stop reason, warnings and curriculum lessons."""
    lines = [
        f"Training: {summary[summary['step_unit']]:,} {_unit(summary)} in {summary['wall_seconds']:.1f} s "
        f"({summary[summary['step_unit'] + '_per_second']:,.0f} {_unit(summary)}/s); "
        f"stop reason: {summary['stop_reason']}.",
        "",
    ]
    lines += [f"**Warning:** {warning}." for warning in summary.get("warnings", [])]
    if summary.get("warnings"):
        lines.append("")
    if summary.get("curriculum"):
        lines += ["Curriculum lessons (`env.curriculum`), when each started:", "", lessons_table(summary), ""]
    return lines


def _setting_words(validation: dict[str, Any]) -> str:
    setting = validation.get("setting")
    if setting is None:
        return ""
    return ", mean over eval.settings," if setting == "mean" else f" under setting `{setting}`"


def lessons_table(summary: dict[str, Any]) -> str:
    """When each curriculum lesson started (the train summary's ``curriculum.started``), as a markdown table."""
    started = summary["curriculum"]["started"]
    unit = _unit(summary)
    rows = [f"| lesson | started at ({unit}) |", "|---|---:|"]
    rows += [f"| `{entry['lesson']}` | {entry['step']:,} |" for entry in started]
    return "\n".join(rows)


def _setting_rows(selection: dict[str, Any]) -> list[tuple[str, str, dict[str, Any], dict[str, Any] | None]]:
    """(name, parameters, test scores, validation scores) of the training distribution, then of each setting."""
    validation = selection["validation"]  # the training distribution's only when selection read it there
    rows: list[tuple[str, str, dict[str, Any], dict[str, Any] | None]] = [
        (
            "training distribution",
            "env.parameters",
            selection["test"],
            validation if validation.get("setting") is None else None,
        )
    ]
    for name, entry in selection.get("settings", {}).items():
        parameters = ", ".join(f"{key}: {value}" for key, value in entry["parameters"].items()) or "env defaults"
        rows.append((name, parameters, entry["test"], entry["validation"]))
    return rows


def settings_table(selection: dict[str, Any]) -> str:
    """The selected model's test (and validation) mean return under the training distribution and each setting."""
    rows = [
        "| setting | parameters | test mean return | test 95% CI | episodes | validation mean |",
        "|---|---|---:|---|---:|---:|",
    ]
    for name, parameters, test, validation in _setting_rows(selection):
        valid = score(validation["mean_return"]) if validation and "mean_return" in validation else ""
        mean, low, high = score_with_interval(test["mean_return"], test["ci95_low"], test["ci95_high"])
        rows.append(f"| {name} | {parameters} | {mean} | [{low}, {high}] | {test['episodes']} | {valid} |")
    return "\n".join(rows)


def plot_settings(selection: dict[str, Any], title: str, target: Path) -> None:
    """A bar chart of the selected model's test mean return under the training distribution and each setting, with
    95% bootstrap intervals."""
    rows = _setting_rows(selection)
    names = [name for name, *_ in rows]
    means = [test["mean_return"] for _, _, test, _ in rows]
    errors = [
        [m - test["ci95_low"] for m, (_, _, test, _) in zip(means, rows, strict=True)],
        [test["ci95_high"] - m for m, (_, _, test, _) in zip(means, rows, strict=True)],
    ]
    with new_figure(target, figsize=(max(4.0, 1.3 * len(rows) + 2), 3.6)) as (_, ax):
        ax.bar(range(len(rows)), means, yerr=errors, capsize=4, color=["#4c72b0"] + ["#dd8452"] * (len(rows) - 1))
        ax.set_xticks(range(len(rows)), names, rotation=15, ha="right", fontsize=8)
        ax.set_ylabel("test mean return (95% CI)")
        ax.set_title(title, fontsize=9)
        ax.grid(axis="y", alpha=0.3)


def candidates_table(candidates: list[dict[str, Any]], selected: str) -> str:
    """Every candidate's validation scores as a markdown table (pandas), oldest first, the selected one marked."""
    import pandas as pd

    ordered = sorted(candidates, key=lambda c: c["step"])
    unit = _unit(ordered[0]) if ordered else "env steps"
    # A row's mean, interval and IQM share its interval's decimals; a row without an interval, its mean's.
    decimals = [
        interval_decimals(c["mean_return"], c["ci95_low"], c["ci95_high"])
        if "ci95_low" in c
        else decimals_for(c["mean_return"])
        for c in ordered
    ]
    frame = pd.DataFrame(
        {
            "checkpoint": [
                f"`{Path(c['checkpoint']).name}`" + (" **(selected)**" if c["checkpoint"] == selected else "")
                for c in ordered
            ],
            unit: [f"{c['step']:,}" for c in ordered],
            "mean": [score(c["mean_return"], places) for c, places in zip(ordered, decimals, strict=True)],
            "95% CI": [
                f"[{score(c['ci95_low'], places)}, {score(c['ci95_high'], places)}]" if "ci95_low" in c else ""
                for c, places in zip(ordered, decimals, strict=True)
            ],
            "IQM": [
                score(c.get("iqm_return", float("nan")), places) for c, places in zip(ordered, decimals, strict=True)
            ],
            "std": [score(c["std_return"]) for c in ordered],
            "min": [score(c["min_return"]) for c in ordered],
            "max": [score(c["max_return"]) for c in ordered],
        }
    )
    # Scores are strings already (rlcore.common.numbers): to_markdown keeps them as they are.
    return str(frame.to_markdown(index=False, disable_numparse=True, colalign=("left", "right", *["right"] * 6)))


def _unit(record: dict[str, Any]) -> str:
    """``env steps`` or ``gradient steps``: what a record's step counts."""
    return str(record.get("step_unit", "env_steps")).replace("_", " ")
