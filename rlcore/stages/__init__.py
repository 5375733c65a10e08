"""The pipeline's stages as plain functions, one module per DVC stage: params and a project root in, paths out.

No Prefect, no DVC: ``rlcore <stage>`` (used by dvc.yaml) and the Prefect tasks in ``flows/`` both call these.
Each stage reads only the params keys :data:`STAGE_PARAMS` lists for it (dvc.yaml's ``params``, flows' cache keys).
"""

from rlcore.stages.collect import collect_shard, collect_stage, merge_collected_shards, shard_path
from rlcore.stages.evaluate import checkpoints_to_evaluate, evaluate_checkpoint, evaluate_stage, write_evaluations
from rlcore.stages.export import export_stage
from rlcore.stages.select import select_stage
from rlcore.stages.stage_params import STAGE_PARAMS
from rlcore.stages.train import train_stage

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
