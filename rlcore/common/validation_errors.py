"""pydantic's validation errors rendered as one line: the dotted key, what was expected, what was given."""

from __future__ import annotations

import re
from typing import Any

from pydantic import BaseModel, ValidationError

from rlcore.common.errors import did_you_mean

_UNION_TAG = re.compile(
    r"^(int|float|str|bool|bytes|none|constrained-\w+|literal\[.*\]|function-\w+\[.*\]|list\[.*\]|dict\[.*\]"
    r"|tagged-union\[.*\]|union\[.*\]|is-instance\[.*\]|json-or-python\[.*\]|lax-\w+|strict-\w+)$"
)
_COMPARISONS = {"greater_than": ">", "greater_than_equal": ">=", "less_than": "<", "less_than_equal": "<="}


def short_repr(value: Any, limit: int = 80) -> str:
    """``repr(value)`` cut to about ``limit`` characters (huge lists, strings and numbers stay one short line)."""
    import reprlib

    shortener = reprlib.Repr()
    shortener.maxlevel, shortener.maxlist, shortener.maxdict, shortener.maxtuple = 3, 8, 8, 8
    shortener.maxstring, shortener.maxlong, shortener.maxother = limit, 40, limit
    text = shortener.repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def describe_validation_error(exc: ValidationError, model: type[BaseModel]) -> str:
    """One line for the first problem: the dotted key, what was expected, what was given. The alternatives of a
    union (``ent_coef: float | auto``) are named together."""
    errors = exc.errors(include_url=False)
    error = errors[0]
    loc = [str(part) for part in error["loc"] if not _UNION_TAG.match(str(part))]
    key = ".".join(loc) or "<top level>"
    given = short_repr(error.get("input"))
    if error["type"] == "extra_forbidden":
        siblings = _field_names(model, loc[:-1])
        prefix = ".".join(loc[:-1]) + "." if len(loc) > 1 else ""
        return f"unknown key {short_repr(key)}{did_you_mean(loc[-1], siblings, prefix=prefix)}"
    if error["type"] == "missing":
        return f"{key}: required key is missing"
    message = error["msg"]
    if message.startswith("Value error, "):
        message = message[len("Value error, ") :]
        return message if not loc or message.startswith(f"{key}.") else f"{key}: {message}"
    alternatives = [
        other
        for other in errors
        if len(other["loc"]) > len(loc) and [str(p) for p in other["loc"] if not _UNION_TAG.match(str(p))] == loc
    ]
    if len(alternatives) > 1:
        return f"{key}: expected {' or '.join(dict.fromkeys(_expected(other) for other in alternatives))}, got {given}"
    if error["type"] in _COMPARISONS:
        bound = next(iter(error.get("ctx", {}).values()), "?")
        return f"{key}: must be {_COMPARISONS[error['type']]} {bound}, got {given}"
    message = message[0].lower() + message[1:]
    return f"{key}: {message} ({given})" if ", got " in message else f"{key}: {message}, got {given}"


def _expected(error: Any) -> str:
    """What one alternative of a union wanted, in a few words."""
    kind = error["type"]
    if kind in _COMPARISONS:
        return f"a number {_COMPARISONS[kind]} {next(iter(error.get('ctx', {}).values()), '?')}"
    if kind == "literal_error":
        return str(error.get("ctx", {}).get("expected", "one of the listed values"))
    if kind == "finite_number":
        return "a finite number"
    if kind.startswith("float_"):
        return "a number"
    if kind.startswith("int_"):
        return "an integer"
    message = str(error["msg"]).removeprefix("Value error, ")
    return message[0].lower() + message[1:]


def _field_names(model: type[BaseModel], loc: list[str]) -> list[str]:
    node: Any = model
    for part in loc:
        field = node.model_fields.get(part) if isinstance(node, type) and issubclass(node, BaseModel) else None
        if field is None:
            return []
        node = field.annotation
    if isinstance(node, type) and issubclass(node, BaseModel):
        return list(node.model_fields)
    return []
