"""Runs of several seeds (``train.seeds``): each seed's params and run directory, as the stages share them.

Seed ``k`` of a run with ``train.seeds`` is the run with ``seed: k`` and ``train.seeds: null`` trained into
``runs/<name>/seed_<k>/`` (:class:`~rlcore.common.stage_paths.Layout` with ``seed``): its envs, exploration, minibatch
order, periodic evaluation episodes, stop conditions and fingerprint are that run's. The seeds run one after another
in one process today; a trainer that runs several seeds at once writes the same folders.
"""

from __future__ import annotations

import os
from pathlib import Path

import yaml

from rlcore.common.errors import ConfigError
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
    return {seed: Layout(root, params.name, params.branch, seed) for seed in run_seeds(params) or []}


def check_dvc_declares_the_seeds(params: Params, root: Path) -> None:
    """Under ``dvc repro`` (DVC names the stage in ``DVC_STAGE``), refuse ``train.seeds`` when the stage's outputs do
    not hold ``runs/<name>/`` whole: the root dvc.yaml declares one run's files (``runs/<name>/checkpoints``, ...),
    which a run of seeds does not write, so DVC would fail after training every seed. ``pipelines/seeds/dvc.yaml``
    declares the run folder."""
    address = os.environ.get("DVC_STAGE")
    if address is None or params.train.seeds is None:
        return
    dvc_file, _, stage = address.rpartition(":")
    try:
        declared = yaml.safe_load((root / (dvc_file or "dvc.yaml")).read_text())["stages"][stage].get("outs", [])
        outs = [next(iter(out)) if isinstance(out, dict) else out for out in declared]
    except (OSError, KeyError, TypeError, AttributeError, StopIteration, yaml.YAMLError):
        return  # not a dvc.yaml this check can read: DVC itself says what is missing after the stage
    run = f"runs/{params.name}"
    if any(str(out).replace("${name}", params.name).rstrip("/") in (run, "runs") for out in outs):
        return
    raise ConfigError(
        f"train.seeds: DVC stage {stage!r} declares one run's outputs, not the seeds' folders {run}/seed_<k>/; "
        "run several seeds with `dvc repro pipelines/seeds/dvc.yaml` (its train stage declares the run folder), "
        "`rlcore pipeline` or the stage commands"
    )
