"""Names that params refer to: gymnasium env ids, PettingZoo envs (``pettingzoo:<module>``) and import paths of
wrappers. A leaf module (config uses it)."""

from __future__ import annotations

import contextlib
import dataclasses
import importlib
import math
import re
import reprlib
import sys
from collections.abc import Callable
from typing import Any

import gymnasium as gym

from rlcore.common.errors import UserCodeValueError, did_you_mean, format_traceback, raised_at
from rlcore.envs.user_envs import UserEnvEntry, import_user_module, unknown_name, user_env_spec


def check_env_id(env_id: str) -> None:
    """Raise ``ValueError`` (pydantic turns it into a one-line ``ConfigError``) unless ``env_id`` names an env: a
    registered id, ``module:Env-v0`` (the module registers it), ``module:Name`` (a class or function of the module,
    ``rlcore.envs.user_envs``); or, for ``pettingzoo:...``, unless its function imports."""
    if is_multiagent(env_id):
        try:
            parallel_env_factory(env_id)
        except ValueError:  # a module with an AEC game only (``env``): played turn-based (env.opponent)
            module = env_id.removeprefix(PREFIX)
            if ":" in module or not callable(getattr(sys.modules.get(module), "env", None)):
                raise
        return
    try:
        spec = env_spec(env_id)
    except gym.error.Error:
        known = list(gym.registry.keys())
        raise ValueError(
            f"unknown gymnasium env id {env_id!r}{did_you_mean(env_id, known)} (an env class of your own is named "
            "module:ClassName)"
        ) from None
    env_creator(env_id, spec)


_EXTRAS = {"jax": "gymnasium[jax]", "Box2D": "gymnasium[box2d]", "mujoco": "gymnasium[mujoco]", "ale_py": "ale-py"}
"""The pip requirement that brings a module gymnasium's envs import lazily."""


def env_creator(env_id: str, spec: Any = None) -> Any:
    """The callable that builds one ``env_id`` env (its class, usually), imported now so that a missing optional
    dependency is refused at load, in one line that says what to install (``ValueError``)."""
    spec = env_spec(env_id) if spec is None else spec
    entry = spec.entry_point
    if getattr(entry, "__name__", "") == "_raise_shimmy_error":  # gymnasium's placeholder for the gym-compat envs
        raise ValueError(f'{env_id} needs shimmy: `pip install "shimmy[gym-v26]"` (or shimmy[gym-v21])')
    if isinstance(entry, UserEnvEntry):  # the user's own class or function (rlcore.envs.user_envs)
        return entry.target()
    if not isinstance(entry, str):
        return entry
    try:
        return gym.envs.registration.load_env_creator(entry)
    except gym.error.DependencyNotInstalled as exc:
        extra = re.search(r"gymnasium\[[\w-]+\]", str(exc))
        what = f'`pip install "{extra.group()}"`' if extra else " ".join(str(exc).split())
        raise ValueError(f"{env_id} needs {what}") from None
    except ModuleNotFoundError as exc:
        package = _EXTRAS.get(exc.name or "", exc.name)
        raise ValueError(f'{env_id} needs `pip install "{package}"` (no module named {exc.name!r})') from None
    except (Exception, SystemExit) as exc:
        raise ValueError(f"{env_id}: its entry point {entry} does not import: {_one_line(exc)}") from None


def _one_line(exc: BaseException) -> str:
    return " ".join(f"{type(exc).__name__}: {exc}".split())


def _register_minatar() -> None:
    import minatar.gym

    minatar.gym.register_envs()
    for env_id in [env_id for env_id in gym.registry if env_id.startswith("MinAtar/")]:
        # The same games and kwargs, built by the subclass that takes seeds of any size (rlcore.envs.minatar).
        spec = gym.registry[env_id]
        gym.registry[env_id] = dataclasses.replace(spec, entry_point="rlcore.envs.minatar:MinAtarEnv")


def _register_ale() -> None:
    import ale_py

    gym.register_envs(ale_py)


_NAMESPACES = {"MinAtar": (_register_minatar, "minatar"), "ALE": (_register_ale, "ale-py")}
"""Namespaces of packages whose envs are registered by a call (gymnasium 1.x loads no plugins): an id in one of them
(``MinAtar/Breakout-v1``, ``ALE/Pong-v5``) registers its package's envs on first use, in every process."""


def env_spec(env_id: str) -> Any:
    """The spec every env of ``env_id`` is made from (``gymnasium.make``/``make_vec`` take it): gymnasium's
    registered one; for ``module:Name``, the user env's (``rlcore.envs.user_envs``: ``Name`` is a class or function
    of the module), else that of the id ``Name`` the module registered when imported (``module:Env-v0``;
    ``gym.spec`` itself does not read the module prefix, ``gym.make`` does). Raises ``ValueError`` for a module that
    does not import or names no env, ``gym.error.Error`` for an unknown id."""
    if ":" in env_id:
        spec = user_env_spec(env_id)
        if spec is not None:
            return spec
        module_id = env_id
        env_id = env_id.partition(":")[2]
        try:
            return gym.spec(env_id)
        except gym.error.Error:
            raise ValueError(unknown_name(module_id)) from None
    namespace = env_id.partition("/")[0] if "/" in env_id else None
    if namespace in _NAMESPACES and env_id not in gym.registry:
        register, package = _NAMESPACES[namespace]
        try:
            register()
        except ImportError:
            raise ValueError(f'{env_id} needs `pip install "{package}"`') from None
    return gym.spec(env_id)


MOVED_MODULES = {
    "rlcore.partial_observation": "rlcore.envs.partial_observation",
    "rlcore.minatar_env": "rlcore.envs.minatar",
}
"""rlcore modules a params file may name (a wrapper, an entry point) that moved into a concept folder: an import
path through the old name is refused with the new one."""


PREFIX = "pettingzoo:"
"""What starts an ``env.id`` naming a PettingZoo env (Parallel; AEC with ``env.opponent``)."""


def is_multiagent(env_id: str) -> bool:
    """Whether ``env_id`` names a PettingZoo env (``pettingzoo:...``) rather than a gymnasium one."""
    return env_id.startswith(PREFIX)


def parallel_env_factory(env_id: str, function: str = "parallel_env") -> Callable[..., Any]:
    """The function that builds one ``env_id`` env from its kwargs: ``pettingzoo:<module>:<function>``'s, else the
    module's ``function`` (``parallel_env``; ``env`` for an AEC game, ``rlcore.envs.turn_based``); ``ValueError``
    (one line) when the module or the function does not exist."""
    path = env_id.removeprefix(PREFIX)
    if not path:
        raise ValueError(f"{env_id!r}: expected pettingzoo:<module> (e.g. pettingzoo:mpe2.simple_spread_v3)")
    if ":" in path:
        factory = import_object(path)
    else:
        try:
            module = importlib.import_module(path)
        except ImportError as exc:
            if exc.name is not None and exc.name == path.partition(".")[0] != "":  # the package is not installed
                raise ValueError(f'{env_id} needs `pip install "{exc.name}"` (no module named {exc.name!r})') from None
            raise ValueError(f"cannot import PettingZoo env module {path!r}: {exc}") from None
        except (Exception, SystemExit) as exc:
            raise ValueError(f"importing PettingZoo env module {path!r} raised {raised_at(exc)}") from None
        factory = getattr(module, function, None)
        if factory is None:
            names = [name for name in dir(module) if not name.startswith("_")]
            if function == "parallel_env" and callable(getattr(module, "env", None)):
                raise ValueError(
                    f"env.opponent: missing; {path} has no parallel_env, only an AEC env (a turn-based game): set "
                    "env.opponent to the import path of an opponent to play it against (rlcore.envs.turn_based)"
                )
            raise ValueError(
                f"{path} has no {function} (a PettingZoo env module has one; or name a function that "
                f"returns the env as pettingzoo:{path}:<function>){did_you_mean(function, names)}"
            )
    if not callable(factory):
        raise ValueError(f"{path} is not a function returning a PettingZoo env")
    return factory


def import_object(path: str) -> Any:
    """The object at ``package.module.Name`` or ``package.module:Name``; ``ValueError`` naming what is missing, or
    (:class:`UserCodeValueError`) what the module raised when imported: any exception, a syntax error included."""
    module_name, sep, attribute = path.partition(":") if ":" in path else path.rpartition(".")
    if not sep or not module_name or not attribute:
        raise ValueError(f"expected an import path like gymnasium.wrappers.ClipReward, got {path!r}")
    moved = MOVED_MODULES.get(module_name)
    if moved is not None:
        raise ValueError(f"{module_name} moved to {moved}: write {moved}{sep}{attribute}")
    module = import_user_module(module_name)
    try:
        return getattr(module, attribute)
    except AttributeError:
        names = [name for name in dir(module) if not name.startswith("_")]
        raise ValueError(f"{module_name} has no {attribute!r}{did_you_mean(attribute, names)}") from None
    except Exception as exc:  # a module-level __getattr__ of the user's
        message = f"{module_name}.{attribute} raised {raised_at(exc)}"
        raise UserCodeValueError(message, format_traceback(exc)) from None


def check_env_kwargs(env_id: str, kwargs: dict[str, Any]) -> None:
    """Refuse (``ValueError`` naming ``env.kwargs.<key>``) what the env would only trip over later, mid-training:
    ``max_episode_steps`` that is not a positive integer, a ``render_mode`` the env does not list, and a value of
    another type than the default of the constructor's parameter it sets (a number for a number, true/false for a
    flag, a string for a string; null is passed through). Anything else is left to the env's constructor."""
    steps = kwargs.get("max_episode_steps")
    if steps is not None and (isinstance(steps, bool) or not isinstance(steps, int) or steps < 1):
        raise ValueError(f"env.kwargs.max_episode_steps: expected a positive integer (or null), got {_short(steps)}")
    spec = env_spec(env_id)
    creators = [env_creator(env_id, spec)]
    if isinstance(spec.vector_entry_point, str):
        with contextlib.suppress(Exception):  # a broken vector entry point is refused where used (make_vector_env)
            creators.append(gym.envs.registration.load_env_creator(spec.vector_entry_point))
    elif callable(spec.vector_entry_point):
        creators.append(spec.vector_entry_point)
    mode = kwargs.get("render_mode")
    modes = (getattr(creators[0], "metadata", None) or {}).get("render_modes")
    if mode is not None and modes and mode not in modes:
        listed = ", ".join(repr(m) for m in modes)
        raise ValueError(f"env.kwargs.render_mode: {env_id} renders in {listed} (or null), got {mode!r}")
    for key, value in kwargs.items():
        if value is None or key in {"max_episode_steps", "render_mode"}:
            continue
        default = _constructor_default(creators, key)
        expected = _kind(default)
        if expected is not None and _kind(value, of_value=True) not in _ACCEPTS[expected]:
            raise ValueError(
                f"env.kwargs.{key}: {env_id} expects {expected} (its default is {default!r}), got {_short(value)}"
            )
        if isinstance(value, float) and not math.isfinite(value):
            raise ValueError(f"env.kwargs.{key}: expected a finite number, got {value!r}")


_ACCEPTS = {"a number": {"an integer", "a number"}, "true or false": {"true or false"}, "a string": {"a string"}}


def _kind(value: Any, of_value: bool = False) -> str | None:
    if isinstance(value, bool):
        return "true or false"
    if isinstance(value, int):
        return "an integer" if of_value else "a number"
    if isinstance(value, float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    return "something else" if of_value else None


def _short(value: Any) -> str:
    shortener = reprlib.Repr()
    shortener.maxlevel, shortener.maxlist, shortener.maxdict, shortener.maxstring, shortener.maxlong = 2, 6, 6, 60, 40
    return shortener.repr(value)


def _constructor_default(creators: list[Any], key: str) -> Any:
    """The default of parameter ``key`` of the first creator that declares one (None when none does)."""
    import inspect

    for creator in creators:
        try:
            parameter = inspect.signature(creator).parameters.get(key)
        except (TypeError, ValueError):
            continue
        if parameter is not None and parameter.default is not inspect.Parameter.empty:
            return parameter.default
    return None
