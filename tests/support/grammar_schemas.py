"""Hypothesis strategies for tool schemas a grammar can bound, and checks of the calls.

The tiny random-weight model writes whatever a grammar allows, so a schema
whose values are unbounded (a string without ``maxLength``) could make it
write until the token limit; these schemas bound every string and array, as
real tool schemas often do, and cover every JSON type: strings (with and
without a lower bound), integers (free, non-negative, a small range), numbers,
booleans, ``null`` in a type list, string and integer enums, nested objects
with required and optional members, and arrays of scalars or objects.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import jsonschema
from hypothesis import strategies as st

__all__ = ["call_problems", "tool_lists", "tool_schema"]

_RESERVED = {"all", "workspace", "none", "true", "false", "null"}
_LOWER = "abcdefghijklmnopqrstuvwxyz"
NAMES = st.builds(lambda head, tail: head + tail, st.sampled_from(_LOWER),
                  st.text(alphabet=_LOWER + "0123456789_", max_size=8)).filter(
    lambda n: n not in _RESERVED)
WORDS = st.text(alphabet="abcdefghijklmnopqrstuvwxyz XYZ-_0123456789", min_size=1, max_size=6)


@st.composite
def _string(draw: st.DrawFn) -> dict[str, Any]:
    high = draw(st.integers(0, 10))
    schema: dict[str, Any] = {"type": "string", "maxLength": high}
    if high and draw(st.booleans()):
        schema["minLength"] = draw(st.integers(1, high))
    return schema


@st.composite
def _integer(draw: st.DrawFn) -> dict[str, Any]:
    shape = draw(st.sampled_from(["free", "natural", "range"]))
    if shape == "natural":
        return {"type": "integer", "minimum": draw(st.integers(0, 1))}
    if shape == "range":
        low = draw(st.integers(-5, 20))
        return {"type": "integer", "minimum": low, "maximum": low + draw(st.integers(0, 30))}
    return {"type": "integer"}


LEAVES = st.one_of(
    _string(),
    _integer(),
    st.just({"type": "number"}),
    st.just({"type": "boolean"}),
    st.builds(lambda n: {"type": ["string", "null"], "maxLength": n}, st.integers(0, 8)),
    st.just({"type": ["integer", "null"]}),
    st.lists(WORDS, min_size=1, max_size=4, unique=True).map(
        lambda v: {"type": "string", "enum": v}),
    st.lists(st.integers(-3, 99), min_size=1, max_size=4, unique=True).map(
        lambda v: {"type": "integer", "enum": v}),
)


def _object(values: st.SearchStrategy[dict[str, Any]]) -> st.SearchStrategy[dict[str, Any]]:
    @st.composite
    def build(draw: st.DrawFn) -> dict[str, Any]:
        names = draw(st.lists(NAMES, min_size=1, max_size=3, unique=True))
        properties = {name: draw(values) for name in names}
        required = [n for n in names if draw(st.booleans())]
        schema: dict[str, Any] = {"type": "object", "properties": properties}
        if required:
            schema["required"] = required
        return schema

    return build()


def _array(items: st.SearchStrategy[dict[str, Any]]) -> st.SearchStrategy[dict[str, Any]]:
    @st.composite
    def build(draw: st.DrawFn) -> dict[str, Any]:
        high = draw(st.integers(0, 3))
        schema: dict[str, Any] = {"type": "array", "items": draw(items), "maxItems": high}
        if high and draw(st.booleans()):
            schema["minItems"] = draw(st.integers(1, high))
        return schema

    return build()


VALUES = st.one_of(LEAVES, _array(LEAVES), _object(LEAVES), _array(_object(LEAVES)))


@st.composite
def tool_schema(draw: st.DrawFn, name: str | None = None) -> dict[str, Any]:
    """One tool: 0-4 parameters of any shape, some required."""
    names = draw(st.lists(NAMES, max_size=4, unique=True))
    properties = {n: draw(VALUES) for n in names}
    required = [n for n in names if draw(st.booleans())]
    parameters: dict[str, Any] = {"type": "object", "properties": properties}
    if required:
        parameters["required"] = required
    return {"name": name or draw(NAMES), "description": "a tool", "parameters": parameters}


@st.composite
def tool_lists(draw: st.DrawFn, max_tools: int = 3) -> list[dict[str, Any]]:
    """1..``max_tools`` tools with distinct names."""
    names = draw(st.lists(NAMES, min_size=1, max_size=max_tools, unique=True))
    return [draw(tool_schema(name)) for name in names]


def call_problems(calls: Sequence[tuple[str, Mapping[str, Any]]],
                  tools: Sequence[Mapping[str, Any]]) -> list[str]:
    """What is wrong with ``calls`` against ``tools`` (an empty list: nothing)."""
    by_name = {t["name"]: t["parameters"] for t in tools}
    problems = []
    for name, arguments in calls:
        schema = by_name.get(name)
        if schema is None:
            problems.append(f"{name!r} is not an offered tool")
            continue
        unknown = set(arguments) - set(schema.get("properties") or {})
        if unknown and not schema.get("additionalProperties", False):  # as the dispatcher
            problems.append(f"{name}: unknown parameters {sorted(unknown)}")
        for error in jsonschema.Draft202012Validator(schema).iter_errors(dict(arguments)):
            problems.append(f"{name}: {error.message}")
    return problems
