"""A family's calls as GBNF, written from its :class:`~toolwire.parse.record.CallFormat`.

The grammar follows the record the parser runs, so every sentence of it is a
reply the parser reads back as calls:

* the markers are each marker's first spelling (the one the template
  writes); where the parser skips blanks between two markers the grammar
  allows one newline;
* several calls are written both ways the parser reads them: one section per
  call (Qwen, Hermes) or all calls in one section (Kimi, DeepSeek, a JSON list);
* a header is the record's first header pattern (or its XML attributes) with
  the tool's name; tool names are only the offered tools';
* the arguments are :mod:`toolwire.grammar.arguments`'s.

A record whose arguments the grammar cannot write (a
:class:`~toolwire.parse.record.GrammarArguments` hook's own syntax) raises
:class:`~toolwire.errors.GrammarFormatError`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ..errors import GrammarFormatError, GrammarSchemaError
from ..parse.markers import valid_name
from ..parse.record import (
    CallFormat,
    CallObjects,
    GrammarArguments,
    JsonArguments,
    PythonicCalls,
    TaggedArguments,
)
from .arguments import GAP, ArgumentWriter, header_text
from .gbnf import RuleSet, alternatives, literal, optional, repetition, sequence
from .json_values import json_text

__all__ = ["CallsWriter"]

_FENCE_OPEN = '"```json\\n"'
_FENCE_CLOSE = '"\\n```"'


class CallsWriter:
    """Writes the calls of one family for some tools.

    :param fmt: the family's record.
    :param tools: ``(name, parameters schema)`` of the tools a call may use.
    :param rules: where rules go.
    :param end_markers: texts of the runtime's end-of-generation tokens: a
        closing marker among them is optional at the very end (the model ends its
        turn with that token, which never reaches the text).
    """

    def __init__(self, fmt: CallFormat, tools: Sequence[tuple[str, Mapping[str, Any]]],
                 rules: RuleSet, *, end_markers: Sequence[str] = ()) -> None:
        self.fmt = fmt
        self.family = fmt.family
        self.rules = rules
        self.end_markers = frozenset(end_markers)
        for kind in fmt.kinds:
            if isinstance(kind, GrammarArguments):
                raise GrammarFormatError(
                    f"{fmt.family}: its arguments are written in the family's own syntax "
                    f"({kind.name!r}, read by a hook), which no grammar is generated for",
                    family=fmt.family, feature="GrammarArguments")
        self.header_kind = next((k for k in fmt.kinds
                                 if not isinstance(k, CallObjects | PythonicCalls)), None)
        self.whole = [k for k in fmt.kinds if isinstance(k, CallObjects | PythonicCalls)]
        if not tools:
            raise GrammarSchemaError(f"{fmt.family}: no tools to call", family=fmt.family,
                                     keyword="tools")
        closers = (*fmt.call_close, *fmt.section_close)
        self.writers = [ArgumentWriter(rules, family=fmt.family, tool=name, parameters=params,
                                       closers=closers) for name, params in tools]
        for name, _ in tools:
            if name in fmt.text_headers:
                raise GrammarSchemaError(
                    f"{fmt.family}: a call of a tool named {name!r} reads as text in this "
                    "family", family=fmt.family, tool=name, keyword="name")

    # -- one call of any allowed tool ----------------------------------------------------

    def _header_call(self, writer: ArgumentWriter, opened: bool) -> str:
        key = ("header-call", writer.tool, opened)
        known = self.rules.memo.get(key)
        if known is None:
            known = self.rules.memo[key] = self._write_header_call(writer, opened)
        return known

    def _write_header_call(self, writer: ArgumentWriter, opened: bool) -> str:
        fmt = self.fmt
        kind = self.header_kind
        if not valid_name(writer.tool):
            raise GrammarSchemaError(
                f"{fmt.family}: tool name {writer.tool!r} cannot be written in this family's "
                "markup (its parser would not read it back)", family=fmt.family,
                tool=writer.tool, keyword="name")
        if isinstance(kind, JsonArguments):
            args = writer.json_object()
            if kind.fence:
                args = alternatives(args, sequence(_FENCE_OPEN, args, _FENCE_CLOSE))
        elif isinstance(kind, TaggedArguments):
            args = sequence(writer.tagged(kind), GAP if fmt.call_close else "")
        else:  # pragma: no cover - refused in __init__
            raise GrammarFormatError(f"{fmt.family}: unknown arguments", family=fmt.family)
        return self.rules.add(f"call-{writer.tool}", sequence(
            literal(fmt.call_open[0]) if fmt.call_open and not opened else "",
            header_text(fmt.header, writer.tool),
            literal(fmt.header_end[0]) if fmt.header_end else "",
            args))

    def _close(self, markers: tuple[str, ...], *, last: bool) -> str:
        if not markers:
            return ""
        close = literal(markers[0])
        return optional(close) if last and markers[0] in self.end_markers else close

    def header_call(self, *, last: bool = False, opened: bool = False) -> str:
        """One call in the family's call markup, of any allowed tool (``opened``: its
        opening marker already written)."""
        name = self.rules.add("call-opened" if opened else "call", alternatives(
            *(self._header_call(w, opened) for w in self.writers)))
        return sequence(name, self._close(self.fmt.call_close, last=last))

    def _object(self, shape: CallObjects, writer: ArgumentWriter) -> str:
        args = writer.json_object()
        if shape.named:
            body = sequence(literal("{" + json_text(writer.tool) + ": "), args, '"}"')
        else:
            body = sequence(literal("{" + json_text(shape.name_keys[0]) + ": "
                                    + json_text(writer.tool) + ", "
                                    + json_text(shape.args_keys[0]) + ": "), args, '"}"')
        return self.rules.add(f"object-{writer.tool}", body)

    def _objects(self, shape: CallObjects, limit: int | None) -> str:
        one = self.rules.add("call-object", alternatives(
            *(self._object(shape, w) for w in self.writers)))
        more = self._more(f'", " {one}', None if limit is None else limit - 1)
        if shape.opened_list:
            body = sequence(one, more, '"]"')
        elif shape.container == "object":
            body = one
        elif shape.container == "list":
            body = sequence('"["', one, more, '"]"')
        else:
            body = alternatives(one, sequence('"["', one, more, '"]"'))
        return sequence(_FENCE_OPEN, body, _FENCE_CLOSE) if shape.fence else body

    def _pythonic(self, syntax: PythonicCalls, limit: int | None) -> str:
        one = self.rules.add("call-python", alternatives(
            *(self.rules.add(f"python-{w.tool}", w.pythonic(raw_strings=syntax.raw_strings))
              for w in self.writers)))
        more = self._more(f'", " {one}', None if limit is None else limit - 1)
        return sequence('"["', one, more, '"]"')

    # -- a section's body, sections, and the reply's calls ------------------------------

    def body(self, limit: int | None, *, last: bool) -> str:
        """What one section holds: 1..``limit`` calls in any of the record's syntaxes."""
        options = []
        for kind in self.whole:
            options.append(self._objects(kind, limit) if isinstance(kind, CallObjects)
                           else self._pythonic(kind, limit))
        if self.header_kind is not None:
            sep = literal(self.fmt.separator.strip()) if self.fmt.separator.strip() else ""
            more = sequence(GAP, sep, GAP if sep else "", self.header_call())
            if limit == 1:
                options.append(self.header_call(last=last))
            else:
                options.append(sequence(self.header_call(),
                                        self._more(more, None if limit is None else limit - 2),
                                        optional(sequence(GAP, sep, GAP if sep else "",
                                                          self.header_call(last=last)))))
        return alternatives(*options)

    def _section(self, limit: int | None, *, last: bool, opened: bool = False) -> str:
        fmt = self.fmt
        close = self._close(fmt.section_close, last=last)
        return sequence("" if opened else literal(fmt.section_open[0]), GAP,
                        self.body(limit, last=last and not fmt.section_close),
                        GAP if close else "", close)

    def _more(self, part: str, most: int | None) -> str:
        """Up to ``most`` more of ``part`` (``None``: any number), written as every
        repetition is (:func:`~toolwire.grammar.gbnf.repetition`), so that a large
        ``max_calls`` gives a grammar llama.cpp accepts (a count over
        :data:`~toolwire.grammar.gbnf.MAX_REPEAT` is relaxed to no bound, as a schema's
        counts are)."""
        return repetition(self.rules, part, 0, most, hint="more-calls")

    def _run(self, first: str, first_last: str, middle: str, middle_last: str,
             limit: int | None) -> str:
        """1..``limit`` units: ``first`` (or ``first_last`` alone), then ``middle``s, the
        last one ``middle_last``."""
        if limit == 1:
            return first_last
        if (first, first_last) == (middle, middle_last):
            return sequence(self._more(f"{middle} {GAP}", None if limit is None else limit - 1),
                            middle_last)
        more = self._more(f"{GAP} {middle}", None if limit is None else limit - 2)
        return alternatives(first_last, sequence(first, more, GAP, middle_last))

    def calls(self, limit: int | None, *, opened: str = "") -> str:
        """1..``limit`` calls (``None``: any number), every way the parser reads them.

        :param opened: the opening marker already written (a lazy grammar's
            continuation): the calls that begin with it, without it.
        """
        fmt = self.fmt
        if fmt.max_calls is not None:
            limit = fmt.max_calls if limit is None else min(limit, fmt.max_calls)
        forms = []
        if fmt.section_open and opened in ("", fmt.section_open[0]):
            single = self.rules.add("section", self._section(1, last=False))
            single_last = self.rules.add("section-last", self._section(1, last=True))
            first = self._section(1, last=False, opened=True) if opened else single
            first_last = self._section(1, last=True, opened=True) if opened else single_last
            forms.append(self._run(first, first_last, single, single_last, limit))
            if limit != 1:
                forms.append(self._section(limit, last=True, opened=bool(opened)))
        standalone = (not fmt.section_open or fmt.implicit_section) and fmt.call_open \
            and self.header_kind is not None
        if standalone and opened in ("", fmt.call_open[0]):
            call = self.rules.add("standalone-call", self.header_call())
            call_last = self.header_call(last=True)
            first = self.header_call(opened=True) if opened else call
            first_last = self.header_call(last=True, opened=True) if opened else call_last
            forms.append(self._run(first, first_last, call, call_last, limit))
        if fmt.at_start and self.whole and not opened:
            forms.append(self.bare(limit))
        if not forms:
            raise GrammarFormatError(f"{fmt.family}: its calls have no opening marker the "
                                     "grammar can write", family=fmt.family,
                                     feature="opening marker")
        return self.rules.add("calls-after" if opened else "calls", alternatives(*forms))

    def bare(self, limit: int | None) -> str:
        """Calls without any marker, as the reply's start (Llama 3's bare JSON)."""
        return self.rules.add("bare-calls", alternatives(*(
            self._objects(k, limit) if isinstance(k, CallObjects) else self._pythonic(k, limit)
            for k in self.whole)))

    def openers(self) -> tuple[str, ...]:
        """The markers that open calls (a lazy grammar starts at one of them)."""
        fmt = self.fmt
        found: list[str] = []
        if fmt.section_open:
            found.append(fmt.section_open[0])
        if (not fmt.section_open or fmt.implicit_section) and fmt.call_open \
                and self.header_kind is not None:
            found.append(fmt.call_open[0])
        return tuple(dict.fromkeys(found))

    def bare_starts(self) -> str:
        """The characters bare calls begin with at the reply's start (``""``: none)."""
        fmt = self.fmt
        if not (fmt.at_start and self.whole):
            return ""
        chars = set()
        for kind in self.whole:
            if isinstance(kind, PythonicCalls):
                chars.add("[")
            elif kind.fence:
                chars.add("`")
            else:
                chars.update({"{"} if kind.container == "object" else
                             {"["} if kind.container == "list" else {"{", "["})
        return "".join(sorted(chars))
