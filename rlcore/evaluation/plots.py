"""Figures written as PNG files: matplotlib on its Agg backend (no display), saved through a temporary name."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
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
