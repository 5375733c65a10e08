"""The training pipeline as one Prefect flow: a task run per stage, passing paths and content hashes. An offline run
whose dataset is what its ``collect`` writes (``dataset.path`` is ``collect.output``) collects it first, as
``dvc repro`` runs the collect stage before ``train_offline``: again only when what collect reads changed.

Tasks reload params from the file (plus overrides) themselves, so what crosses task boundaries is
small, hashable and JSON-safe; models and tensors never do. Each task is cached on what its stage reads
(``flows/caching.py``): a re-run skips the stages whose inputs did not change and whose outputs are still on disk.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from prefect import flow, get_run_logger, task
from prefect.artifacts import create_markdown_artifact, create_table_artifact

from flows.caching import StageInputs, file_digests
from flows.task_runners import retry_options
from rlcore.common.checkpoints import list_checkpoints
from rlcore.common.files import read_json, sha256_file
from rlcore.common.numbers import interval_decimals, score
from rlcore.common.project import use_project_folder
from rlcore.common.stage_paths import Layout, project_path
from rlcore.config.sections import Params
from rlcore.params import load_params
from rlcore.stages import collect_stage, evaluate_stage, export_stage, select_stage, train_stage
from rlcore.stages.seeds import seed_layouts
from rlcore.trainers import is_offline


def _params(params_path: str, overrides: list[str]) -> Any:
    return load_params(params_path, overrides)


CACHED: dict[str, Any] = {"persist_result": True, "result_serializer": "json"}
"""Persisted as JSON (read back without pickle); where: ``<root>/.prefect/storage`` (:func:`cache_options`)."""


def cache_options(root: str) -> dict[str, Any]:
    """Task options that keep the cached results with the project they describe."""
    return {"result_storage": Path(root) / ".prefect" / "storage"}


@task(name="collect", cache_policy=StageInputs(stage="collect"), **CACHED)
def collect_task(params_path: str, overrides: list[str], root: str) -> dict[str, Any]:
    path = collect_stage(_params(params_path, overrides), Path(root))
    return {"dataset": str(path), "sha256": sha256_file(path), "outputs": file_digests([path])}


def collects_its_dataset(params: Params, root: Path) -> bool:
    """Whether the run trains on the dataset its own ``collect`` writes, from a model it follows: an offline run
    whose ``dataset.path`` is ``collect.output`` and whose ``collect.policy`` is set or follows a base run. A dataset
    from elsewhere (``rlcore import-minari``, another path) is trained on as it is."""
    if not is_offline(params) or params.collect.policy is None:
        return False
    dataset = project_path(root, params.dataset.path, "dataset.path")
    return dataset.resolve() == project_path(root, params.collect.output, "collect.output").resolve()


@task(name="train", cache_policy=StageInputs(stage="train"), **CACHED)
def train_task(params_path: str, overrides: list[str], root: str) -> dict[str, Any]:
    params = _params(params_path, overrides)
    run_dir = train_stage(params, Path(root), replace=True)  # a pipeline makes the run match its params
    layouts = list(seed_layouts(params, Path(root)).values()) or [Layout(Path(root), params.name)]
    summaries = [layout.train_summary for layout in layouts]  # train.seeds: each seed's run
    checkpoints = [path for layout in layouts for _, path in list_checkpoints(layout.checkpoints)]
    return {
        "run_dir": str(run_dir),
        "train_summary_sha256": "".join(sha256_file(summary) for summary in summaries),
        "outputs": file_digests([*summaries, *checkpoints]),
    }


@task(name="evaluate", cache_policy=StageInputs(stage="evaluate"), **CACHED)
def evaluate_task(params_path: str, overrides: list[str], root: str, upstream: dict[str, Any]) -> dict[str, Any]:
    path = evaluate_stage(_params(params_path, overrides), Path(root))
    return {"evaluations": str(path), "sha256": sha256_file(path), "outputs": file_digests([path])}


@task(name="select-best", cache_policy=StageInputs(stage="select"), **CACHED)
def select_task(params_path: str, overrides: list[str], root: str, upstream: dict[str, Any]) -> dict[str, Any]:
    params = _params(params_path, overrides)
    best = select_stage(params, Path(root))
    layout = Layout(Path(root), params.name)
    written = [path for path in sorted(layout.best.iterdir()) if path.is_file()]
    written += [path for path in (layout.metrics, layout.report) if path.is_file()]
    return {
        "best": str(best),
        "policy_sha256": sha256_file(layout.best_policy),
        "metrics": str(layout.metrics),
        "outputs": file_digests(written),
    }


@task(name="export", cache_policy=StageInputs(stage="export"), **CACHED)
def export_task(params_path: str, overrides: list[str], root: str, upstream: dict[str, Any]) -> dict[str, Any]:
    card = export_stage(_params(params_path, overrides), Path(root))
    files = [card.parent / name for name in read_json(card).get("files", [])]
    return {"model_card": str(card), "sha256": sha256_file(card), "outputs": file_digests([card, *files])}


@flow(name="training_pipeline", log_prints=True)
def training_pipeline(
    params_path: str = "params.yaml", overrides: list[str] | None = None, root: str = ".", collect: bool = True
) -> dict[str, Any]:
    """[collect ->] train -> evaluate -> select-best -> export, on the project in ``root``; collect when the run
    trains on the dataset it collects (:func:`collects_its_dataset`) and ``collect`` (false: the caller just did)."""
    overrides = list(overrides or [])
    root = str(use_project_folder(root))  # the user's modules (an env of their own) import from it
    params = load_params(params_path, overrides)
    options = {**retry_options(params.deploy), **cache_options(root)}
    stages: dict[str, Any] = {}
    if collect and collects_its_dataset(params, Path(root)):
        stages["collect"] = collect_task.with_options(**options)(params_path, overrides, root)
    trained = train_task.with_options(**options)(params_path, overrides, root)
    if params.deploy.task_runner == "dask":  # a task run per checkpoint, on Dask worker processes
        from flows.evaluate import evaluate_on_task_runner

        evaluated = evaluate_on_task_runner(params_path, overrides, root)
    else:
        evaluated = evaluate_task.with_options(**options)(params_path, overrides, root, trained)
    # Each stage's upstream results (content digests of their outputs) are part of its cache key.
    after_evaluate = {"train": trained, "evaluate": evaluated}
    selected = select_task.with_options(**options)(params_path, overrides, root, after_evaluate)
    exported = export_task.with_options(**options)(params_path, overrides, root, {"train": trained, "select": selected})
    publish_artifacts(Path(root), params.name)
    get_run_logger().info("exported model card: %s", exported["model_card"])
    return {**stages, "train": trained, "evaluate": evaluated, "select": selected, "export": exported}


def publish_artifacts(root: Path, name: str) -> None:
    """A markdown summary and a table of evaluation results, visible in the Prefect UI."""
    layout = Layout(root, name)
    selection = read_json(layout.selection)
    card = read_json(layout.export / "model_card.json")
    test, validation = selection["test"], selection["validation"]
    places = interval_decimals(test["mean_return"], test["ci95_low"], test["ci95_high"])
    mean, low, high, iqm = (score(test[key], places) for key in ("mean_return", "ci95_low", "ci95_high", "iqm_return"))
    create_markdown_artifact(
        key=f"training-summary-{name}".lower().replace("_", "-").replace(".", "-"),
        markdown=(
            f"# {card['algorithm']} on {card['env']['id']} (`{name}`)\n\n"
            f"Selected `{selection['checkpoint']}`: test mean return **{mean}** (95% CI {low} to {high}, IQM {iqm}) "
            f"over {test['episodes']} test episodes; validation {validation['metric']} {score(validation['value'])} "
            f"over {validation['episodes']} episodes (selection used validation, the score is reported on test).\n\n"
            f"Reason: {selection['reason']}.\n\nExported: {', '.join(card['files'])} in `{layout.export}`."
        ),
        description="What was trained, the selected model and its score",
    )
    candidates = read_json(layout.evaluations)["candidates"]
    create_table_artifact(
        key=f"evaluations-{name}".lower().replace("_", "-").replace(".", "-"),
        table=[
            {
                k: c[k]
                for k in (
                    "checkpoint",
                    "step",
                    "step_unit",
                    "mean_return",
                    "iqm_return",
                    "ci95_low",
                    "ci95_high",
                    "std_return",
                    "min_return",
                    "max_return",
                )
            }
            for c in candidates
        ],
        description="Validation scores of every checkpoint of the run (the evaluate stage)",
    )
