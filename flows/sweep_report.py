"""A sweep's results under ``reports/sweep/``: best params, a table of all trials, plots, a summary.

| file | what |
|---|---|
| ``best_params.yaml`` | the best trial's values as a params fragment (``rlcore sweep --apply`` merges it) |
| ``trials.parquet``, ``trials.csv`` | every trial: number, state, value, duration, its params, env steps, folder |
| ``history.png``, ``importances.png``, ``parallel_coordinates.png`` | Optuna's matplotlib plots |
| ``summary.md`` | the study, the counts, the best trial and how to reproduce it, pruning's savings |
"""

from __future__ import annotations

import csv
import io
import statistics
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Any

import optuna
import yaml
from optuna.exceptions import ExperimentalWarning
from optuna.trial import FrozenTrial, TrialState

from flows.sweep_study import decode
from rlcore.io import atomic_path, write_text
from rlcore.sweep_config import SweepConfig, nested, yaml_text

if TYPE_CHECKING:
    from flows.sweep_run import SweepPlan

PLOTS = {
    "history.png": "plot_optimization_history",
    "importances.png": "plot_param_importances",
    "parallel_coordinates.png": "plot_parallel_coordinate",
}


def trial_rows(trials: list[FrozenTrial], sweep: SweepConfig) -> list[dict[str, Any]]:
    """One row per trial, params by their dotted key (categorical values as YAML text when mixed)."""
    rows = []
    for trial in trials:
        values = decode(sweep, trial.params)
        duration = trial.duration.total_seconds() if trial.duration is not None else None
        row: dict[str, Any] = {
            "number": trial.number,
            "state": trial.state.name,
            "value": trial.value,
            "duration_seconds": round(duration, 3) if duration is not None else None,
            "datetime_start": trial.datetime_start.isoformat() if trial.datetime_start else None,
            "datetime_complete": trial.datetime_complete.isoformat() if trial.datetime_complete else None,
        }
        for key, dim in sweep.space.items():
            value = values.get(key)
            mixed = dim.type == "categorical" and len({type(c) for c in dim.choices or []}) > 1
            row[key] = yaml_text(value) if value is not None and (mixed or isinstance(value, list | dict)) else value
        attrs = trial.user_attrs
        for key in ("env_steps", "counterfactual_env_steps", "worker_pid", "folder", "error"):
            row[key] = attrs.get(key)
        rows.append(row)
    return rows


def pruning_savings(trials: list[FrozenTrial]) -> dict[str, Any]:
    """Env steps trained vs. what the same trials would have trained unpruned (pruned runs at their full budget)."""
    finished = [t for t in trials if t.state in (TrialState.COMPLETE, TrialState.PRUNED)]
    trained = sum(int(t.user_attrs.get("env_steps", 0)) for t in finished)
    unpruned = sum(int(t.user_attrs.get("counterfactual_env_steps", 0)) for t in finished)
    share = 1.0 - trained / unpruned if unpruned else 0.0
    return {"env_steps": trained, "unpruned_env_steps": unpruned, "saved_share": round(share, 4)}


def write_reports(study: optuna.Study, plan: SweepPlan) -> dict[str, Any]:
    """Write every file of ``reports/sweep/``; returns the counts, the best trial and a one-line summary."""
    sweep, out = plan.sweep, plan.reports
    out.mkdir(parents=True, exist_ok=True)
    trials = study.get_trials(deepcopy=False)
    rows = trial_rows(trials, sweep)
    _write_table(rows, out)
    counts = {state.name.lower(): sum(t.state == state for t in trials) for state in TrialState}
    complete = [t for t in trials if t.state == TrialState.COMPLETE]
    best = study.best_trial if complete else None
    best_values = decode(sweep, best.params) if best else {}
    if best is not None:
        header = (
            f"# Best trial {best.number} of study {plan.study_name}: {sweep.metric} {best.value:.6g} "
            f"({sweep.direction}).\n# Merge into params.yaml with `rlcore sweep --apply`.\n"
        )
        write_text(
            out / "best_params.yaml",
            header + yaml.safe_dump(nested(best_values), sort_keys=False, default_flow_style=None),
        )
    else:
        (out / "best_params.yaml").unlink(missing_ok=True)
    notes = _write_plots(study, out)
    savings = pruning_savings(trials)
    finished = counts["complete"] + counts["pruned"]
    line = (
        f"study {plan.study_name}: {finished} finished ({counts['complete']} complete, {counts['pruned']} pruned, "
        f"{counts['fail']} failed)"
        + (f", best {sweep.metric} {best.value:.6g} (trial {best.number})" if best else ", no complete trial")
        + f" -> {(out / 'summary.md').relative_to(plan.root).as_posix()}"
    )
    write_text(out / "summary.md", _summary(plan, counts, best, best_values, rows, savings, notes))
    return {
        "study": plan.study_name,
        "storage": plan.storage,
        "counts": counts,
        "best": {"number": best.number, "value": best.value, "params": best_values} if best else None,
        "savings": savings,
        "reports": str(out),
        "rows": rows,
        "line": line,
    }


def _write_table(rows: list[dict[str, Any]], out: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    columns = list(rows[0]) if rows else ["number", "state", "value", "duration_seconds"]
    table = pa.Table.from_pylist(rows) if rows else pa.table({c: pa.array([], pa.null()) for c in columns})
    with atomic_path(out / "trials.parquet") as tmp:
        pq.write_table(table, tmp)
    text = io.StringIO()
    writer = csv.DictWriter(text, fieldnames=columns, lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    write_text(out / "trials.csv", text.getvalue())


def _write_plots(study: optuna.Study, out: Path) -> list[str]:
    """Optuna's matplotlib plots as PNG (no plotly needed); returns notes on plots that could not be drawn."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from optuna.visualization import matplotlib as plots

    notes = []
    for name, function in PLOTS.items():
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", ExperimentalWarning)
                warnings.simplefilter("ignore", UserWarning)
                axes = getattr(plots, function)(study)
            figure = axes.figure
            figure.set_size_inches(8, 5)
            with atomic_path(out / name) as tmp:
                figure.savefig(tmp, format="png", dpi=100, bbox_inches="tight")
            plt.close(figure)
        except (ValueError, RuntimeError, ZeroDivisionError, IndexError) as exc:
            (out / name).unlink(missing_ok=True)
            notes.append(f"{name}: not drawn ({exc or type(exc).__name__})")
    plt.close("all")
    return notes


def _summary(
    plan: SweepPlan,
    counts: dict[str, int],
    best: FrozenTrial | None,
    best_values: dict[str, Any],
    rows: list[dict[str, Any]],
    savings: dict[str, Any],
    notes: list[str],
) -> str:
    sweep = plan.sweep
    seeds = sweep.seeds if sweep.seeds is not None else [plan.tree.get("seed", 0)]
    runs = f"{sweep.aggregate} over seeds {', '.join(map(str, seeds))}"
    if sweep.envs:
        runs += " and envs " + ", ".join(f"{e.id} (normalized {e.baseline:g} -> {e.target:g})" for e in sweep.envs)
    durations = [r["duration_seconds"] for r in rows if r["state"] == "COMPLETE" and r["duration_seconds"]]
    lines = [
        f"# Sweep `{plan.study_name}`",
        "",
        "| | |",
        "|---|---|",
        f"| objective | {sweep.direction} `{sweep.metric}` of the selected checkpoint, {runs} |",
        f"| search | {', '.join(f'`{k}`' for k in sweep.space)}; sampler `{sweep.sampler}`, pruner `{sweep.pruner}` |",
        f"| trials | {counts['complete']} complete, {counts['pruned']} pruned, {counts['fail']} failed "
        f"(requested: {plan.n_trials} finished) |",
        f"| median complete trial | {statistics.median(durations):.1f} s |" if durations else "| median trial | - |",
        f"| pruning | trained {savings['env_steps']:,} env steps instead of at most "
        f"{savings['unpruned_env_steps']:,}: {100 * savings['saved_share']:.0f}% saved |",
        f"| storage | `{plan.storage}` |",
        f"| git revision | `{plan.git_revision or '-'}` |",
        "",
    ]
    if best is not None:
        lines += [
            f"## Best: trial {best.number}, {sweep.metric} {best.value:.6g}",
            "",
            "```yaml",
            yaml.safe_dump(nested(best_values), sort_keys=False, default_flow_style=None).rstrip(),
            "```",
            "",
            f"Folder: `{best.user_attrs.get('folder')}`. Reproduce: `{best.user_attrs.get('command')}`. "
            "Apply to params.yaml: `rlcore sweep --apply`.",
            "",
        ]
    ranked = sorted(
        (r for r in rows if r["state"] == "COMPLETE"),
        key=lambda r: r["value"],
        reverse=sweep.direction == "maximize",
    )[:10]
    if ranked:
        keys = list(sweep.space)
        lines += ["## Top trials", "", "| trial | value | " + " | ".join(keys) + " | env steps | seconds |"]
        lines.append("|" + "---|" * (len(keys) + 4))
        for r in ranked:
            cells = [f"{r[k]:.4g}" if isinstance(r[k], float) else str(r[k]) for k in keys]
            lines.append(
                f"| {r['number']} | {r['value']:.6g} | " + " | ".join(cells) + f" | {r['env_steps']} | "
                f"{r['duration_seconds']} |"
            )
        lines.append("")
    lines += [f"![{name}]({name})" for name in PLOTS if (plan.reports / name).is_file()]
    lines += [f"- {note}" for note in notes]
    return "\n".join(lines) + "\n"
