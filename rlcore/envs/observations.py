"""Observation spaces as rlcore stores and feeds them: which spaces it takes, their storage dtype, images, and
``Dict`` observations packed into one flat vector.

| observation space | what a policy gets, (B, ...) | stored as |
|---|---|---|
| ``Box`` of floats, any shape | the values, float32 | float32 |
| ``Box`` of ``uint8`` or ``bool`` (frames, MinAtar's channels) | the raw values (scaled in the network) | its dtype |
| ``Discrete(n, start)`` | the value, (B,) int64 (one-hot in the network) | int64 |
| ``Dict`` of these, ``MultiBinary``, ``MultiDiscrete`` | a :class:`PackedDict` vector, the keys in order | packed |

"Stored" is how rollouts, replay and datasets keep them.

**Packed ``Dict`` observations.** A vector env with a ``Dict`` observation space is wrapped in
:class:`PackDictObservations`: each observation becomes one flat vector, its keys in the ``Dict``'s order (sorted,
as gymnasium orders them), each key's values flattened in C order at a fixed offset (:func:`layout`). The
vector's dtype is ``uint8`` when every key fits in it (``uint8``/``bool`` images, ``MultiBinary``, ``Discrete`` with
values below 256), else ``float32`` (exact for integers below 2**24). Discrete values are stored as they are, not
one-hot. The network unpacks the vector (``rlcore.nets.encoders.DictEncoder``), so one array per step flows through
every buffer, dataset and exported graph; an exported model's card lists the layout, and :func:`pack` builds its
input from a ``Dict`` observation.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from gymnasium import spaces

LEAF_SPACES = (spaces.Box, spaces.Discrete, spaces.MultiBinary, spaces.MultiDiscrete)
"""The spaces a ``Dict`` observation's keys may have (nested ``Dict``/``Tuple`` are refused)."""


class PackedDict(spaces.Box):
    """A ``Dict`` observation space as rlcore sees it: one flat Box over the packed vector (see the module
    docstring), remembering the ``Dict`` it packs (``dict_space``) so the network can unpack it. ``action_mask``:
    its ``"action_mask"`` key is the env's mask of legal actions (``rlcore.envs.action_masks``), which the policy
    applies (:func:`action_mask_slice`)."""

    def __init__(self, dict_space: spaces.Dict, action_mask: bool = False) -> None:
        parts = layout(dict_space)
        dtype = pack_dtype(dict_space)
        low = np.concatenate([_bounds(part.space)[0] for part in parts]).astype(dtype)
        high = np.concatenate([_bounds(part.space)[1] for part in parts]).astype(dtype)
        super().__init__(low=low, high=high, shape=(parts[-1].stop,), dtype=dtype)
        self.dict_space = dict_space
        self.action_mask = action_mask

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, PackedDict)
            and self.dict_space == other.dict_space
            and self.action_mask == other.action_mask
        )

    def __hash__(self) -> int:
        return hash((repr(self.dict_space), self.action_mask))

    def __repr__(self) -> str:
        return f"PackedDict({self.dict_space}{', action_mask=True' if self.action_mask else ''})"


def action_mask_slice(space: gym.Space) -> tuple[int, int] | None:
    """Where the action mask sits in observations of ``space``: ``packed[..., start:stop]`` (one 0/1 value per
    action), or None when the observations carry no mask the policy applies."""
    if not (isinstance(space, PackedDict) and space.action_mask):
        return None
    part = next(part for part in layout(space.dict_space) if part.key == "action_mask")
    return part.start, part.stop


@dataclass(frozen=True)
class Part:
    """One key of a packed ``Dict``: its values are ``packed[..., start:stop]``, reshaped to ``shape``."""

    key: str
    space: gym.Space
    start: int
    stop: int
    shape: tuple[int, ...]


def layout(dict_space: spaces.Dict) -> list[Part]:
    """Where each key of ``dict_space`` sits in the packed vector, in the ``Dict``'s key order."""
    parts, offset = [], 0
    for key, space in dict_space.spaces.items():
        shape = tuple(space.shape or ())
        size = int(np.prod(shape)) if shape else 1
        parts.append(Part(str(key), space, offset, offset + size, shape))
        offset += size
    return parts


def pack_dtype(dict_space: spaces.Dict) -> np.dtype[Any]:
    """``uint8`` when every key's values fit in it, else ``float32``."""
    return np.dtype(np.uint8) if all(_fits_uint8(space) for space in dict_space.spaces.values()) else np.dtype("f4")


def _fits_uint8(space: gym.Space) -> bool:
    if isinstance(space, spaces.Box):
        return space.dtype in (np.uint8, np.bool_)
    if isinstance(space, spaces.MultiBinary):
        return True
    if isinstance(space, spaces.Discrete):
        return int(space.start) >= 0 and int(space.start) + int(space.n) <= 256
    if isinstance(space, spaces.MultiDiscrete):
        return bool(np.all(space.start >= 0) and np.all(space.start + space.nvec <= 256))
    return False


def _bounds(space: gym.Space) -> tuple[np.ndarray, np.ndarray]:
    """Flat lower and upper bounds of a ``Dict`` key's values (as stored: Discrete values, not one-hot)."""
    if isinstance(space, spaces.Box):
        return space.low.reshape(-1).astype(np.float64), space.high.reshape(-1).astype(np.float64)
    if isinstance(space, spaces.Discrete):
        return np.array([space.start], np.float64), np.array([space.start + space.n - 1], np.float64)
    if isinstance(space, spaces.MultiDiscrete):
        start = space.start.reshape(-1).astype(np.float64)
        return start, start + space.nvec.reshape(-1) - 1
    size = int(np.prod(space.shape or ()))
    return np.zeros(size), np.ones(size)  # MultiBinary


def pack(dict_space: spaces.Dict, observation: dict[str, Any], batched: bool = True) -> np.ndarray:
    """A ``Dict`` observation as its packed vector: (B, D) from values with a leading batch axis (a vector env's),
    or (D,) for one observation with ``batched=False``."""
    dtype = pack_dtype(dict_space)
    if not batched:
        return pack(dict_space, {key: np.asarray(value)[None] for key, value in observation.items()})[0]
    columns = []
    for part in layout(dict_space):
        values = np.asarray(observation[part.key])
        columns.append(values.reshape(len(values), -1).astype(dtype, copy=False))
    return np.concatenate(columns, axis=1)


class PackDictObservations(gym.vector.VectorObservationWrapper):
    """A vector env with ``Dict`` observations, seen through their packed vectors (:func:`pack`)."""

    def __init__(self, env: gym.vector.VectorEnv, action_mask: bool = False) -> None:
        super().__init__(env)
        dict_space = env.single_observation_space
        assert isinstance(dict_space, spaces.Dict)
        self.dict_space = dict_space
        self.single_observation_space = PackedDict(dict_space, action_mask)
        self.observation_space = gym.vector.utils.batch_space(self.single_observation_space, env.num_envs)

    def observations(self, observations: dict[str, Any]) -> np.ndarray:
        return pack(self.dict_space, observations)

    def __getattr__(self, name: str) -> Any:
        """The wrapped vector env's own methods (``set_attr``, ``get_attr``, ``call``), which gymnasium's vector
        wrappers do not forward."""
        if name.startswith("_"):
            raise AttributeError(name)
        return getattr(self.env, name)


def observation_problem(space: gym.Space) -> str | None:
    """Why rlcore cannot take observations of ``space`` (a phrase for a one-line error), or None if it can."""
    if isinstance(space, spaces.Box | spaces.Discrete):
        return None
    if isinstance(space, spaces.Dict):
        if not space.spaces:
            return "an empty Dict observation space"
        for key, leaf in space.spaces.items():
            if not isinstance(leaf, LEAF_SPACES):
                return (
                    f"a Dict observation whose key {key!r} is a {type(leaf).__name__}; rlcore supports Box, Discrete, "
                    "MultiBinary and MultiDiscrete keys (not nested)"
                )
        return None
    return f"a {type(space).__name__} observation space; rlcore supports Box, Discrete and Dict observations"


def is_image(space: gym.Space) -> bool:
    """A ``uint8`` or ``bool`` Box of 2 (H, W) or 3 (H, W, C or C, H, W) axes: what ``policy.encoder: auto``
    gives a CNN. Float Boxes are vectors unless ``policy.encoder`` names a CNN."""
    return isinstance(space, spaces.Box) and space.dtype in (np.uint8, np.bool_) and len(space.shape) in (2, 3)


def storage_dtype(space: gym.Space) -> np.dtype[Any]:
    """The dtype observations of ``space`` are kept in: float32 for floats (float64 envs included), the space's
    own dtype otherwise (``uint8`` frames stay ``uint8``), int64 for Discrete."""
    if isinstance(space, spaces.Discrete):
        return np.dtype(np.int64)
    dtype = np.dtype(space.dtype)
    return np.dtype(np.float32) if np.issubdtype(dtype, np.floating) else dtype


def obs_tensor(obs: Any) -> torch.Tensor:
    """Observations as a tensor in their storage dtype: floats as float32, integers and booleans as they are."""
    tensor = torch.as_tensor(np.asarray(obs))
    return tensor.float() if tensor.is_floating_point() else tensor


def observation_input(space: gym.Space) -> str | dict[str, Any]:
    """How an exported graph's ``obs`` input is laid out, for the model card: a sentence, or for a packed ``Dict``
    the sentence and every key's offset, shape and dtype."""
    dtype = storage_dtype(space).name
    if isinstance(space, PackedDict):
        return {
            "description": f"{dtype} (batch, {space.shape[0]}): the Dict observation packed by "
            "rlcore.envs.observations.pack (each key's raw values flattened, in this order, at these offsets)",
            "keys": [
                {
                    "key": part.key,
                    "offset": part.start,
                    "size": part.stop - part.start,
                    "shape": list(part.shape),
                    "space": type(part.space).__name__,
                    "dtype": str(part.space.dtype),
                }
                for part in layout(space.dict_space)
            ],
        }
    if isinstance(space, spaces.Discrete):
        return "int64 (batch,): the Discrete observation's value (one-hot encoding is inside)"
    shape = ", ".join(str(n) for n in space.shape or ())
    inside = "scaling by 1/255 and the CNN are inside" if dtype == "uint8" else "normalization is inside"
    return f"{dtype} (batch, {shape}), raw observations as the env gives them ({inside})"
