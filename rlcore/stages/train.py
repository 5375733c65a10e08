"""The train stage: train into ``runs/<name>/``, with the params' file paths made relative to the project."""

from __future__ import annotations

from pathlib import Path

from rlcore.common.stage_paths import Layout, project_path
from rlcore.config.sections import Params
from rlcore.trainers import is_offline, train
from rlcore.trainers.stopping import EvaluationCallback


def train_stage(
    params: Params, root: Path, on_evaluation: EvaluationCallback | None = None, resume_from: Path | None = None
) -> Path:
    """Train into ``runs/<name>/``; resumes an interrupted run. Returns the run directory."""
    layout = Layout(root, params.name, params.branch)
    if is_offline(params) and not Path(params.dataset.path).is_absolute():  # the dataset, relative to the project
        params = params.model_copy(deep=True)
        params.dataset.path = str(root / params.dataset.path)
    init_from = params.train.init_from
    if init_from is not None:  # a checkpoint or policy.pt, relative to the project
        params = params.model_copy(deep=True)
        params.train.init_from = str(project_path(root, init_from, "train.init_from"))
    behavioral_cloning = getattr(params.algo, "behavioral_cloning", None)
    if behavioral_cloning is not None:  # its dataset, relative to the project
        params = params.model_copy(deep=True)
        dataset = project_path(root, behavioral_cloning.dataset, "algo.behavioral_cloning.dataset")
        params.algo.behavioral_cloning.dataset = str(dataset)  # type: ignore[attr-defined]
    train(params, layout.run_dir, on_evaluation=on_evaluation, resume_from=resume_from)
    return layout.run_dir
