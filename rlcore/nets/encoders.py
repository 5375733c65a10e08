"""Observation encoders: what turns a batch of observations into the flat features every head reads.

Chosen from the observation space (``policy.encoder: auto``), or named in params:

| space | ``auto`` | features |
|---|---|---|
| float ``Box``, any shape | :class:`Flatten` | the (normalized) values flattened: the MLP input as ever |
| ``uint8``/``bool`` ``Box``, 2-3 axes (image) | :class:`NatureCNN` (sides >= 36), else :class:`SmallCNN` | 512, 128 |
| ``Discrete(n)`` | :class:`OneHot` | n |
| ``MultiBinary``, ``MultiDiscrete`` (``Dict`` keys) | :class:`Flatten`, :class:`OneHot` per sub-space | n, sum(nvec) |
| ``Dict`` (packed: ``rlcore.envs.observations``) | :class:`DictEncoder`: one of the above per key | the sum |

``policy.encoder`` = ``flatten``, ``nature_cnn`` or ``small_cnn`` overrides the choice for images (and, for a CNN,
also for any 3-axis float Box, e.g. preprocessed float frames); vectors and discrete values keep theirs.
``policy.image_channels`` says where an image's channel axis is; ``auto`` takes the first axis when it is shorter
than the last ((4, 84, 84) from ``FrameStackObservation``), else the last ((84, 84, 3), MinAtar's (10, 10, C)).

Images are cast to float32 inside the network and ``uint8`` ones scaled by 1/255 there, so buffers keep raw frames
and an exported model takes them as the env gives them. Encoders take raw (or normalized) observations,
(B, *obs_shape), and return (B, out_features) float32.
"""

from __future__ import annotations

import math
from typing import Literal

import gymnasium as gym
import numpy as np
import torch
from gymnasium import spaces
from torch import nn

from rlcore.common.errors import ConfigError
from rlcore.envs.observations import PackedDict, is_image, layout

EncoderName = Literal["auto", "flatten", "nature_cnn", "small_cnn"]
ChannelOrder = Literal["auto", "first", "last"]

NATURE_MIN_SIDE = 36
"""The smallest image side the Nature CNN's three convolutions (8/4, 4/2, 3/1) leave at least one pixel of."""


class Encoder(nn.Module):
    """Observations (B, *shape) -> features (B, out_features) float32."""

    out_features: int


class Flatten(Encoder):
    """The values flattened, cast to float32 and multiplied by ``scale`` (1/255 for ``uint8`` frames)."""

    def __init__(self, shape: tuple[int, ...], scale: float = 1.0) -> None:
        super().__init__()
        self.out_features = int(np.prod(shape)) if shape else 1
        self.scale = scale

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        features = obs.to(torch.float32).flatten(start_dim=1)
        return features * self.scale if self.scale != 1.0 else features


class OneHot(Encoder):
    """Integer values (B, k) or (B,), value i of ``sizes[i]`` choices from ``starts[i]``, as concatenated one-hot
    vectors, (B, sum(sizes)). Written as a comparison with a range (not ``F.one_hot``) so it exports to ONNX."""

    offsets: torch.Tensor
    choices: torch.Tensor

    def __init__(self, sizes: list[int], starts: list[int]) -> None:
        super().__init__()
        self.out_features = int(sum(sizes))
        self.register_buffer("offsets", torch.tensor(starts, dtype=torch.int64), persistent=False)
        # Position j of the output is choice choices[j] of sub-value owner[j].
        self.register_buffer("choices", torch.cat([torch.arange(n) for n in sizes]), persistent=False)
        self.owner = [i for i, n in enumerate(sizes) for _ in range(n)]

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        values = obs.reshape(obs.shape[0], -1).to(torch.int64) - self.offsets  # (B, k); shape[0]: a dynamic batch
        return (values[:, self.owner] == self.choices).to(torch.float32)


def _conv(in_channels: int, out_channels: int, kernel: int, stride: int) -> nn.Conv2d:
    layer = nn.Conv2d(in_channels, out_channels, kernel, stride)
    nn.init.orthogonal_(layer.weight, math.sqrt(2))
    nn.init.zeros_(layer.bias)  # type: ignore[arg-type]  # Conv2d has a bias unless bias=False
    return layer


def _linear(in_features: int, out_features: int) -> nn.Linear:
    layer = nn.Linear(in_features, out_features)
    nn.init.orthogonal_(layer.weight, math.sqrt(2))
    nn.init.zeros_(layer.bias)
    return layer


class ImageEncoder(Encoder):
    """A CNN over images (B, H, W[, C]) or (B, C, H, W) as the env gives them: the channel axis is moved first,
    a missing one added, values cast to float32 and scaled (1/255 for ``uint8``) before the convolutions."""

    def __init__(self, shape: tuple[int, ...], channels_last: bool, scale: float) -> None:
        super().__init__()
        self.channels_last = channels_last and len(shape) == 3
        self.grayscale = len(shape) == 2
        self.scale = scale
        if self.grayscale:
            self.chw = (1, *shape)
        else:
            self.chw = (shape[2], shape[0], shape[1]) if self.channels_last else tuple(shape)

    def images(self, obs: torch.Tensor) -> torch.Tensor:
        """(B, C, H, W) float32, scaled."""
        x = obs.to(torch.float32)
        if self.grayscale:
            x = x.unsqueeze(1)
        elif self.channels_last:
            x = x.permute(0, 3, 1, 2)
        return x * self.scale if self.scale != 1.0 else x

    def _flat_size(self, convs: nn.Module) -> int:
        with torch.no_grad():
            return int(convs(torch.zeros(1, *self.chw)).shape[1])


class NatureCNN(ImageEncoder):
    """Mnih et al. (2015): 32 8x8/4, 64 4x4/2, 64 3x3/1 convolutions, then a 512-unit layer (ReLU throughout)."""

    def __init__(self, shape: tuple[int, ...], channels_last: bool, scale: float) -> None:
        super().__init__(shape, channels_last, scale)
        self.convs = nn.Sequential(
            _conv(self.chw[0], 32, 8, 4),
            nn.ReLU(),
            _conv(32, 64, 4, 2),
            nn.ReLU(),
            _conv(64, 64, 3, 1),
            nn.ReLU(),
            nn.Flatten(),
        )
        self.out_features = 512
        self.linear = nn.Sequential(_linear(self._flat_size(self.convs), 512), nn.ReLU())

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return self.linear(self.convs(self.images(obs)))


class SmallCNN(ImageEncoder):
    """Young & Tian's MinAtar network (2019): one 16-filter 3x3 convolution (stride 1), then a 128-unit layer."""

    def __init__(self, shape: tuple[int, ...], channels_last: bool, scale: float) -> None:
        super().__init__(shape, channels_last, scale)
        self.convs = nn.Sequential(_conv(self.chw[0], 16, 3, 1), nn.ReLU(), nn.Flatten())
        self.out_features = 128
        self.linear = nn.Sequential(_linear(self._flat_size(self.convs), 128), nn.ReLU())

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return self.linear(self.convs(self.images(obs)))


class DictEncoder(Encoder):
    """A packed ``Dict`` observation (B, D): each key's slice reshaped and encoded by its own encoder, the features
    concatenated in key order."""

    def __init__(self, space: PackedDict, choice: EncoderName, channels: ChannelOrder) -> None:
        super().__init__()
        self.parts = layout(space.dict_space)
        encoders = {part.key: _encoder(part.space, choice, channels, f"key {part.key!r}") for part in self.parts}
        self.encoders = nn.ModuleDict(encoders)
        self.out_features = sum(encoder.out_features for encoder in encoders.values())

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        features = [
            self.encoders[part.key](obs[:, part.start : part.stop].reshape(obs.shape[0], *part.shape))
            for part in self.parts
        ]
        return torch.cat(features, dim=1)


def build_encoder(space: gym.Space, choice: EncoderName = "auto", channels: ChannelOrder = "auto") -> Encoder:
    """The encoder for observations of ``space`` (``policy.encoder``, ``policy.image_channels``). A choice that does
    not fit the space (a CNN on a vector, an image too small for the Nature CNN) is refused in one line."""
    if isinstance(space, PackedDict):
        return DictEncoder(space, choice, channels)
    shape = tuple(space.shape or ())
    if choice in ("nature_cnn", "small_cnn") and not (is_image(space) or len(shape) == 3):
        raise ConfigError(f"policy.encoder: {choice} needs images (H, W[, C]), but the observations are {space}")
    return _encoder(space, choice, channels, "observations")


def _encoder(space: gym.Space, choice: EncoderName, channels: ChannelOrder, what: str) -> Encoder:
    if isinstance(space, spaces.Discrete):
        return OneHot([int(space.n)], [int(space.start)])
    if isinstance(space, spaces.MultiDiscrete):
        return OneHot([int(n) for n in space.nvec.reshape(-1)], [int(s) for s in space.start.reshape(-1)])
    if isinstance(space, spaces.MultiBinary):
        return Flatten(tuple(space.shape))
    assert isinstance(space, spaces.Box)
    shape = tuple(space.shape)
    scale = 1 / 255 if space.dtype == np.uint8 else 1.0
    cnn = choice in ("nature_cnn", "small_cnn") and (is_image(space) or len(shape) == 3)
    if not (is_image(space) or cnn) or choice == "flatten":
        return Flatten(shape, scale if is_image(space) else 1.0)
    channels_last = _channels_last(shape, channels)
    height, width = _spatial(shape, channels_last)
    name = choice if choice != "auto" else "nature_cnn" if min(height, width) >= NATURE_MIN_SIDE else "small_cnn"
    if name == "nature_cnn" and min(height, width) < NATURE_MIN_SIDE:
        raise ConfigError(
            f"policy.encoder: nature_cnn needs images of at least {NATURE_MIN_SIDE}x{NATURE_MIN_SIDE} pixels, "
            f"but the {what} are {height}x{width} (shape {shape}); use small_cnn"
        )
    if name == "small_cnn" and min(height, width) < 3:
        raise ConfigError(f"policy.encoder: small_cnn needs images of at least 3x3 pixels, got {height}x{width}")
    return (NatureCNN if name == "nature_cnn" else SmallCNN)(shape, channels_last, scale)


def _channels_last(shape: tuple[int, ...], channels: ChannelOrder) -> bool:
    if len(shape) == 2 or channels == "last":
        return True
    if channels == "first":
        return False
    return not shape[0] < shape[2]


def _spatial(shape: tuple[int, ...], channels_last: bool) -> tuple[int, int]:
    if len(shape) == 2 or channels_last:
        return int(shape[0]), int(shape[1])
    return int(shape[1]), int(shape[2])


def float_mask(space: gym.Space) -> np.ndarray | None:
    """Which elements of an observation the running normalizer applies to: float vector values only, never images
    or integers. None: all of them (a float Box, today's behaviour); an all-False mask: none."""
    if isinstance(space, PackedDict):
        mask = np.zeros(space.shape, dtype=bool)
        for part in layout(space.dict_space):
            leaf = part.space
            mask[part.start : part.stop] = isinstance(leaf, spaces.Box) and np.issubdtype(leaf.dtype, np.floating)
        return mask
    if isinstance(space, spaces.Box) and np.issubdtype(space.dtype, np.floating):
        return None
    return np.zeros(tuple(space.shape or ()), dtype=bool)
