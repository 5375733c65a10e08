"""The evaluate stage: every checkpoint of a run (of each of ``train.seeds``) on the validation episodes ->
``reports/<name>/evaluations.json``."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import torch

from rlcore.common.checkpoints import list_checkpoints, load_checkpoint
from rlcore.common.errors import RLCoreError
from rlcore.common.files import check_target, sha256_file, write_json
from rlcore.common.numbers import score
from rlcore.common.seeds import describe, validation_seeds
from rlcore.common.stage_paths import Layout
from rlcore.config.sections import Params
from rlcore.evaluation.evaluator import Evaluator
from rlcore.registry import policy_from_checkpoint
from rlcore.stages.evaluators import close_all, declared_settings, evaluators_for, under_settings
from rlcore.stages.seeds import run_seeds, seed_layouts
from rlcore.stages.shared import check_trained_on, checkpoint_words, step_counts

log = logging.getLogger("rlcore")


def evaluate_stage(params: Params, root: Path) -> Path:
    """Evaluate every checkpoint of ``runs/<name>/`` on ``eval.episodes`` validation episodes (``rlcore.common.seeds``),
    under the training distribution and under each of ``eval.settings`` (the same episode seeds).

    Writes ``reports/<name>/evaluations.json``; returns its path.
    """
    torch.set_num_threads(params.torch_threads)
    check_target(Layout(root, params.name).evaluations)  # refused before any episode, not after
    checkpoints = checkpoints_to_evaluate(params, root)
    evaluators = evaluators_for(params)
    try:
        candidates = [_evaluate_one(evaluators, params, root, path, seed) for seed, path in checkpoints]
    finally:
        close_all(evaluators)
    return write_evaluations(params, root, candidates)


def checkpoints_to_evaluate(params: Params, root: Path) -> list[tuple[int | None, Path]]:
    """(training seed, checkpoint) of every checkpoint to evaluate, oldest first: the run's (seed None), or with
    ``train.seeds`` each seed's in the list's order. Refuses a run (a seed) without checkpoints."""
    layouts: dict[int | None, Layout] = {None: Layout(root, params.name)}
    if run_seeds(params) is not None:
        layouts = {seed: layout for seed, layout in seed_layouts(params, root).items()}
    found: list[tuple[int | None, Path]] = []
    for seed, layout in layouts.items():
        checkpoints = list_checkpoints(layout.checkpoints)
        if not checkpoints:
            raise RLCoreError(f"{layout.checkpoints}: no checkpoints to evaluate; run `rlcore train` first")
        found += [(seed, path) for _, path in checkpoints]
    return found


def evaluate_checkpoint(params: Params, root: Path, path: Path, seed: int | None = None) -> dict[str, Any]:
    """Evaluate one checkpoint (of training seed ``seed`` with ``train.seeds``): the same entry ``evaluate_stage``
    writes for it (for parallel evaluation).

    The evaluator re-seeds on every call, so the result does not depend on what else it evaluated.
    """
    torch.set_num_threads(params.torch_threads)
    evaluators = evaluators_for(params)
    try:
        return _evaluate_one(evaluators, params, root, Path(path), seed)
    finally:
        close_all(evaluators)


def write_evaluations(params: Params, root: Path, candidates: list[dict[str, Any]]) -> Path:
    """Write ``reports/<name>/evaluations.json`` from per-checkpoint entries (oldest first; with ``train.seeds`` each
    entry names its ``train_seed`` and the file lists ``train_seeds``); returns its path."""
    layout = Layout(root, params.name)
    cfg = params.eval
    seeds = run_seeds(params)
    write_json(
        layout.evaluations,
        {
            "run": layout.run_dir.relative_to(root).as_posix(),
            "env_id": params.env.id,
            "split": "validation",
            "episodes": cfg.episodes,
            "deterministic": cfg.deterministic,
            "seed": cfg.seed,
            "seeds": describe(validation_seeds(cfg.seed, cfg.episodes)),
            "max_episode_steps": cfg.max_episode_steps,
            "settings": declared_settings(params),
            **({"train_seeds": seeds} if seeds is not None else {}),
            "candidates": candidates,
        },
    )
    return layout.evaluations


def _evaluate_one(
    evaluators: dict[str | None, Evaluator], params: Params, root: Path, path: Path, seed: int | None = None
) -> dict[str, Any]:
    checkpoint = load_checkpoint(path)
    check_trained_on(checkpoint, params.env.id)
    policy = policy_from_checkpoint(checkpoint)
    result = evaluators[None].evaluate(policy)
    what = checkpoint_words(path, seed)
    log.info("evaluated %s: %s", what, result.summary())
    settings = {name: under.scores() for name, under in under_settings(evaluators, policy).items()}
    for name, scores in settings.items():
        log.info(
            "evaluated %s under %s: %s over %d episodes", what, name, score(scores["mean_return"]), scores["episodes"]
        )
    return {
        **({"train_seed": seed} if seed is not None else {}),
        "checkpoint": path.relative_to(root).as_posix(),
        "sha256": sha256_file(path),
        **step_counts(checkpoint),
        "algo": checkpoint.algo,
        **result.to_dict(),
        # Offline runs: validation on held-out episodes, measured when the checkpoint was written.
        **{f"validation_{k}": v for k, v in checkpoint.meta.get("validation", {}).items()},
        **({"settings": settings} if settings else {}),
    }
