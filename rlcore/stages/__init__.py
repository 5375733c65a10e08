"""The pipeline's stages as plain functions, one module per DVC stage: params and a project root in, paths out.

No Prefect, no DVC: ``rlcore <stage>`` (used by dvc.yaml) and the Prefect tasks in ``flows/`` both call these.
Each stage reads only the params keys :data:`STAGE_PARAMS` lists for it (dvc.yaml's ``params``, flows' cache keys).
A name is imported from its stage module when first used, so ``rlcore train`` does not import the select stage's
statistics (scipy, rliable) or the collect stage's Parquet writer: each ``rlcore`` process starts faster.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rlcore.stages.collect import collect_shard, collect_stage, merge_collected_shards, shard_path
    from rlcore.stages.evaluate import checkpoints_to_evaluate, evaluate_checkpoint, evaluate_stage, write_evaluations
    from rlcore.stages.export import export_stage
    from rlcore.stages.select import select_stage
    from rlcore.stages.stage_params import STAGE_PARAMS
    from rlcore.stages.train import train_stage

_MODULE_OF = {
    "STAGE_PARAMS": "stage_params",
    "checkpoints_to_evaluate": "evaluate",
    "collect_shard": "collect",
    "collect_stage": "collect",
    "evaluate_checkpoint": "evaluate",
    "evaluate_stage": "evaluate",
    "export_stage": "export",
    "merge_collected_shards": "collect",
    "select_stage": "select",
    "shard_path": "collect",
    "train_stage": "train",
    "write_evaluations": "evaluate",
}
"""Each public name -> the stage module that defines it."""

__all__ = [
    "STAGE_PARAMS",
    "checkpoints_to_evaluate",
    "collect_shard",
    "collect_stage",
    "evaluate_checkpoint",
    "evaluate_stage",
    "export_stage",
    "merge_collected_shards",
    "select_stage",
    "shard_path",
    "train_stage",
    "write_evaluations",
]


def __getattr__(name: str) -> Any:
    module = _MODULE_OF.get(name)
    if module is None:
        raise AttributeError(f"module 'rlcore.stages' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"rlcore.stages.{module}"), name)
    globals()[name] = value
    return value
