"""Values written as nested elements (MiniMax-M3): ``ns<key>value ns</key>``, lists as ``item``.

The parser (:func:`toolwire.parse.values.decode_nested_value`) reads an object
as a run of ``ns<key>...ns</key>`` elements, a list as a run of ``ns<item>``
elements, and a leaf as text typed by its schema; so a leaf is raw text in
which the prefix token ``ns`` never occurs, a number or a boolean as JSON
spells it, or ``null``. A free-form object is written empty (its keys cannot
be told from the schema).

Each referenced definition is one rule, written once and named wherever it is
used, so a recursive schema (a tree) is a recursive grammar and a chain of
branches sharing references costs its length.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..errors import GrammarSchemaError
from ..parse.markers import valid_name
from ..vocabulary.schema import resolve_ref
from .avoid import avoiding_text, bounded_text
from .gbnf import RuleSet, alternatives, literal, repetition, sequence
from .json_values import REFUSED, JsonValues, json_text

__all__ = ["NestedValues"]

_GAP = '"\\n"?'


class NestedValues:
    """Writes nested-element values for one tool into ``rules``.

    :param ns: the token before every tag (``]<]minimax[>[``).
    """

    def __init__(self, rules: RuleSet, *, ns: str, family: str, tool: str,
                 root: Mapping[str, Any]) -> None:
        self.rules = rules
        self.ns = ns
        self.family = family
        self.tool = tool
        self.root = root
        self.scalars = JsonValues(rules, family=family, tool=tool, root=root)
        self.text = avoiding_text(rules, [ns], hint="nested-text", after=ns)
        self._refs: dict[str, str] = {}

    def _refuse(self, path: str, keyword: str, why: str) -> GrammarSchemaError:
        return GrammarSchemaError(f"{self.family}: tool {self.tool!r}, {path}: {why} "
                                  f"({keyword!r})",
                                  family=self.family, tool=self.tool, path=path, keyword=keyword)

    def element(self, tag: str, value: str) -> str:
        """``ns<tag>value ns</tag>``."""
        return sequence(literal(f"{self.ns}<{tag}>"), value, literal(f"{self.ns}</{tag}>"))

    def value(self, schema: Any, path: str) -> str:
        """The nested-element spelling of the values ``schema`` admits."""
        if isinstance(schema, Mapping) and isinstance(schema.get("$ref"), str):
            return self._reference(schema["$ref"], schema, path)
        if not isinstance(schema, Mapping):
            return self.text
        for keyword in schema:
            if keyword in REFUSED:
                raise self._refuse(path, keyword, "the grammar cannot express this keyword")
        for key in ("anyOf", "oneOf"):
            branches = schema.get(key)
            if isinstance(branches, list) and branches:
                rest = {k: v for k, v in schema.items() if k not in ("anyOf", "oneOf")}
                return alternatives(*(self.value({**rest, **b} if isinstance(b, Mapping) else b,
                                                 f"{path}/{key}/{i}")
                                      for i, b in enumerate(branches)))
        fixed = [schema["const"]] if "const" in schema else schema.get("enum")
        if isinstance(fixed, list):
            texts = [v if isinstance(v, str) else json_text(v) for v in fixed
                     if not isinstance(v, dict | list)]
            kept = [literal(t) for t in texts if self.ns not in t]
            if not kept:
                raise self._refuse(path, "enum", "no value can be written as nested elements")
            return alternatives(*kept)
        declared = schema.get("type")
        kinds = declared if isinstance(declared, list) else [declared] if declared else []
        if not kinds:
            kinds = ["object"] if "properties" in schema else ["array"] if "items" in schema \
                else ["string"]
        return alternatives(*(self._typed(str(k), schema, path) for k in kinds))

    def _reference(self, ref: str, schema: Mapping[str, Any], path: str) -> str:
        """The rule of a referenced definition (made on first use)."""
        name = self._refs.get(ref)
        if name is None:
            name = self.rules.reserve(f"nested-ref-{ref.rsplit('/', 1)[-1]}")
            self._refs[ref] = name
            self.rules.define(name, self.value(resolve_ref(dict(schema), self.root),
                                               path + "/$ref"))
        return name

    def _typed(self, kind: str, schema: Mapping[str, Any], path: str) -> str:
        if kind == "object":
            properties = schema.get("properties")
            if not isinstance(properties, Mapping) or not properties:
                return '""'
            required = set(schema.get("required") or ())
            members = []
            for name, sub in properties.items():
                if not valid_name(str(name)):
                    raise self._refuse(f"{path}/properties/{name}", "name",
                                       f"{name!r} cannot be a tag name")
                members.append((literal(f"{self.ns}<{name}>"),
                                sequence(self.value(sub, f"{path}/properties/{name}"),
                                         literal(f"{self.ns}</{name}>")),
                                name in required))
            return self.scalars.members(members, separator="", lead=_GAP, hint="nested-obj")
        if kind == "array":
            item = sequence(_GAP, self.element("item", self.value(schema.get("items"),
                                                                  f"{path}/items")))
            fewest, most = schema.get("minItems"), schema.get("maxItems")
            low = fewest if isinstance(fewest, int) and fewest >= 0 else 0
            high = most if isinstance(most, int) and most >= 0 else None
            return repetition(self.rules, item, low, high, hint="nested-items") or '""'
        if kind == "string":
            shortest = schema.get("minLength")
            longest = schema.get("maxLength")
            low = shortest if isinstance(shortest, int) else 0
            high = longest if isinstance(longest, int) else None
            if not low and high is None:
                return self.text
            return bounded_text(self.rules, [self.ns], low, high)
        if kind == "integer":
            return self.scalars.integer(schema)
        if kind == "number":
            return self.scalars.number(schema)
        if kind == "boolean":
            return '("true" | "false")'
        return '"null"'
