"""Human-readable outputs of a run: a learning-curve PNG and a short markdown report."""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Any

from rlcore.io import atomic_path, write_text


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
) -> None:
    """Periodic-evaluation returns during training, each checkpoint's validation score (the evaluate stage), and
    the selected model's test score with its 95% interval."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    steps, values = read_curve(tsv)
    fig, ax = plt.subplots(figsize=(7, 4), dpi=110)
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
    ax.set_xlabel(_unit(selected))
    ax.set_ylabel("episode return")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend(loc="lower right", fontsize=8)
    fig.tight_layout()
    with atomic_path(target) as tmp:
        fig.savefig(tmp, format="png")
    plt.close(fig)


def write_report(
    target: Path,
    name: str,
    env_id: str,
    algo: str,
    selection: dict[str, Any],
    candidates: list[dict[str, Any]],
    summary: dict[str, Any] | None,
    plot_name: str,
) -> None:
    """``reports/report.md``: the test score with its interval, the validation score selection used (and which
    is which), how training went, the learning curve and every candidate's validation scores."""
    test, validation = selection["test"], selection["validation"]
    lines = [
        f"# Run `{name}`: {algo} on {env_id}",
        "",
        f"**Test score: {test['mean_return']:.1f}** mean return, 95% CI [{test['ci95_low']:.1f}, "
        f"{test['ci95_high']:.1f}], IQM {test['iqm_return']:.1f}, over {test['episodes']} test episodes "
        f"(std {test['std_return']:.1f}, min {test['min_return']:.1f}, max {test['max_return']:.1f}; "
        f"{test['truncated']} truncated).",
        "",
        f"**Validation score: {validation['value']:.2f}** {validation['metric']} (mean return "
        f"{validation['mean_return']:.1f}, 95% CI [{validation['ci95_low']:.1f}, {validation['ci95_high']:.1f}], "
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
    if summary:
        lines += [
            f"Training: {summary[summary['step_unit']]:,} {_unit(summary)} in {summary['wall_seconds']:.1f} s "
            f"({summary[summary['step_unit'] + '_per_second']:,.0f} {_unit(summary)}/s); "
            f"stop reason: {summary['stop_reason']}.",
            "",
        ]
        lines += [f"**Warning:** {warning}." for warning in summary.get("warnings", [])]
        if summary.get("warnings"):
            lines.append("")
    lines += [
        f"![learning curve]({plot_name})",
        "",
        "Validation scores of every checkpoint:",
        "",
        candidates_table(candidates, selection["checkpoint"]),
        "",
        "Exported model: `export/policy.onnx`, `export/policy.pt2`, card `export/model_card.json` "
        "(after the export stage).",
        "",
    ]
    write_text(target, "\n".join(lines))


def candidates_table(candidates: list[dict[str, Any]], selected: str) -> str:
    """Every candidate's validation scores as a markdown table (pandas), oldest first, the selected one marked."""
    import pandas as pd

    ordered = sorted(candidates, key=lambda c: c["step"])
    unit = _unit(ordered[0]) if ordered else "env steps"
    frame = pd.DataFrame(
        {
            "checkpoint": [
                f"`{Path(c['checkpoint']).name}`" + (" **(selected)**" if c["checkpoint"] == selected else "")
                for c in ordered
            ],
            unit: [f"{c['step']:,}" for c in ordered],
            "mean": [c["mean_return"] for c in ordered],
            "95% CI": [f"[{c['ci95_low']:.1f}, {c['ci95_high']:.1f}]" if "ci95_low" in c else "" for c in ordered],
            "IQM": [c.get("iqm_return", float("nan")) for c in ordered],
            "std": [c["std_return"] for c in ordered],
            "min": [c["min_return"] for c in ordered],
            "max": [c["max_return"] for c in ordered],
        }
    )
    return str(frame.to_markdown(index=False, floatfmt=".1f", colalign=("left", "right", *["right"] * 6)))


def _unit(record: dict[str, Any]) -> str:
    """``env steps`` or ``gradient steps``: what a record's step counts."""
    return str(record.get("step_unit", "env_steps")).replace("_", " ")
