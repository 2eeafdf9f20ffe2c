"""One call's arguments, as each kind of :class:`~toolwire.parse.record.Arguments` writes them.

* :class:`~toolwire.parse.record.JsonArguments` and the arguments inside
  :class:`~toolwire.parse.record.CallObjects`: a JSON object of the declared
  parameters (:meth:`ArgumentWriter.json_object`);
* :class:`~toolwire.parse.record.TaggedArguments`: name/value pairs in the
  family's markup (:meth:`ArgumentWriter.tagged`). A string parameter's value is
  raw text in which the value's closing marker, the next argument's opening
  marker and the call's and section's closing markers never occur (so the
  parser cannot end it early); every other value is JSON whose strings leave
  out the first characters of those markers; MiniMax-M3's nested elements are
  written as nested elements;
* :class:`~toolwire.parse.record.PythonicCalls`: ``name(key=value, ...)``, string
  values raw between ``'`` (without a ``'`` inside) or escaped, others as JSON,
  which is a Python literal too (:meth:`ArgumentWriter.pythonic`).

Names a family's markup cannot carry (a blank in an XML attribute, a dash in a
Python keyword) raise :class:`~toolwire.errors.GrammarSchemaError`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any, Final

from ..errors import GrammarSchemaError
from ..parse.markers import valid_name
from ..parse.record import Header, TaggedArguments
from ..vocabulary.schema import schema_types
from .avoid import avoiding_text, bounded_text, first_chars
from .gbnf import RuleSet, alternatives, literal, sequence
from .json_values import REFUSED, JsonValues
from .nested import NestedValues

__all__ = ["GAP", "ArgumentWriter", "header_text"]

GAP: Final = '"\\n"?'
"""Layout the parser skips between markers: at most one newline, as templates write."""

_ID: Final = "[a-zA-Z0-9]{1,24}"
_INDEX: Final = "[0-9]{1,4}"
_PY_NAME: Final = re.compile(r"[A-Za-z_][\w.\-]*")
_PY_KEYWORD: Final = re.compile(r"[A-Za-z_]\w*")
_STRING_ONLY: Final = (frozenset({"string"}), frozenset({"string", "null"}))
_CDATA: Final = "<![CDATA["


def _attribute_value(text: str) -> str:
    return text.replace("&", "&amp;")


def header_text(header: Header, name: str, *, kind_value: str = "") -> str:
    """The GBNF of a header naming ``name`` (a tool or a parameter).

    XML attributes are written `` key="value"`` in the record's order; a
    pattern header is the record's first pattern (as the template writes it)
    with its holes filled: the name, a call id, an index, the value kind.
    """
    if header.attributes:
        parts = []
        for hole, attribute in header.attributes.items():
            if hole == "name":
                value = literal(_attribute_value(name))
            elif hole == "kind":
                value = literal(kind_value)
            else:
                value = _ID
            parts.append(sequence(literal(f' {attribute}="'), value, '"\\""'))
        return sequence(*parts)
    pattern = header.patterns[0]
    out = []
    pos = 0
    for match in re.finditer(r"\{(name|id|index|kind|any)\}", pattern):
        out.append(literal(pattern[pos:match.start()]) if match.start() > pos else "")
        hole = match.group(1)
        out.append(literal(name) if hole == "name" else literal(kind_value)
                   if hole == "kind" else _INDEX if hole == "index" else _ID)
        pos = match.end()
    if pos < len(pattern):
        out.append(literal(pattern[pos:]))
    return sequence(*out)


class ArgumentWriter:
    """Writes the arguments of one tool's calls, for one family.

    :param rules: where rules go.
    :param family: the family's name (messages).
    :param tool: the tool's name.
    :param parameters: the tool's parameters schema.
    :param closers: the call's and the section's closing markers (a raw value
        must not hold them).
    """

    def __init__(self, rules: RuleSet, *, family: str, tool: str, parameters: Mapping[str, Any],
                 closers: Sequence[str] = ()) -> None:
        self.rules = rules
        self.family = family
        self.tool = tool
        self.parameters = parameters
        self.closers = tuple(c for c in closers if c)
        properties = parameters.get("properties")
        self.properties: Mapping[str, Any] = properties if isinstance(properties, Mapping) else {}
        self.required = set(parameters.get("required") or ())
        self.json = JsonValues(rules, family=family, tool=tool, root=parameters)
        # writers by the markers their values avoid: the parameters that share them
        # share the rules of the definitions they refer to
        self._tagged_writers: dict[tuple[str, ...], JsonValues] = {}
        self._nested_writers: dict[str, Any] = {}
        # the arguments object is written from its properties, and a string parameter
        # of a tagged or pythonic call as raw text: a keyword that would shape either
        # some other way cannot be left out silently
        self._refuse_keywords(parameters, "/")
        for name, schema in self.properties.items():
            self._refuse_keywords(schema, f"/properties/{name}")

    def _refuse_keywords(self, schema: Any, path: str) -> None:
        for keyword in schema if isinstance(schema, Mapping) else ():
            if keyword in REFUSED:
                raise GrammarSchemaError(
                    f"{self.family}: tool {self.tool!r}, {path}: the grammar cannot express "
                    f"this keyword ({keyword!r}); no grammar can constrain it. Simplify the "
                    "schema, or use tool_choice='auto' without a grammar.",
                    family=self.family, tool=self.tool, path=path, keyword=keyword)

    def _bad_name(self, name: str, what: str) -> GrammarSchemaError:
        return GrammarSchemaError(
            f"{self.family}: {what} {name!r} of tool {self.tool!r} cannot be written in this "
            "family's markup (its parser would not read it back)",
            family=self.family, tool=self.tool, path=f"/properties/{name}", keyword="name")

    # -- JSON objects ----------------------------------------------------------------

    def json_object(self) -> str:
        """The arguments as one JSON object of the declared parameters.

        With no declared parameters it is ``{}``, unless ``additionalProperties``
        admits other keys (``true`` or a schema; the dispatcher refuses undeclared
        keys only when it is absent or ``false``): then any keys, values of that schema.
        """
        if not self.properties and not self.parameters.get("additionalProperties", False):
            return '"{}"'
        return self.json.object(self.parameters, "")

    # -- tagged pairs ------------------------------------------------------------------

    def tagged(self, args: TaggedArguments) -> str:
        """The name/value pairs of one call, in the declared order."""
        members = []
        for name, schema in self.properties.items():
            if not valid_name(name):
                raise self._bad_name(name, "parameter")
            members.append((self._pair_open(args, name, schema),
                            self._pair_value(args, name, schema), name in self.required))
        if not members:
            return ""
        separator = sequence(GAP, literal(args.separator.strip())) \
            if args.separator.strip() else ""
        return self.json.members(members, separator=separator, lead=GAP,
                                 hint=f"{self.tool}-args")

    def _is_string(self, schema: Any) -> bool:
        return schema_types(schema, self.parameters) in _STRING_ONLY

    def _kind(self, args: TaggedArguments, schema: Any) -> str:
        return "string" if self._is_string(schema) else "json"

    def _pair_open(self, args: TaggedArguments, name: str, schema: Any) -> str:
        kind = self._kind(args, schema)
        header = args.header
        kind_value = ""
        if "kind" in header.attributes or any("{kind}" in p for p in header.patterns):
            kind_value = _kind_value(header.kinds, kind, schema, self.parameters)
        end = _header_end(args, kind)
        value_open = sequence(GAP, literal(args.value_open)) if args.value_open else ""
        return sequence(literal(args.open), header_text(header, name, kind_value=kind_value),
                        literal(end), value_open)

    def _pair_value(self, args: TaggedArguments, name: str, schema: Any) -> str:
        kind = self._kind(args, schema)
        close = args.close_for(kind).replace("{name}", name)
        words = [close, args.open, *self.closers]
        if args.nested:
            words.append(args.nested)
        if args.cdata:
            words.append(_CDATA)
        words = [w for w in dict.fromkeys(words) if w]
        layout = "\n" if args.trim_newline else ""
        if args.nested and kind != "string":
            value = self._nested(args.nested, schema, f"/properties/{name}")
        elif kind == "string":
            value = self._raw_string(schema, words, after=layout + close,
                                     hint=f"{self.tool}-{name}", args=args)
        else:
            value = self._tagged_json(schema, words, f"/properties/{name}")
        return sequence(literal(layout), value, literal(layout), literal(close))

    def _raw_string(self, schema: Any, words: list[str], *, after: str, hint: str,
                    args: TaggedArguments) -> str:
        """A raw string value. Where a newline on both sides of a value is layout (the
        template writes none there), a member beginning and ending with one is written
        with that layout around it, and a length-bounded value never begins with one,
        so the parser reads back exactly what the grammar let through."""
        enum = _string_enum(schema, self.parameters)
        if enum is not None:
            written = [f"\n{v}\n" if args.reads_as_layout(v) else v for v in enum]
            kept = [literal(v) for v in written if _fits(v, words, after)]
            if not kept:
                raise GrammarSchemaError(
                    f"{self.family}: no value of {hint!r} can be written inside this markup",
                    family=self.family, tool=self.tool, keyword="enum")
            return alternatives(*kept)
        low, high = _lengths(schema, self.parameters)
        if low or high is not None:
            return bounded_text(self.rules, words, low, high,
                                not_first="" if args.trim_newline else "\n")
        return avoiding_text(self.rules, words, hint=f"{hint}-text", after=after)

    def _tagged_json(self, schema: Any, words: list[str], path: str) -> str:
        key = tuple(words)
        writer = self._tagged_writers.get(key)
        if writer is None:
            writer = JsonValues(self.rules, family=self.family, tool=self.tool,
                                root=self.parameters, string_excluded=first_chars(words),
                                literal_ok=lambda text: not any(w in text for w in key))
            self._tagged_writers[key] = writer
        return writer.value(schema, path)

    def _nested(self, ns: str, schema: Any, path: str) -> str:
        """A value written as nested elements (``ns<key>...ns</key>``, lists as ``item``)."""
        writer = self._nested_writers.get(ns)
        if writer is None:
            writer = NestedValues(self.rules, ns=ns, family=self.family, tool=self.tool,
                                  root=self.parameters)
            self._nested_writers[ns] = writer
        value: str = writer.value(schema, path)
        return value

    # -- pythonic calls ----------------------------------------------------------------

    def pythonic(self, *, raw_strings: bool) -> str:
        """``name(key=value, ...)`` for this tool."""
        if not _PY_NAME.fullmatch(self.tool) or self.tool.endswith(".call"):
            raise GrammarSchemaError(
                f"{self.family}: tool name {self.tool!r} is not a Python name; a pythonic call "
                "cannot carry it", family=self.family, tool=self.tool, keyword="name")
        members = []
        for name, schema in self.properties.items():
            if not _PY_KEYWORD.fullmatch(name):
                raise self._bad_name(name, "parameter")
            if raw_strings and self._is_string(schema):
                value = self._quoted_raw(schema)
            else:
                value = self.json.value(schema, f"/properties/{name}")
            members.append((literal(f"{name}="), value, name in self.required))
        inner = self.json.members(members, separator='", "', hint=f"{self.tool}-kwargs") \
            if members else ""
        return sequence(literal(f"{self.tool}("), inner, '")"')

    def _quoted_raw(self, schema: Any) -> str:
        enum = _string_enum(schema, self.parameters)
        if enum is not None:
            kept = [literal(f"'{v}'") for v in enum if "'" not in v]
            if not kept:
                raise GrammarSchemaError(
                    f"{self.family}: every value of an enum of {self.tool!r} holds a quote, "
                    "which a raw pythonic string cannot", family=self.family, tool=self.tool,
                    keyword="enum")
            return alternatives(*kept)
        low, high = _lengths(schema, self.parameters)
        return sequence('"\'"', bounded_text(self.rules, ["'"], low, high), '"\'"')


def _header_end(args: TaggedArguments, kind: str) -> str:
    """The header's end marker for a value of ``kind`` (one that implies it, or a neutral one)."""
    neutral = ""
    for marker, implied in args.header_end.items():
        if implied == kind:
            return marker
        if implied is None and not neutral:
            neutral = marker
    return neutral or next(iter(args.header_end), "")


def _kind_value(kinds: Mapping[str, str], kind: str, schema: Any, root: Any) -> str:
    """The header's spelling of a value kind (``string="true"``, ``type="integer"``)."""
    for spelling, meaning in kinds.items():
        if spelling != "*" and meaning == kind:
            return spelling
    if kinds.get("*") == kind:
        types = sorted(schema_types(schema, root) - {"null", "string"})
        return types[0] if types else "object"
    return kind


def _string_enum(schema: Any, root: Any) -> list[str] | None:
    """The texts of a string parameter's ``enum``/``const`` (``null`` written ``null``)."""
    if not isinstance(schema, Mapping):
        return None
    values = schema.get("enum")
    if "const" in schema:
        values = [schema["const"]]
    if isinstance(values, list) and all(isinstance(v, str) or v is None for v in values):
        return ["null" if v is None else v for v in values]
    return None


def _fits(value: str, words: Sequence[str], after: str) -> bool:
    """No marker occurs in ``value + after`` starting inside ``value``."""
    text = value + after
    for word in words:
        at = text.find(word)
        if 0 <= at < len(value):
            return False
    return True


def _lengths(schema: Any, root: Any) -> tuple[int, int | None]:
    if not isinstance(schema, Mapping):
        return 0, None
    low = schema.get("minLength")
    high = schema.get("maxLength")
    low = low if isinstance(low, int) and not isinstance(low, bool) and low > 0 else 0
    high = high if isinstance(high, int) and not isinstance(high, bool) and high >= 0 else None
    return low, high
