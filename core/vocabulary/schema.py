"""JSON-schema helpers shared by the registry, the validator and the parsers.

Real tool schemas are not always valid JSON Schema: public collections use
``"type": "dict"``, ``"float"``, ``"tuple"`` and ``"any"``. :func:`normalize_schema`
maps those to their JSON Schema meaning (as the Berkeley leaderboard does) and
reports what it changed, so a tool author can see it.

Parsers of text-valued formats (Qwen XML, GLM key/value, ...) receive every value
as text; :func:`coerce_text_value` turns it into the type the schema asks for.
"""

from __future__ import annotations

import ast
import json
import math
import re
import warnings
from collections.abc import Mapping, Sequence
from typing import Any

__all__ = [
    "ToolSchemaIndex",
    "allows_null",
    "coerce_text_value",
    "json_type_of",
    "normalize_schema",
    "parameter_schemas",
    "parse_model_literal",
    "resolve_ref",
    "schema_types",
    "tool_parameters_by_name",
]

_TYPE_ALIASES = {
    "dict": "object",
    "float": "number",
    "double": "number",
    "tuple": "array",
    "list": "array",
    "int": "integer",
    "str": "string",
    "bool": "boolean",
}
_JSON_TYPES = frozenset({"object", "array", "string", "number", "integer", "boolean", "null"})
_PYTHON_LITERALS = {"True": True, "False": False, "None": None}
_STRING_ONLY = frozenset({"string"})
_LEAVES = (str, int, float, type(None))
_KEPT_AS_GIVEN = frozenset({"enum", "const", "default", "examples", "required"})
_NAMED_SUBSCHEMAS = frozenset({"properties", "$defs", "definitions", "patternProperties"})
_STRING_OR_NULL = frozenset({"string", "null"})


def normalize_schema(schema: Any, notes: list[str] | None = None, path: str = "") -> Any:
    """Return a copy of ``schema`` with non-standard type names mapped to JSON Schema.

    ``dict`` -> ``object``, ``float`` -> ``number``, ``tuple`` -> ``array``, ``any`` ->
    no type constraint. Each change is appended to ``notes`` (when given) as a
    human-readable line naming the location. A Python object used in several
    places is copied once (the copies share it too), noted where first met.
    """
    return _Normalizer(notes).copy(schema, path)


class _Normalizer:
    """One :func:`normalize_schema` copy: each object copied once, by identity."""

    __slots__ = ("copies", "notes")

    def __init__(self, notes: list[str] | None) -> None:
        self.notes = notes
        self.copies: dict[int, tuple[Any, Any]] = {}

    def copy(self, schema: Any, path: str) -> Any:
        if isinstance(schema, _LEAVES) or not isinstance(schema, list | Mapping):
            return schema
        known = self.copies.get(id(schema))
        if known is not None:
            return known[1]
        out: Any
        if isinstance(schema, list):
            out = [self.copy(item, f"{path}/{i}") for i, item in enumerate(schema)]
        else:
            out = self._mapping(schema, path)
        self.copies[id(schema)] = (schema, out)
        return out

    def _mapping(self, schema: Mapping[str, Any], path: str) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for key, value in schema.items():
            if key == "type":
                out_type = _normalize_type(value, self.notes, f"{path}/{key}")
                if out_type is not None:
                    out["type"] = out_type
            elif isinstance(value, _LEAVES) or key in _KEPT_AS_GIVEN:
                out[key] = value
            elif key in _NAMED_SUBSCHEMAS and isinstance(value, Mapping):
                where = f"{path}/{key}"
                out[key] = {name: self.copy(sub, f"{where}/{name}")
                            for name, sub in value.items()}
            else:
                out[key] = self.copy(value, f"{path}/{key}")
        return out


def _normalize_type(value: Any, notes: list[str] | None, where: str) -> Any:
    if isinstance(value, list):
        mapped = [_normalize_type(v, notes, where) for v in value]
        if any(m is None for m in mapped):
            return None
        return mapped
    if not isinstance(value, str) or value in _JSON_TYPES:
        return value
    mapped_type = _TYPE_ALIASES.get(value)
    if value == "any":
        note = "type 'any' dropped (no constraint)"
    elif mapped_type is None:
        note = f"unknown type {value!r} dropped"
    else:
        note = f"type {value!r} read as {mapped_type!r}"
    if notes is not None:
        notes.append(f"{where or '/'}: {note}")
    return mapped_type


def resolve_ref(schema: Any, root: Any, _depth: int = 0) -> Any:
    """Follow local ``$ref`` pointers (``#/$defs/x``) in ``schema`` against ``root``.

    Unresolvable or cyclic references resolve to ``{}`` (no constraint) rather than
    raising: a parser typing a value must never fail because of a schema.
    """
    while isinstance(schema, Mapping) and isinstance(schema.get("$ref"), str):
        if _depth > 32:
            return {}
        ref: str = schema["$ref"]
        if not ref.startswith("#"):
            return {}
        target: Any = root
        for part in ref[1:].split("/"):
            if not part:
                continue
            part = part.replace("~1", "/").replace("~0", "~")
            if isinstance(target, Mapping) and part in target:
                target = target[part]
            else:
                return {}
        schema = target
        _depth += 1
    return schema


def schema_types(schema: Any, root: Any = None) -> frozenset[str]:
    """Return the set of JSON types a (sub)schema admits; empty means "anything".

    Looks through ``$ref``, ``anyOf``/``oneOf``/``allOf``, type lists, ``enum`` and
    ``const`` values. Each subschema is looked at once (by identity, after its
    ``$ref`` is followed), so a chain of references shared by several branches
    costs its length, not 2 to the power of it; a branch that leads back to a
    subschema being looked at adds nothing.
    """
    root = schema if root is None else root
    resolved = resolve_ref(schema, root)
    if not isinstance(resolved, Mapping):
        return frozenset()
    if not _has_branches(resolved):
        return _types_of(resolved, None)
    return _TypeWalk(root).types(resolved) or frozenset()


def _has_branches(schema: Mapping[str, Any]) -> bool:
    return "anyOf" in schema or "oneOf" in schema or "allOf" in schema


class _TypeWalk:
    """One :func:`schema_types` question: the types of each subschema with branches,
    computed once (a subschema without branches is cheaper to look at again)."""

    __slots__ = ("memo", "root")

    def __init__(self, root: Any) -> None:
        self.root = root
        # id -> (the object, so the id stays its own; its types, None while computed)
        self.memo: dict[int, tuple[Any, frozenset[str] | None]] = {}

    def types(self, schema: Any) -> frozenset[str] | None:
        """The types of ``schema``; ``None`` for one whose types are being computed."""
        schema = resolve_ref(schema, self.root)
        if not isinstance(schema, Mapping):
            return frozenset()
        if not _has_branches(schema):
            return _types_of(schema, None)
        known = self.memo.get(id(schema))
        if known is not None:
            return known[1]
        self.memo[id(schema)] = (schema, None)
        found = _types_of(schema, self)
        self.memo[id(schema)] = (schema, found)
        return found


def _types_of(schema: Mapping[str, Any], walk: _TypeWalk | None) -> frozenset[str]:
    """The types ``schema`` admits; ``walk`` answers for its branches (it has none
    when ``walk`` is ``None``)."""
    found: set[str] = set()
    declared = schema.get("type")
    if isinstance(declared, str):
        found.add(declared)
    elif isinstance(declared, list):
        found.update(t for t in declared if isinstance(t, str))
    if walk is not None:
        for key in ("anyOf", "oneOf"):
            branches = schema.get(key)
            if isinstance(branches, list):
                for branch in branches:
                    sub = walk.types(branch)
                    if sub is None:
                        continue
                    if not sub:
                        return frozenset()
                    found |= sub
        all_of = schema.get("allOf")
        if isinstance(all_of, list) and not found:
            for branch in all_of:
                found |= walk.types(branch) or frozenset()
    if not declared:
        if "enum" in schema:
            values = schema["enum"]
            if isinstance(values, list):
                found.update(json_type_of(v) for v in values)
        if "const" in schema:
            found.add(json_type_of(schema["const"]))
    if not found:
        if "properties" in schema:
            found.add("object")
        elif "items" in schema:
            found.add("array")
    return frozenset(found)


def allows_null(schema: Any, root: Any = None) -> bool:
    """Whether a (sub)schema admits ``null``.

    Besides ``"null"`` among its types (a type list, ``anyOf``/``oneOf``), an
    OpenAPI-style ``"nullable": true`` and a ``"default": null`` count: real
    tool schemas mark optional parameters that way all the time. As cheap as
    :func:`schema_types`.
    """
    root = schema if root is None else root
    resolved = resolve_ref(schema, root)
    if not isinstance(resolved, Mapping):
        return False
    if resolved.get("nullable") is True or ("default" in resolved
                                            and resolved["default"] is None):
        return True
    return "null" in schema_types(resolved, root)


def json_type_of(value: Any) -> str:
    """The JSON type name of a Python value (``integer`` and ``number`` apart)."""
    if isinstance(value, bool):
        return "boolean"
    if value is None:
        return "null"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    return "object"


def _matches_type(value: Any, json_type: str) -> bool:
    if json_type == "integer":
        return (isinstance(value, int) and not isinstance(value, bool)) or (
            isinstance(value, float) and math.isfinite(value) and value.is_integer()
        )
    if json_type == "number":
        return isinstance(value, int | float) and not isinstance(value, bool)
    return json_type_of(value) == json_type


def coerce_text_value(text: str, schema: Any, root: Any = None,
                      types: frozenset[str] | None = None) -> Any:
    """Type a parameter value written as text, as the schema asks.

    * A parameter whose schema admits only strings (or has no schema) keeps the
      text verbatim.
    * Otherwise the text is read as JSON; the Python spellings ``True``, ``False``
      and ``None`` (which templates produce through ``|string``) are accepted too.
    * When the schema admits strings *and* other types, the JSON reading is kept
      only if it has one of the other types; otherwise the text stays a string.
    * Text that does not parse stays text, so the validator can tell the model
      exactly what was wrong.
    """
    if types is None:
        types = schema_types(schema, root) if schema is not None else frozenset({"string"})
    if types == _STRING_ONLY:
        return text
    stripped = text.strip()
    if stripped in _PYTHON_LITERALS:
        value: Any = _PYTHON_LITERALS[stripped]
    else:
        try:
            value = json.loads(stripped)
        except (ValueError, RecursionError):
            value = _lenient_number(stripped, types)
            if value is None:
                value = _python_literal(stripped)
            if value is None:
                return text
    if not types:
        return value
    non_string = types - {"string"}
    if any(_matches_type(value, t) for t in non_string):
        return value
    if "string" in types:
        return text
    return value


_INTEGER_RE = re.compile(r"[+-]?[0-9]+")
_NUMBER_RE = re.compile(r"[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")


def _lenient_number(text: str, types: frozenset[str]) -> int | float | None:
    """Numbers JSON refuses but a model plainly meant (``007``, ``+3``, ``.5``)."""
    if ("integer" in types or "number" in types) and _INTEGER_RE.fullmatch(text):
        return int(text)
    if "number" in types and _NUMBER_RE.fullmatch(text):
        return float(text)
    return None


_LITERAL_FILENAME = "<toolwire model literal>"
# Model text such as ``[1and 2]`` or ``'\d'`` makes the compiler warn on stderr; it is
# untrusted input, not code, so those warnings (and only those) are silenced.
for _category in (SyntaxWarning, DeprecationWarning):
    warnings.filterwarnings("ignore", category=_category, module=re.escape(_LITERAL_FILENAME))


def parse_model_literal(text: str) -> ast.Expression:
    """``text`` (model output) as a Python expression tree, compiled without warnings.

    :raises SyntaxError: (and ``ValueError``, ``RecursionError``, ``MemoryError``)
        when it is not one.
    """
    return ast.parse(text, _LITERAL_FILENAME, mode="eval")


def _python_literal(text: str) -> list[Any] | dict[Any, Any] | None:
    """A dict or list some templates write with Python's repr (``{'a': True}``)."""
    if text[:1] not in ("{", "[") or len(text) > 100_000:
        return None
    try:
        value = ast.literal_eval(parse_model_literal(text))
    except (ValueError, SyntaxError, RecursionError, MemoryError, TypeError):
        return None
    return value if isinstance(value, dict | list) else None


def parameter_schemas(parameters: Any) -> dict[str, Any]:
    """Map each declared parameter name to its (ref-resolved) schema."""
    if not isinstance(parameters, Mapping):
        return {}
    props = parameters.get("properties")
    if not isinstance(props, Mapping):
        return {}
    return {str(name): resolve_ref(sub, parameters) for name, sub in props.items()}


def tool_parameters_by_name(tools: Sequence[Any] | None) -> dict[str, Any]:
    """Map tool name -> parameters schema from OpenAI-style dicts or tool specs."""
    out: dict[str, Any] = {}
    for tool in tools or ():
        spec = getattr(tool, "schema", tool)
        if isinstance(spec, Mapping) and spec.get("type") == "function":
            spec = spec.get("function", {})
        if isinstance(spec, Mapping) and isinstance(spec.get("name"), str):
            out[spec["name"]] = normalize_schema(spec.get("parameters") or {})
    return out


class ToolSchemaIndex:
    """Per-reply lookup of parameter types, computed once per (tool, parameter).

    Parsers of text-valued formats ask it whether a parameter is a string (to
    stream it verbatim) and to type a finished value; unknown tools and
    parameters are strings.
    """

    __slots__ = ("_cache", "_params", "_refuses_null", "_tools")

    def __init__(self, tools: Mapping[str, Any]) -> None:
        self._tools = tools
        self._params: dict[str, dict[str, Any] | None] = {}
        self._cache: dict[tuple[str, str], frozenset[str]] = {}
        self._refuses_null: dict[tuple[str, str], bool] = {}

    def parameters(self, tool: str) -> dict[str, Any] | None:
        """``{parameter: schema}`` of a tool, or ``None`` when the tool is unknown."""
        if tool not in self._params:
            root = self._tools.get(tool)
            self._params[tool] = parameter_schemas(root) if root is not None else None
        return self._params[tool]

    def types(self, tool: str, param: str) -> frozenset[str]:
        """The JSON types a parameter admits (``{"string"}`` when unknown)."""
        key = (tool, param)
        found = self._cache.get(key)
        if found is None:
            params = self.parameters(tool)
            if params is None or param not in params:
                found = _STRING_ONLY
            else:
                found = schema_types(params[param], self._tools.get(tool))
            self._cache[key] = found
        return found

    def is_string(self, tool: str, param: str) -> bool:
        """Whether the parameter takes text verbatim (``null`` aside)."""
        types = self.types(tool, param)
        return types == _STRING_ONLY or types == _STRING_OR_NULL

    def refuses_null(self, tool: str, param: str) -> bool:
        """Whether a known parameter's schema does not admit ``null`` (see
        :func:`allows_null`); ``False`` for unknown tools and parameters."""
        key = (tool, param)
        found = self._refuses_null.get(key)
        if found is None:
            schema = self.schema(tool, param)
            found = schema is not None and not allows_null(schema, self._tools.get(tool))
            self._refuses_null[key] = found
        return found

    def schema(self, tool: str, param: str) -> Any:
        """The parameter's schema, or ``None`` when the tool or parameter is unknown."""
        params = self.parameters(tool)
        return None if params is None else params.get(param)

    def root(self, tool: str) -> Any:
        """The tool's whole parameters schema (for ``$ref`` resolution)."""
        return self._tools.get(tool)

    def coerce(self, tool: str, param: str, text: str) -> Any:
        """Type a finished text value by the parameter's schema."""
        types = self.types(tool, param)
        if types == _STRING_ONLY:
            return text
        params = self.parameters(tool) or {}
        return coerce_text_value(text, params.get(param), self._tools.get(tool), types)
