"""Figures written as PNG files: matplotlib on its Agg backend (no display), saved through a temporary name; the
across-seed figures (learning curves with the IQM band, performance profiles)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from rlcore.common.files import atomic_path


def pyplot() -> Any:
    """``matplotlib.pyplot`` on the Agg backend, so plotting works on a machine without a display."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def save_figure(figure: Any, target: Path, **savefig: Any) -> None:
    """Write ``figure`` to ``target`` as PNG through a temporary name: a reader never sees half a file, and a
    failed draw leaves the previous picture in place."""
    with atomic_path(target) as tmp:
        figure.savefig(tmp, format="png", **savefig)


@contextlib.contextmanager
def new_figure(target: Path, figsize: tuple[float, float] = (7, 4), dpi: int = 110) -> Iterator[tuple[Any, Any]]:
    """A figure with one axes to draw on inside the block; on leaving it, laid out, written to ``target``
    (:func:`save_figure`) and closed (also when drawing failed, then nothing is written)."""
    plt = pyplot()
    figure, axes = plt.subplots(figsize=figsize, dpi=dpi)
    try:
        yield figure, axes
        figure.tight_layout()
        save_figure(figure, target)
    finally:
        plt.close(figure)


def plot_seed_curves(
    curves: Mapping[int, tuple[Sequence[float], Sequence[float]]],
    target: Path,
    title: str = "",
    x_label: str = "env steps",
    y_label: str = "validation mean return",
) -> dict[str, Any]:
    """Every seed's learning curve (``curves``: seed -> (steps, values), as ``report.read_curve`` reads them) as a
    thin line, and the IQM across seeds with its pointwise 95% bootstrap band (:func:`aggregate.iqm_band`) on top.
    Returns the band."""
    from rlcore.evaluation.aggregate import iqm_band  # scipy and rliable load only when a seed figure is drawn

    band = iqm_band(curves)
    with new_figure(target) as (_, ax):
        for seed in band["seeds"]:
            steps, values = curves[seed]
            ax.plot(steps, values, linewidth=0.8, alpha=0.45, label=f"seed {seed}")
        if band["steps"]:
            ax.fill_between(
                band["steps"], band["low"], band["high"], color="black", alpha=0.15, label="IQM 95% interval"
            )
            ax.plot(
                band["steps"], band["iqm"], color="black", linewidth=2.0, label=f"IQM over {len(band['seeds'])} seeds"
            )
        ax.set_xlabel(x_label)
        ax.set_ylabel(y_label)
        if title:
            ax.set_title(title)
        ax.grid(alpha=0.3)
        ax.legend(fontsize="small", ncol=2 if len(band["seeds"]) > 6 else 1)
    return band


def plot_performance_profile(
    scores_by_method: Mapping[str, Sequence[float] | Mapping[int, float]],
    target: Path,
    thresholds: Sequence[float] | None = None,
    title: str = "",
    x_label: str = r"test mean return ($\tau$)",
) -> None:
    """Performance profiles (:func:`aggregate.performance_profile`: the fraction of each method's runs scoring above
    each threshold, with its 95% band), drawn by ``rliable.plot_utils.plot_performance_profiles``."""
    from rlcore.evaluation.aggregate import performance_profile

    taus, profiles, intervals = performance_profile(scores_by_method, thresholds)
    with new_figure(target) as (_, ax):
        from rliable import plot_utils  # imports pyplot (and seaborn): after new_figure chose the Agg backend

        plot_utils.plot_performance_profiles(
            profiles,
            taus,
            performance_profile_cis=intervals,
            ax=ax,
            xlabel=x_label,
            ylabel=r"fraction of runs with score $> \tau$",
            labelsize="medium",
            ticklabelsize="small",
            legend=len(profiles) > 1,
            legendsize="small",
        )
        if title:
            ax.set_title(title)
