"""Editing a params file in place: set dotted keys to new values, keeping its comments and layout.

Used by ``rlcore sweep --apply`` to merge a sweep's best params (``reports/sweep/best_params.yaml``)
into ``params.yaml``. Each value is replaced on its own line; when a key is missing from the file or
the file's layout is beyond a line edit (flow mappings, multi-line values), the file is rewritten
from its parsed data instead, which keeps the values but drops the comments.
"""

from __future__ import annotations

import copy
import logging
import re
from pathlib import Path
from typing import Any

import yaml

from rlcore.common.errors import ConfigError
from rlcore.common.files import write_text
from rlcore.config.reading import parse_yaml, read_yaml_mapping
from rlcore.config.sweep import flatten, yaml_text
from rlcore.params import validate_params

log = logging.getLogger("rlcore")

_LINE = re.compile(r"^(?P<indent> *)(?P<key>[A-Za-z0-9_.-]+):(?P<gap>[ \t]*)(?P<value>.*?)(?P<comment>[ \t]+#.*)?$")


def set_values(text: str, values: dict[str, Any]) -> tuple[str, list[str]]:
    """Replace the values of dotted ``values`` keys in block-style YAML ``text``; returns it and the keys not found."""
    lines = text.splitlines(keepends=True)
    stack: list[tuple[int, str]] = []
    found: set[str] = set()
    for index, line in enumerate(lines):
        body = line.rstrip("\r\n")
        stripped = body.strip()
        if not stripped or stripped.startswith(("#", "-")):
            continue
        match = _LINE.match(body)
        if match is None:
            continue
        indent = len(match["indent"])
        while stack and stack[-1][0] >= indent:
            stack.pop()
        path = ".".join([*(key for _, key in stack), match["key"]])
        if not match["value"]:
            stack.append((indent, match["key"]))
            continue
        if path in values:
            newline = line[len(body) :]
            gap = match["gap"] or " "
            lines[index] = f"{match['indent']}{match['key']}:{gap}{yaml_text(values[path])}{match['comment'] or ''}"
            lines[index] += newline
            found.add(path)
    return "".join(lines), [key for key in values if key not in found]


def apply_values(params_file: Path, values: dict[str, Any]) -> str:
    """Set ``values`` (dotted keys) in ``params_file`` atomically, after validating the result; returns how."""
    original = read_yaml_mapping(params_file)
    expected = copy.deepcopy(original)
    for key, value in values.items():
        node = expected
        *parents, leaf = key.split(".")
        for part in parents:
            node = node.setdefault(part, {})
            if not isinstance(node, dict):
                raise ConfigError(f"{params_file}: {key}: {part} is a value, not a section")
        node[leaf] = copy.deepcopy(value)
    validate_params(expected, str(params_file))
    text, missing = set_values(params_file.read_text(), values)
    how = "edited in place (comments kept)"
    if missing or _parsed(text, params_file) != expected:
        text = yaml.safe_dump(expected, sort_keys=False)
        how = "rewritten (comments dropped: " + (f"{', '.join(missing)} not in the file" if missing else "layout") + ")"
    write_text(params_file, text)
    return how


def _parsed(text: str, params_file: Path) -> Any:
    """The edited text read back as rlcore reads params files; ``None`` if the line edit broke it."""
    try:
        return parse_yaml(text, str(params_file))
    except ConfigError:
        return None


def apply_fragment(params_file: Path, fragment_file: Path) -> dict[str, Any]:
    """Merge a params fragment (e.g. a sweep's ``best_params.yaml``) into ``params_file``; returns the values set.

    The values come back by dotted key, as YAML text: ``{"algo.lr": "0.0012"}``.
    """
    if not fragment_file.is_file():
        raise ConfigError(f"{fragment_file}: not found; run `rlcore sweep` first")
    values = flatten(read_yaml_mapping(fragment_file))
    if not values:
        raise ConfigError(f"{fragment_file}: holds no params to apply")
    how = apply_values(params_file, values)
    applied = {key: yaml_text(value) for key, value in values.items()}
    log.info("%s: set %s; %s", params_file, ", ".join(f"{k}={v}" for k, v in applied.items()), how)
    return applied
