"""Checkpoint evaluation on a Prefect task runner: a task run per checkpoint, gathered into evaluations.json.

``deploy.task_runner: dask`` runs these tasks on prefect-dask's DaskTaskRunner (``flows/task_runners.py``).
Each task calls ``rlcore.stages.evaluate_checkpoint``, so the file written is the one ``rlcore evaluate`` writes.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from prefect import flow, task

from flows.task_runners import dask_task_runner, retry_options
from rlcore.common.files import sha256_file
from rlcore.common.project import use_project_folder
from rlcore.params import load_params
from rlcore.stages import checkpoints_to_evaluate, evaluate_checkpoint, write_evaluations


@task(name="evaluate-checkpoint")
def evaluate_checkpoint_task(
    params_path: str, overrides: list[str], root: str, checkpoint: str, seed: int | None = None
) -> dict[str, Any]:
    return evaluate_checkpoint(load_params(params_path, overrides), Path(root), Path(checkpoint), seed)


@flow(name="evaluate_checkpoints")
def evaluate_checkpoints(
    params_path: str = "params.yaml", overrides: list[str] | None = None, root: str = "."
) -> dict[str, str]:
    """Evaluate every checkpoint of the run, a task run each, and write ``reports/<name>/evaluations.json``."""
    overrides = list(overrides or [])
    root = str(use_project_folder(root))  # the user's modules (an env of their own) import from it
    params = load_params(params_path, overrides)
    checkpoints = checkpoints_to_evaluate(params, Path(root))
    evaluate = evaluate_checkpoint_task.with_options(**retry_options(params.deploy))
    futures = [
        evaluate.with_options(task_run_name=f"evaluate-{path.stem}" + ("" if seed is None else f"-seed-{seed}")).submit(
            params_path, overrides, root, str(path), seed
        )
        for seed, path in checkpoints
    ]
    candidates = [future.result() for future in futures]  # in checkpoint order, as evaluate_stage writes them
    path = write_evaluations(params, Path(root), candidates)
    return {"evaluations": str(path), "sha256": sha256_file(path)}


def evaluate_on_task_runner(params_path: str, overrides: list[str], root: str) -> dict[str, str]:
    """Run :func:`evaluate_checkpoints` (as a subflow when called in a flow) on the configured Dask runner."""
    deploy = load_params(params_path, overrides).deploy
    return evaluate_checkpoints.with_options(task_runner=dask_task_runner(deploy))(params_path, overrides, root)
