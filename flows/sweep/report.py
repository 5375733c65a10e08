"""A sweep's results under ``reports/sweep/``: best params, a table of all trials, plots, a summary.

| file | what |
|---|---|
| ``best_params.yaml`` | the best trial's values as a params fragment (``rlcore sweep --apply`` merges it) |
| ``trials.parquet``, ``trials.csv`` | every trial: number, state, value, test value, duration, params, env steps, |
|   | and each run's (seed's) validation and test score |
| ``history.png``, ``importances.png``, ``parallel_coordinates.png`` | Optuna's matplotlib plots |
| ``summary.md`` | the counts, the best trial (value and test score), how to reproduce it, what pruning saved |

A trial's value is the validation score of its selected checkpoints (what selection used); the test score
(``test_value``, the selected models on test episodes) is reported beside it and never optimized.

The trials table is Optuna's ``study.trials_dataframe()`` (pandas), its params columns decoded to params
values, plus the user attributes rlcore records (env steps, worker PID, folder, error).
"""

from __future__ import annotations

import io
import math
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Any

import optuna
import yaml
from optuna.exceptions import ExperimentalWarning
from optuna.trial import FrozenTrial, TrialState

from flows.sweep.plan import REPORT_PLOTS
from flows.sweep.search import decode
from flows.sweep.trial import plan_runs
from rlcore.common.files import atomic_path, remove_stale, write_text
from rlcore.config.sweep import SearchDimension, SweepConfig, nested, yaml_text
from rlcore.evaluation.plots import pyplot, save_figure
from rlcore.params import validate_params

if TYPE_CHECKING:
    import pandas as pd

    from flows.sweep.plan import SweepPlan

COLUMNS = ["number", "state", "value", "duration_seconds", "datetime_start", "datetime_complete"]
"""The table's first columns; then each searched key, then :data:`USER_ATTRS`."""
USER_ATTRS: dict[str, str | None] = {
    "test_value": "Float64",
    "env_steps": "Int64",
    "counterfactual_env_steps": "Int64",
    "worker_pid": "Int64",
    "folder": None,
    "error": None,
}
"""The user attributes of a trial the table shows, with their pandas dtype (nullable ints)."""


def trials_table(study: optuna.Study, sweep: SweepConfig, runs: list[str] | None = None) -> pd.DataFrame:
    """One row per trial, params by their dotted key (categorical values as YAML text when mixed or nested), and
    for each of ``runs`` (a trial's run labels: ``seed_<s>``, ``<env>/seed_<s>``) the run's validation score
    (``score <run>``, what the value aggregates) and test score (``test_score <run>``); empty where a run did not
    finish (a pruned or failed trial)."""
    import pandas as pd

    attrs = ("number", "state", "value", "datetime_start", "datetime_complete", "duration", "params", "user_attrs")
    frame = study.trials_dataframe(attrs=attrs, multi_index=True)
    if frame.empty:
        return pd.DataFrame(columns=COLUMNS[:4])

    def column(group: str, key: str = "") -> pd.Series:
        if (group, key) in frame.columns:
            return frame[(group, key)]
        return pd.Series(None, index=frame.index, dtype=object)

    table = pd.DataFrame(
        {
            "number": column("number"),
            "state": column("state"),
            "value": column("value"),
            "duration_seconds": pd.to_timedelta(column("duration")).dt.total_seconds().round(3),
            "datetime_start": column("datetime_start").map(_iso),
            "datetime_complete": column("datetime_complete").map(_iso),
        }
    )
    for key, dim in sweep.space.items():
        table[key] = column("params", key).map(lambda stored, dim=dim: _cell(dim, stored))
    for key, dtype in USER_ATTRS.items():
        table[key] = column("user_attrs", key)
        if dtype is not None:
            table[key] = table[key].astype(dtype)
    for attr, prefix in (("scores", "score"), ("test_scores", "test_score")):
        per_run = column("user_attrs", attr)
        for k, label in enumerate(runs or []):
            cells = per_run.map(lambda scores, k=k: scores[k] if isinstance(scores, list) and k < len(scores) else None)
            table[f"{prefix} {label}"] = cells.astype("Float64")
    return table


def _number(value: Any) -> str:
    """A score for the summary, ``-`` where there is none (e.g. a trial recorded before test scores existed)."""
    return "-" if value is None or _missing(value) else f"{float(value):.6g}"


def _iso(moment: Any) -> str | None:
    return None if _missing(moment) else moment.isoformat()


def _missing(value: Any) -> bool:
    import pandas as pd

    return value is None or value is pd.NaT or value is pd.NA or (isinstance(value, float) and math.isnan(value))


def _cell(dim: SearchDimension, stored: Any) -> Any:
    """A stored Optuna param as the table shows it: the params value, or its YAML text if not a plain scalar."""
    if _missing(stored):
        return None
    try:
        value = dim.decode(stored)
    except KeyError:
        return stored
    mixed = dim.type == "categorical" and len({type(c) for c in dim.choices or []}) > 1
    return yaml_text(value) if mixed or isinstance(value, list | dict) else value


def records(table: pd.DataFrame) -> list[dict[str, Any]]:
    """The table as plain rows (Python scalars, None for missing): for Prefect's table artifact."""
    return table.astype(object).where(table.notna(), None).to_dict("records")


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
    table = trials_table(study, sweep, [run.label for run in plan_runs(validate_params(plan.tree, plan.params_file))])
    _write_table(table, out)
    counts = {state.name.lower(): sum(t.state == state for t in trials) for state in TrialState}
    complete = [t for t in trials if t.state == TrialState.COMPLETE]
    best = study.best_trial if complete else None
    best_values = decode(sweep, best.params) if best else {}
    if best is not None:
        header = (
            f"# Best trial {best.number} of study {plan.study_name}: {sweep.metric} {best.value:.6g} on validation "
            f"episodes ({sweep.direction}); test {_number(best.user_attrs.get('test_value'))}.\n"
            "# Merge into params.yaml with `rlcore sweep --apply`.\n"
        )
        write_text(
            out / "best_params.yaml",
            header + yaml.safe_dump(nested(best_values), sort_keys=False, default_flow_style=None),
        )
    else:
        remove_stale(out / "best_params.yaml")
    notes = _write_plots(study, out)
    savings = pruning_savings(trials)
    finished = counts["complete"] + counts["pruned"]
    line = (
        f"study {plan.study_name}: {finished} finished ({counts['complete']} complete, {counts['pruned']} pruned, "
        f"{counts['fail']} failed)"
        + (
            f", best {sweep.metric} {best.value:.6g} on validation, test {_number(best.user_attrs.get('test_value'))} "
            f"(trial {best.number})"
            if best
            else ", no complete trial"
        )
        + f" -> {(out / 'summary.md').relative_to(plan.root).as_posix()}"
    )
    write_text(out / "summary.md", _summary(plan, counts, best, best_values, table, savings, notes))
    return {
        "study": plan.study_name,
        "storage": plan.storage,
        "counts": counts,
        "best": {
            "number": best.number,
            "value": best.value,
            "test_value": best.user_attrs.get("test_value"),
            "params": best_values,
        }
        if best
        else None,
        "savings": savings,
        "reports": str(out),
        "rows": records(table),
        "line": line,
    }


def _write_table(table: pd.DataFrame, out: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    with atomic_path(out / "trials.parquet") as tmp:
        pq.write_table(pa.Table.from_pandas(table, preserve_index=False), tmp)
    text = io.StringIO()
    table.to_csv(text, index=False, lineterminator="\n")
    write_text(out / "trials.csv", text.getvalue())


def _write_plots(study: optuna.Study, out: Path) -> list[str]:
    """Optuna's matplotlib plots as PNG (no plotly needed); returns notes on plots that could not be drawn."""
    plt = pyplot()
    from optuna.visualization import matplotlib as plots

    notes = []
    for name, function in REPORT_PLOTS.items():
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", ExperimentalWarning)
                warnings.simplefilter("ignore", UserWarning)
                axes = getattr(plots, function)(study)
            figure = axes.figure
            figure.set_size_inches(8, 5)
            save_figure(figure, out / name, dpi=100, bbox_inches="tight")
            plt.close(figure)
        except (ValueError, RuntimeError, ZeroDivisionError, IndexError) as exc:
            remove_stale(out / name)
            notes.append(f"{name}: not drawn ({exc or type(exc).__name__})")
    plt.close("all")
    return notes


def _summary(
    plan: SweepPlan,
    counts: dict[str, int],
    best: FrozenTrial | None,
    best_values: dict[str, Any],
    table: pd.DataFrame,
    savings: dict[str, Any],
    notes: list[str],
) -> str:
    sweep = plan.sweep
    seeds = sweep.seeds if sweep.seeds is not None else [plan.tree.get("seed", 0)]
    runs = f"{sweep.aggregate} over seeds {', '.join(map(str, seeds))}"
    if sweep.envs:
        runs += " and envs " + ", ".join(f"{e.id} (normalized {e.baseline:g} -> {e.target:g})" for e in sweep.envs)
    complete = table[table["state"] == "COMPLETE"]
    durations = complete["duration_seconds"][complete["duration_seconds"] > 0]
    lines = [
        f"# Sweep `{plan.study_name}`",
        "",
        "| | |",
        "|---|---|",
        f"| objective | {sweep.direction} `{sweep.metric}` of the selected checkpoint on the validation episodes, "
        f"{runs} (the test score is reported beside it, never optimized) |",
        f"| search | {', '.join(f'`{k}`' for k in sweep.space)}; sampler `{sweep.sampler}`, pruner `{sweep.pruner}` |",
        f"| trials | {counts['complete']} complete, {counts['pruned']} pruned, {counts['fail']} failed "
        f"(requested: {plan.n_trials} finished) |",
        f"| median complete trial | {durations.median():.1f} s |" if len(durations) else "| median trial | - |",
        f"| pruning | trained {savings['env_steps']:,} env steps instead of at most "
        f"{savings['unpruned_env_steps']:,}: {100 * savings['saved_share']:.0f}% saved |",
        f"| storage | `{plan.storage}` |",
        f"| git revision | `{plan.git_revision or '-'}` |",
        "",
    ]
    if best is not None:
        test = _number(best.user_attrs.get("test_value"))
        lines += [
            f"## Best: trial {best.number}, {sweep.metric} {best.value:.6g} (validation), test {test}",
            "",
            f"The value is {sweep.metric} on the validation episodes that chose each run's checkpoint; the test "
            f"score ({test}) is the same selected models on test episodes nothing else ran.",
            "",
            "```yaml",
            yaml.safe_dump(nested(best_values), sort_keys=False, default_flow_style=None).rstrip(),
            "```",
            "",
            f"Folder: `{best.user_attrs.get('folder')}`. Reproduce: `{best.user_attrs.get('command')}`. "
            "Apply to params.yaml: `rlcore sweep --apply`.",
            "",
        ]
    ranked = records(complete.sort_values("value", ascending=sweep.direction != "maximize", kind="stable").head(10))
    if ranked:
        keys = list(sweep.space)
        lines += [
            "## Top trials",
            "",
            "| trial | value (validation) | test | " + " | ".join(keys) + " | env steps | seconds |",
        ]
        lines.append("|" + "---|" * (len(keys) + 5))
        for r in ranked:
            cells = [f"{r[k]:.4g}" if isinstance(r[k], float) else str(r[k]) for k in keys]
            test_cell = _number(r.get("test_value"))
            lines.append(
                f"| {r['number']} | {r['value']:.6g} | {test_cell} | " + " | ".join(cells) + f" | {r['env_steps']} | "
                f"{r['duration_seconds']} |"
            )
        lines.append("")
    lines += [f"![{name}]({name})" for name in REPORT_PLOTS if (plan.reports / name).is_file()]
    lines += [f"- {note}" for note in notes]
    return "\n".join(lines) + "\n"
