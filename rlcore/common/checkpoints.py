"""Checkpoints: one file per evaluated training step, holding everything a run needs to resume.

A checkpoint is a ``torch.save`` of plain containers and tensors, read back with
``weights_only=True`` (no pickle of arbitrary objects). Non-tensor metadata (params, spaces,
counters, the NumPy RNG state) travels as a JSON string inside it.

Layout of ``runs/<name>/checkpoints/``: ``step_<step:010d>.pt``; the highest step is the latest. A step counts
what the run's budget counts (``step_unit``): env steps for online runs, gradient steps for offline runs.
"""

from __future__ import annotations

import hashlib
import json
import re
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import torch

from rlcore.common.errors import CheckpointError, describe_exception, file_problem
from rlcore.common.files import atomic_path, json_safe

FORMAT = "rlcore-checkpoint"
VERSION = 1
_NAME = re.compile(r"^step_(\d{10})\.pt$")


StepUnit = Literal["env_steps", "gradient_steps"]
"""What a run's step counter counts: env steps (online runs) or gradient steps (offline runs)."""


@dataclass(frozen=True)
class Checkpoint:
    """A loaded checkpoint. ``tensors`` holds state dicts (``policy``, ``algorithm``, ``rng``)."""

    path: Path
    algo: str
    step: int
    """The run's step count when it was saved, in ``step_unit``."""
    step_unit: StepUnit
    meta: dict[str, Any]
    tensors: dict[str, Any]


def checkpoint_path(directory: Path, step: int) -> Path:
    return Path(directory) / f"step_{step:010d}.pt"


def list_checkpoints(directory: Path) -> list[tuple[int, Path]]:
    """``(step, path)`` of every checkpoint in ``directory``, oldest first."""
    directory = Path(directory)
    if not directory.is_dir():
        return []
    found = []
    for path in directory.iterdir():
        match = _NAME.match(path.name)
        if match:
            found.append((int(match.group(1)), path))
    return sorted(found)


def content_digest(meta_json: str, tensors: dict[str, Any]) -> str:
    """sha256 of a checkpoint's metadata and every value in its state dicts (tensors by dtype, shape and bytes),
    in key order: stored in the file, so bytes garbled anywhere in it are found at load."""
    digest = hashlib.sha256(meta_json.encode())

    def visit(value: Any) -> None:
        if isinstance(value, torch.Tensor):
            flat = value.detach().cpu().contiguous().reshape(-1)  # a GPU learner's optimizer state too
            digest.update(f"T{value.dtype}{tuple(value.shape)}".encode())
            digest.update(flat.view(torch.uint8).numpy().tobytes() if flat.numel() else b"")
        elif isinstance(value, dict):
            for key in sorted(value, key=str):
                digest.update(f"K{key!r}".encode())
                visit(value[key])
        elif isinstance(value, list | tuple):
            digest.update(f"L{len(value)}".encode())
            for item in value:
                visit(item)
        else:
            digest.update(f"V{value!r}".encode())

    visit(tensors)
    return digest.hexdigest()


def save_checkpoint(
    path: Path, algo: str, step: int, step_unit: StepUnit, meta: dict[str, Any], tensors: dict[str, Any]
) -> None:
    """Write atomically: a crash mid-write leaves the previous checkpoints untouched and loadable."""
    meta_json = json.dumps(json_safe(meta), allow_nan=False)  # a diverged run's NaN scores become null
    payload = {
        "format": FORMAT,
        "version": VERSION,
        "algo": algo,
        "step": step,
        "step_unit": step_unit,
        "meta": meta_json,
        "content_sha256": content_digest(meta_json, tensors),
        **tensors,
    }
    # Through a file object, not the path: torch.save names the zip's records after the file it writes (here the
    # temporary name, which holds the PID), so the same checkpoint saved twice would differ in its bytes and DVC
    # would see a new selected model (and re-run collect and the offline branch) when the same one is selected again.
    with atomic_path(path) as tmp, open(tmp, "wb") as handle:
        torch.save(payload, handle)


def load_problem(exc: BaseException) -> str:
    """Why ``torch.load(weights_only=True)`` failed, on one line, without torch's advice to retry with
    ``weights_only=False``: that runs whatever code the file holds, unsafe for a file of unknown origin."""
    text = str(exc)
    if "WeightsUnpickler error:" in text:  # a pickle holding more than tensors, or no pickle at all
        lines = [line.strip() for line in text.split("WeightsUnpickler error:", 1)[1].splitlines() if line.strip()]
        detail = lines[0].split(". ")[0].rstrip(".")[:200] if lines else ""  # the next lines are torch's advice
        return (
            f"not a file of tensors only ({detail})"
            if detail and "weights_only" not in detail
            else "not a file of tensors only"
        )
    if "weights_only" in text:  # any other form of the same advice
        return type(exc).__name__
    return describe_exception(exc, limit=200) if text.strip() else f"{type(exc).__name__} (empty or cut short?)"


def load_checkpoint(path: Path, expected_algo: str | None = None) -> Checkpoint:
    """Load and check a checkpoint; every problem is a one-line :class:`CheckpointError` naming the file."""
    path = Path(path)
    problem = file_problem(path, "checkpoint")
    if problem is not None:
        raise CheckpointError(f"{path}: {problem}")
    try:
        with warnings.catch_warnings():
            # A foreign or corrupt file may announce a pickle protocol torch warns about on stderr; the one-line
            # error below (or the file loading after all) says what matters.
            warnings.filterwarnings("ignore", message="Detected pickle protocol", category=UserWarning)
            payload = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # torch raises several types for truncated or foreign files
        raise CheckpointError(
            f"{path}: not a readable checkpoint (truncated or corrupt?): {load_problem(exc)}"
        ) from None
    if not isinstance(payload, dict) or payload.get("format") != FORMAT:
        raise CheckpointError(f"{path}: not an rlcore checkpoint")
    if payload.get("version") != VERSION:
        raise CheckpointError(
            f"{path}: checkpoint format version {payload.get('version')!r}, this rlcore reads version {VERSION}"
        )
    algo = payload["algo"]
    if expected_algo is not None and algo != expected_algo:
        raise CheckpointError(f"{path}: checkpoint was written by algorithm {algo!r}, params say {expected_algo!r}")
    header = {"format", "version", "algo", "step", "step_unit", "meta", "content_sha256"}
    tensors = {k: v for k, v in payload.items() if k not in header}
    recorded = payload.get("content_sha256")
    if recorded is not None and recorded != content_digest(payload["meta"], tensors):
        raise CheckpointError(f"{path}: corrupt checkpoint (its content does not match the hash stored in it)")
    unit = payload.get("step_unit", "env_steps")
    if "step" not in payload or unit not in ("env_steps", "gradient_steps"):
        raise CheckpointError(f"{path}: checkpoint has no step count (written by an older rlcore?)")
    return Checkpoint(path, algo, int(payload["step"]), unit, json.loads(payload["meta"]), tensors)
