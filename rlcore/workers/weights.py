"""Policy weights as one flat float64 vector: the form they travel in to actors and rollout workers."""

from __future__ import annotations

import numpy as np
import torch
from torch import nn


class WeightsCodec:
    """A policy's ``state_dict`` as one flat float64 vector (float32 weights and float64 statistics both fit
    exactly), so weights can sit in one shared-memory block or one message. Any ``nn.Module`` works: it needs
    only ``state_dict`` and ``load_state_dict``."""

    def __init__(self, policy: nn.Module) -> None:
        state = policy.state_dict()
        self.names = list(state)
        self.shapes = [tuple(value.shape) for value in state.values()]
        self.dtypes = [value.dtype for value in state.values()]
        self.sizes = [int(value.numel()) for value in state.values()]
        self.size = sum(self.sizes)

    def encode(self, policy: nn.Module) -> np.ndarray:
        """(size,) float64."""
        with torch.no_grad():
            return torch.cat([value.reshape(-1).double() for value in policy.state_dict().values()]).numpy()

    def decode_into(self, policy: nn.Module, flat: np.ndarray) -> None:
        parts = torch.from_numpy(np.asarray(flat, dtype=np.float64)).split(self.sizes)
        state = {
            name: part.reshape(shape).to(dtype)
            for name, part, shape, dtype in zip(self.names, parts, self.shapes, self.dtypes, strict=True)
        }
        policy.load_state_dict(state)
