"""The warm-start DAG as one Prefect flow: BC from the offline branch, then PPO initialized from the BC model.

    training_pipeline(params.yaml)        the from-scratch run: its selected model is what `collect` rolls out,
                                          and its learning curve the warm-started run's baseline
    retrain_offline(offline.yaml)         collect -> BC -> evaluate -> select-best -> export (models/bc-cartpole)
    training_pipeline(the preset)         PPO with train.init_from: models/bc-cartpole/policy.pt
                                          -> evaluate -> select-best (report beside select.baseline_run) -> export

The same stages as ``dvc repro pipelines/warmstart/dvc.yaml``; each part is the subflow the project already has.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from prefect import flow, get_run_logger

from flows.pipeline import training_pipeline
from flows.retrain import retrain_offline
from rlcore.common.files import read_json


@flow(name="warm_start_pipeline", log_prints=True)
def warm_start_pipeline(
    params_path: str = "configs/ppo-from-bc-cartpole.yaml",
    overrides: list[str] | None = None,
    root: str = ".",
    base_params: str = "params.yaml",
    base_overrides: list[str] | None = None,
    offline_params: str = "offline.yaml",
    offline_overrides: list[str] | None = None,
) -> dict[str, Any]:
    """base pipeline -> collect + offline branch (BC) -> the warm-started pipeline of ``params_path``."""
    base = training_pipeline(params_path=base_params, overrides=list(base_overrides or []), root=root)
    offline = retrain_offline(params_path=offline_params, overrides=list(offline_overrides or []), root=root)
    warm = training_pipeline(params_path=params_path, overrides=list(overrides or []), root=root)
    source = read_json(Path(warm["export"]["model_card"]))["training"]["initialized_from"]
    get_run_logger().info("warm-started from %s (sha256 %s)", source["path"], source["sha256"])
    return {"base": base, "offline": offline, "warm_start": warm, "initialized_from": source}
