"""Retraining on new data: collect a new dataset version, then run the offline branch's pipeline on it.

Each model's card records the dataset it came from (path, sha256 and the MD5 DVC uses), so a scheduled
``retrain_offline`` run leaves a trail of which dataset version produced which model.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from prefect import flow, get_run_logger

from flows.collect import collect_flow
from flows.pipeline import training_pipeline
from rlcore.common.files import read_json


@flow(name="retrain_offline", log_prints=True)
def retrain_offline(
    params_path: str = "offline.yaml", overrides: list[str] | None = None, root: str = "."
) -> dict[str, Any]:
    """collect (from ``collect.policy``) -> train -> evaluate -> select-best -> export, on ``params_path``."""
    overrides = list(overrides or [])
    collected = collect_flow(params_path=params_path, overrides=overrides, root=root)
    trained = training_pipeline(params_path=params_path, overrides=overrides, root=root, collect=False)
    dataset = read_json(Path(trained["export"]["model_card"]))["training"]["dataset"]
    get_run_logger().info("retrained on %s (md5 %s)", dataset["path"], dataset["md5"])
    return {"collect": collected, "pipeline": trained, "dataset_md5": dataset["md5"]}
