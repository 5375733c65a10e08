"""Gymnasium environments: the one vector-env factory (wrappers, the per-episode settings hook, autoreset
check) and plain-data descriptions of spaces.

Vector envs use gymnasium's default next-step autoreset: after a step that ends an episode, the
returned observation is the episode's last one, and the *next* step resets that env (its action
is ignored, its reward is 0). Trainers mask those reset steps out (see ``rlcore.data.rollouts``).
"""

from __future__ import annotations

import functools
import math
import warnings
from collections.abc import Callable
from typing import Any, Protocol

import gymnasium as gym
import numpy as np
from gymnasium import spaces
from gymnasium.vector import AutoresetMode

from rlcore.common.errors import ConfigError, RLCoreError, UserCodeError, describe_exception, format_traceback
from rlcore.envs.action_masks import ActionMaskObservation
from rlcore.envs.config import EnvConfig
from rlcore.envs.ids import env_spec
from rlcore.envs.multiagent import ParallelEnvRows, is_multiagent
from rlcore.envs.observations import PackDictObservations, PackedDict, observation_problem
from rlcore.envs.parameters import EnvParameters
from rlcore.envs.settings import Parameters, lesson_parameters
from rlcore.envs.turn_based import make_game
from rlcore.envs.user_code import UserWrapper


class EpisodeSettings(Protocol):
    """Per-episode env settings (parameter randomization, curriculum lessons): the hook where they apply.

    ``apply`` is called on every sub-env's base env right before each of its resets, with that sub-env's own
    generator, so settings drawn for an episode depend on the env's seed and episode count only. It returns a new
    base env to use from this reset on (a parameter only the constructor takes changed), or None.
    """

    def apply(self, env: gym.Env, rng: np.random.Generator) -> gym.Env | None: ...


SETTINGS_STREAM = 0x5E771465
"""Mixed into a sub-env's reset seed for its settings generator. Gymnasium seeds the env's own generator with the
reset seed itself; drawing the settings from that same stream would tie an episode's parameters to its initial state
(CartPole draws both with ``uniform``)."""


class ApplyEpisodeSettings(gym.Wrapper):
    """Calls :meth:`EpisodeSettings.apply` before every reset of the env it wraps (the outermost wrapper, so
    ``vector_env.set_attr("episode_settings", ...)`` replaces the settings of every sub-env, in any process).

    The generator is re-seeded at every seeded reset from ``(seed, SETTINGS_STREAM)`` and goes on through the
    autoresets after it: episode ``j`` after a reset with seed ``s`` always gets the same draws. A base env that
    ``apply`` rebuilt replaces the old one inside the wrapper stack, which stays as it is (time limits, the user's
    wrappers), so the vector env sees one ordinary reset.
    """

    def __init__(self, env: gym.Env, settings: EpisodeSettings) -> None:
        super().__init__(env)
        self.episode_settings = settings
        self.settings_rng = np.random.default_rng([0, SETTINGS_STREAM])

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[Any, dict[str, Any]]:
        if seed is not None:
            self.settings_rng = np.random.default_rng([seed, SETTINGS_STREAM])
        replacement = self.episode_settings.apply(self.env.unwrapped, self.settings_rng)
        if replacement is not None:
            self._replace_base(replacement)
        return self.env.reset(seed=seed, options=options)

    def _replace_base(self, replacement: gym.Env) -> None:
        holder: gym.Wrapper = self
        while isinstance(holder.env, gym.Wrapper):
            holder = holder.env
        old = holder.env
        if (replacement.observation_space, replacement.action_space) != (old.observation_space, old.action_space):
            raise RuntimeError(f"env parameters changed the spaces of {old}: they must not")
        holder.env = replacement
        old.close()


def training_settings(env: EnvConfig) -> EpisodeSettings | None:
    """The settings of the training distribution: ``env.parameters`` overridden by the last curriculum lesson's
    (what training ends under); None when the env has no parameters."""
    if not (env.parameters or env.curriculum):
        return None
    return settings_for(env, lesson_parameters(env.parameters, env.curriculum, len(env.curriculum) - 1))


def settings_for(env: EnvConfig, parameters: Parameters) -> EpisodeSettings:
    """Per-episode settings drawing ``parameters`` for ``env`` (its id, kwargs and ``parameters_adapter``)."""
    return EnvParameters(env.id, env.kwargs, parameters, env.parameters_adapter)


def use_settings(vector_env: gym.vector.VectorEnv, settings: EpisodeSettings) -> None:
    """Give every sub-env of ``vector_env`` (built with settings) ``settings``: each uses them from its next reset."""
    set_attr = getattr(vector_env, "set_attr", None)  # Sync and Async envs have it (wrappers pass it on)
    if set_attr is None:
        raise TypeError(f"{vector_env} cannot change its sub-envs' settings (no set_attr)")
    set_attr("episode_settings", settings)


def make_vector_env(
    env: EnvConfig,
    num_envs: int,
    episode_settings: EpisodeSettings | None = None,
    opponent_key: str = "env.opponent",
) -> gym.vector.VectorEnv:
    """The only way rlcore builds an env: ``num_envs`` copies of ``env.id`` with ``env.kwargs``, each wrapped
    in ``env.wrappers`` and in ``episode_settings`` (by default the training distribution's,
    :func:`training_settings`: ``env.parameters``; none for an env without parameters). Seed it through
    ``reset(seed=...)``: sub-env ``i`` gets ``seed + i`` (gymnasium's rule).

    ``auto`` vectorization picks the env's own batched implementation (``vector_entry_point``) when it exists
    and nothing wraps the sub-envs: for CartPole that is a single NumPy step for all envs, ~10x faster than
    ``sync``. Refuses (one line) an env that does not reset in the step after an episode ends, which every
    loop here relies on (gymnasium's default, ``AutoresetMode.NEXT_STEP``).
    """
    if is_multiagent(env.id) and not env.turn_based():
        return _guarded_checked(make_parallel_rows(env, num_envs), env)
    wrappers: list[Callable[[gym.Env], gym.Wrapper]] = [
        UserWrapper(index, item.wrapper, item.kwargs) for index, item in enumerate(env.wrappers)
    ]
    if env.action_mask is not None:  # checks the masks and carries them as a Dict key (rlcore.envs.action_masks)
        wrappers.append(functools.partial(ActionMaskObservation, source=env.action_mask, env_id=env.id))
    if episode_settings is None:
        episode_settings = training_settings(env)
    if episode_settings is not None:
        wrappers.append(functools.partial(ApplyEpisodeSettings, settings=episode_settings))
    mode = env.vectorization
    kwargs = env.kwargs
    if env.turn_based():  # the learner's seat of a two-player game, the opponent inside (rlcore.envs.turn_based)
        kwargs = {"env_id": env.id, "opponent": env.opponent, "kwargs": env.kwargs, "opponent_key": opponent_key}
        spec = gym.envs.registration.EnvSpec(id=env.id, entry_point=make_game, disable_env_checker=True)
    else:
        spec = env_spec(env.id)  # also registers ids of known packages (MinAtar, ALE) in this process
    if mode == "auto":
        mode = "vector_entry_point" if spec.vector_entry_point is not None and not wrappers else "sync"
    try:
        vector_env = gym.make_vec(spec, num_envs=num_envs, vectorization_mode=mode, wrappers=wrappers or None, **kwargs)
    except RLCoreError:  # a wrapper's (UserWrapper), already naming its key
        raise
    except TypeError as exc:
        raise ConfigError(f"env.kwargs: {env.id} does not accept these arguments: {_one_line(exc)}") from None
    except (gym.error.DependencyNotInstalled, ImportError) as exc:  # an optional dependency, found only when built
        raise ConfigError(f"env.id: {env.id} cannot be built: {_one_line(exc)}") from None
    except gym.error.Error as exc:  # e.g. vector_kwargs for an env's own batched implementation
        raise ConfigError(f"env: {env.id} cannot be built ({mode} vectorization): {_one_line(exc)}") from None
    except (ValueError, AssertionError, ArithmeticError, LookupError) as exc:  # the env's (or a wrapper's) own checks
        raise ConfigError(f"env.kwargs: {env.id} refuses them: {type(exc).__name__}: {_one_line(exc)}") from None
    except Exception as exc:  # the env's constructor is the user's code too
        raise UserCodeError.raised(f"env.id: {env.id} raised when built", exc) from None
    return _guarded_checked(vector_env, env)


def make_parallel_rows(env: EnvConfig, num_envs: int) -> gym.vector.VectorEnv:
    """``num_envs`` copies of the PettingZoo env ``env.id``, each agent a row (``rlcore.envs.multiagent``)."""
    try:
        return ParallelEnvRows(env.id, env.kwargs, num_envs, env.agent_id is not False)
    except ValueError as exc:  # checked at load; params built in code may skip that
        message = str(exc)
        raise ConfigError(message if message.startswith("env.") else f"env.id: {message}") from None
    except Exception as exc:
        raise UserCodeError.raised(f"env.id: {env.id} raised when built", exc) from None


def _guarded_checked(vector_env: gym.vector.VectorEnv, env: EnvConfig) -> gym.vector.VectorEnv:
    """``vector_env`` behind :class:`UserCodeGuard`, its spaces and autoreset checked, Dict observations packed."""
    vector_env = UserCodeGuard(vector_env, env.id, bool(env.wrappers))
    try:
        check_spaces(env.id, vector_env.single_observation_space, vector_env.single_action_space)
        check_autoreset(env.id, vector_env)
    except BaseException:
        vector_env.close()
        raise
    if isinstance(vector_env.single_observation_space, spaces.Dict):
        # one flat vector per observation (rlcore.envs.observations), the mask one of its keys
        return PackDictObservations(vector_env, env.action_mask is not None)
    return vector_env


class UserCodeGuard(gym.vector.VectorWrapper):
    """What the env (or a wrapper of ``env.wrappers``, or a turn-based game's opponent) raises in ``reset`` or
    ``step``, ``SystemExit`` included, becomes one
    :class:`UserCodeError` naming the env and the step (counted in this vector env's ``step`` calls), its traceback
    kept for the run's error log. rlcore's own errors (an adapter's, a wrapper's) pass through as they are."""

    def __init__(self, env: gym.vector.VectorEnv, env_id: str, wrapped: bool) -> None:
        super().__init__(env)
        self.what = f"env.id: {env_id}" + (" (or one of env.wrappers)" if wrapped else "")
        self.steps = 0
        self.asynchronous = isinstance(env.unwrapped, gym.vector.AsyncVectorEnv)

    def reset(self, *, seed: Any = None, options: dict[str, Any] | None = None) -> tuple[Any, dict[str, Any]]:
        return self._guarded(lambda: self.env.reset(seed=seed, options=options), "reset")

    def step(self, actions: Any) -> tuple[Any, Any, Any, Any, dict[str, Any]]:
        self.steps += 1
        return self._guarded(lambda: self.env.step(actions), "step")

    def _guarded(self, call: Callable[[], Any], what: str) -> Any:
        """``call()``; an async env's worker reports its error (with the traceback) as gymnasium warnings: those are
        kept for the error log instead of shown, any other warning is shown as usual."""
        caught: list[warnings.WarningMessage] = []
        try:
            if not self.asynchronous:
                return call()
            with warnings.catch_warnings(record=True) as recorded:
                caught = recorded
                return call()
        except RLCoreError:
            raise
        except (Exception, SystemExit) as exc:  # sys.exit in the user's step is theirs to report, not rlcore's exit
            where = f"raised in step {self.steps}" if what == "step" else f"raised in reset (after step {self.steps})"
            reports = "".join(f"{warning.message}\n" for warning in caught if _worker_report(warning))
            raise UserCodeError(
                f"{self.what} {where}: {describe_exception(exc)}", reports + format_traceback(exc)
            ) from None
        finally:
            for warning in caught:
                if not _worker_report(warning):
                    warnings.warn_explicit(warning.message, warning.category, warning.filename, warning.lineno)

    def __getattr__(self, name: str) -> Any:
        """The wrapped vector env's own methods (``set_attr``, ``get_attr``, ``call``), which gymnasium's vector
        wrappers do not forward."""
        if name.startswith("_"):
            raise AttributeError(name)
        return getattr(self.env, name)


def _worker_report(warning: warnings.WarningMessage) -> bool:
    """Whether ``warning`` is gymnasium's report of an async worker's exception (``gymnasium.logger.error``)."""
    return "ERROR: " in str(warning.message) and "async_vector_env" in warning.filename


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
    problem = observation_problem(observation_space)
    if problem is not None:
        raise ConfigError(f"env.id: {env_id} has {problem}")
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
    null), or of a packed Dict (``rlcore.envs.observations.PackedDict``: ``{"type": "dict", "spaces": {key: ...}}``,
    keys in packing order, and ``"action_mask": true`` when its mask key is applied)."""
    if isinstance(space, PackedDict | spaces.Dict):
        dict_space = space.dict_space if isinstance(space, PackedDict) else space
        described: dict[str, Any] = {
            "type": "dict",
            "spaces": {key: describe_space(leaf) for key, leaf in dict_space.spaces.items()},
        }
        if isinstance(space, PackedDict) and space.action_mask:
            described["action_mask"] = True
        return described
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
    """Inverse of :func:`describe_space` (a ``dict`` description gives the packed space rlcore's policies read)."""
    if description["type"] == "dict":
        leaves = [(key, space_from_description(leaf)) for key, leaf in description["spaces"].items()]
        return PackedDict(spaces.Dict(leaves), bool(description.get("action_mask", False)))  # a list keeps the order
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
