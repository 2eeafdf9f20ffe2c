"""Hypothesis strategies for fuzzing parsers: tool schemas, conforming arguments,
adversarial strings and chunkings.

Typical use::

    from hypothesis import given, strategies as st
    from toolwire.testing import strategies as tws

    @given(tws.tool_calls_with_schemas())
    def test_round_trip(case):
        tools, calls = case
        ...

Requires ``hypothesis`` (installed with the ``test`` extra).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any

from hypothesis import strategies as st

__all__ = [
    "MARKUP_FRAGMENTS",
    "adversarial_text",
    "arguments_for",
    "chunkings",
    "identifiers",
    "json_dumps",
    "parameter_schemas",
    "split_text",
    "tool_calls_with_schemas",
    "tool_schemas",
]

MARKUP_FRAGMENTS: tuple[str, ...] = (
    "<tool_call>", "</tool_call>", "<function=", "</function>", "<parameter=", "</parameter>",
    "<think>", "</think>", ">", "<", "\n", "{", "}", '"name"', '"arguments"', "[", "]", ":",
    "<|im_end|>", "[TOOL_CALLS]", "<|python_tag|>", "<arg_key>", "<arg_value>", '{"name": "x"}',
    "```json", "True", "null", "\\", '"',
)
"""Pieces of real tool-call markup, mixed into adversarial text."""


def identifiers(max_size: int = 12) -> st.SearchStrategy[str]:
    """Names for tools and parameters (letters, digits, underscores)."""
    return st.from_regex(rf"[a-z_][a-z0-9_]{{0,{max_size - 1}}}", fullmatch=True)


def adversarial_text(*, max_size: int = 80, fragments: Sequence[str] = MARKUP_FRAGMENTS
                     ) -> st.SearchStrategy[str]:
    """Text mixing unicode, markup look-alikes and JSON look-alikes."""
    piece = st.one_of(
        st.text(max_size=8),
        st.sampled_from(list(fragments)),
        st.text(alphabet=" \n\t", max_size=3),
        st.sampled_from(["03106", "-0.0", "1e300", "0", "", "ünïcödé ✓", "😀", "a\u0301"]),
    )
    return st.lists(piece, max_size=max_size // 4 + 1).map("".join)


def parameter_schemas(max_depth: int = 2) -> st.SearchStrategy[dict[str, Any]]:
    """Schemas of single parameters: typed scalars, enums, arrays, nested objects, anyOf."""
    scalars = st.sampled_from([
        {"type": "string"}, {"type": "integer"}, {"type": "number"}, {"type": "boolean"},
        {"type": ["integer", "null"]}, {"type": "string", "enum": ["a", "b c", "03106"]},
        {"anyOf": [{"type": "integer"}, {"type": "boolean"}]},
    ])

    def extend(inner: st.SearchStrategy[dict[str, Any]]) -> st.SearchStrategy[dict[str, Any]]:
        arrays = inner.map(lambda s: {"type": "array", "items": s})
        objects = st.dictionaries(identifiers(), inner, min_size=1, max_size=3).map(
            lambda props: {"type": "object", "properties": props,
                           "required": sorted(props)})
        return st.one_of(arrays, objects)

    return st.recursive(scalars, extend, max_leaves=4 * max_depth)


def tool_schemas(max_params: int = 4) -> st.SearchStrategy[dict[str, Any]]:
    """Function schemas ``{"name", "description", "parameters"}``; some parameters optional,
    some defined through ``$defs``/``$ref``."""

    @st.composite
    def build(draw: st.DrawFn) -> dict[str, Any]:
        name = draw(identifiers())
        props = draw(st.dictionaries(identifiers(), parameter_schemas(), max_size=max_params))
        required = [p for p in props if draw(st.booleans())]
        params: dict[str, Any] = {"type": "object", "properties": props}
        if required:
            params["required"] = required
        if props and draw(st.booleans()):
            moved = draw(st.sampled_from(sorted(props)))
            params["$defs"] = {"shared": props[moved]}
            props[moved] = {"$ref": "#/$defs/shared"}
        return {"name": name, "description": "a generated tool", "parameters": params}

    return build()


def _resolve(schema: dict[str, Any], root: dict[str, Any]) -> dict[str, Any]:
    ref = schema.get("$ref")
    if isinstance(ref, str) and ref.startswith("#/$defs/"):
        resolved: dict[str, Any] = root["$defs"][ref.split("/")[-1]]
        return resolved
    return schema


def arguments_for(parameters: dict[str, Any], *,
                  strings: st.SearchStrategy[str] | None = None
                  ) -> st.SearchStrategy[dict[str, Any]]:
    """Arguments that conform to a ``parameters`` object schema."""
    text = strings if strings is not None else st.text(max_size=30)

    def value_for(schema: dict[str, Any]) -> st.SearchStrategy[Any]:
        schema = _resolve(schema, parameters)
        if "enum" in schema:
            return st.sampled_from(schema["enum"])
        if "anyOf" in schema:
            return st.one_of([value_for(s) for s in schema["anyOf"]])
        kind = schema.get("type")
        if isinstance(kind, list):
            return st.one_of([value_for({"type": k}) for k in kind])
        if kind == "string":
            return text
        if kind == "integer":
            return st.integers(min_value=-(10**12), max_value=10**12)
        if kind == "number":
            return st.one_of(st.floats(allow_nan=False, allow_infinity=False),
                             st.sampled_from([0.0, -0.0, 1e300, 3.5]))
        if kind == "boolean":
            return st.booleans()
        if kind == "null":
            return st.none()
        if kind == "array":
            return st.lists(value_for(schema.get("items", {"type": "string"})), max_size=3)
        if kind == "object":
            props = schema.get("properties", {})
            return st.fixed_dictionaries({k: value_for(v) for k, v in props.items()})
        return st.none()

    props: dict[str, Any] = parameters.get("properties", {})
    required = set(parameters.get("required", []))

    @st.composite
    def build(draw: st.DrawFn) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for name, schema in props.items():
            if name in required or draw(st.booleans()):
                out[name] = draw(value_for(schema))
        return out

    return build()


def tool_calls_with_schemas(
    *, max_tools: int = 3, max_calls: int = 3, strings: st.SearchStrategy[str] | None = None,
    keep: Callable[[dict[str, Any], dict[str, Any]], bool] | None = None,
) -> st.SearchStrategy[tuple[list[dict[str, Any]], list[tuple[str, dict[str, Any]]]]]:
    """``(tools, calls)``: OpenAI-style tools and calls ``(name, arguments)`` to them.

    ``keep(schema, arguments)`` may reject calls a format cannot express.
    """

    @st.composite
    def build(draw: st.DrawFn) -> tuple[list[dict[str, Any]], list[tuple[str, dict[str, Any]]]]:
        schemas = draw(st.lists(tool_schemas(), min_size=1, max_size=max_tools,
                                unique_by=lambda s: s["name"]))
        calls = []
        for _ in range(draw(st.integers(min_value=1, max_value=max_calls))):
            schema = draw(st.sampled_from(schemas))
            args = draw(arguments_for(schema["parameters"], strings=strings))
            if keep is None or keep(schema, args):
                calls.append((schema["name"], args))
        tools = [{"type": "function", "function": s} for s in schemas]
        return tools, calls

    return build()


def split_text(text: str, cuts: Sequence[int]) -> list[str]:
    """Split ``text`` at the given positions (sorted, deduplicated, clipped)."""
    points = sorted({c for c in cuts if 0 < c < len(text)})
    pieces, last = [], 0
    for point in points:
        pieces.append(text[last:point])
        last = point
    pieces.append(text[last:])
    return pieces


def chunkings(text: str) -> st.SearchStrategy[list[str]]:
    """Ways to split ``text`` into deltas: single characters, tokens, random cuts."""
    if not text:
        return st.just([""])
    random_cuts = st.lists(st.integers(min_value=1, max_value=max(len(text) - 1, 1)),
                           max_size=min(len(text), 40)).map(lambda cuts: split_text(text, cuts))
    fixed = st.sampled_from([1, 2, 3, 4, 7, 64]).map(
        lambda n: [text[i:i + n] for i in range(0, len(text), n)])
    return st.one_of(random_cuts, fixed)


def json_dumps(value: Any) -> str:
    """Canonical JSON for comparing argument values exactly (keeps -0.0 and int/float)."""
    return json.dumps(value, sort_keys=True, ensure_ascii=False)
