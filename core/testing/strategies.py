"""Hypothesis strategies for fuzzing parsers: tool schemas, conforming arguments,
adversarial strings and chunkings.

Typical use::

    from hypothesis import given, strategies as st
    from toolwire.testing import strategies as tws

    @given(tws.tool_calls_with_schemas(), st.data())
    def test_round_trip(case, data):
        tools, calls = case
        reply = render(calls)                   # through the real chat template
        pieces = data.draw(tws.chunkings(reply))
        ...

What the schema strategies generate, and why some schemas are left out:

* typed scalars, ``enum`` and ``const`` values, ``anyOf``, nullable types, arrays,
  nested objects (with optional properties), free-form objects of any JSON,
  ``$ref`` into ``$defs``, optional parameters;
* never a union of ``string`` with another type (``["string", "integer"]``,
  ``anyOf: [string, null]``) unless asked with ``string_unions=True``: a
  format that writes every value as text (Qwen XML, GLM key/value) cannot tell
  the string ``"5"`` from the integer ``5`` there, so such a schema tests the
  format, not the parser.

Requires ``hypothesis`` (installed with the ``test`` extra).
"""

from __future__ import annotations

import functools
import json
import operator
import string
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from hypothesis import strategies as st

from ..parse.record import CallFormat
from .drift import Drift, drifts

__all__ = [
    "JSON_LOOKALIKES",
    "MARKUP_FRAGMENTS",
    "adversarial_text",
    "arguments_for",
    "chunkings",
    "drifted_replies",
    "identifiers",
    "json_dumps",
    "json_values",
    "markup_fragments",
    "parameter_schemas",
    "split_text",
    "tool_calls_with_schemas",
    "tool_schemas",
    "very_long_text",
]

MARKUP_FRAGMENTS: tuple[str, ...] = (
    "<tool_call>", "</tool_call>", "<function=", "</function>", "<parameter=", "</parameter>",
    "<think>", "</think>", ">", "<", "\n", "{", "}", '"name"', '"arguments"', "[", "]", ":",
    "<|im_end|>", "[TOOL_CALLS]", "<|python_tag|>", "<arg_key>", "<arg_value>", '{"name": "x"}',
    "```json", "True", "null", "\\", '"',
)
"""Pieces of real tool-call markup (several families), mixed into adversarial text."""

JSON_LOOKALIKES: tuple[str, ...] = (
    '{"name": "search", "arguments": {"query": "x"}}', '[{"name": "x", "arguments": {}}]',
    '{"a": 1', '"unterminated', "[1, 2,", "NaN", "Infinity", "1e999", "-0", "0x1F", "True",
    "None", "null", "{}", "[]", '"\\u0000"', '{"nested": {"deep": [null, true, 1.5e-7]}}',
)
"""Text that looks like JSON (or Python literals) without being what a format expects."""

_ODD_PIECES: tuple[str, ...] = (
    "03106", "-0.0", "1e300", "0", "", "ünïcödé ✓", "😀", "a\u0301", "\u200b", "\u2028",
    "\r\n", "\t", "\x00", "\ufeff", "ﬁ", "İ",
)


_FIRST = string.ascii_lowercase + "_"
_REST = string.ascii_lowercase + string.digits + "_"


@functools.cache
def identifiers(max_size: int = 12) -> st.SearchStrategy[str]:
    """Names for tools and parameters (letters, digits, underscores)."""
    # Composed from two alphabets rather than st.from_regex, which is much slower to draw.
    return st.builds(operator.add, st.sampled_from(_FIRST),
                     st.text(alphabet=_REST, max_size=max_size - 1))


def markup_fragments(family_markers: Iterable[str] = ()) -> tuple[str, ...]:
    """:data:`MARKUP_FRAGMENTS` plus a family's own markers and near misses of them.

    For each marker it adds the marker itself, its prefixes (a tag cut short),
    the marker without its last character, an upper-cased copy and a copy with
    a space inside, so a parser sees both the real thing and look-alikes.

    :param family_markers: the family's literal markup (``"<tool_call>"``,
        ``"[TOOL_CALLS]"``, ...), e.g. ``ConformanceReport.markers``.
    :returns: the fragments, without duplicates, in a stable order.
    """
    out: dict[str, None] = dict.fromkeys(MARKUP_FRAGMENTS)
    for marker in family_markers:
        if not marker:
            continue
        out[marker] = None
        for cut in (1, 2, len(marker) // 2, len(marker) - 1):
            if 0 < cut < len(marker):
                out[marker[:cut]] = None
        out[marker.upper()] = None
        middle = len(marker) // 2
        out[marker[:middle] + " " + marker[middle:]] = None
        out[marker + marker] = None
    return tuple(out)


def very_long_text(*, min_size: int = 1_000, max_size: int = 20_000,
                   fragments: Sequence[str] = MARKUP_FRAGMENTS) -> st.SearchStrategy[str]:
    """Long text (``min_size`` to ``max_size`` characters): a short piece repeated.

    Built by repetition, so hypothesis does not draw every character; the piece
    may hold markup fragments, which exercises parsers that hold text back.
    """
    piece = st.lists(st.one_of(st.text(min_size=1, max_size=6), st.sampled_from(list(fragments))),
                     min_size=1, max_size=4).map("".join).filter(bool)

    @st.composite
    def build(draw: st.DrawFn) -> str:
        unit = draw(piece)
        size = draw(st.integers(min_value=min_size, max_value=max_size))
        text = (unit * (size // len(unit) + 1))[:size]
        return draw(st.sampled_from(["", "\n", "x"])) + text

    return build()


def adversarial_text(*, max_size: int = 80, fragments: Sequence[str] = MARKUP_FRAGMENTS,
                     very_long: bool = False) -> st.SearchStrategy[str]:
    """Text mixing unicode, markup look-alikes and JSON look-alikes.

    :param max_size: roughly the longest text drawn (in pieces of a few characters).
    :param fragments: markup to mix in; pass ``markup_fragments(markers)`` for a family.
    :param very_long: draw :func:`very_long_text` instead, a quarter of the time
        (thousands of characters).
    """
    piece = st.one_of(
        st.text(max_size=8),
        st.sampled_from(list(fragments)),
        st.text(alphabet=" \n\t", max_size=3),
        st.sampled_from(list(_ODD_PIECES)),
        st.sampled_from(list(JSON_LOOKALIKES)),
    )
    short = st.lists(piece, max_size=max_size // 4 + 1).map("".join)
    if not very_long:
        return short
    # one_of picks a branch uniformly: three short branches make long text a quarter
    # of the draws, so an example with several strings stays mostly short and fast.
    return st.one_of(short, short, short, very_long_text(fragments=fragments))


@functools.cache
def json_values(max_leaves: int = 6) -> st.SearchStrategy[Any]:
    """Any JSON value: scalars (with ``-0.0``, big integers, unicode), lists, objects."""
    scalars = st.one_of(
        st.none(), st.booleans(), st.integers(min_value=-(2**53), max_value=2**53),
        st.floats(allow_nan=False, allow_infinity=False), st.text(max_size=10),
    )
    return st.recursive(
        scalars,
        lambda inner: st.one_of(st.lists(inner, max_size=3),
                                st.dictionaries(identifiers(), inner, max_size=3)),
        max_leaves=max_leaves,
    )


_SCALAR_SCHEMAS: tuple[dict[str, Any], ...] = (
    {"type": "string"}, {"type": "integer"}, {"type": "number"}, {"type": "boolean"},
    {"type": ["integer", "null"]}, {"type": "string", "enum": ["a", "b c", "03106"]},
    {"anyOf": [{"type": "integer"}, {"type": "boolean"}]},
    {"type": "integer", "enum": [0, 7, -12]}, {"const": "fixed value"},
    {"anyOf": [{"type": "number"}, {"type": "null"}]},
    {"type": "object", "additionalProperties": True},
)

_STRING_UNIONS: tuple[dict[str, Any], ...] = (
    {"type": ["string", "integer"]}, {"anyOf": [{"type": "string"}, {"type": "null"}]},
    {"type": ["string", "boolean", "null"]},
)


@functools.cache
def parameter_schemas(max_depth: int = 2, *, string_unions: bool = False
                      ) -> st.SearchStrategy[dict[str, Any]]:
    """Schemas of single parameters: typed scalars, enums, arrays, nested objects, anyOf.

    :param max_depth: how deeply arrays and objects nest.
    :param string_unions: also draw unions of ``string`` with other types (see
        the module docstring for why they are off by default).
    """
    scalars = st.sampled_from(list(_SCALAR_SCHEMAS + (_STRING_UNIONS if string_unions else ())))

    @st.composite
    def objects(draw: st.DrawFn, inner: st.SearchStrategy[dict[str, Any]]) -> dict[str, Any]:
        props = draw(st.dictionaries(identifiers(), inner, min_size=1, max_size=3))
        required = sorted(p for p in props if draw(st.booleans())) \
            if draw(st.booleans()) else sorted(props)
        return {"type": "object", "properties": props, "required": required}

    def extend(inner: st.SearchStrategy[dict[str, Any]]) -> st.SearchStrategy[dict[str, Any]]:
        arrays = inner.map(lambda s: {"type": "array", "items": s})
        return st.one_of(arrays, objects(inner))

    return st.recursive(scalars, extend, max_leaves=4 * max_depth)


@functools.cache
def tool_schemas(max_params: int = 4, *, string_unions: bool = False
                 ) -> st.SearchStrategy[dict[str, Any]]:
    """Function schemas ``{"name", "description", "parameters"}``; some parameters optional,
    some defined through ``$defs``/``$ref``.

    :param max_params: the most parameters a tool has (it may have none).
    :param string_unions: passed to :func:`parameter_schemas`.
    """

    properties = st.dictionaries(identifiers(), parameter_schemas(string_unions=string_unions),
                                 max_size=max_params)

    @st.composite
    def build(draw: st.DrawFn) -> dict[str, Any]:
        name = draw(identifiers())
        props = draw(properties)
        required = []
        for param in props:
            if draw(st.booleans()):
                required.append(param)
        params: dict[str, Any] = {"type": "object"}
        if len(props) > 0 and draw(st.booleans()):
            moved = draw(st.sampled_from(sorted(props)))
            params["$defs"] = {"shared": props[moved]}
            props[moved] = {"$ref": "#/$defs/shared"}
        # Templates print each parameter's description (Hermes, Command R+), as real
        # schemas have them.
        params["properties"] = {param: {**schema, "description": f"the {param}"}
                                for param, schema in props.items()}
        if required:
            params["required"] = required
        return {"name": name, "description": "a generated tool", "parameters": params}

    return build()


def _resolve(schema: dict[str, Any], root: dict[str, Any]) -> dict[str, Any]:
    ref = schema.get("$ref")
    if isinstance(ref, str) and ref.startswith("#/$defs/"):
        resolved: dict[str, Any] = root["$defs"][ref.split("/")[-1]]
        return resolved
    return schema


_SCALAR_VALUES: dict[str, st.SearchStrategy[Any]] = {
    "integer": st.integers(min_value=-(10**12), max_value=10**12),
    "number": st.one_of(st.floats(allow_nan=False, allow_infinity=False),
                        st.sampled_from([0.0, -0.0, 1e300, 3.5])),
    "boolean": st.booleans(),
    "null": st.none(),
}


def arguments_for(parameters: dict[str, Any], *,
                  strings: st.SearchStrategy[str] | None = None
                  ) -> st.SearchStrategy[dict[str, Any]]:
    """Arguments that conform to a ``parameters`` object schema.

    Optional parameters (and optional properties of nested objects) are left out
    at random; ``strings`` draws every string value (default: any short text).
    """
    text = strings if strings is not None else st.text(max_size=30)

    def value_for(schema: dict[str, Any]) -> st.SearchStrategy[Any]:
        schema = _resolve(schema, parameters)
        if "const" in schema:
            return st.just(schema["const"])
        if "enum" in schema:
            return st.sampled_from(schema["enum"])
        if "anyOf" in schema:
            return st.one_of([value_for(s) for s in schema["anyOf"]])
        kind = schema.get("type")
        if isinstance(kind, list):
            return st.one_of([value_for({"type": k}) for k in kind])
        if kind == "string":
            return text
        if kind in _SCALAR_VALUES:
            return _SCALAR_VALUES[kind]
        if kind == "array":
            return st.lists(value_for(schema.get("items", {"type": "string"})), max_size=3)
        if kind == "object":
            if "properties" not in schema:
                return st.dictionaries(identifiers(), json_values(), max_size=3)
            return object_for(schema)
        return st.none()

    def object_for(schema: dict[str, Any]) -> st.SearchStrategy[dict[str, Any]]:
        props: dict[str, Any] = schema.get("properties", {})
        required = set(schema.get("required", []))
        return st.fixed_dictionaries(
            {k: value_for(v) for k, v in props.items() if k in required},
            optional={k: value_for(v) for k, v in props.items() if k not in required})

    return object_for(parameters)


def _schema_name(schema: dict[str, Any]) -> Any:
    return schema["name"]


def tool_calls_with_schemas(
    *, max_tools: int = 3, max_calls: int = 3, min_calls: int = 1,
    strings: st.SearchStrategy[str] | None = None,
    keep: Callable[[dict[str, Any], dict[str, Any]], bool] | None = None,
    string_unions: bool = False,
) -> st.SearchStrategy[tuple[list[dict[str, Any]], list[tuple[str, dict[str, Any]]]]]:
    """``(tools, calls)``: OpenAI-style tools and calls ``(name, arguments)`` to them.

    :param max_tools: the most tools offered.
    :param min_calls: the fewest calls drawn (calls ``keep`` rejects are dropped
        afterwards, so fewer may remain).
    :param max_calls: the most calls in one turn.
    :param strings: draws string values (default: any short text).
    :param keep: ``keep(function_schema, arguments)`` may reject calls a format
        cannot express.
    :param string_unions: passed to :func:`parameter_schemas`.
    """

    tool_lists = st.lists(tool_schemas(string_unions=string_unions), min_size=1,
                          max_size=max_tools, unique_by=_schema_name)

    @st.composite
    def build(draw: st.DrawFn) -> tuple[list[dict[str, Any]], list[tuple[str, dict[str, Any]]]]:
        schemas = draw(tool_lists)
        calls = []
        for _ in range(draw(st.integers(min_value=min_calls, max_value=max_calls))):
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
    """Ways to split ``text`` into deltas: single characters, tokens, random cuts.

    The pieces always join back to ``text``; a piece is never empty (except the
    one piece of an empty text).
    """
    if not text:
        return st.just([""])
    # functools.partial, not lambdas: hypothesis reads a lambda's source to label
    # it, which is slow for a strategy built afresh for every text.
    random_cuts = st.lists(st.integers(min_value=1, max_value=max(len(text) - 1, 1)),
                           max_size=min(len(text), 40)).map(functools.partial(split_text, text))
    fixed = _CHUNK_SIZES.map(functools.partial(_fixed_pieces, text))
    return st.one_of(random_cuts, fixed)


_CHUNK_SIZES = st.sampled_from([1, 2, 3, 4, 7, 64])


def _fixed_pieces(text: str, size: int) -> list[str]:
    return [text[i:i + size] for i in range(0, len(text), size)]


def json_dumps(value: Any) -> str:
    """Canonical JSON for comparing argument values exactly (keeps -0.0 and int/float)."""
    return json.dumps(value, sort_keys=True, ensure_ascii=False)


def drifted_replies(fmt: CallFormat, reply: str, values: Sequence[str]
                    ) -> st.SearchStrategy[Drift]:
    """The drifts of a rendered reply that the family's rules read back as its calls
    (:mod:`toolwire.testing.drift`): a closer left out before the next call, the
    family's end-of-turn markup inside an open call, several calls in one block.

    :param fmt: the family's record.
    :param reply: a reply rendered through the family's real template.
    :param values: the last argument value of each call, as the reply writes it (a
        distinct word).
    :returns: one of the drifts (nothing, where the record allows none).
    """
    found = drifts(fmt, reply, values)
    return st.sampled_from(found) if found else st.nothing()
