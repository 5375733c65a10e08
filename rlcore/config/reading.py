"""Reading params files and ``--set`` overrides safely: UTF-8 text of bounded size, YAML parsed with a safe loader
bounded in depth and in alias expansion, with no key given twice in a mapping, ``key.path=value`` overrides applied
to the tree; one-line errors. Every YAML rlcore reads goes through :func:`parse_yaml`."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

from rlcore.common.errors import ConfigError, file_problem

MAX_PARAMS_FILE_BYTES = 1 << 20
"""A params file larger than this (1 MiB) is refused unread: params files are a few KB."""
MAX_YAML_VALUES = 100_000
"""A params file or ``--set`` value whose YAML holds more values than this, counting every alias's expansion, is
refused before it is built (an alias bomb, "billion laughs", would otherwise hang validation)."""
MAX_YAML_DEPTH = 64
"""Deepest nesting of YAML collections accepted."""


class InvalidYAML(ConfigError):
    """Text that is not YAML at all (``--set`` then takes the value as a string)."""


_SAFE_LOADER: type[yaml.SafeLoader] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml's: ~10x faster


class ParamsLoader(_SAFE_LOADER):
    """``yaml.SafeLoader`` (libyaml's where PyYAML has it) that also reads ``1e-3`` and ``1e5`` as numbers, as
    YAML 1.2 (and DVC, reading the same params.yaml) does: YAML 1.1 floats need a dot (``1.0e-3``), and the string
    ``'1e-3'`` would now be refused where a number is expected (``rlcore.common.strict_model``). They are floats: an
    integer key refuses ``1e5`` as it refuses ``100000.0``."""


ParamsLoader.add_implicit_resolver(  # copies SafeLoader's resolvers before adding this one
    "tag:yaml.org,2002:float",
    re.compile(r"^[-+]?[0-9][0-9_]*(?:\.[0-9_]*)?[eE][-+]?[0-9]+$"),
    list("-+0123456789"),
)


def parse_yaml(text: str, source: str, key_prefix: str = "") -> Any:
    """``yaml.safe_load`` bounded: refuses (``ConfigError`` naming ``source``) YAML that is invalid, nested deeper
    than :data:`MAX_YAML_DEPTH`, recursive, that would expand to more than :data:`MAX_YAML_VALUES` values, or that
    gives a key twice in one mapping (named by its dotted path, after ``key_prefix`` for a ``--set`` value)."""
    if _flow_depth(text) > MAX_YAML_DEPTH:  # PyYAML's scanner is quadratic in the depth of [ and { nesting
        raise ConfigError(f"{source}: YAML nested deeper than {MAX_YAML_DEPTH} levels")
    try:
        loader = ParamsLoader(text)
    except yaml.YAMLError as exc:  # a character YAML does not allow (NUL, other control characters)
        raise InvalidYAML(f"{source}: not valid YAML: {_yaml_problem(exc)}") from None
    try:
        try:
            node = loader.get_single_node()
        except yaml.YAMLError as exc:
            raise InvalidYAML(f"{source}: not valid YAML{_yaml_line(exc)}: {_yaml_problem(exc)}") from None
        except RecursionError:
            raise ConfigError(f"{source}: YAML nested deeper than {MAX_YAML_DEPTH} levels") from None
        if node is None:
            return None
        _check_expansion(node, source)
        _check_duplicate_keys(node, source, key_prefix)
        try:
            return loader.construct_document(node)
        except yaml.YAMLError as exc:
            raise InvalidYAML(f"{source}: not valid YAML{_yaml_line(exc)}: {_yaml_problem(exc)}") from None
        except Exception as exc:  # a tagged or implicit value that does not convert: !!int abc, 2001-13-45
            problem = " ".join(f"{type(exc).__name__}: {exc}".split())
            raise InvalidYAML(f"{source}: not valid YAML: a value that does not convert ({problem})") from None
    finally:
        loader.dispose()


def _yaml_line(exc: yaml.YAMLError) -> str:
    mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
    return f" (line {mark.line + 1})" if mark is not None else ""


def _yaml_problem(exc: yaml.YAMLError) -> str:
    """PyYAML's message without its quoted excerpt of the text: one short line."""
    if isinstance(exc, yaml.reader.ReaderError):
        return f"unacceptable character #x{exc.character:04x} at offset {exc.position} ({exc.reason})"
    parts = [getattr(exc, "context", None), getattr(exc, "problem", None)]
    text = ", ".join(str(part) for part in parts if part) or str(exc)
    return " ".join(text.split())


_QUOTED_OR_COMMENT = re.compile(r'"(?:[^"\\]|\\.)*"|\'(?:[^\']|\'\')*\'|(?:^|(?<=\s))#[^\n]*', re.MULTILINE)
_FLOW_BRACKET = re.compile(r"[][{}]")


def _flow_depth(text: str) -> int:
    """The deepest nesting of flow collections (``[``, ``{``) outside quoted strings and comments."""
    depth = deepest = 0
    for match in _FLOW_BRACKET.finditer(_QUOTED_OR_COMMENT.sub("", text)):
        depth = depth + 1 if match.group() in "[{" else max(depth - 1, 0)
        deepest = max(deepest, depth)
    return deepest


def _check_expansion(root: yaml.Node, source: str) -> None:
    """Count the values ``root`` expands to (aliases counted at every use) without expanding it."""

    def children(node: yaml.Node) -> list[yaml.Node]:
        if isinstance(node, yaml.SequenceNode):
            return list(node.value)
        if isinstance(node, yaml.MappingNode):
            return [item for pair in node.value for item in pair]
        return []

    sizes: dict[int, int] = {}
    heights: dict[int, int] = {}
    active: set[int] = set()
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    while stack:
        node, finished = stack.pop()
        key = id(node)
        if finished:
            active.discard(key)
            below = children(node)
            sizes[key] = 1 + sum(sizes[id(child)] for child in below)
            heights[key] = 1 + max((heights[id(child)] for child in below), default=0)
            if sizes[key] > MAX_YAML_VALUES:
                raise ConfigError(
                    f"{source}: YAML expands to more than {MAX_YAML_VALUES} values (aliases counted at every use: "
                    "an alias bomb?)"
                )
            if heights[key] > MAX_YAML_DEPTH:
                raise ConfigError(f"{source}: YAML nested deeper than {MAX_YAML_DEPTH} levels")
            continue
        if key in sizes:
            continue
        if key in active:
            raise ConfigError(f"{source}: a YAML alias refers to a collection that contains it (recursive)")
        active.add(key)
        stack.append((node, True))
        stack.extend((child, False) for child in children(node) if id(child) not in sizes)


_MERGE_TAG = "tag:yaml.org,2002:merge"


def _check_duplicate_keys(root: yaml.Node, source: str, key_prefix: str) -> None:
    """Refuse a mapping that gives one key twice, at any depth: YAML keeps the last value without a word, so a
    second ``train:`` would replace the whole first section. Keys are compared as the mapping would hold them
    (``1``, ``01`` and ``true`` are one key); the merge key ``<<`` is not a key of the result."""
    visited: set[int] = set()
    stack: list[tuple[yaml.Node, str]] = [(root, key_prefix)]
    while stack:
        node, path = stack.pop()
        if id(node) in visited:  # an alias: its collection was checked where it was defined (first in the text)
            continue
        visited.add(id(node))
        below: list[tuple[yaml.Node, str]] = []
        if isinstance(node, yaml.SequenceNode):
            below = [(child, _dotted(path, str(index))) for index, child in enumerate(node.value)]
        elif isinstance(node, yaml.MappingNode):
            first: dict[Any, yaml.Node] = {}
            for key_node, value_node in node.value:
                if key_node.tag == _MERGE_TAG or not isinstance(key_node, yaml.ScalarNode):
                    below.append((value_node, path))  # a complex key is refused when the mapping is built
                    continue
                key = _mapping_key(key_node)
                if key in first:
                    earlier = first[key]
                    where = _where(earlier.start_mark, key_node.start_mark)
                    if earlier.value != key_node.value:  # 1 and 01, 1 and true
                        where += f", written {earlier.value!r} and {key_node.value!r}"
                    raise ConfigError(
                        f"{source}: duplicate key '{_dotted(path, key_node.value)}' ({where}): YAML would keep "
                        "only the last value; give each key once"
                    )
                first[key] = key_node
                below.append((value_node, _dotted(path, key_node.value)))
        stack.extend(reversed(below))  # popped in the order of the text


def _mapping_key(node: yaml.ScalarNode) -> Any:
    """The key a mapping would hold for ``node`` (its tag and text if it does not convert: refused later)."""
    try:
        key = yaml.constructor.SafeConstructor().construct_object(node)
        hash(key)
    except Exception:  # noqa: BLE001 - any value that does not convert is reported when the document is built
        return (node.tag, node.value)
    return key


def _dotted(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def _where(first: yaml.Mark, second: yaml.Mark) -> str:
    """``lines 3 and 40``; on one line (a ``--set`` value, a flow mapping): ``line 1, columns 2 and 9``."""
    if first.line == second.line:
        return f"line {first.line + 1}, columns {first.column + 1} and {second.column + 1}"
    return f"lines {first.line + 1} and {second.line + 1}"


def read_text_file(path: Path, what: str = "params file", limit: int = MAX_PARAMS_FILE_BYTES) -> str:
    """The text of a UTF-8 file (a UTF-8 byte-order mark is fine); one-line errors name the file."""
    problem = file_problem(path, what)
    if problem is not None:
        raise ConfigError(f"{path}: {problem}")
    try:
        size = path.stat().st_size
        if size > limit:
            raise ConfigError(f"{path}: {size} bytes is too large for a {what} (at most {limit}): is it one?")
        raw = path.read_bytes()
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read the {what}: {exc.strerror or exc}") from None
    if raw.startswith((b"\xff\xfe", b"\xfe\xff")):
        raise ConfigError(f"{path}: not a UTF-8 text {what} (it is UTF-16: save it as UTF-8)")
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise ConfigError(
            f"{path}: not a UTF-8 text {what} (byte 0x{raw[exc.start]:02x} at offset {exc.start} is not UTF-8; "
            "a binary file, or another encoding such as latin-1?)"
        ) from None
    if "\x00" in text:
        raise ConfigError(f"{path}: not a UTF-8 text {what} (it holds NUL bytes: a binary file?)")
    return text


def read_yaml_mapping(path: Path) -> dict[str, Any]:
    """Parse a YAML file that must hold a non-empty mapping; one-line errors name the file."""
    data = parse_yaml(read_text_file(path), str(path))
    if data is None:
        raise ConfigError(f"{path}: params file is empty (nothing but blanks, comments or null): nothing to run")
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a mapping of params at the top level, got {type(data).__name__}")
    return data


def apply_overrides(tree: dict[str, Any], overrides: list[str]) -> dict[str, Any]:
    """Apply ``key.path=value`` overrides; values are parsed as YAML (``1e-3``, ``true``, ``[64, 64]``), bounded
    like a params file (:func:`parse_yaml`); a value that is not valid YAML is taken as a string."""
    for item in overrides:
        key, sep, raw = item.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"--set {item!r}: expected KEY=VALUE, e.g. --set algo.lr=0.001")
        try:
            value = parse_yaml(raw, f"--set {key.strip()}", key.strip()) if raw.strip() else ""
        except InvalidYAML:
            value = raw
        node = tree
        parts = key.strip().split(".")
        for depth, part in enumerate(parts[:-1]):
            child = node.setdefault(part, {})
            if not isinstance(child, dict):
                prefix = ".".join(parts[: depth + 1])
                raise ConfigError(f"--set {key}: {prefix} is a value, not a section")
            node = child
        node[parts[-1]] = value
    return tree
