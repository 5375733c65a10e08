"""Where and in which precision the networks train: ``train.device`` and ``train.precision``.

Mixed precision runs the losses' forward passes under ``torch.autocast`` (bfloat16, or float16 with a gradient
scaler). Weights, optimizer moments, rollouts and acting stay float32, so a checkpoint or an export does not depend
on the precision a run trained in.

On ``cuda`` only the learner moves: the algorithm trains a copy of the policy on the GPU (:func:`learner_copy`),
fed each rollout moved there whole, while acting, evaluation, checkpoints and export keep the CPU policy, synced
from the copy after every update, the observation statistics the other way before it (:func:`copy_weights`). Envs
step on the CPU either way, and a CPU policy acting on a few observations at a time avoids a host-device round trip
per env step.
"""

from __future__ import annotations

import contextlib
import copy
import functools
from typing import Any

import torch
from torch import nn

from rlcore.common.errors import ConfigError
from rlcore.config.sections import MemoryConfig, TrainConfig

AUTOCAST_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}


def training_device(train: TrainConfig) -> torch.device:
    """``train.device`` resolved; ``cuda`` where torch sees no CUDA GPU is refused in one line. ``auto`` is the CPU:
    small MLPs train fastest there (SB3 says the same of MLP policies), and no GPU has been measured yet to say
    where one pays off."""
    if train.device == "cuda" and not torch.cuda.is_available():
        raise ConfigError("train.device: cuda, but torch sees no CUDA GPU on this machine (use auto or cpu)")
    return torch.device("cuda" if train.device == "cuda" else "cpu")


@functools.cache
def autocast_runs(cell: str, precision: str, device_type: str) -> bool:
    """Whether torch on this machine runs a recurrent ``cell`` (``lstm``, ``gru``) under ``precision``'s autocast on
    ``device_type``. Some CPUs' oneDNN has no bfloat16 or float16 LSTM ("could not create a primitive descriptor for
    the LSTM forward propagation primitive": an AVX512-FP16 Xeon and an AMD EPYC, torch 2.13, 2026-11-29). It fails
    only on a batch whose sequences all have one length (packed sequences of unequal lengths take another kernel),
    so in training it struck at the first minibatch without an episode start, or the first burn-in, not at once."""
    module = (nn.LSTM if cell == "lstm" else nn.GRU)(4, 8).to(device_type)
    try:
        with torch.autocast(device_type, dtype=AUTOCAST_DTYPES[precision]):
            module(torch.zeros(3, 2, 4, device=device_type))
    except RuntimeError:
        return False
    return True


def check_precision_support(train: TrainConfig, memory: MemoryConfig | None, device: torch.device) -> None:
    """Refuse in one line, before a run starts, mixed precision with a recurrent core that torch cannot run in it on
    ``device`` (:func:`autocast_runs`): the training session's check, as ``train.device: cuda`` without a GPU is, so
    evaluate, select and export of the run (which act in float32) work on any machine."""
    if train.precision == "fp32" or memory is None or autocast_runs(memory.type, train.precision, device.type):
        return
    other = "gru" if memory.type == "lstm" else "lstm"
    instead = f"policy.memory.type: {other}, or " if autocast_runs(other, train.precision, device.type) else ""
    raise ConfigError(
        f"train.precision: {train.precision} with policy.memory.type: {memory.type}: torch on this "
        f"{device.type.upper()} has no {str(AUTOCAST_DTYPES[train.precision]).removeprefix('torch.')} "
        f"{memory.type.upper()} (its oneDNN cannot build one); set {instead}train.precision: fp32"
    )


def learner_copy(policy: nn.Module, device: torch.device) -> nn.Module:
    """The policy an algorithm trains on ``device``: ``policy`` itself on the CPU, a copy moved there otherwise."""
    if device.type == "cpu":
        return policy
    return copy.deepcopy(policy).to(device)


def copy_weights(source: nn.Module, target: nn.Module) -> None:
    """``target``'s parameters and buffers (normalizer statistics included) set to ``source``'s, across devices;
    nothing when they are one module (training on the CPU)."""
    if source is not target:
        target.load_state_dict(source.state_dict())


class Precision:
    """How an algorithm computes its losses: ``autocast()`` around their forward passes, and ``scaler`` around
    ``backward`` and the optimizer step (``rlcore.algos.base.Algorithm.accumulate`` / ``apply_gradients``).

    fp32: no autocast, a disabled scaler (``scale`` returns the loss, ``step`` is ``optimizer.step``). bf16: autocast,
    no scaler (bfloat16 has float32's range). fp16: autocast and a dynamic loss scale, halved after a step whose
    gradients overflowed (that step is skipped) and doubled after 2000 good ones (torch's ``GradScaler``). fp16
    runs on the CPU too, slowly (no half-precision matrix units there): it is meant for CUDA; bf16 is the CPU's.
    """

    def __init__(self, name: str = "fp32", device: torch.device | None = None) -> None:
        if name not in ("fp32", *AUTOCAST_DTYPES):
            raise ConfigError(f"train.precision: expected fp32, bf16 or fp16, got {name!r}")
        self.name = name
        self.device_type = (device or torch.device("cpu")).type
        self.scaler = torch.amp.GradScaler(self.device_type, enabled=name == "fp16")

    def autocast(self) -> Any:
        """A context for the losses' forward passes: autocast to bfloat16 or float16, or nothing at fp32."""
        if self.name == "fp32":
            return contextlib.nullcontext()
        return torch.autocast(self.device_type, dtype=AUTOCAST_DTYPES[self.name])

    def state_dict(self) -> dict[str, Any]:
        """The loss scale and its growth counter (fp16), so a resumed run scales as the run it continues; empty
        otherwise."""
        return self.scaler.state_dict() if self.scaler.is_enabled() else {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if self.scaler.is_enabled() and state:
            self.scaler.load_state_dict(state)
