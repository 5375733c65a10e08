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
    tsv: Path, candidates: list[dict[str, Any]], selected: dict[str, Any], title: str, target: Path
) -> None:
    """Periodic-evaluation returns during training, and the evaluate stage's scores of each checkpoint."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    steps, values = read_curve(tsv)
    fig, ax = plt.subplots(figsize=(7, 4), dpi=110)
    if steps:
        ax.plot(steps, values, marker=".", label="training eval (mean return)")
    ax.errorbar(
        [c["step"] for c in candidates],
        [c["mean_return"] for c in candidates],
        yerr=[c["std_return"] for c in candidates],
        fmt="o",
        capsize=3,
        alpha=0.8,
        label="evaluate stage (mean ± std)",
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
    ax.set_xlabel("env steps")
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
    selected: dict[str, Any],
    reason: str,
    candidates: list[dict[str, Any]],
    summary: dict[str, Any] | None,
    plot_name: str,
) -> None:
    lines = [
        f"# Run `{name}`: {algo} on {env_id}",
        "",
        f"**Selected:** `{selected['checkpoint']}` — mean return **{selected['mean_return']:.1f}** "
        f"± {selected['std_return']:.1f} over {selected['episodes']} episodes, "
        f"after {selected['step']:,} {_unit(selected)}.",
        "",
        f"Why: {reason}.",
        "",
    ]
    if summary:
        lines += [
            f"Training: {summary[summary['step_unit']]:,} {_unit(summary)} in {summary['wall_seconds']:.1f} s "
            f"({summary[summary['step_unit'] + '_per_second']:,.0f} {_unit(summary)}/s); "
            f"stop reason: {summary['stop_reason']}.",
            "",
        ]
    lines += [
        f"![learning curve]({plot_name})",
        "",
        f"| checkpoint | {_unit(selected)} | mean | std | min | max |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for c in sorted(candidates, key=lambda c: c["step"]):
        mark = " **(selected)**" if c["checkpoint"] == selected["checkpoint"] else ""
        lines.append(
            f"| `{Path(c['checkpoint']).name}`{mark} | {c['step']:,} | {c['mean_return']:.1f} | "
            f"{c['std_return']:.1f} | {c['min_return']:.1f} | {c['max_return']:.1f} |"
        )
    lines += [
        "",
        "Exported model: `export/policy.onnx`, `export/policy.pt2`, card `export/model_card.json` "
        "(after the export stage).",
        "",
    ]
    write_text(target, "\n".join(lines))


def _unit(record: dict[str, Any]) -> str:
    """``env steps`` or ``gradient steps``: what a record's step counts."""
    return str(record.get("step_unit", "env_steps")).replace("_", " ")
