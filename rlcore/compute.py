"""Where and in which precision the networks train: ``train.device`` and ``train.precision``.

Mixed precision runs the losses' forward passes under ``torch.autocast`` in bfloat16. Weights, optimizer moments,
rollouts and acting stay float32, so a checkpoint or an export does not depend on the precision a run trained in.
"""

from __future__ import annotations

import contextlib
from typing import Any

import torch

from rlcore.config import TrainConfig
from rlcore.errors import ConfigError


def check_device(train: TrainConfig) -> None:
    """Refuse (one line) a device or precision this machine cannot run: CUDA without a GPU, fp16 without CUDA.

    The networks train on the CPU (``auto`` and ``cpu``; SB3 likewise recommends the CPU for MLP policies). ``cuda``
    is refused on every machine for now (CUDA training is not implemented), rather than silently training on the
    CPU.
    """
    if train.device == "cuda" and not torch.cuda.is_available():
        raise ConfigError("train.device: cuda, but torch sees no CUDA GPU on this machine (use auto or cpu)")
    if train.device == "cuda":
        raise ConfigError("train.device: cuda training is not implemented yet (networks train on the CPU: use auto)")
    if train.precision == "fp16":
        raise ConfigError(
            "train.precision: fp16 needs CUDA (with a gradient scaler) and training runs on the CPU: use bf16"
        )


def training_device(train: TrainConfig) -> torch.device:
    """``train.device`` resolved (after :func:`check_device`): the CPU."""
    check_device(train)
    return torch.device("cpu")


class Precision:
    """How an algorithm computes its losses: ``autocast()`` around their forward passes (bf16), or nothing (fp32).

    fp16 would also need a gradient scaler around ``backward`` and the optimizer step; it is refused until training
    runs on CUDA (:func:`check_device`), so there is none here.
    """

    def __init__(self, name: str = "fp32", device: torch.device | None = None) -> None:
        if name not in ("fp32", "bf16"):
            raise ConfigError(f"train.precision: {name} is not available here (fp32 or bf16)")
        self.name = name
        self.device_type = (device or torch.device("cpu")).type

    def autocast(self) -> Any:
        """A context for the losses' forward passes: autocast to bfloat16, or nothing at fp32."""
        if self.name == "fp32":
            return contextlib.nullcontext()
        return torch.autocast(self.device_type, dtype=torch.bfloat16)
