"""A :class:`~toolwire.parse.record.CallFormat` written out as Python a plugin can paste.

``toolwire detect --derive`` prints a derived record this way: only the fields
that differ from their defaults, in the order the record declares them, so the
text reads like a hand-written family and evaluates back to an equal record.
"""

from __future__ import annotations

from typing import Any

import attrs

from .record import CallFormat

__all__ = ["format_source"]

_INDENT = "    "


def format_source(fmt: CallFormat, *, name: str = "FORMAT") -> str:
    """``NAME = CallFormat(...)`` for ``fmt`` (a :class:`GrammarArguments` hook is named)."""
    return f"{name} = {_value(fmt, 0)}\n"


def _value(value: Any, depth: int) -> str:
    if attrs.has(type(value)):
        return _record(value, depth)
    if isinstance(value, tuple) and len(value) != 1:
        return "(" + ", ".join(_value(v, depth) for v in value) + ")"
    if isinstance(value, tuple):
        return "(" + _value(value[0], depth) + ",)"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{_value(k, depth)}: {_value(v, depth)}"
                               for k, v in value.items()) + "}"
    if callable(value):
        return getattr(value, "__qualname__", repr(value))
    return repr(value)


def _record(record: Any, depth: int) -> str:
    fields = []
    for field in attrs.fields(type(record)):
        value = getattr(record, field.name)
        default = field.default
        if isinstance(default, attrs.Factory):  # type: ignore[arg-type]
            default = default.factory()
        if field.converter is not None and default is not attrs.NOTHING:
            default = field.converter(default)
        if default is not attrs.NOTHING and value == default:
            continue
        fields.append(f"{field.name}={_value(value, depth + 1)}")
    head = type(record).__name__ + "("
    one_line = head + ", ".join(fields) + ")"
    if len(one_line) + len(_INDENT) * depth <= 96:
        return one_line
    inner = _INDENT * (depth + 1)
    return head + "\n" + "".join(f"{inner}{f},\n" for f in fields) + _INDENT * depth + ")"
