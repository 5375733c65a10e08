"""The train stage: train into ``runs/<name>/`` (with ``train.seeds``: each seed into ``runs/<name>/seed_<k>/``, as one
batched program or one per process of a group of seeds, on worker processes every seed shares, or one after
another), with the params' file paths made relative to the project; and one-seed runs in projects of their own
trained together (:func:`train_seed_roots`, a sweep trial's seeds)."""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from pathlib import Path

from rlcore.common.checkpoints import list_checkpoints, load_checkpoint
from rlcore.common.errors import CheckpointError, ConfigError
from rlcore.common.stage_paths import Layout, project_path
from rlcore.config.sections import Params
from rlcore.stages.seeds import run_seeds, seed_layouts, seed_params
from rlcore.trainers import SeedRun, is_offline, train, train_seeds
from rlcore.trainers.fingerprint import changed_key, trained_params
from rlcore.trainers.finished_runs import RunFinishedError
from rlcore.trainers.seed_processes import seed_groups, train_seed_groups
from rlcore.trainers.stopping import EvaluationCallback

log = logging.getLogger("rlcore")


def train_stage(
    params: Params,
    root: Path,
    on_evaluation: EvaluationCallback | None = None,
    resume_from: Path | None = None,
    replace: bool = False,
) -> Path:
    """Train into ``runs/<name>/``; resumes an interrupted run. Returns the run directory. A finished run there
    trained with other train params is refused (:func:`refuse_replacing_a_finished_run`) unless ``replace``: the
    pipelines (dvc.yaml, whose cache keeps the previous run, and the Prefect flows) replace it.

    With ``train.seeds``: seed ``k``'s run (``rlcore.stages.seeds``) into ``runs/<name>/seed_<k>/``, all together
    through the family's loop (``train.batch_seeds``, ``rlcore.trainers.train_seeds``: one batched loop, or the
    family's worker processes serving every seed), or in the list's order; a seed whose
    run finished with the same train params is kept, an interrupted one resumes, so a killed
    run goes on with the seed it was training. ``resume_from`` is refused (it names one seed's checkpoint).
    """
    seeds = run_seeds(params)
    if seeds is not None:
        if not replace:
            for seed, layout in seed_layouts(params, root).items():
                refuse_replacing_a_finished_run(seed_params(params, seed), layout.run_dir)
        if resume_from is not None:
            raise ConfigError(
                "--resume-from: names one run's checkpoint; with train.seeds each seed resumes from its own folder "
                "(run `rlcore train` again)"
            )
        runs = [
            SeedRun(seed, _project_paths(seed_params(params, seed), root), layout.run_dir)
            for seed, layout in seed_layouts(params, root).items()
        ]
        _train_seed_runs(runs, on_evaluation)
        return Layout(root, params.name).run_dir
    layout = Layout(root, params.name)
    if not replace and resume_from is None:
        refuse_replacing_a_finished_run(params, layout.run_dir)
    train(_project_paths(params, root), layout.run_dir, on_evaluation=on_evaluation, resume_from=resume_from)
    return layout.run_dir


def refuse_replacing_a_finished_run(params: Params, run_dir: Path) -> None:
    """Refuse, in one line naming a key that changed, to replace the finished run in ``run_dir`` with a run of other
    train params (``runs/<name>/`` is the run of that name: another name trains beside it). Interrupted runs are
    not refused (the trainer starts fresh when their params changed), nor a finished run with the same params."""
    if not (run_dir / "train_summary.json").is_file():
        return
    found = list_checkpoints(run_dir / "checkpoints")
    if not found:
        return
    try:
        trained = load_checkpoint(found[-1][1]).meta["params"]
    except CheckpointError:
        return  # unreadable: the trainer says so and keeps it aside
    change = changed_key(trained_params(trained), trained_params(params.to_dict()))
    if change is not None:
        key, before, after = change
        raise ConfigError(
            f"{key}: {run_dir} holds a finished run trained with {key} {json.dumps(before)}, now "
            f"{json.dumps(after)}; give this run another name (--set name=...) to keep both, or pass --replace to "
            "replace it"
        )


def train_seed_roots(seeds: Sequence[tuple[Params, Path]], on_evaluation: EvaluationCallback | None = None) -> None:
    """Train one-seed runs (``seed: k``, no ``train.seeds``; equal but for ``seed``), each into its own project
    root's ``runs/<name>/`` (paths in its params relative to that root), as :func:`train_stage` trains the seeds of
    ``train.seeds`` (together through the family's loop, or one after another with a log line); a finished run with
    the same train params is kept, an interrupted one resumes. ``on_evaluation`` is called after every seed's
    evaluations (a batched run evaluates its seeds at the same steps)."""
    runs = [
        SeedRun(params.seed, _project_paths(params, root), Layout(root, params.name).run_dir) for params, root in seeds
    ]
    _train_seed_runs(runs, on_evaluation)


def not_batched_reason(params: Params) -> str | None:
    """Why the seeds of ``params`` train one after another, or None: they train together
    (``rlcore.trainers.train_seeds``)."""
    return None if params.train.batch_seeds else "train.batch_seeds is false"


def _train_seed_runs(runs: list[SeedRun], on_evaluation: EvaluationCallback | None) -> None:
    """The seeds' runs together (``rlcore.trainers.train_seeds``; ``train.seed_processes``: in groups, each in a
    process of its own, ``rlcore.trainers.seed_processes``), or one after another (``train.batch_seeds`` false)."""
    if runs[0].params.train.batch_seeds:
        groups = seed_groups(runs, on_evaluation)
        if len(groups) > 1:
            train_seed_groups(groups)
        else:
            train_seeds(runs, on_evaluation)
        return
    log.info("train.seeds: the seeds train one after another, not batched: %s", not_batched_reason(runs[0].params))
    for run in runs:
        try:
            train(run.params, run.run_dir, on_evaluation=on_evaluation, keep_finished=True)
        except RunFinishedError:
            log.info("seed %d: finished in %s with these train params; kept", run.seed, run.run_dir)


def _project_paths(params: Params, root: Path) -> Params:
    """``params`` with the files they name (dataset, warm start, demonstrations) made relative to the project."""
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
    return params
