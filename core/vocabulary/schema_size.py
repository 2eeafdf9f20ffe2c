"""The size of a tool schema, measured once when the tool enters, against :class:`SchemaLimits`.

A tool schema is untrusted input (an HTTP client's ``tools``, an MCP server's
listing), and what toolwire does with it (validate arguments with jsonschema,
type the values a parser reads, write a grammar) costs time in its size. Two
numbers bound that cost, and both are counted in time linear in the schema:

* **nodes**: the JSON values the schema holds (objects, arrays and scalars, as
  its JSON text would have them; a Python object used in several places counts
  at each) and **depth**, how deeply its objects and arrays nest;
* **expansion**: how many subschemas are applied to *one* value, following the
  keywords that apply a subschema to the same value (``$ref``, ``$dynamicRef``,
  ``allOf``, ``anyOf``, ``oneOf``, ``not``, ``if``/``then``/``else``,
  ``dependentSchemas``) and not those that move to a part of it
  (``properties``, ``items``...). References are resolved as jsonschema
  resolves them (JSON pointers, anchors, embedded ``$id`` resources), and each
  subschema's count is computed once (a walk of the reference graph), so a chain
  of 40 levels of ``{"anyOf": [{"$ref": next}, {"$ref": next}]}``, whose
  expansion is 2^41, is refused after a few dozen steps. A subschema applied to
  a value through itself (``{"$defs": {"a": {"anyOf": [{"$ref": "#/$defs/a"}]}}}``)
  is refused as a ``cycle``: jsonschema would recurse on it for ever. A
  recursive schema whose reference descends first (a tree:
  ``{"items": {"$ref": "#"}}``) is fine.

The expansion bounds the validator's work on each value of the arguments; the
dispatcher also bounds a whole validation (see
:func:`toolwire.conversation.validation.step_allowance`), since branches that
each descend can still multiply with the value's depth.

Every regular expression of the schema (each ``pattern`` and each
``patternProperties`` key, found by a walk of its subschemas, not of its data) is
checked here by :func:`toolwire.vocabulary.patterns.check_patterns`: bounded in
length, and compiled in the pattern child within a memory and a time bound, all of
them in one job; one that cannot be used is refused as the limit ``pattern``,
naming where it is (one that is not a regular expression at all is left to the
metaschema check).
So is ``patternProperties`` beside ``unevaluatedProperties``: jsonschema would
match those keys with Python's backtracking ``re`` while it works out which
properties were evaluated.

:func:`check_schema_size` raises :class:`~toolwire.errors.ToolSchemaBudgetError`
(naming the tool and the bound); :class:`toolwire.Tool` calls it on every
schema, before anything else walks it. The bounds are :class:`toolwire.limits.SchemaLimits`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Final

import attrs
import referencing
import referencing.exceptions
import referencing.jsonschema

from ..errors import ToolSchemaBudgetError
from ..limits import PATTERN_LIMITS, SchemaLimits
from .patterns import check_patterns

if TYPE_CHECKING:
    from typing import TypeAlias

    from referencing._core import Resolver

    _Resolver: TypeAlias = Resolver[Any] | None

__all__ = ["SchemaSize", "check_schema_size"]

_REFERENCES: Final = ("$ref", "$dynamicRef", "$recursiveRef")
_IN_PLACE_LISTS: Final = ("allOf", "anyOf", "oneOf")
_IN_PLACE_SINGLE: Final = ("not", "if", "then", "else")
_IN_PLACE_MAPS: Final = ("dependentSchemas", "dependencies")
_SUBSCHEMA_SINGLE: Final = ("additionalProperties", "additionalItems", "contains",
                            "propertyNames", "unevaluatedItems", "unevaluatedProperties",
                            "contentSchema", "items", *_IN_PLACE_SINGLE)
_SUBSCHEMA_LISTS: Final = ("prefixItems", "items", *_IN_PLACE_LISTS)
_SUBSCHEMA_MAPS: Final = ("properties", "patternProperties", "$defs", "definitions",
                          *_IN_PLACE_MAPS)
_LIMITS: Final = SchemaLimits()
_RESOURCE_KEYS: Final = ("$id", "id", "$schema")
_IN_PLACE_KEYS: Final = frozenset((*_REFERENCES, *_IN_PLACE_LISTS, *_IN_PLACE_SINGLE,
                                   *_IN_PLACE_MAPS))


@attrs.frozen
class SchemaSize:
    """What a schema measured.

    :ivar nodes: its JSON values.
    :ivar depth: its deepest nesting of objects and arrays.
    :ivar expansion: the most subschemas it applies to one value.
    """

    nodes: int
    depth: int
    expansion: int


class _Over(Exception):
    """A limit was passed (internal: becomes a ToolSchemaBudgetError)."""

    def __init__(self, limit: str, found: int, at: Any, *, contained: bool = False) -> None:
        super().__init__(limit)
        self.limit = limit
        self.found = found
        self.at = at
        self.contained = contained
        self.where = ""


def check_schema_size(schema: Any, *, tool: str, limits: SchemaLimits = _LIMITS,
                      part: str = "parameters schema") -> SchemaSize:
    """Measure a tool's parameters schema (or any schema from outside) against ``limits``.

    :param part: what the schema is, in messages (``"output schema"`` for an MCP
        tool's ``outputSchema``, which passes the same limits).
    :returns: its size, when within the limits.
    :raises ToolSchemaBudgetError: over a limit, a cycle, or a regular expression
        that cannot be used (naming the tool, the limit and where in the schema it
        was found).
    """
    try:
        nodes, depth, in_place = _tree_size(schema, limits)
        # without a keyword that applies another subschema, each applies only itself
        expansion = _Expansion(schema, limits.max_expansion).largest() if in_place else 1
    except _Over as over:
        over.where = _path_to(schema, over.at)
        raise _error(tool, limits, over, part) from None
    _check_patterns(schema, tool, part)
    return SchemaSize(nodes, depth, expansion)


def _check_patterns(schema: Any, tool: str, part: str) -> None:
    """Compile every regular expression of ``schema`` (see the module doc)."""
    evaluated_properties = False
    where_pattern_keys = ""
    found_patterns: list[tuple[str, str]] = []
    for where, subschema in _subschemas(schema):
        evaluated_properties = evaluated_properties or "unevaluatedProperties" in subschema
        found = subschema.get("pattern")
        patterns = [(f"{where}/pattern", found)] if isinstance(found, str) else []
        keys = subschema.get("patternProperties")
        if keys is not None and _is_map(keys):
            where_pattern_keys = where_pattern_keys or f"{where}/patternProperties"
            patterns += [(f"{where}/patternProperties/{_pointer(str(key))}", key)
                         for key in keys if isinstance(key, str)]
        found_patterns += patterns
    problems = check_patterns([pattern for _, pattern in found_patterns])
    for (place, pattern), problem in zip(found_patterns, problems, strict=True):
        if problem is not None and not problem.syntax:  # the metaschema check says the rest
            raise ToolSchemaBudgetError(
                f"tool {tool!r}: the regular expression at {place} cannot be used: {problem}; "
                "the tool is refused (schema limit 'pattern', a fixed bound)",
                tool=tool, budget="pattern", limit=PATTERN_LIMITS.max_chars,
                found=len(pattern))
    if evaluated_properties and where_pattern_keys:
        raise ToolSchemaBudgetError(
            f"tool {tool!r}: its {part} has patternProperties (at "
            f"{where_pattern_keys}) and unevaluatedProperties, which would match those "
            "regular expressions without a bound; the tool is refused (schema limit "
            "'pattern', a fixed bound)", tool=tool, budget="pattern", limit=0, found=0)


def _pointer(name: str) -> str:
    return name.replace("~", "~0").replace("/", "~1")


def _subschemas(schema: Any) -> list[tuple[str, Mapping[str, Any]]]:
    """Every subschema written in ``schema`` with its JSON pointer, each object once
    (iterative; the schema is within the node limit already)."""
    found: list[tuple[str, Mapping[str, Any]]] = []
    seen: set[int] = set()
    stack: list[tuple[str, Any]] = [("", schema)]
    while stack:
        where, current = stack.pop()
        if not _is_map(current) or id(current) in seen:
            continue
        seen.add(id(current))
        found.append((where or "/", current))
        for keyword in _SUBSCHEMA_SINGLE:
            stack.append((f"{where}/{keyword}", current.get(keyword)))
        for keyword in _SUBSCHEMA_LISTS:
            items = current.get(keyword)
            if isinstance(items, list):
                stack.extend((f"{where}/{keyword}/{i}", item) for i, item in enumerate(items))
        for keyword in _SUBSCHEMA_MAPS:
            named = current.get(keyword)
            if _is_map(named):
                stack.extend((f"{where}/{keyword}/{_pointer(str(name))}", item)
                             for name, item in named.items())
    return found


def _error(tool: str, limits: SchemaLimits, over: _Over, part: str) -> ToolSchemaBudgetError:
    where = over.where or "/"
    if over.limit == "nodes":
        limit = limits.max_nodes
        why = f"holds more than {limit:,} JSON values"
    elif over.limit == "depth":
        limit = limits.max_depth
        why = f"nests objects and arrays more than {limit:,} levels deep (at {where})"
    elif over.limit == "expansion":
        limit = limits.max_expansion
        why = (f"applies more than {limit:,} subschemas to one value through $ref, anyOf, "
               f"oneOf, allOf, not or if/then/else (at least {over.found:,} at {where}); "
               "validating or typing a value by it would take exponential time")
    elif over.contained:
        limit = 0
        why = f"contains itself (at {where}): as JSON it would never end"
    else:
        limit = 0
        why = (f"applies {where} to a value through itself (a $ref cycle that never "
               "descends into a property or item); validation would never end")
    return ToolSchemaBudgetError(
        f"tool {tool!r}: its {part} {why}; it is refused (schema limit "
        f"{over.limit!r}, a fixed bound)",
        tool=tool, budget=over.limit, limit=limit, found=over.found)


_SCALARS: Final = (str, int, float, type(None))


def _is_map(value: Any) -> bool:
    """``isinstance(value, Mapping)``, without the ABC check for JSON's own types."""
    return isinstance(value, dict) or (not isinstance(value, (*_SCALARS, list))
                                       and isinstance(value, Mapping))


def _is_container(value: Any) -> bool:
    return isinstance(value, dict | list | tuple) or (not isinstance(value, _SCALARS)
                                                      and isinstance(value, Mapping))


def _children(value: Any) -> Any:
    return value if isinstance(value, list | tuple) else value.values()


def _path_to(schema: Any, target: Any) -> str:
    """The JSON pointer of the first place ``target`` is found in ``schema`` (only
    asked when a schema is refused; each object is looked into once)."""
    seen: set[int] = set()
    stack: list[tuple[Any, str]] = [(schema, "")]
    while stack:
        value, where = stack.pop()
        if value is target:
            return where
        if id(value) in seen or not _is_container(value):
            continue
        seen.add(id(value))
        named = enumerate(value) if isinstance(value, list | tuple) else value.items()
        stack.extend((item, f"{where}/{name}") for name, item in named)
    return ""


def _tree_size(schema: Any, limits: SchemaLimits) -> tuple[int, int, bool]:
    """``(values, depth, in_place)`` of ``schema`` as JSON text would hold it
    (iterative; each object measured once, however often it is used); ``in_place``:
    some object in it has a keyword that applies a subschema to the same value."""
    if not _is_container(schema):
        return 1, 0, False
    in_place = False
    sizes: dict[int, tuple[int, int]] = {}
    kept: list[Any] = []  # ids stay valid while their objects live
    started: set[int] = set()
    stack: list[tuple[Any, bool]] = [(schema, False)]
    while stack:
        value, finished = stack.pop()
        key = id(value)
        if finished:
            count, deepest = 1, 1
            for item in _children(value):
                if isinstance(item, _SCALARS):
                    count += 1
                elif _is_container(item):
                    inner, below = sizes[id(item)]
                    count += inner
                    if below >= deepest:
                        deepest = below + 1
                else:
                    count += 1
            started.discard(key)
            sizes[key] = (count, deepest)
            if count > limits.max_nodes:
                raise _Over("nodes", count, value)
            if deepest > limits.max_depth:
                raise _Over("depth", deepest, value)
            continue
        if key in sizes:
            continue
        if key in started:
            raise _Over("cycle", 0, value, contained=True)
        started.add(key)
        kept.append(value)
        stack.append((value, True))
        if not in_place and _is_map(value):
            in_place = not _IN_PLACE_KEYS.isdisjoint(value.keys())
        for item in _children(value):
            if isinstance(item, _SCALARS) or not _is_container(item):
                continue
            if id(item) in started:
                raise _Over("cycle", 0, item, contained=True)
            if id(item) not in sizes:
                stack.append((item, False))
    nodes, depth = sizes[id(schema)]
    return nodes, depth, in_place


class _Expansion:
    """The expansion of every subschema of one schema, each computed once.

    References are resolved by ``referencing``, what jsonschema resolves them with.
    """

    def __init__(self, schema: Any, limit: int) -> None:
        self.root = schema
        self.limit = limit
        self.memo: dict[int, int] = {}
        self.kept: list[Any] = []
        dialect = schema.get("$schema") if isinstance(schema, Mapping) else None
        self.spec = referencing.jsonschema.specification_with(
            dialect if isinstance(dialect, str) else "",
            default=referencing.jsonschema.DRAFT202012)
        self.resolver: _Resolver = None
        if isinstance(schema, Mapping):
            try:
                resource = self.spec.create_resource(schema)
                uri = resource.id() or ""
                registry: referencing.Registry[Any] = \
                    referencing.Registry().with_resource(uri, resource).crawl()
                self.resolver = registry.resolver(base_uri=uri)
            except Exception:  # a schema jsonschema cannot load either
                self.resolver = None

    def largest(self) -> int:
        """The most subschemas any subschema applies to one value."""
        if not isinstance(self.root, Mapping):
            return 1
        best = 0
        seen: set[int] = set()
        stack: list[tuple[Any, _Resolver]] = [(self.root, self.resolver)]
        while stack:
            schema, resolver = stack.pop()
            if id(schema) in seen:
                continue
            seen.add(id(schema))
            best = max(best, self.of(schema, resolver))
            for sub in _lexical_subschemas(schema):
                stack.append((sub, self._enter(sub, resolver)))
        return best

    def _enter(self, schema: Any, resolver: _Resolver) -> _Resolver:
        """The resolver inside ``schema`` (another base URI when it has an ``$id``)."""
        if resolver is None or not _is_map(schema) \
                or not any(key in schema for key in _RESOURCE_KEYS):
            return resolver
        try:
            resource = referencing.Resource.from_contents(schema,
                                                          default_specification=self.spec)
            return resolver.in_subresource(resource)
        except Exception:  # an unusable $id or $schema: keep the base
            return resolver

    def _in_place(self, schema: Mapping[str, Any], resolver: _Resolver
                  ) -> list[tuple[Any, _Resolver]]:
        """The subschemas applied to the same value as ``schema``."""
        out: list[tuple[Any, _Resolver]] = []
        for keyword in _REFERENCES:
            ref = schema.get(keyword)
            if not isinstance(ref, str) or resolver is None:
                continue
            try:
                resolved = resolver.lookup("#" if keyword == "$recursiveRef" else ref)
            except Exception:  # jsonschema cannot follow it either
                continue
            if isinstance(resolved.contents, Mapping | bool):
                out.append((resolved.contents, resolved.resolver))
        for keyword in _IN_PLACE_LISTS:
            branches = schema.get(keyword)
            if isinstance(branches, list):
                out.extend((b, self._enter(b, resolver)) for b in branches
                           if isinstance(b, bool) or _is_map(b))
        for keyword in _IN_PLACE_SINGLE:
            branch = schema.get(keyword)
            if branch is not None and (isinstance(branch, bool) or _is_map(branch)):
                out.append((branch, self._enter(branch, resolver)))
        for keyword in _IN_PLACE_MAPS:
            branches = schema.get(keyword)
            if branches is not None and _is_map(branches):
                out.extend((b, self._enter(b, resolver)) for b in branches.values()
                           if _is_map(b))
        return out

    def of(self, schema: Any, resolver: _Resolver) -> int:
        """The subschemas applied to one value by ``schema`` (itself included)."""
        known = self.memo.get(id(schema))
        if known is not None:
            return known
        started: set[int] = set()
        stack: list[list[Any]] = [[schema, resolver, None]]
        while stack:
            entry = stack[-1]
            current, current_resolver, children = entry
            key = id(current)
            if children is None:
                if key in self.memo:
                    stack.pop()
                    continue
                if key in started:
                    raise _Over("cycle", 0, current)
                started.add(key)
                self.kept.append(current)
                children = (self._in_place(current, current_resolver)
                            if _is_map(current) else [])
                entry[2] = children
                for child, child_resolver in children:
                    if id(child) in started:
                        raise _Over("cycle", 0, child)
                    if id(child) not in self.memo:
                        stack.append([child, child_resolver, None])
                continue
            stack.pop()
            started.discard(key)
            total = 1 + sum(self.memo[id(child)] for child, _ in children)
            self.memo[key] = total
            if total > self.limit:
                raise _Over("expansion", total, current)
        return self.memo[id(schema)]


def _lexical_subschemas(schema: Any) -> list[Any]:
    """The subschemas written inside ``schema`` (not those it refers to)."""
    if not _is_map(schema):
        return []
    out: list[Any] = []
    for keyword in _SUBSCHEMA_SINGLE:
        sub = schema.get(keyword)
        if sub is not None and _is_map(sub):
            out.append(sub)
    for keyword in _SUBSCHEMA_LISTS:
        subs = schema.get(keyword)
        if isinstance(subs, list):
            out.extend(s for s in subs if _is_map(s))
    for keyword in _SUBSCHEMA_MAPS:
        subs = schema.get(keyword)
        if subs is not None and _is_map(subs):
            out.extend(s for s in subs.values() if _is_map(s))
    return out
