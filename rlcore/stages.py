"""The pipeline's stages as plain functions: params and a project root in, paths out.

No Prefect, no DVC: ``rlcore <stage>`` (used by dvc.yaml) and the Prefect tasks in ``flows/`` both
call these. Each stage reads only its own params sections (see ``rlcore.config.sections``).
"""

from __future__ import annotations

import json
import logging
import shutil
from pathlib import Path
from typing import Any

import torch

from rlcore.common.checkpoints import Checkpoint, list_checkpoints, load_checkpoint, save_checkpoint
from rlcore.common.errors import RLCoreError
from rlcore.common.files import read_json, sha256_file, write_json
from rlcore.common.seeds import describe, test_seeds, validation_seeds
from rlcore.common.stage_paths import Layout, project_path
from rlcore.config.sections import Params
from rlcore.data.collection import collect_dataset, env_record
from rlcore.data.reader import read_metadata
from rlcore.data.writer import merge_datasets
from rlcore.envs.settings import describe_parameters
from rlcore.envs.vector import settings_for
from rlcore.evaluation.evaluator import SCORE_KEYS, EvalResult, Evaluator, episode_cap
from rlcore.evaluation.export import export_policy, model_card, write_model_card
from rlcore.evaluation.report import (
    baseline_words,
    plot_baseline_comparison,
    plot_learning_curve,
    plot_settings,
    write_report,
)
from rlcore.evaluation.selection import select_best, view_scores
from rlcore.evaluation.video import record_episode
from rlcore.nets.policy import Policy
from rlcore.registry import policy_from_checkpoint
from rlcore.trainers import is_offline, train
from rlcore.trainers.run_directory import command_line
from rlcore.trainers.stopping import EvaluationCallback

log = logging.getLogger("rlcore")


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


def evaluate_stage(params: Params, root: Path) -> Path:
    """Evaluate every checkpoint of ``runs/<name>/`` on ``eval.episodes`` validation episodes (``rlcore.common.seeds``),
    under the training distribution and under each of ``eval.settings`` (the same episode seeds).

    Writes ``reports/evaluations.json``; returns its path.
    """
    torch.set_num_threads(params.torch_threads)
    layout = Layout(root, params.name, params.branch)
    checkpoints = list_checkpoints(layout.checkpoints)
    if not checkpoints:
        raise RLCoreError(f"{layout.checkpoints}: no checkpoints to evaluate; run `rlcore train` first")
    evaluators = _evaluators(params)
    try:
        candidates = [_evaluate_one(evaluators, params, root, path) for _, path in checkpoints]
    finally:
        _close(evaluators)
    return write_evaluations(params, root, candidates)


def evaluate_checkpoint(params: Params, root: Path, path: Path) -> dict[str, Any]:
    """Evaluate one checkpoint: the same entry ``evaluate_stage`` writes for it (for parallel evaluation).

    The evaluator re-seeds on every call, so the result does not depend on what else it evaluated.
    """
    torch.set_num_threads(params.torch_threads)
    evaluators = _evaluators(params)
    try:
        return _evaluate_one(evaluators, params, root, Path(path))
    finally:
        _close(evaluators)


def declared_settings(params: Params) -> list[dict[str, Any]]:
    """``eval.settings`` as plain data (what ``evaluations.json`` records it was evaluated under)."""
    return [{"name": s.name, "parameters": describe_parameters(s.parameters)} for s in params.eval.settings]


def write_evaluations(params: Params, root: Path, candidates: list[dict[str, Any]]) -> Path:
    """Write ``reports/evaluations.json`` from per-checkpoint entries (oldest first); returns its path."""
    layout = Layout(root, params.name, params.branch)
    cfg = params.eval
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
            "candidates": candidates,
        },
    )
    return layout.evaluations


def _evaluator(params: Params, split: str = "validation", setting: str | None = None) -> Evaluator:
    """The evaluator of the validation episodes (evaluate stage) or the test episodes (select stage), under the
    training distribution (``setting`` None) or the named one of ``eval.settings``."""
    cfg = params.eval
    if split == "validation":
        seeds = validation_seeds(cfg.seed, cfg.episodes)
    else:
        seeds = test_seeds(cfg.seed, cfg.test_episodes)
    settings = None
    if setting is not None:
        settings = settings_for(params.env, next(s for s in cfg.settings if s.name == setting).parameters)
    label = f"{split} episodes" + (f" under eval setting {setting!r}" if setting is not None else "")
    return Evaluator(
        params.env,
        len(seeds),
        seeds.start,
        cfg.deterministic,
        cfg.max_parallel_envs,
        cfg.max_episode_steps,
        settings,
        label,
    )


def _evaluators(params: Params, split: str = "validation") -> dict[str | None, Evaluator]:
    """None -> the training distribution's evaluator, then one per ``eval.settings`` entry, by name, in order."""
    evaluators: dict[str | None, Evaluator] = {}
    try:
        for name in [None, *(setting.name for setting in params.eval.settings)]:
            evaluators[name] = _evaluator(params, split, name)
    except BaseException:
        _close(evaluators)
        raise
    return evaluators


def _close(evaluators: dict[str | None, Evaluator]) -> None:
    for evaluator in evaluators.values():
        evaluator.close()


def _under_settings(evaluators: dict[str | None, Evaluator], policy: Policy) -> dict[str, EvalResult]:
    """``policy``'s result under each named setting (the same episode seeds as the training distribution's)."""
    return {name: evaluator.evaluate(policy) for name, evaluator in evaluators.items() if name is not None}


def _evaluate_one(evaluators: dict[str | None, Evaluator], params: Params, root: Path, path: Path) -> dict[str, Any]:
    checkpoint = load_checkpoint(path)
    if checkpoint.meta["params"]["env"]["id"] != params.env.id:
        raise RLCoreError(
            f"{path}: trained on {checkpoint.meta['params']['env']['id']}, params say env.id {params.env.id}"
        )
    policy = policy_from_checkpoint(checkpoint)
    result = evaluators[None].evaluate(policy)
    log.info("evaluated %s: %s", path.name, result.summary())
    settings = {name: under.scores() for name, under in _under_settings(evaluators, policy).items()}
    for name, scores in settings.items():
        log.info(
            "evaluated %s under %s: %.1f over %d episodes", path.name, name, scores["mean_return"], scores["episodes"]
        )
    return {
        "checkpoint": path.relative_to(root).as_posix(),
        "sha256": sha256_file(path),
        **step_counts(checkpoint),
        "algo": checkpoint.algo,
        **result.to_dict(),
        # Offline runs: validation on held-out episodes, measured when the checkpoint was written.
        **{f"validation_{k}": v for k, v in checkpoint.meta.get("validation", {}).items()},
        **({"settings": settings} if settings else {}),
    }


STEP_KEYS = ("step", "step_unit", "env_steps", "gradient_steps")
"""How far a checkpoint was trained: ``step`` in the run's ``step_unit``, and both true counts."""


def step_counts(checkpoint: Checkpoint) -> dict[str, Any]:
    return {
        "step": checkpoint.step,
        "step_unit": checkpoint.step_unit,
        "env_steps": checkpoint.meta.get("env_steps", 0),
        "gradient_steps": checkpoint.meta.get("gradient_steps", 0),
    }


def select_stage(params: Params, root: Path) -> Path:
    """Pick the best checkpoint on the validation scores, then score it on the test episodes.

    Selection reads ``reports/evaluations.json`` (the evaluate stage's validation episodes); the selected policy
    alone is then evaluated on ``eval.test_episodes`` test episodes that no other stage runs (``rlcore.common.seeds``):
    the reported score. Choosing the best of N checkpoints on the same episodes it is reported on would
    overstate it. Writes ``models/best/{policy.pt,selection.json}``,
    ``reports/{metrics.json,report.md,learning_curve.png}``.
    """
    torch.set_num_threads(params.torch_threads)
    layout = Layout(root, params.name, params.branch)
    if not layout.evaluations.is_file():
        raise RLCoreError(f"{layout.evaluations}: not found; run `rlcore evaluate` first")
    evaluations = read_json(layout.evaluations)
    if evaluations["env_id"] != params.env.id:
        raise RLCoreError(
            f"{layout.evaluations}: evaluated on {evaluations['env_id']}, params say env.id {params.env.id}; "
            "run `rlcore evaluate` again"
        )
    if evaluations.get("settings", []) != declared_settings(params):
        raise RLCoreError(
            f"{layout.evaluations}: evaluated under other eval.settings than the params declare; "
            "run `rlcore evaluate` again"
        )
    candidates = evaluations["candidates"]
    chosen = params.select.setting
    best, reason = select_best(candidates, params.select.metric, chosen)
    source = root / best["checkpoint"]
    if sha256_file(source) != best["sha256"]:
        raise RLCoreError(f"{source}: changed since it was evaluated; run `rlcore evaluate` again")
    checkpoint = load_checkpoint(source)
    test, seeds, test_settings = _test_evaluation(params, checkpoint)
    log.info("test score of %s: %s", source.name, test.summary())
    for name, result in test_settings.items():
        log.info("test score of %s under %s: %s", source.name, name, result.summary())
    # The selected policy alone: weights and metadata, no optimizer or RNG state.
    save_checkpoint(
        layout.best_policy,
        checkpoint.algo,
        checkpoint.step,
        checkpoint.step_unit,
        checkpoint.meta,
        {"policy": checkpoint.tensors["policy"]},
    )
    metric = params.select.metric
    chosen_scores = view_scores(best, chosen)
    validation = {
        "metric": metric,
        "value": chosen_scores[metric],
        "setting": chosen,
        **{key: chosen_scores[key] for key in SCORE_KEYS if key in chosen_scores},
        "seeds": evaluations.get("seeds"),
    }
    settings = {
        setting.name: {
            "parameters": describe_parameters(setting.parameters),
            "validation": best["settings"][setting.name],
            "test": test_settings[setting.name].scores(),
        }
        for setting in params.eval.settings
    }
    selection = {
        "checkpoint": best["checkpoint"],
        "sha256": best["sha256"],
        **{key: best[key] for key in STEP_KEYS},
        "metric": metric,
        "reason": reason,
        "validation": validation,
        "test": {**test.scores(), "seeds": describe(seeds)},
        **({"settings": settings} if settings else {}),
        "eval_settings": {
            "episodes": evaluations["episodes"],
            "test_episodes": params.eval.test_episodes,
            "deterministic": params.eval.deterministic,
            "seed": params.eval.seed,
            "max_episode_steps": params.eval.max_episode_steps,
        },
    }
    write_json(layout.selection, selection)
    validation_keys: tuple[str, ...] = (
        "metric",
        "value",
        "episodes",
        "mean_return",
        "iqm_return",
        "ci95_low",
        "ci95_high",
    )
    if chosen is not None:
        validation_keys = ("setting", *validation_keys)
    write_json(
        layout.metrics,
        {
            **test.scores(),
            **{key: best[key] for key in STEP_KEYS},
            "checkpoint": best["checkpoint"],
            "validation": {key: validation[key] for key in validation_keys if key in validation},
            # Test scores of the selected model under each of eval.settings (the same test episode seeds).
            **(
                {"settings": {name: _short_scores(entry["test"]) for name, entry in settings.items()}}
                if settings
                else {}
            ),
        },
    )
    summary: dict[str, Any] | None = read_json(layout.train_summary) if layout.train_summary.is_file() else None
    env_id, algo = evaluations["env_id"], checkpoint.algo
    lessons = (summary or {}).get("curriculum", {}).get("started")
    plot_learning_curve(
        layout.learning_curve_tsv,
        candidates,
        best,
        selection["test"],
        f"{algo} on {env_id} ({params.name})",
        layout.learning_curve_png,
        lessons,
    )
    layout.settings_png.unlink(missing_ok=True)  # a chart of settings no longer declared
    if settings:
        plot_settings(selection, f"{algo} on {env_id} ({params.name}): test episodes", layout.settings_png)
    video = _record_video(params, checkpoint, seeds, layout.reports / "episode.gif") if params.eval.video else None
    baseline = _baseline_comparison(params, root, f"{algo} on {env_id}", summary)
    write_report(
        layout.report,
        params.name,
        env_id,
        algo,
        selection,
        candidates,
        summary,
        layout.learning_curve_png.name,
        video.name if video else None,
        layout.settings_png.name if settings else None,
        baseline,
    )
    log.info("selected %s", reason)
    return layout.best


def _baseline_comparison(params: Params, root: Path, what: str, summary: dict[str, Any] | None) -> list[str] | None:
    """``select.baseline_run``: this run's learning curve beside the baseline's (``reports/baseline_comparison.png``)
    and the report's lines on it; None when no baseline is named."""
    layout = Layout(root, params.name, params.branch)
    layout.baseline_png.unlink(missing_ok=True)  # a chart of a baseline no longer named
    name = params.select.baseline_run
    if name is None:
        return None
    other = Layout(root, name)
    if not other.learning_curve_tsv.is_file():
        raise RLCoreError(f"select.baseline_run: {other.run_dir}: no learning curve; train that run first")
    threshold = params.train.target_return
    unit = ((summary or {}).get("step_unit") or "env_steps").replace("_", " ")
    started = " (warm start)" if (summary or {}).get("initialized_from") else ""
    curves = {f"{params.name}{started}": layout.learning_curve_tsv, name: other.learning_curve_tsv}
    title = f"{what}: {params.name} and {name}"
    reached = plot_baseline_comparison(curves, threshold, unit, title, layout.baseline_png)
    return baseline_words(reached, threshold, unit, layout.baseline_png.name)


def _short_scores(scores: dict[str, Any]) -> dict[str, Any]:
    """What ``reports/metrics.json`` keeps of a setting's test scores."""
    return {key: scores[key] for key in ("mean_return", "ci95_low", "ci95_high", "episodes")}


def _record_video(params: Params, checkpoint: Checkpoint, seeds: range, path: Path) -> Path | None:
    """``eval.video``: the selected model's first test episode (its seed, the evaluation's cap) as a GIF."""
    cap = episode_cap(params.env, params.eval.max_episode_steps)
    policy = policy_from_checkpoint(checkpoint)
    return record_episode(params.env, policy, seeds.start, params.eval.deterministic, cap, path)


def _test_evaluation(params: Params, checkpoint: Checkpoint) -> tuple[EvalResult, range, dict[str, EvalResult]]:
    """The selected checkpoint's score on the test episodes, their seeds, and its score under each of
    ``eval.settings`` on the same episodes."""
    trained_on = checkpoint.meta["params"]["env"]["id"]
    if trained_on != params.env.id:
        raise RLCoreError(f"{checkpoint.path}: trained on {trained_on}, params say env.id {params.env.id}")
    evaluators = _evaluators(params, "test")
    try:
        policy = policy_from_checkpoint(checkpoint)
        return evaluators[None].evaluate(policy), evaluators[None].seeds, _under_settings(evaluators, policy)
    finally:
        _close(evaluators)


def export_stage(params: Params, root: Path) -> Path:
    """Export ``models/best/policy.pt`` to ``export/`` (ONNX, torch.export, model card); returns the card's path."""
    torch.set_num_threads(params.torch_threads)
    layout = Layout(root, params.name, params.branch)
    checkpoint = load_checkpoint(layout.best_policy)
    if not layout.selection.is_file():
        raise RLCoreError(f"{layout.selection}: not found; run `rlcore select` first")
    selection = read_json(layout.selection)
    policy = policy_from_checkpoint(checkpoint)
    cfg = params.export
    if not (cfg.onnx or cfg.torch_export):
        raise RLCoreError("export.onnx and export.torch_export are both false: nothing to export")
    result = export_policy(
        policy,
        checkpoint.meta,
        layout.export,
        cfg.onnx,
        cfg.torch_export,
        cfg.parity_observations,
        cfg.parity_atol,
        cfg.parity_rtol,
        cfg.opset,
    )
    card = model_card(checkpoint.meta, selection, result, command_line(), root)
    for stale in {"policy.onnx", "policy.pt2"} - set(result.files):
        (layout.export / stale).unlink(missing_ok=True)
    path = write_model_card(layout.export, card)
    log.info("exported %s (parity %s)", ", ".join(result.files), result.parity)
    return path


def collect_stage(params: Params, root: Path) -> Path:
    """Roll out ``collect.policy`` (a ``.pt`` model or ``random``) and write the dataset ``collect.output``.

    With ``collect.shards`` > 1 the shards are collected one after another, then merged: the same file the
    Prefect flow writes when it runs the shards in parallel on Dask.
    """
    shards = [collect_shard(params, root, index) for index in range(params.collect.shards)]
    return shards[0] if len(shards) == 1 else merge_collected_shards(params, root)


def shard_path(params: Params, root: Path, index: int) -> Path:
    """Where shard ``index`` is written: ``collect.output`` itself for one shard, else ``<output>.shards/``."""
    output = project_path(root, params.collect.output, "collect.output")
    count = params.collect.shards
    if count == 1:
        return output
    return output.with_name(f"{output.name}.shards") / f"shard-{index:05d}-of-{count:05d}.parquet"


def collect_shard(params: Params, root: Path, index: int) -> Path:
    """Collect shard ``index`` of ``collect.shards`` on its own: its share of the budget, its own seeds.

    Shard ``i`` seeds its envs from ``collect.seed + i * collect.num_envs`` (no two shards share an env seed)
    and gets ``steps // shards`` transitions (or episodes), the first ``steps % shards`` shards one more.
    A shard file already in place from an interrupted collection with the same plan, policy and env is
    kept (shard files appear only once complete), so a re-run redoes only the missing shards.
    """
    torch.set_num_threads(params.torch_threads)
    cfg = params.collect
    policy, provenance = _collect_policy(params, root)
    steps, episodes = (
        None if budget is None else _share(budget, cfg.shards, index) for budget in (cfg.steps, cfg.episodes)
    )
    path = shard_path(params, root, index)
    plan = {"index": index, "count": cfg.shards, "steps": steps, "episodes": episodes}
    expected = {
        "shard": plan,
        "seed": cfg.seed + index * cfg.num_envs,
        "num_envs": cfg.num_envs,
        "env": env_record(params.env),
        "policy": {**provenance, "epsilon": cfg.epsilon, "deterministic": cfg.deterministic},
    }
    if cfg.shards > 1 and _collected_already(path, expected):
        log.info("shard %d of %d was collected before: %s (kept)", index, cfg.shards, path)
        return path
    collect_dataset(
        path,
        params.env,
        policy,
        provenance,
        cfg.num_envs,
        steps,
        episodes,
        cfg.epsilon,
        cfg.deterministic,
        cfg.seed + index * cfg.num_envs,
        cfg.row_group_size,
        extra_metadata={"shard": plan} if cfg.shards > 1 else None,
    )
    return path


def _collected_already(path: Path, expected: dict[str, Any]) -> bool:
    if not path.is_file():
        return False
    try:
        metadata = read_metadata(path)
    except RLCoreError:  # unreadable: collect it again
        return False
    return all(
        json.loads(json.dumps(metadata.get(key))) == json.loads(json.dumps(value)) for key, value in expected.items()
    )


def merge_collected_shards(params: Params, root: Path) -> Path:
    """Merge the shards of ``collect.shards`` into ``collect.output`` (in shard order), then delete them."""
    cfg = params.collect
    paths = [shard_path(params, root, index) for index in range(cfg.shards)]
    missing = [str(path) for path in paths if not path.is_file()]
    if missing:
        raise RLCoreError(f"{missing[0]}: shard not collected ({len(missing)} of {cfg.shards} missing)")
    shards = [read_metadata(path) for path in paths]
    metadata = {k: v for k, v in shards[0].items() if k not in ("episodes", "transitions", "seed", "shard")}
    metadata["seed"] = cfg.seed
    metadata["shards"] = [
        {"seed": shard["seed"], "episodes": shard["episodes"], "transitions": shard["transitions"]} for shard in shards
    ]
    output = project_path(root, cfg.output, "collect.output")
    merged = merge_datasets(paths, output, metadata, cfg.row_group_size)
    shutil.rmtree(paths[0].parent)
    log.info(
        "merged %d shards: %d transitions in %d episodes (mean return %.1f) -> %s",
        cfg.shards,
        merged["transitions"],
        merged["episodes"],
        merged["episode_return"]["mean"],
        output,
    )
    return output


def _share(total: int, parts: int, index: int) -> int:
    return total // parts + (index < total % parts)


def _collect_policy(params: Params, root: Path) -> tuple[Any, dict[str, Any]]:
    """The policy to roll out (None: uniformly random) and its provenance for the dataset's metadata."""
    cfg = params.collect
    if cfg.policy == "random":
        return None, {"kind": "random"}
    source = root / cfg.policy
    checkpoint = load_checkpoint(source)
    if checkpoint.meta["params"]["env"]["id"] != params.env.id:
        raise RLCoreError(
            f"{source}: trained on {checkpoint.meta['params']['env']['id']}, params say env.id {params.env.id}"
        )
    return policy_from_checkpoint(checkpoint), {
        "kind": "checkpoint",
        "path": cfg.policy,
        "sha256": sha256_file(source),
        "algo": checkpoint.algo,
        **step_counts(checkpoint),
        "evaluation": checkpoint.meta.get("evaluation", {}).get("mean_return"),
    }
