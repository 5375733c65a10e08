"""Envs named by import path, ``env.id: package.module:Name``: the user's own ``gymnasium.Env`` subclass, or a
function returning one, called with ``env.kwargs``; how such an id is told from ``module:Env-v0`` (a registered
id), the spec every process makes it from, and the errors that say what to do.

The rule for ``module:Name``: import ``module`` (from the project folder, ``rlcore.common.project``, or the installed
packages); if it has an attribute ``Name``, that is the env; else ``Name`` is a gymnasium id the import registered
(``module:Env-v0``). An id with a version (``-v0``) is never an attribute name, so the two never collide.

A user env is not added to gymnasium's registry: :func:`user_env_spec` is its spec, which ``gymnasium.make`` and
``gymnasium.make_vec`` take as they take a registered one (``rlcore.envs.ids.env_spec`` hands out both), so
training, evaluation, collection, export checks and every worker process build it the same way.
"""

from __future__ import annotations

import importlib
import inspect
import re
from types import ModuleType
from typing import Any

import gymnasium as gym

from rlcore.common.errors import (
    ConfigError,
    RLCoreError,
    UserCodeError,
    UserCodeValueError,
    describe_exception,
    did_you_mean,
    format_traceback,
    raised_at,
)
from rlcore.common.project import searched_folders
from rlcore.common.validation_errors import short_repr

MODULE_PATH = re.compile(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)*")
"""A module's import path: dotted Python identifiers."""


def import_user_module(name: str) -> ModuleType:
    """The module ``name`` of an import path in params. ``ValueError`` when it is nowhere to be found (naming the
    folders searched), :class:`UserCodeValueError` when importing it raised (its own code, or a module it imports
    that is missing)."""
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as exc:
        if exc.name is None or not (name == exc.name or name.startswith(exc.name + ".")):  # a module it imports
            message = f"importing module {name!r} raised {raised_at(exc)}"
            raise UserCodeValueError(message, format_traceback(exc)) from None
        where = ", ".join(searched_folders()) or "no folder of your own"
        path = name.replace(".", "/")
        raise ValueError(
            f"no module named {exc.name!r}: not in {where} nor in the installed packages; put {path}.py in the "
            "project folder (the one rlcore runs in: where params.yaml and dvc.yaml are)"
        ) from None
    except (Exception, SystemExit) as exc:  # whatever the module raises: a syntax error, its own checks
        raise UserCodeValueError(f"importing module {name!r} raised {raised_at(exc)}", format_traceback(exc)) from None


def user_env_spec(env_id: str) -> gym.envs.registration.EnvSpec | None:
    """The spec of ``module:Name`` when ``Name`` is an attribute of ``module`` (a ``gymnasium.Env`` subclass or a
    callable; ``ValueError`` for anything else); None when it is not, so ``Name`` is a registered id."""
    module_name, _, name = env_id.partition(":")
    if not MODULE_PATH.fullmatch(module_name) or not name:
        raise ValueError(f"{env_id!r} is not module:Name (e.g. reach_env:ReachEnv, a class in reach_env.py)")
    module = import_user_module(module_name)
    try:
        target = getattr(module, name, None)
    except Exception as exc:  # a module-level __getattr__ of the user's
        message = f"{module_name}.{name} raised {raised_at(exc)}"
        raise UserCodeValueError(message, format_traceback(exc)) from None
    if target is None:
        return None
    if isinstance(target, type) and not issubclass(target, gym.Env):
        bases = ", ".join(base.__qualname__ for base in target.__mro__[1:-1]) or "object only"
        raise ValueError(f"{module_name}.{name} is a class that is not a gymnasium.Env subclass (its bases: {bases})")
    if not callable(target):
        raise ValueError(
            f"{module_name}.{name} is not a gymnasium.Env class or a function returning one: it is "
            f"{short_repr(target)} (of type {type(target).__name__})"
        )
    return gym.envs.registration.EnvSpec(id=env_id, entry_point=UserEnvEntry(env_id))


def unknown_name(env_id: str) -> str:
    """Why ``module:Name`` names no env: the module has no ``Name`` and registered no id ``Name``; with the Env
    classes it defines and the ids it registered to pick from."""
    module_name, _, name = env_id.partition(":")
    module = importlib.import_module(module_name)  # imported by user_env_spec already
    classes = [
        attribute
        for attribute, value in vars(module).items()
        if isinstance(value, type) and issubclass(value, gym.Env) and value.__module__ == module_name
    ]
    registered = [spec.id for spec in gym.registry.values() if _entry_module(spec.entry_point) == module_name]
    offers = ([f"its gymnasium.Env classes: {', '.join(classes)}"] if classes else []) + (
        [f"the ids it registers: {', '.join(registered)}"] if registered else []
    )
    if not offers:
        return (
            f"{module_name} has no {name!r}, defines no gymnasium.Env class and registers no env: name a class of it "
            f"(or a function returning an env) as {module_name}:<Name>, or call gymnasium.register in it"
        )
    hint = did_you_mean(name, classes + registered)
    return f"{module_name} has no {name!r} and registers no env {name!r}{hint}; {'; '.join(offers)}"


def _entry_module(entry_point: Any) -> str:
    if isinstance(entry_point, str):
        return entry_point.partition(":")[0]
    return str(getattr(entry_point, "__module__", ""))


class UserEnvEntry:
    """The entry point of a user env's spec: ``module:Name`` called with the env's kwargs, its result checked to be
    a ``gymnasium.Env``. It holds the id only (a plain class), so async vectorization pickles it and each process
    imports the user's module itself. Raises rlcore's own errors, naming ``env.kwargs`` or ``env.id``."""

    def __init__(self, env_id: str) -> None:
        self.env_id = env_id

    def target(self) -> Any:
        """The class or function the id names."""
        module_name, _, name = self.env_id.partition(":")
        return getattr(importlib.import_module(module_name), name)

    @property
    def metadata(self) -> dict[str, Any]:
        """The target's (its render modes, which ``gymnasium.make`` reads); none when it has none (a function)."""
        metadata = getattr(self.target(), "metadata", None)
        if not isinstance(metadata, dict):
            raise AttributeError("metadata")  # so gymnasium.make finds none, as for the function itself
        return metadata

    def __call__(self, **kwargs: Any) -> gym.Env:
        target = self.target()
        try:
            inspect.signature(target).bind(**kwargs)
        except TypeError as exc:
            raise ConfigError(f"env.kwargs: {self.env_id} does not accept them: {exc}") from None
        except ValueError:  # no signature to read (a builtin): the call says
            pass
        try:
            env = target(**kwargs)
        except RLCoreError:
            raise
        except (Exception, SystemExit) as exc:  # sys.exit() in the user's code is an error here, not an exit
            message = f"env.id: {self.env_id} raised when built: {raised_at(exc)}"
            raise UserCodeError(message, format_traceback(exc)) from None
        if not isinstance(env, gym.Env):
            returned = f"{type(env).__name__} ({short_repr(env)})"
            raise ConfigError(f"env.id: {self.env_id} returned {returned}, not a gymnasium.Env")
        return env


def check_user_env(env_id: str, kwargs: dict[str, Any]) -> None:
    """Build the user env ``env_id`` once with ``kwargs`` (and close it), so what it raises or returns is refused at
    load, before anything is written: ``ValueError`` naming ``env.id`` or ``env.kwargs``, or
    :class:`UserCodeValueError` with the traceback of the user's code."""
    spec = user_env_spec(env_id) if ":" in env_id else None
    if spec is None:  # a registered id: gymnasium's own env, built where it is used
        return
    try:
        env = gym.make(spec, **kwargs)
    except UserCodeError as exc:
        raise UserCodeValueError(str(exc), exc.details) from None
    except RLCoreError as exc:
        raise ValueError(str(exc)) from None
    except Exception as exc:  # gymnasium's own checks of what the env declares (its metadata, its spaces)
        raise ValueError(f"env.id: {env_id} cannot be built: {describe_exception(exc)}") from None
    env.close()
