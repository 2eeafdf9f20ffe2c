"""JSON values by their schema, as GBNF: a small JSON-schema-to-grammar converter.

Every family writes some values as JSON (all of them in JSON families, the
non-string ones in tagged families, nested ones in pythonic calls; JSON is
also a Python literal there). :class:`JsonValues` writes the grammar of the
values a schema admits:

* ``type`` (one or a list), ``enum``, ``const``;
* strings with ``minLength``/``maxLength``; integers and numbers, with a sign
  only where ``minimum`` allows one (a small closed integer range is spelled
  out value by value); booleans; ``null`` only where the schema admits it;
* objects by ``properties``/``required`` (declared keys in declaration order,
  each at most once, every required one present; a free-form object takes any
  string keys with values of ``additionalProperties``); arrays by ``items``,
  ``minItems``, ``maxItems``;
* ``anyOf``/``oneOf`` (as alternatives), ``allOf`` (merged), local ``$ref``
  (recursion included), and the empty schema (any JSON value).

Each referenced definition is one rule, written once and named wherever it is
used (recursion goes through that name), and each subschema is written once
(by identity; one met again is reused, as a rule when its text is long), so
the work and the grammar grow with the schema, never with the number of paths
through it (a chain of ``anyOf`` branches that share their references).
``allOf`` is merged from every subschema its branches reach, each once.

Relaxed, so that the grammar admits a little more than the schema and
dispatch's validation has the last word: ``pattern``, ``format``, other
numeric bounds (``maximum``, ``multipleOf``...), ``uniqueItems``,
``minProperties``/``maxProperties``, ``contains``, ``oneOf``'s exclusivity.
Refused with :class:`~toolwire.errors.GrammarSchemaError`, because
the grammar would have to guess the shape: ``patternProperties``,
``prefixItems``, ``not``, ``if``/``then``/``else``, ``dependentSchemas``,
``unevaluatedProperties``, ``propertyNames``, remote ``$ref``.

Counts llama.cpp cannot hold (``minLength`` 2001, ``minItems`` 3000...) are
relaxed as :data:`~toolwire.grammar.gbnf.MAX_REPEAT` says. Numbers have at most
16 integral and 15 fractional digits and a two-digit exponent; whitespace is at
most one space after ``:`` and ``,`` (as ``json.dumps`` writes it), so a model
cannot pad forever.
"""

from __future__ import annotations

import json
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final

from ..errors import GrammarSchemaError
from ..vocabulary.schema import resolve_ref
from .gbnf import RuleSet, alternatives, char_class, literal, optional, repetition, sequence

__all__ = ["ANNOTATIONS", "REFUSED", "RELAXED", "JsonValues", "json_text"]

ANNOTATIONS: Final = frozenset({
    "title", "description", "default", "examples", "$comment", "deprecated", "readOnly",
    "writeOnly", "$schema", "$id", "$defs", "definitions", "nullable", "$anchor",
    "contentMediaType", "contentEncoding", "x-order",
})
"""Keywords that say nothing about a value's shape (``nullable`` is OpenAPI's and
JSON Schema validation ignores it, so the grammar does too)."""

RELAXED: Final = frozenset({
    "pattern", "format", "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum",
    "multipleOf", "uniqueItems", "minProperties", "maxProperties", "contains", "minContains",
    "maxContains", "dependentRequired",
})
"""Keywords the grammar does not enforce (it admits a superset; dispatch validates)."""

REFUSED: Final = frozenset({
    "patternProperties", "prefixItems", "not", "if", "then", "else", "dependentSchemas",
    "unevaluatedProperties", "unevaluatedItems", "propertyNames", "$dynamicRef",
    "$recursiveRef", "dependencies",
})
"""Keywords whose shape the grammar cannot write: asking for them raises."""

_TYPES: Final = ("string", "integer", "number", "boolean", "null", "object", "array")
_MAX_ENUMERATED_RANGE: Final = 64
_INLINE_REUSE: Final = 40
"""A subschema's expression met again is named as a rule when it is longer than this."""


def json_text(value: Any) -> str:
    """A value as the grammar spells it: ``json.dumps`` with ``", "`` and ``": "``."""
    return json.dumps(value, ensure_ascii=False)


class JsonValues:
    """Writes the grammar of JSON values for one tool's schemas into ``rules``.

    :param rules: where rules go.
    :param family: for error messages.
    :param tool: the tool's name, for error messages.
    :param root: the tool's parameters schema (``$ref`` targets live there).
    :param string_excluded: characters a string may not hold as themselves (the
        first characters of a tagged family's markers, see
        :mod:`toolwire.grammar.arguments`); a ``\\u`` escape of one is fine, since
        the markup itself then never appears in the text.
    :param literal_ok: whether a fixed text (an ``enum`` member) may be written.
    """

    def __init__(self, rules: RuleSet, *, family: str, tool: str, root: Mapping[str, Any],
                 string_excluded: str = "",
                 literal_ok: Callable[[str], bool] | None = None) -> None:
        self.rules = rules
        self.family = family
        self.tool = tool
        self.root = root
        self.literal_ok = literal_ok or (lambda text: True)
        self._refs: dict[str, str] = {}
        # id -> (the subschema, kept so its id stays its own; its expression, None while
        # it is being written)
        self._written: dict[int, tuple[Any, str | None]] = {}
        raw = char_class('"\\' + string_excluded + "\x7F", negate=True, ranges="\\x00-\\x1F")
        # no "\\/": JSON reads it as "/", a Python literal (pythonic calls) as two characters
        escape = ('"\\\\" (["\\\\bfnrt] | "u" ([0-9a-cA-Ce-fE-F] [0-9a-fA-F]{3} '
                  '| [dD] [0-7] [0-9a-fA-F]{2}))')
        self.char = rules.add("char", f"{raw} | {escape}")
        self.ws = '" "?'
        self._any: str | None = None

    # -- errors --------------------------------------------------------------------

    def _refuse(self, path: str, keyword: str, why: str) -> GrammarSchemaError:
        return GrammarSchemaError(
            f"{self.family}: tool {self.tool!r}, {path or '/'}: {why} ({keyword!r}); no grammar "
            "can constrain it. Simplify the schema, or use tool_choice='auto' without a grammar.",
            family=self.family, tool=self.tool, path=path or "/", keyword=keyword)

    # -- the entry point -----------------------------------------------------------

    def value(self, schema: Any, path: str = "") -> str:
        """An expression for the values ``schema`` admits."""
        if schema is True or schema is None:
            return self.any_value()
        if schema is False:
            raise self._refuse(path, "false", "the schema admits no value")
        if not isinstance(schema, Mapping):
            raise self._refuse(path, "type", "the schema is not an object")
        ref = schema.get("$ref")
        if isinstance(ref, str):
            return self._reference(ref, schema, path)
        known = self._written.get(id(schema))
        if known is not None:
            return self._again(schema, known[1], path)
        self._written[id(schema)] = (schema, None)
        expression = self._value(schema, path)
        self._written[id(schema)] = (schema, expression)
        return expression

    def _again(self, schema: Mapping[str, Any], expression: str | None, path: str) -> str:
        """A subschema met a second time: its expression, named when long."""
        if expression is None:
            raise self._refuse(path, "$ref", "the schema contains itself")
        if len(expression) <= _INLINE_REUSE:
            return expression
        name = self.rules.add("shared", expression)
        self._written[id(schema)] = (schema, name)
        return name

    def _value(self, schema: Mapping[str, Any], path: str) -> str:
        for keyword in schema:
            if keyword in REFUSED:
                raise self._refuse(path, keyword, "the grammar cannot express this keyword")
        if "allOf" in schema:
            return self.value(self._merged(schema, path), path)
        for key in ("anyOf", "oneOf"):
            branches = schema.get(key)
            if isinstance(branches, list):
                rest = {k: v for k, v in schema.items()
                        if k not in ("anyOf", "oneOf") and k not in ANNOTATIONS}
                # without a shape beside the branches each is written as itself, so a
                # branch several schemas share is written once
                options = [self.value({**rest, **b} if rest and isinstance(b, Mapping) else b,
                                      f"{path}/{key}/{i}") for i, b in enumerate(branches)]
                if not options:
                    raise self._refuse(path, key, "no branch admits a value")
                return alternatives(*options)
        if "const" in schema:
            return self._fixed([schema["const"]], path, "const")
        enum = schema.get("enum")
        if isinstance(enum, list):
            return self._fixed(enum, path, "enum")
        declared = schema.get("type")
        if isinstance(declared, list):
            kinds = [t for t in declared if t in _TYPES]
        elif isinstance(declared, str) and declared in _TYPES:
            kinds = [declared]
        elif "properties" in schema or "additionalProperties" in schema:
            kinds = ["object"]
        elif "items" in schema:
            kinds = ["array"]
        else:
            return self.any_value()
        if not kinds:
            raise self._refuse(path, "type", f"unknown type {declared!r}")
        return alternatives(*(self._typed(kind, schema, path) for kind in kinds))

    def _typed(self, kind: str, schema: Mapping[str, Any], path: str) -> str:
        if kind == "string":
            return self.string(schema)
        if kind == "integer":
            return self.integer(schema)
        if kind == "number":
            return self.number(schema)
        if kind == "boolean":
            return '("true" | "false")'
        if kind == "null":
            return '"null"'
        if kind == "object":
            return self.object(schema, path)
        return self.array(schema, path)

    # -- references and merging ------------------------------------------------------

    def _reference(self, ref: str, schema: Mapping[str, Any], path: str) -> str:
        if not ref.startswith("#"):
            raise self._refuse(path, "$ref", f"a reference outside the schema ({ref})")
        name = self._refs.get(ref)
        if name is not None:
            return name
        if not _points_to_something(self.root, ref):
            raise self._refuse(path, "$ref", f"the reference {ref} points nowhere")
        target = resolve_ref(dict(schema), self.root)
        name = self.rules.reserve(f"ref-{ref.rsplit('/', 1)[-1]}")
        self._refs[ref] = name
        self.rules.define(name, self.value(target, path + "/$ref"))
        return name

    def _merged(self, schema: Mapping[str, Any], path: str) -> dict[str, Any]:
        """``schema`` with its ``allOf`` merged in: every subschema the branches reach
        (through references and inner ``allOf``), each once, nearest first."""
        merged: dict[str, Any] = {k: v for k, v in schema.items() if k != "allOf"}
        seen = {id(schema)}
        queue: deque[tuple[str, Any]] = deque(
            (f"{path}/allOf/{i}", b) for i, b in enumerate(schema.get("allOf") or []))
        while queue:
            where, branch = queue.popleft()
            if isinstance(branch, Mapping) and "$ref" in branch:
                branch = resolve_ref(dict(branch), self.root)
            if not isinstance(branch, Mapping):
                raise self._refuse(where, "allOf", "a branch is not a schema")
            if id(branch) in seen:
                continue
            seen.add(id(branch))
            for key, value in branch.items():
                if key == "allOf" and isinstance(value, list):
                    queue.extend((f"{where}/allOf/{i}", b) for i, b in enumerate(value))
                elif key == "properties" and isinstance(value, Mapping):
                    merged["properties"] = {**(merged.get("properties") or {}), **value}
                elif key == "required" and isinstance(value, list):
                    merged["required"] = [*(merged.get("required") or []), *value]
                elif key in merged and merged[key] != value and key not in ANNOTATIONS:
                    raise self._refuse(where, "allOf", f"branches disagree on {key!r}")
                else:
                    merged[key] = value
        return merged

    # -- scalars -------------------------------------------------------------------

    def _fixed(self, values: Sequence[Any], path: str, keyword: str) -> str:
        texts = [json_text(v) for v in values]
        kept = [literal(t) for t in texts if self.literal_ok(t)]
        if not kept:
            raise self._refuse(path, keyword, "no value can be written inside this markup")
        return alternatives(*kept)

    def string(self, schema: Mapping[str, Any]) -> str:
        """A quoted string, within ``minLength``/``maxLength``."""
        low = _count(schema.get("minLength"), 0)
        high = _count(schema.get("maxLength"), None)
        return sequence('"\\""', repetition(self.rules, self.char, low, high, hint="chars"),
                        '"\\""')

    def integer(self, schema: Mapping[str, Any]) -> str:
        """An integer: a sign only where the lower bound allows a negative one."""
        low = _bound(schema, "minimum", "exclusiveMinimum", +1)
        high = _bound(schema, "maximum", "exclusiveMaximum", -1)
        if low is not None and high is not None and 0 <= high - low < _MAX_ENUMERATED_RANGE:
            return alternatives(*(literal(str(v)) for v in range(int(low), int(high) + 1)))
        digits = '("0" | [1-9] [0-9]{0,15})'
        if low is not None and low >= 1:
            return "[1-9] [0-9]{0,15}"
        if low is not None and low >= 0:
            return digits
        return sequence('"-"?', digits)

    def number(self, schema: Mapping[str, Any]) -> str:
        """A JSON number; no sign where the lower bound is not negative."""
        low = _bound(schema, "minimum", "exclusiveMinimum", 0)
        sign = "" if low is not None and low >= 0 else '"-"?'
        return sequence(sign, '("0" | [1-9] [0-9]{0,15})', '("." [0-9]{1,15})?',
                        '([eE] [-+]? [0-9]{1,2})?')

    # -- containers ----------------------------------------------------------------

    def object(self, schema: Mapping[str, Any], path: str) -> str:
        """An object: its declared properties in order, or free-form keys."""
        properties = schema.get("properties")
        if isinstance(properties, Mapping) and properties:
            required = set(schema.get("required") or ())
            members = [(literal(json_text(str(name))) + ' ":" ' + self.ws,
                        self.value(sub, f"{path}/properties/{name}"), name in required)
                       for name, sub in properties.items()]
            body = self.members(members, separator='"," ' + self.ws)
            return sequence('"{"', body, '"}"')
        extra = schema.get("additionalProperties", True)
        if extra is False:
            return '"{}"'
        value = self.value(extra if isinstance(extra, Mapping) else None,
                           f"{path}/additionalProperties")
        pair = sequence(self.string({}), '":"', self.ws, value)
        return sequence('"{"', optional(sequence(pair, f'("," {self.ws} {pair})*')), '"}"')

    def members(self, members: Sequence[tuple[str, str, bool]], *, separator: str,
                lead: str = "", hint: str = "members") -> str:
        """Members ``(prefix, value, required)`` in order, each at most once, the
        required ones always, ``separator`` between two (``lead`` before each).

        One rule per position and "something written yet" state: linear in the
        number of members, and unambiguous. Written from the last member back
        (a rule names the one after it), so a thousand members need no deep stack.
        """
        n = len(members)
        names: dict[tuple[int, bool], str] = {}

        def body(i: int, first: bool) -> str:
            prefix, value, needed = members[i]
            taken = sequence("" if first else separator, lead, prefix, value,
                             names.get((i + 1, False), ""))
            return taken if needed else alternatives(taken, names.get((i + 1, first), "") or '""')

        # every later position is reached after something was written; the positions
        # reached with nothing written yet are those up to the first required member
        for i in range(n - 1, 0, -1):
            names[(i, False)] = self.rules.add(f"{hint}-{i}", body(i, False))
        first_required = next((i for i, (_, _, needed) in enumerate(members) if needed), n - 1)
        for i in range(first_required, -1, -1):
            names[(i, True)] = self.rules.add(f"{hint}-{i}", body(i, True))
        return names.get((0, True), "")

    def array(self, schema: Mapping[str, Any], path: str) -> str:
        """An array of ``items``, within ``minItems``/``maxItems``."""
        item = self.value(schema.get("items"), f"{path}/items")
        low = _count(schema.get("minItems"), 0)
        high = _count(schema.get("maxItems"), None)
        if high == 0:
            return '"[]"'
        more = repetition(self.rules, f'"," {self.ws} {item}', max(low - 1, 0),
                          None if high is None else high - 1, hint="more-items")
        items = sequence(item, more)
        return sequence('"["', items if low > 0 else optional(items), '"]"')

    def any_value(self) -> str:
        """Any JSON value (the empty schema)."""
        if self._any is None:
            value = self.rules.reserve("json-value")
            self._any = value
            pair = sequence(self.string({}), '":"', self.ws, value)
            obj = sequence('"{"', optional(sequence(pair, f'("," {self.ws} {pair})*')), '"}"')
            arr = sequence('"["', optional(sequence(value, f'("," {self.ws} {value})*')), '"]"')
            self.rules.define(value, alternatives(obj, arr, self.string({}), self.number({}),
                                                  '"true"', '"false"', '"null"'))
        return self._any


def _points_to_something(root: Any, ref: str) -> bool:
    target = root
    for part in ref[1:].split("/"):
        if not part:
            continue
        part = part.replace("~1", "/").replace("~0", "~")
        if not isinstance(target, Mapping) or part not in target:
            return False
        target = target[part]
    return True


def _count(value: Any, default: int | None) -> Any:
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value
    return default


def _bound(schema: Mapping[str, Any], inclusive: str, exclusive: str, step: int) -> float | None:
    """The inclusive integer-ish bound a schema sets (``step`` moves an exclusive one in)."""
    found = []
    value = schema.get(inclusive)
    if isinstance(value, int | float) and not isinstance(value, bool):
        found.append(float(value))
    value = schema.get(exclusive)
    if isinstance(value, int | float) and not isinstance(value, bool):
        found.append(float(value) + step if step else float(value))
    if not found:
        return None
    import math

    pick = max(found) if step >= 0 else min(found)
    return float(math.ceil(pick)) if step >= 0 else float(math.floor(pick))
