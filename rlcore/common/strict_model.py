"""The base of every params section (``rlcore.config``, ``rlcore.envs.config``, the algorithms' configs).

A leaf module (pydantic only), so the sweep section can share it without an import cycle. What it refuses
everywhere, unless a key's own type says otherwise:

- unknown keys (``extra="forbid"``), also on assignment;
- non-finite floats: ``.inf``, ``-.inf``, ``.nan`` (and strings such as ``"nan"`` or ``"1e999"``);
- a boolean where a number is expected: YAML reads ``seed: true`` as ``True``, which pydantic would take as 1;
- a number in a string where a number is expected: a quoted ``threshold: '450'`` is a string in YAML, which
  pydantic would convert (a key whose type admits that string takes it; pydantic refuses any other string);
- a float where an integer is expected: pydantic would read ``seeds: [1.0, 2.0]`` as seeds 1 and 2, and ``1e5`` as
  100000 (a fractional float, ``1.5``, it refuses itself).
"""

from __future__ import annotations

import math
import types
from typing import Annotated, Any, Literal, Union, get_args, get_origin

from pydantic import BaseModel, ConfigDict, ValidationInfo, field_validator


class StrictModel(BaseModel):
    """A params section: unknown keys are errors, values are validated on assignment too, floats must be finite
    and a boolean is not a number."""

    model_config = ConfigDict(
        extra="forbid", validate_assignment=True, frozen=False, allow_inf_nan=False, use_attribute_docstrings=True
    )

    @field_validator("*", mode="before")
    @classmethod
    def _no_boolean_numbers(cls, value: Any, info: ValidationInfo) -> Any:
        field = cls.model_fields.get(info.field_name) if info.field_name is not None else None
        if field is not None and _boolean_as_number(value, field.annotation):
            shown = str(value).lower() if isinstance(value, bool) else f"in {value!r}"[:80]
            raise ValueError(f"expected {_expected(field.annotation)}, got a boolean ({shown})")
        if field is not None and _string_as_number(value, field.annotation):
            shown = repr(value)[:80] if isinstance(value, str) else f"in {value!r}"[:80]
            raise ValueError(f"expected {_expected(field.annotation)}, got a string ({shown}); write it unquoted")
        if field is not None and _float_as_integer(value, field.annotation):
            shown = repr(value)[:80] if isinstance(value, float) else f"in {value!r}"[:80]
            raise ValueError(
                f"expected {_expected(field.annotation)}, got a float ({shown}); write integers without a decimal "
                "point or exponent"
            )
        return value


def _members(annotation: Any) -> list[Any]:
    """The alternatives of a union (``Annotated`` unwrapped), else ``[annotation]``."""
    while get_origin(annotation) is Annotated:
        annotation = get_args(annotation)[0]
    if get_origin(annotation) in (Union, types.UnionType):
        return [member for arg in get_args(annotation) for member in _members(arg)]
    return [annotation]


def _admits_boolean(annotation: Any) -> bool:
    for member in _members(annotation):
        if member is Any or member is bool or member is object:
            return True
        if get_origin(member) is Literal and any(isinstance(arg, bool) for arg in get_args(member)):
            return True
    return False


def _is_number(annotation: Any) -> bool:
    return any(member in (int, float) for member in _members(annotation))


def _boolean_as_number(value: Any, annotation: Any) -> bool:
    """True when ``value`` holds a boolean where ``annotation`` wants a number (lists and their items too)."""
    if isinstance(value, bool):
        return _is_number(annotation) and not _admits_boolean(annotation)
    if isinstance(value, list | tuple):
        items = [get_args(m)[0] for m in _members(annotation) if get_origin(m) in (list, tuple) and get_args(m)]
        return any(_boolean_as_number(item, kind) for kind in items[:1] for item in value)
    return False


def _is_integer(annotation: Any) -> bool:
    members = _members(annotation)
    return int in members and float not in members and not any(m in (Any, object) for m in members)


def _float_as_integer(value: Any, annotation: Any) -> bool:
    """True when ``value`` holds a whole float where ``annotation`` wants an integer (lists and their items too)."""
    if isinstance(value, float):
        return value.is_integer() and _is_integer(annotation)
    if isinstance(value, list | tuple):
        items = [get_args(m)[0] for m in _members(annotation) if get_origin(m) in (list, tuple) and get_args(m)]
        return any(_float_as_integer(item, kind) for kind in items[:1] for item in value)
    return False


def _admits_string(value: str, annotation: Any) -> bool:
    for member in _members(annotation):
        if member in (Any, object) or (isinstance(member, type) and issubclass(member, str)):
            return True
        if get_origin(member) is Literal and value in get_args(member):
            return True
    return False


def _finite_number(text: str) -> bool:
    """Whether pydantic would read ``text`` as a number (any other string it refuses itself, non-finite ones as
    such)."""
    try:
        return math.isfinite(float(text))
    except ValueError:
        return False


def _string_as_number(value: Any, annotation: Any) -> bool:
    """True when ``value`` holds a string where ``annotation`` wants a number (lists and their items too) and
    takes no string of that value."""
    if isinstance(value, str):
        return _is_number(annotation) and _finite_number(value) and not _admits_string(value, annotation)
    if isinstance(value, list | tuple):
        items = [get_args(m)[0] for m in _members(annotation) if get_origin(m) in (list, tuple) and get_args(m)]
        return any(_string_as_number(item, kind) for kind in items[:1] for item in value)
    return False


def _expected(annotation: Any) -> str:
    members = _members(annotation)
    for member in members:
        if get_origin(member) in (list, tuple) and get_args(member):
            return f"a list of {_expected(get_args(member)[0]).removeprefix('a ').removeprefix('an ')}s"
    return "an integer" if int in members and float not in members else "a number"
