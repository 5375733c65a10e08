"""Runs of several seeds (``train.seeds``): each seed's params and run directory, as the stages share them.

Seed ``k`` of a run with ``train.seeds`` is the run with ``seed: k`` and ``train.seeds: null`` trained into
``runs/<name>/seed_<k>/`` (:class:`~rlcore.common.stage_paths.Layout` with ``seed``): its envs, exploration, minibatch
order, periodic evaluation episodes, stop conditions and fingerprint are that run's. However the seeds train (as one
batched program, in groups over child processes: ``train.seed_processes``, or one after another), they write the
same folders.
"""

from __future__ import annotations

from pathlib import Path

from rlcore.common.stage_paths import Layout
from rlcore.config.sections import Params


def run_seeds(params: Params) -> list[int] | None:
    """``train.seeds`` (in the order given), or None for the one run with ``seed``."""
    return None if params.train.seeds is None else list(params.train.seeds)


def seed_params(params: Params, seed: int) -> Params:
    """The params of seed ``seed``'s run: the one-seed run with ``seed: <seed>``."""
    single = params.model_copy(deep=True)
    single.seed = seed
    single.train.seeds = None
    return single


def seed_layouts(params: Params, root: Path) -> dict[int, Layout]:
    """Each seed's layout (its run directory ``runs/<name>/seed_<k>/``), in ``train.seeds``' order."""
    return {seed: Layout(root, params.name, seed=seed) for seed in run_seeds(params) or []}
