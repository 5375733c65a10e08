"""Names that params refer to: gymnasium env ids and import paths of wrappers. A leaf module (config uses it)."""

from __future__ import annotations

import importlib
from typing import Any

import gymnasium as gym

from rlcore.errors import did_you_mean


def check_env_id(env_id: str) -> None:
    """Raise ``ValueError`` (pydantic turns it into a one-line ``ConfigError``) unless ``env_id`` is registered,
    importing the module of a ``module:Env-v0`` id first."""
    if ":" in env_id:
        module, _, _ = env_id.partition(":")
        try:
            importlib.import_module(module)
        except ImportError as exc:
            raise ValueError(f"cannot import module {module!r} named in the env id: {exc}") from None
    try:
        gym.spec(env_id)
    except gym.error.Error:
        known = list(gym.registry.keys())
        raise ValueError(f"unknown gymnasium env id {env_id!r}{did_you_mean(env_id, known)}") from None


def import_object(path: str) -> Any:
    """The object at ``package.module.Name`` or ``package.module:Name``; ``ValueError`` naming what is missing."""
    module_name, sep, attribute = path.partition(":") if ":" in path else path.rpartition(".")
    if not sep or not module_name or not attribute:
        raise ValueError(f"expected an import path like gymnasium.wrappers.ClipReward, got {path!r}")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ValueError(f"cannot import module {module_name!r}: {exc}") from None
    try:
        return getattr(module, attribute)
    except AttributeError:
        names = [name for name in dir(module) if not name.startswith("_")]
        raise ValueError(f"{module_name} has no {attribute!r}{did_you_mean(attribute, names)}") from None
