"""Gymnasium environments: the one vector-env factory (wrappers, the per-episode settings hook, autoreset
check) and plain-data descriptions of spaces.

Vector envs use gymnasium's default next-step autoreset: after a step that ends an episode, the
returned observation is the episode's last one, and the *next* step resets that env (its action
is ignored, its reward is 0). Trainers mask those reset steps out (see ``rlcore.buffers``).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from typing import Any, Protocol

import gymnasium as gym
import numpy as np
from gymnasium import spaces
from gymnasium.vector import AutoresetMode

from rlcore.config import EnvConfig
from rlcore.env_ids import env_spec, import_object
from rlcore.errors import ConfigError


class EpisodeSettings(Protocol):
    """Per-episode env settings (parameter randomization, curriculum lessons): the hook where they apply.

    ``apply`` is called on every sub-env right before each of its resets, with that sub-env's own
    generator, so settings drawn for an episode depend on the env's seed and episode count only.
    """

    def apply(self, env: gym.Env, rng: np.random.Generator) -> None: ...


class ApplyEpisodeSettings(gym.Wrapper):
    """Calls :meth:`EpisodeSettings.apply` before every reset of the env it wraps."""

    def __init__(self, env: gym.Env, settings: EpisodeSettings) -> None:
        super().__init__(env)
        self.settings = settings
        self.settings_rng = np.random.default_rng(0)

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[Any, dict[str, Any]]:
        if seed is not None:
            self.settings_rng = np.random.default_rng(seed)
        self.settings.apply(self.env.unwrapped, self.settings_rng)
        return self.env.reset(seed=seed, options=options)


def make_vector_env(
    env: EnvConfig, num_envs: int, episode_settings: EpisodeSettings | None = None
) -> gym.vector.VectorEnv:
    """The only way rlcore builds an env: ``num_envs`` copies of ``env.id`` with ``env.kwargs``, each wrapped
    in ``env.wrappers`` (and ``episode_settings``, when given). Seed it through ``reset(seed=...)``: sub-env
    ``i`` gets ``seed + i`` (gymnasium's rule).

    ``auto`` vectorization picks the env's own batched implementation (``vector_entry_point``) when it exists
    and nothing wraps the sub-envs: for CartPole that is a single NumPy step for all envs, ~10x faster than
    ``sync``. Refuses (one line) an env that does not reset in the step after an episode ends, which every
    loop here relies on (gymnasium's default, ``AutoresetMode.NEXT_STEP``).
    """
    wrappers: list[Callable[[gym.Env], gym.Wrapper]] = [
        functools.partial(import_object(item.wrapper), **item.kwargs) for item in env.wrappers
    ]
    if episode_settings is not None:
        wrappers.append(functools.partial(ApplyEpisodeSettings, settings=episode_settings))
    mode = env.vectorization
    if mode == "auto":
        mode = "vector_entry_point" if env_spec(env.id).vector_entry_point is not None and not wrappers else "sync"
    try:
        vector_env = gym.make_vec(
            env.id, num_envs=num_envs, vectorization_mode=mode, wrappers=wrappers or None, **env.kwargs
        )
    except TypeError as exc:
        raise ConfigError(f"env.kwargs: {env.id} does not accept these arguments: {_one_line(exc)}") from None
    except (gym.error.DependencyNotInstalled, ImportError) as exc:  # an optional dependency, found only when built
        raise ConfigError(f"env.id: {env.id} cannot be built: {_one_line(exc)}") from None
    except gym.error.Error as exc:  # e.g. vector_kwargs for an env's own batched implementation
        raise ConfigError(f"env: {env.id} cannot be built ({mode} vectorization): {_one_line(exc)}") from None
    except (ValueError, AssertionError, ArithmeticError, LookupError) as exc:  # the env's (or a wrapper's) own checks
        where = "env.kwargs/env.wrappers" if env.wrappers else "env.kwargs"
        raise ConfigError(f"{where}: {env.id} refuses them: {type(exc).__name__}: {_one_line(exc)}") from None
    try:
        check_spaces(env.id, vector_env.single_observation_space, vector_env.single_action_space)
        check_autoreset(env.id, vector_env)
    except BaseException:
        vector_env.close()
        raise
    return vector_env


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split()) or type(exc).__name__


def check_autoreset(env_id: str, vector_env: gym.vector.VectorEnv) -> None:
    mode = vector_env.metadata.get("autoreset_mode", AutoresetMode.NEXT_STEP)
    if mode != AutoresetMode.NEXT_STEP and str(mode) != str(AutoresetMode.NEXT_STEP):
        raise ConfigError(
            f"env: {env_id} resets with autoreset_mode={getattr(mode, 'value', mode)}; rlcore's loops need "
            "next-step autoreset (gymnasium's default: drop autoreset_mode from env.kwargs)"
        )


def check_spaces(env_id: str, observation_space: gym.Space, action_space: gym.Space) -> None:
    if not isinstance(observation_space, spaces.Box):
        raise ConfigError(
            f"env.id: {env_id} has a {type(observation_space).__name__} observation space; "
            "rlcore supports Box observations"
        )
    if observation_space.dtype == np.uint8 and len(observation_space.shape) >= 2:
        # Pixels flattened into an MLP without scaling train badly, and silently: refuse until rlcore has a CNN.
        raise ConfigError(
            f"env.id: {env_id} has image observations ({observation_space.dtype} {observation_space.shape}); "
            "rlcore does not support pixels yet"
        )
    if not isinstance(action_space, spaces.Discrete | spaces.MultiDiscrete | spaces.MultiBinary | spaces.Box):
        raise ConfigError(
            f"env.id: {env_id} has a {type(action_space).__name__} action space; "
            "rlcore supports Discrete, MultiDiscrete, MultiBinary and Box actions"
        )
    if isinstance(action_space, spaces.MultiDiscrete | spaces.MultiBinary) and len(action_space.shape) != 1:
        # A policy's sub-actions are one flat row; a nested layout would need its own reshaping everywhere.
        raise ConfigError(
            f"env.id: {env_id} has a {len(action_space.shape)}-D {type(action_space).__name__} action space "
            f"(shape {action_space.shape}); rlcore supports 1-D MultiDiscrete and MultiBinary actions"
        )


def describe_space(space: gym.Space) -> dict[str, Any]:
    """A JSON-safe description of a Box, Discrete, MultiDiscrete or MultiBinary space (infinite bounds become
    null)."""
    if isinstance(space, spaces.Discrete):
        return {"type": "discrete", "n": int(space.n), "start": int(space.start)}
    if isinstance(space, spaces.MultiDiscrete):
        return {
            "type": "multi_discrete",
            "nvec": space.nvec.tolist(),
            "start": space.start.tolist(),
            "dtype": str(space.dtype),
        }
    if isinstance(space, spaces.MultiBinary):
        return {"type": "multi_binary", "n": int(space.n) if isinstance(space.n, int) else list(space.n)}
    if isinstance(space, spaces.Box):

        def bounds(values: np.ndarray) -> list[float | None]:
            return [None if math.isinf(v) else float(v) for v in values.reshape(-1).tolist()]

        return {
            "type": "box",
            "shape": list(space.shape),
            "dtype": str(space.dtype),
            "low": bounds(space.low),
            "high": bounds(space.high),
        }
    raise ConfigError(f"unsupported space {space}")


def space_from_description(description: dict[str, Any]) -> gym.Space:
    """Inverse of :func:`describe_space`."""
    if description["type"] == "discrete":
        return spaces.Discrete(description["n"], start=description.get("start", 0))
    if description["type"] == "multi_discrete":
        nvec = np.array(description["nvec"], dtype=np.int64)
        return spaces.MultiDiscrete(nvec, dtype=description["dtype"], start=np.array(description["start"]))
    if description["type"] == "multi_binary":
        return spaces.MultiBinary(description["n"])
    shape = tuple(description["shape"])

    dtype = np.dtype(description["dtype"])

    def bounds(values: list[float | None], fill: float) -> np.ndarray:
        return np.array([fill if v is None else v for v in values], dtype=dtype).reshape(shape)

    return spaces.Box(
        low=bounds(description["low"], -np.inf),
        high=bounds(description["high"], np.inf),
        shape=shape,
        dtype=dtype,
    )
