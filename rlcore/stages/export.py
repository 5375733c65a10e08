"""The export stage: the selected model to ONNX and torch.export, checked against torch, with a model card (a run
with ``policy.groups``: one per group, ``rlcore.stages.export_groups``)."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import torch

from rlcore.common.checkpoints import load_checkpoint
from rlcore.common.errors import RLCoreError
from rlcore.common.files import check_target, read_json, remove_stale, shown_path
from rlcore.common.stage_paths import Layout, export_files
from rlcore.config.sections import Params
from rlcore.evaluation.export import ExportOptions, export_policy, model_card, write_model_card
from rlcore.nets.grouped import GroupedActorCritic
from rlcore.registry import policy_from_checkpoint
from rlcore.stages.export_groups import export_groups
from rlcore.trainers.run_directory import command_line

log = logging.getLogger("rlcore")


def export_stage(params: Params, root: Path) -> Path:
    """Export ``models/<name>/policy.pt`` to ``export/`` (ONNX, torch.export, model card); returns the card's path."""
    torch.set_num_threads(params.torch_threads)
    layout = Layout(root, params.name)
    for output in export_files(layout.export):  # a folder or a pipe in the way is refused before the model is read
        check_target(output)
    checkpoint = load_checkpoint(layout.best_policy)
    if not layout.selection.is_file():
        raise RLCoreError(f"{layout.selection}: not found; run `rlcore select` first")
    selection = read_json(layout.selection)
    policy = policy_from_checkpoint(checkpoint)
    cfg = params.export
    if not (cfg.onnx or cfg.torch_export):
        raise RLCoreError("export.onnx and export.torch_export are both false: nothing to export")
    options = ExportOptions(
        onnx=cfg.onnx,
        torch_export=cfg.torch_export,
        parity_observations=cfg.parity_observations,
        parity_atol=cfg.parity_atol,
        parity_rtol=cfg.parity_rtol,
        opset=cfg.opset,
    )
    if isinstance(policy, GroupedActorCritic):  # policy.groups: one model per group
        path = export_groups(policy, checkpoint, selection, options, layout.export, command_line(), root)
        log.info("exported groups %s", ", ".join(policy.layout.members()))
        return path
    result = export_policy(policy, checkpoint.meta, layout.export, options)
    card = model_card(checkpoint.meta, selection, result, command_line(), root)
    for stale in {"policy.onnx", "policy.pt2"} - set(result.files):
        remove_stale(layout.export / stale)
    path = write_model_card(layout.export, card)
    log.info("exported %s to %s: %s", ", ".join(result.files), shown_path(layout.export), parity_words(result.parity))
    return path


def parity_words(parity: dict[str, Any]) -> str:
    """The parity check as a sentence: which files matched torch on how many inputs, and by how much."""
    formats = [name for name in ("onnx", "torch_export") if f"{name}_max_abs_diff" in parity]
    if not formats:
        return "no parity check ran"
    worst_abs = max(parity[f"{name}_max_abs_diff"] for name in formats)
    worst_share = max(parity[f"{name}_max_allowed_fraction"] for name in formats)
    matched = " and ".join({"onnx": "ONNX", "torch_export": "torch.export"}[name] for name in formats)
    return (
        f"the {matched} model{'s' if len(formats) > 1 else ''} matched the torch policy on "
        f"{parity['observations']} observations (largest difference {worst_abs:.2g}, "
        f"{worst_share * 100:.2g}% of what export.parity_atol {parity['atol']:g} and export.parity_rtol "
        f"{parity['rtol']:g} allow)"
    )
