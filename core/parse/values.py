"""Turning argument values written as text into typed values, the same way in every family.

* :func:`python_literal` reads Python (and JSON) literals without evaluating
  anything: what templates print when they pass a value through ``|string``.
* :func:`decode_nested_value` reads values written as nested elements (MiniMax-M3).
* :func:`typed_value` types a text value by the parameter's schema, with the
  null rule every family shares: ``null`` (or ``None`` where the template
  writes Python) is ``None`` when the schema allows null (a type list or
  ``anyOf``/``oneOf`` with ``null``, ``"nullable": true``, or ``"default":
  null``), and stays the verbatim text otherwise.
* :func:`json_arguments` reads a call's JSON arguments, accepting arguments
  double-encoded as a JSON string (with a note for a diagnostic).
"""

from __future__ import annotations

import ast
import re
from collections.abc import Mapping
from typing import Any, Final

from ..vocabulary.schema import (
    allows_null,
    coerce_text_value,
    json_type_of,
    parse_model_literal,
    resolve_ref,
    schema_types,
)
from .json_stream import decode_json

__all__ = [
    "DOUBLE_ENCODED",
    "NOT_LITERAL",
    "decode_nested_value",
    "is_literal",
    "is_null_text",
    "json_arguments",
    "python_literal",
    "typed_value",
]

DOUBLE_ENCODED: Final = "double_encoded_arguments"
"""The diagnostic code for arguments written as a JSON string holding an object."""


class _NotLiteral:
    """Marks text that is not a Python literal (``None`` is a literal)."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "NOT_LITERAL"


NOT_LITERAL: Final = _NotLiteral()
_LITERAL_NAMES: Final[dict[str, Any]] = {"True": True, "False": False, "None": None,
                                         "true": True, "false": False, "null": None}
_NULL_SPELLINGS: Final = frozenset({"null", "None"})
_MAX_LITERAL: Final = 1_000_000


_SURROGATE: Final = re.compile("[\ud800-\udfff]")
# The literals read as Python reads them without its parser (a call's arguments are
# mostly these; the parser costs more than the rest of a short value's reading): a
# quoted string with no escape, quote, line break, NUL or lone surrogate in it, a
# decimal integer short enough to be one machine word's, a literal name.
_SIMPLE_LITERAL: Final = re.compile(
    r"""(?P<text>"[^"\\\n\r\x00\ud800-\udfff]*"|'[^'\\\n\r\x00\ud800-\udfff]*')"""
    r"|(?P<integer>-?(?:0|[1-9][0-9]{0,17}))"
    r"|(?P<name>True|False|None|true|false|null)")


def _join_surrogates(text: str) -> str:
    if _SURROGATE.search(text) is None:  # (looked for in C: a value may be long)
        return text
    return text.encode("utf-16", "surrogatepass").decode("utf-16", "surrogatepass")


def _literal_node(node: ast.AST) -> Any:
    if isinstance(node, ast.Constant):
        value = node.value
        if isinstance(value, str):
            return _join_surrogates(value)
        if value is None or isinstance(value, bool | int | float):
            return value
        raise ValueError("unsupported constant")
    if isinstance(node, ast.Name) and node.id in _LITERAL_NAMES:
        return _LITERAL_NAMES[node.id]
    if isinstance(node, ast.List | ast.Tuple):
        return [_literal_node(item) for item in node.elts]
    if isinstance(node, ast.Dict):
        out: dict[str, Any] = {}
        for key, item in zip(node.keys, node.values, strict=True):
            if key is None:
                raise ValueError("dict unpacking")
            name = _literal_node(key)
            if not isinstance(name, str):
                raise ValueError("non-string key")
            out[name] = _literal_node(item)
        return out
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub | ast.UAdd):
        operand = _literal_node(node.operand)
        if isinstance(operand, bool) or not isinstance(operand, int | float):
            raise ValueError("sign on a non-number")
        return -operand if isinstance(node.op, ast.USub) else operand
    raise ValueError(f"not a literal: {type(node).__name__}")


def python_literal(text: str) -> Any:
    """Read a Python (or JSON) literal without evaluating anything.

    Accepts strings, numbers, ``True``/``False``/``None`` and ``true``/``false``/
    ``null``, lists, tuples (as lists) and dicts with string keys. Returns
    :data:`NOT_LITERAL` for anything else (and for texts over a megabyte).
    """
    if len(text) > _MAX_LITERAL:
        return NOT_LITERAL
    text = text.strip()
    simple = _SIMPLE_LITERAL.fullmatch(text)  # (most values: no parser for them)
    if simple is not None:
        if simple.lastgroup == "text":
            return text[1:-1]
        if simple.lastgroup == "integer":
            return int(text)
        return _LITERAL_NAMES[text]
    try:
        tree = parse_model_literal(text)
        return _literal_node(tree.body)
    except (SyntaxError, ValueError, TypeError, RecursionError, MemoryError):
        return NOT_LITERAL


def is_literal(value: Any) -> bool:
    """Whether :func:`python_literal` returned a value (not :data:`NOT_LITERAL`)."""
    return value is not NOT_LITERAL


def is_null_text(text: str, *, python: bool = True) -> bool:
    """Whether a value's text spells null (``null``, and ``None`` where Python is written)."""
    stripped = text.strip()
    return stripped == "null" or (python and stripped == "None")


def typed_value(text: str, schema: Any, root: Any = None, *, python: bool = False,
                types: frozenset[str] | None = None) -> Any:
    """Type a parameter value written as text, by its schema.

    Strings stay verbatim; other types are read as JSON (Python literals too
    where ``python``); null follows the null rule (see the module doc); text
    that fits no admitted type stays text, so the validator can say exactly
    what was wrong.
    """
    if types is None:
        types = schema_types(schema, root) if schema is not None else frozenset({"string"})
    if is_null_text(text, python=python or "string" not in types):
        return None if schema is not None and allows_null(schema, root) else text
    value = coerce_text_value(text, schema, root, types - {"null"} or None)
    if python and isinstance(value, str) and value.strip() and types - {"string", "null"}:
        literal = python_literal(value)
        if literal is not NOT_LITERAL and literal is not None:
            kind = json_type_of(literal)
            if kind in types or (kind == "integer" and "number" in types):
                return literal
    return value


def json_arguments(text: str) -> tuple[dict[str, Any] | None, bool]:
    """Read a call's JSON arguments: ``(arguments, double_encoded)``.

    An empty text, ``null`` and ``""`` are no arguments (``{}``). A JSON string
    holding an object (arguments encoded twice, which templates applying
    ``tojson`` twice teach models) is decoded, and ``double_encoded`` says so.
    ``None`` when the text is not an object.
    """
    stripped = text.strip()
    if not stripped:
        return {}, False
    ok, value = decode_json(stripped)
    if not ok:
        return None, False
    return arguments_from(value)


def arguments_from(value: Any) -> tuple[dict[str, Any] | None, bool]:
    """Decoded arguments as a dict (see :func:`json_arguments`)."""
    if value is None:
        return {}, False
    if isinstance(value, dict):
        return value, False
    if isinstance(value, str):
        if not value.strip():
            return {}, False
        ok, inner = decode_json(value)
        if ok and isinstance(inner, dict):
            return inner, True
    return None, False


def _nested_tree(raw: str, ns: str) -> str | list[tuple[str, Any]]:
    """Parse ``ns<a>..ns</a>`` markup into ``[(tag, subtree)]``; text without tags is a leaf."""
    if ns not in raw:
        return raw
    root: list[tuple[str, Any]] = []
    stack: list[tuple[str, list[tuple[str, Any]], list[str]]] = [("", root, [])]
    pos = 0
    n = len(raw)
    while pos < n:
        k = raw.find(ns, pos)
        if k < 0:
            stack[-1][2].append(raw[pos:])
            break
        stack[-1][2].append(raw[pos:k])
        gt = raw.find(">", k + len(ns))
        if gt < 0:
            raise ValueError("unterminated tag")
        tag = raw[k + len(ns) + 1:gt]
        if raw.startswith("</", k + len(ns)):
            name, children, texts = stack.pop()
            if name != tag[1:] or not stack:
                raise ValueError("mismatched tag")
            subtree: str | list[tuple[str, Any]] = children if children else "".join(texts)
            stack[-1][1].append((name, subtree))
        else:
            if len(stack) > 64:
                raise ValueError("nested too deep")
            stack.append((tag, [], []))
        pos = gt + 1
    if len(stack) != 1:
        raise ValueError("unclosed tag")
    return root if root else "".join(stack[0][2])


def decode_nested_value(raw: str, ns: str, schema: Any, root: Any = None) -> Any:
    """Decode a value written as nested tags (MiniMax-M3), typed by its schema.

    Mappings are ``ns<key>value ns</key>`` runs, lists are ``ns<item>...`` runs,
    scalars are text typed by :func:`typed_value`. Without a schema a run of
    ``item`` tags is a list. Text that is not well-formed stays text.
    """
    try:
        tree = _nested_tree(raw, ns)
    except ValueError:
        return raw
    return _typed(tree, schema, root)


def _typed(node: str | list[tuple[str, Any]], schema: Any, root: Any) -> Any:
    schema = resolve_ref(schema, root) if schema is not None else {}
    types = schema_types(schema, root)
    if isinstance(node, str):
        if not node and types and "string" not in types:
            if "array" in types:
                return []
            if "object" in types:
                return {}
            if "null" in types:
                return None
        return typed_value(node, schema, root, types=types)
    as_list = ("array" in types and "object" not in types) or (
        not types and all(tag == "item" for tag, _ in node))
    if as_list:
        items = schema.get("items") if isinstance(schema, Mapping) else None
        return [_typed(child, items, root) for _, child in node]
    props = schema.get("properties") if isinstance(schema, Mapping) else None
    extra = schema.get("additionalProperties") if isinstance(schema, Mapping) else None
    out: dict[str, Any] = {}
    for tag, child in node:
        sub = props.get(tag) if isinstance(props, Mapping) else None
        if sub is None and isinstance(extra, Mapping):
            sub = extra
        out[tag] = _typed(child, sub, root)
    return out
