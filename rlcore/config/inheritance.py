"""A params file that inherits from another (``base: params.yaml``): its keys over the base file's, so a second run
(the offline branch's ``offline.yaml``) names only what differs from the first and follows the rest of it.

The rule: the file's mappings merge into the base's key by key, at every depth; any other value (a number, a string,
a list) replaces the base's. One exception: an ``algo`` section that names another algorithm replaces the base's
whole (its keys are that algorithm's). ``base`` is relative to the file naming it; a base may have a base of its own.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rlcore.common.errors import ConfigError
from rlcore.common.validation_errors import short_repr
from rlcore.config.reading import read_yaml_mapping

BASE_KEY = "base"


def base_path(path: Path, tree: dict[str, Any]) -> Path | None:
    """The file ``tree`` (read from ``path``) inherits from, or None; refused in one line when it is not a path."""
    value = tree.get(BASE_KEY)
    if value is None:
        return None
    if not isinstance(value, str) or not value.strip():
        raise ConfigError(
            f"{path}: {BASE_KEY}: expected the path of a params file (e.g. params.yaml), got {short_repr(value)}"
        )
    return Path(path).parent / value


def read_params_tree(path: Path, _seen: tuple[Path, ...] = ()) -> dict[str, Any]:
    """The params tree of ``path`` with its base's keys under it (the module docstring); ``base`` itself stays in
    the tree (it names where the keys came from)."""
    path = Path(path)
    seen = (*_seen, path.resolve())
    tree = read_yaml_mapping(path)
    base = base_path(path, tree)
    if base is None:
        return tree
    if base.resolve() in seen:
        chain = " -> ".join(str(p) for p in (*_seen, path.resolve(), base.resolve()))
        raise ConfigError(f"{path}: {BASE_KEY}: the files inherit from each other ({chain})")
    if not base.is_file():
        raise ConfigError(f"{path}: {BASE_KEY}: {base}: no such params file")
    inherited = read_params_tree(base, seen)
    inherited.pop(BASE_KEY, None)
    return merge(inherited, tree)


def base_tree(path: Path, tree: dict[str, Any]) -> dict[str, Any] | None:
    """The params tree of the file ``tree`` (read from ``path``) inherits from, with its own base's keys under it and
    without its ``base`` key; None without a base."""
    base = base_path(path, tree)
    if base is None:
        return None
    inherited = read_params_tree(base)
    inherited.pop(BASE_KEY, None)
    return inherited


def merge(base: dict[str, Any], own: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """``own``'s keys over ``base``'s (new dicts; neither argument is changed)."""
    merged = dict(base)
    for key, value in own.items():
        below = merged.get(key)
        if isinstance(value, dict) and isinstance(below, dict) and not _replaces(prefix + key, below, value):
            merged[key] = merge(below, value, f"{prefix}{key}.")
        else:
            merged[key] = value
    return merged


def _replaces(key: str, below: dict[str, Any], value: dict[str, Any]) -> bool:
    """An ``algo`` section naming another algorithm replaces the base's whole."""
    return key == "algo" and value.get("name", below.get("name")) != below.get("name")


def own_and_inherited(key: str, own: dict[str, Any], base: dict[str, Any]) -> tuple[list[str], list[str]]:
    """Where the value of dotted ``key`` comes from, as the finest keys of each file: (keys the file itself sets,
    keys it inherits from the base). A key neither has is in neither list (its default applies)."""
    own_node, base_node = _at(own, key), _at(base, key)
    if own_node is _MISSING:
        return [], ([] if base_node is _MISSING else [key])
    if not (isinstance(own_node, dict) and isinstance(base_node, dict)) or _replaces(key, base_node, own_node):
        return [key], []
    own_keys: list[str] = []
    inherited: list[str] = []
    for sub in own_node:
        more_own, more_inherited = own_and_inherited(sub, own_node, base_node)
        own_keys += [f"{key}.{found}" for found in more_own]
        inherited += [f"{key}.{found}" for found in more_inherited]
    inherited += [f"{key}.{sub}" for sub in base_node if sub not in own_node]
    return own_keys, inherited


_MISSING = object()


def _at(tree: dict[str, Any], key: str) -> Any:
    node: Any = tree
    for part in key.split("."):
        if not isinstance(node, dict) or part not in node:
            return _MISSING
        node = node[part]
    return node


def value_at(tree: dict[str, Any], key: str) -> Any:
    """The value at the dotted ``key`` (``select.baseline_run``) of ``tree``, or None where it is not there."""
    found = _at(tree, key)
    return None if found is _MISSING else found


def has_key(tree: dict[str, Any], key: str) -> bool:
    """Whether the dotted ``key`` (``eval.episodes``) is in ``tree``."""
    return _at(tree, key) is not _MISSING
