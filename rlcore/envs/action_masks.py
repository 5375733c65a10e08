"""Action masks (``env.action_mask``): the env's mask of legal actions, read from ``info["action_mask"]`` (gymnasium's
Taxi-v4) or from a ``Dict`` observation's ``"action_mask"`` key (PettingZoo's classic games), checked at every step
and carried as the ``"action_mask"`` key of a ``Dict`` observation; an exported graph takes it as an input of its
own (:class:`MaskInputs`).

The key is packed with the observation's other keys into one flat vector (``rlcore.envs.observations``), so the mask
travels with its observation through every buffer, rollout, replay and dataset: an update reads the mask the action
was chosen under, and a TD target the next state's. The packed space says where it is
(``PackedDict.action_mask``), and the policy gives the masked actions zero probability (``rlcore.nets.policy``).

| ``env.action_mask`` | where the env gives the mask | what the policy sees |
|---|---|---|
| ``info`` | ``info["action_mask"]``, (n,) of 0/1 | ``Dict(action_mask=MultiBinary(n), observation=<the env's>)`` |
| ``observation`` | the ``Dict`` observation's ``"action_mask"`` | that ``Dict``, its mask key as ``MultiBinary(n)`` |

A mask is one value per action of a ``Discrete(n)`` action space, 1 (or True) where the action is legal; anything else
(another shape, float values, values other than 0 and 1, no legal action in a state that did not end an episode) is
refused in one line naming the env, what it gave and what was expected.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

import gymnasium as gym
import numpy as np
import torch
from gymnasium import spaces

from rlcore.common.errors import ConfigError
from rlcore.envs.observations import PackedDict, action_mask_slice, layout, storage_dtype

MASK_KEY = "action_mask"
"""The observation key (and the ``info`` key) the mask is read from and carried as."""

MaskSource = Literal["info", "observation"]


class ActionMaskObservation(gym.Wrapper):
    """A sub-env whose observations carry its action mask as their ``"action_mask"`` key (int8 0/1, (n,)), read from
    ``source`` and checked at every reset and step (:func:`check_mask`), and once when the wrapper is built (an
    unseeded reset, so a wrong mask is refused before anything is written)."""

    def __init__(self, env: gym.Env, source: MaskSource, env_id: str) -> None:
        super().__init__(env)
        self.source = source
        self.env_id = env_id
        action_space = env.action_space
        if not isinstance(action_space, spaces.Discrete):
            raise ConfigError(
                f"env.action_mask: {env_id} has a {type(action_space).__name__} action space; action masks need "
                "Discrete actions (one mask value per action)"
            )
        self.n = int(action_space.n)
        mask_space = spaces.MultiBinary(self.n)
        observed = env.observation_space
        if source == "observation":
            if not isinstance(observed, spaces.Dict) or MASK_KEY not in observed.spaces:
                raise ConfigError(
                    f"env.action_mask: observation, but {env_id}'s observations are {_space_name(observed)} without "
                    f"an {MASK_KEY!r} key (use env.action_mask: info when the env gives info['action_mask'])"
                )
            _check_mask_space(env_id, observed.spaces[MASK_KEY], self.n)
            keys = {**observed.spaces, MASK_KEY: mask_space}
        elif isinstance(observed, spaces.Dict):
            if MASK_KEY in observed.spaces:
                raise ConfigError(
                    f"env.action_mask: info, but {env_id}'s Dict observations already have an {MASK_KEY!r} key "
                    "(use env.action_mask: observation)"
                )
            keys = {**observed.spaces, MASK_KEY: mask_space}
        else:
            keys = {MASK_KEY: mask_space, "observation": observed}
        self.observation_space = spaces.Dict(keys)
        # Checked once where the env is built, before a run writes anything; every later reset seeds the env anew.
        self._with_mask(*env.reset(), terminated=False, when="its first reset")

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[Any, dict[str, Any]]:
        obs, info = self.env.reset(seed=seed, options=options)
        return self._with_mask(obs, info, terminated=False, when="reset"), info

    def step(self, action: Any) -> tuple[Any, Any, bool, bool, dict[str, Any]]:
        obs, reward, terminated, truncated, info = self.env.step(action)
        return self._with_mask(obs, info, bool(terminated), "step"), reward, terminated, truncated, info

    def _with_mask(self, obs: Any, info: dict[str, Any], terminated: bool, when: str) -> dict[str, Any]:
        if self.source == "info":
            if MASK_KEY not in info:
                raise ConfigError(
                    f"env.action_mask: info, but {self.env_id} gave no info[{MASK_KEY!r}] at {when} (info keys: "
                    f"{sorted(info)})"
                )
            mask = check_mask(self.env_id, f"info[{MASK_KEY!r}] at {when}", info[MASK_KEY], self.n, terminated)
            return {**obs, MASK_KEY: mask} if isinstance(obs, dict) else {MASK_KEY: mask, "observation": obs}
        where = f"the observation's {MASK_KEY!r} at {when}"
        return {**obs, MASK_KEY: check_mask(self.env_id, where, obs[MASK_KEY], self.n, terminated)}


def check_mask_applied(env_id: str, observation_space: gym.Space, source: MaskSource | None) -> None:
    """``ValueError`` (one line naming ``env.action_mask``) for ``source`` null (no mask) on a PettingZoo env whose
    observations carry one (a Dict with an ``"action_mask"`` key, as its classic games'): refused, not warned, because
    the policy would then play the moves the mask forbids, which PettingZoo answers by ending the game with a loss
    and a warning of its own at every such move: never a game worth training on."""
    if source is None and isinstance(observation_space, spaces.Dict) and MASK_KEY in observation_space.spaces:
        raise ValueError(
            f"env.action_mask: null, but {env_id}'s observations carry an {MASK_KEY!r} the policy would ignore (it "
            "would play illegal moves, each ending the game); set env.action_mask: observation"
        )


def check_mask(env_id: str, where: str, mask: Any, n: int, terminated: bool) -> np.ndarray:
    """``mask`` as int8 0/1 (n,), or a one-line :class:`ConfigError` naming ``env_id``, ``where`` it came from and
    what was wrong: its shape, its dtype, values other than 0 and 1, or no legal action in a state that is not
    terminal (``terminated``: the last observation of a terminated episode is neither acted on nor bootstrapped
    from, so its mask may be empty; a truncated episode's is bootstrapped from)."""
    values = np.asarray(mask)
    expected = f"expected ({n},) of 0/1, one per action of its Discrete({n}) action space"
    if values.shape != (n,):
        raise ConfigError(f"env.action_mask: {env_id} gave {where} of shape {values.shape}; {expected}")
    if values.dtype.kind not in "biu":
        raise ConfigError(f"env.action_mask: {env_id} gave {where} of dtype {values.dtype}; {expected}")
    if not ((values == 0) | (values == 1)).all():  # np.isin is ~7x slower, and this runs at every env step
        raise ConfigError(f"env.action_mask: {env_id} gave {where} = {values.tolist()}; {expected}")
    if not terminated and not values.any():
        raise ConfigError(
            f"env.action_mask: {env_id} gave {where} with no legal action ({values.tolist()}) in a state that is not "
            "terminal; a mask must allow at least one action"
        )
    return values.astype(np.int8)


def _check_mask_space(env_id: str, space: gym.Space, n: int) -> None:
    shape = tuple(space.shape or ())
    integral = isinstance(space, spaces.MultiBinary) or (
        isinstance(space, spaces.Box) and np.dtype(space.dtype).kind in "biu"
    )
    if shape != (n,) or not integral:
        raise ConfigError(
            f"env.action_mask: {env_id}'s observation key {MASK_KEY!r} is {space}; expected a MultiBinary({n}) or an "
            f"integer Box of shape ({n},), one value per action of its Discrete({n}) action space"
        )


def _space_name(space: gym.Space) -> str:
    return f"a {type(space).__name__} ({space})"


@dataclass(frozen=True)
class MaskInputs:
    """How an exported graph takes a masked observation: ``obs`` without its mask, and ``action_mask`` apart.

    ``obs`` is the observation's one other key in its own storage form when the ``Dict`` has only one (Taxi's
    Discrete state as int64 (B,), PettingZoo's ``"observation"`` array), else the packed vector without the mask's
    columns; ``action_mask`` is (B, n) bool. :meth:`join` rebuilds the packed vector the policy reads.
    """

    start: int
    stop: int
    packed_dtype: torch.dtype
    obs_shape: tuple[int, ...]
    """One row of the ``obs`` input, e.g. () for a Discrete key."""
    obs_dtype: np.dtype[Any]

    def split(self, packed: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Packed observations (B, D) -> (``obs`` (B, *obs_shape), ``action_mask`` (B, n) bool)."""
        rest = np.concatenate([packed[:, : self.start], packed[:, self.stop :]], axis=1)
        return rest.reshape(len(packed), *self.obs_shape).astype(self.obs_dtype), packed[:, self.start : self.stop] > 0

    def join(self, obs: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """(``obs`` (B, *obs_shape), ``action_mask`` (B, n)) -> the packed observations (B, D) the policy reads."""
        rest = obs.reshape(obs.shape[0], -1).to(self.packed_dtype)
        columns = [rest[:, : self.start], mask.to(self.packed_dtype), rest[:, self.start :]]
        return torch.cat(columns, dim=1)

    def describe(self, n: int) -> dict[str, str]:
        """The two inputs, for the model card."""
        shape = ", ".join(["batch", *map(str, self.obs_shape)])
        return {
            "obs": f"{self.obs_dtype.name} ({shape}): the observation without its action mask",
            "action_mask": f"bool (batch, {n}): True where the action is legal (the env's action_mask); the graph "
            "never chooses an illegal action (its score is the float32 minimum)",
        }


def mask_inputs(space: gym.Space) -> MaskInputs | None:
    """The exported inputs of observations of ``space`` that carry an applied mask; None for the others."""
    if not (isinstance(space, PackedDict) and space.action_mask):
        return None
    parts = layout(space.dict_space)
    mask = next(part for part in parts if part.key == MASK_KEY)
    others = [part for part in parts if part.key != MASK_KEY]
    packed = storage_dtype(space)
    if len(others) == 1:
        shape, dtype = others[0].shape, storage_dtype(others[0].space)
    else:
        shape, dtype = (sum(part.stop - part.start for part in others),), packed
    torch_dtype = torch.from_numpy(np.zeros(0, dtype=packed)).dtype
    return MaskInputs(mask.start, mask.stop, torch_dtype, tuple(shape), np.dtype(dtype))


def random_legal_actions(legal: np.ndarray, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """One uniformly random legal action per row of ``legal`` (B, n) bool, and its log-probability: ((B,) int64,
    (B,) float32 ``-log(legal actions)``). A row with no legal action (a terminal observation's) draws from all."""
    legal = legal | ~legal.any(axis=1, keepdims=True)
    counts = legal.sum(axis=1)
    picks = np.floor(rng.random(len(legal)) * counts).astype(np.int64)  # the k-th legal action of each row
    actions = (np.cumsum(legal, axis=1) <= picks[:, None]).sum(axis=1).astype(np.int64)
    return actions, -np.log(counts).astype(np.float32)


def legal_actions(space: gym.Space, obs: np.ndarray) -> np.ndarray | None:
    """The legal actions at packed observations ``obs`` (B, D) of ``space``: (B, n) bool; None without a mask."""
    at = action_mask_slice(space)
    return None if at is None else np.asarray(obs)[:, at[0] : at[1]] > 0
