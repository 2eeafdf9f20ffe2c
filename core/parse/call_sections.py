"""A streaming parser for replies that are text with marked tool-call sections.

Most tool-call formats are prose in which a *marker* (``<tool_call>``,
``[TOOL_CALLS]``, ``<|START_ACTION|>``...) opens a section that holds calls.
:class:`SectionParser` does what all of them share: it scans the text with a
cursor for the family's markers, holds back only a tail that may be the start
of one, removes end-of-turn tokens the model may echo, hands each section to a
*section reader* the family provides, and turns a section that is not what the
format expects back into text plus a :class:`~toolwire.events.DiagnosticEvent`.
A family's plugin supplies the markers and the readers (see
:mod:`toolwire.parse.json_calls` for readers of JSON call objects and lists).

A section reader is fed ``(data, pos, out, eof)`` and answers ``(status, pos)``:

* ``(MORE, p)``: everything before ``p`` is consumed, ``data[p:]`` (a short tail:
  a marker cut short) must be given again with the next delta;
* ``(DONE, p)``: the section ended well; text resumes at ``p``;
* ``(FAIL, p)``: the text is not this format; what the reader consumed (its
  ``raw``) becomes text, and scanning resumes at ``p``.

At ``eof`` a reader must answer ``DONE`` or ``FAIL``. Readers, like the parser,
never scan consumed text again.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Final, Protocol

from ..conversation.schema import ToolSchemaIndex
from ..events import DiagnosticEvent, Event, TextEvent, ToolCallEvent
from .streaming import HeldWhitespace

__all__ = [
    "DONE",
    "FAIL",
    "MATCH",
    "MORE",
    "NOT_A_CALL",
    "NO_MATCH",
    "PARTIAL",
    "CallNumbering",
    "SectionParser",
    "SectionReader",
    "feed_nested",
    "match_literal",
    "partial_marker_start",
    "read_name",
    "skip_blanks",
]

MORE: Final = 0
DONE: Final = 1
FAIL: Final = 2

NOT_A_CALL: Final = "not_a_call"
"""A reader's ``failure`` when the section was plainly text (no diagnostic)."""

_BLANKS = re.compile(r"[ \t\r\n]*")
_NAME_CHARS = re.compile(r"[^\s<>\[\]{}()\"'`|｜,;=]*")
_MAX_NAME: Final = 256

# match_literal results
MATCH: Final = 1
PARTIAL: Final = 0
NO_MATCH: Final = -1


def skip_blanks(data: str, pos: int) -> int:
    """The first position at or after ``pos`` that is not a blank."""
    match = _BLANKS.match(data, pos)
    return match.end() if match else pos


def match_literal(data: str, pos: int, literal: str, eof: bool) -> int:
    """Whether ``literal`` is at ``pos``: MATCH, PARTIAL (cut short, more may come) or NO_MATCH."""
    if data.startswith(literal, pos):
        return MATCH
    rest = len(data) - pos
    if not eof and rest < len(literal) and literal.startswith(data[pos:]):
        return PARTIAL
    return NO_MATCH


def read_name(data: str, pos: int, terminators: Sequence[str], eof: bool
              ) -> tuple[int, str, int]:
    """Read a tool name written as markup, ending at one of ``terminators``.

    :returns: ``(MATCH, name, end)`` with ``end`` after the terminator,
        ``(PARTIAL, "", pos)`` when more text is needed, or ``(NO_MATCH, "", k)``
        with ``k`` where the text stopped being a name.
    """
    match = _NAME_CHARS.match(data, pos)
    end = match.end() if match else pos
    if end - pos > _MAX_NAME:
        return NO_MATCH, "", pos + _MAX_NAME
    if end >= len(data):
        return (NO_MATCH, "", end) if eof else (PARTIAL, "", pos)
    for term in terminators:
        found = match_literal(data, end, term, eof)
        if found == MATCH:
            if end == pos:
                return NO_MATCH, "", pos
            return MATCH, data[pos:end], end + len(term)
        if found == PARTIAL:
            return PARTIAL, "", pos
    return NO_MATCH, "", end


def partial_marker_start(data: str, start: int, markers: Sequence[str],
                         firsts: re.Pattern[str], longest: int) -> int:
    """Where a trailing, incomplete prefix of one of ``markers`` begins (``len(data)``: none).

    Only the last ``longest - 1`` characters are looked at, and only where
    ``firsts`` (a class of the markers' first characters) matches.
    """
    n = len(data)
    k = max(start, n - longest + 1)
    while True:
        found = firsts.search(data, k)
        if found is None:
            return n
        k = found.start()
        tail = data[k:]
        for marker in markers:
            if len(marker) > len(tail) and marker.startswith(tail):
                return k
        k += 1


class CallNumbering:
    """Hands out the index of each call of a reply, in order (0, 1, ...)."""

    __slots__ = ("next",)

    def __init__(self) -> None:
        self.next = 0

    def take(self) -> int:
        """The index of a call that has just begun."""
        index = self.next
        self.next += 1
        return index


class SectionReader(Protocol):
    """Reads one call section; see the module docstring for the protocol.

    :ivar raw: the text consumed and not yet accounted for by a complete call;
        it becomes text when the section fails.
    :ivar failure: the diagnostic code of a failure (:data:`NOT_A_CALL` for
        text that merely looked like a section).
    :ivar message: the diagnostic message of a failure.
    :ivar started: how many calls the reader has begun (start events emitted).
    """

    raw: list[str]
    failure: str
    message: str
    started: int

    def feed(self, data: str, pos: int, out: list[Event], eof: bool) -> tuple[int, int]:
        """Consume from ``pos``; return ``(status, pos)``."""
        ...


class _Owner(Protocol):
    raw: list[str]
    started: int


def feed_nested(owner: _Owner, sub: SectionReader, data: str, pos: int,
                out: list[Event], eof: bool) -> tuple[int, int]:
    """Let ``owner`` delegate to a nested reader: feed it, count the calls it starts,
    and on failure take over its raw text (which becomes text with the section's)."""
    before = sub.started
    status, at = sub.feed(data, pos, out, eof)
    owner.started += sub.started - before
    if status == FAIL:
        owner.raw.extend(sub.raw)
    return status, at


_TEXT = 0
_SECTION = 1


class SectionParser:
    """Text with tool-call sections: the shared scanning loop of marker-based families.

    :param tools: ``{tool name: parameters schema}`` for the reply.
    :param family: the family name, used in diagnostics.
    :param openers: the markers that open a section; :meth:`open_section` is
        called with the one found.
    :param drops: end-of-turn or role tokens removed from the text wherever
        they appear (a model may echo them; a template may render them between
        the calls and the content).
    :param at_start: call :meth:`open_at_start` once, at the first non-blank
        character of the reply (for formats whose call *is* the reply, e.g.
        Llama 3's bare JSON).
    """

    def __init__(self, tools: Mapping[str, Any], *, family: str,
                 openers: Iterable[str], drops: Iterable[str] = (),
                 at_start: bool = False) -> None:
        self.schemas = ToolSchemaIndex(tools)
        self.numbering = CallNumbering()
        self.family = family
        self._openers = frozenset(openers)
        self._drops = frozenset(drops)
        markers = sorted(self._openers | self._drops, key=lambda m: (-len(m), m))
        self._markers = tuple(markers)
        self._marker_re = re.compile("|".join(re.escape(m) for m in markers))
        self._firsts = re.compile("[" + "".join(sorted({re.escape(m[0]) for m in markers})) + "]")
        self._longest = max(len(m) for m in markers)
        self._state = _TEXT
        self._at_start = at_start
        self._pending = ""
        self._held = HeldWhitespace()
        self._lead = False
        self._reader: SectionReader | None = None
        self._section_blanks = ""
        self._section_calls = False

    # -- what a family provides ------------------------------------------------------

    def open_section(self, marker: str) -> SectionReader | None:
        """A reader for the section that ``marker`` opens (``None``: the marker is text)."""
        raise NotImplementedError

    def open_at_start(self, data: str, pos: int, eof: bool) -> SectionReader | bool | None:
        """At the reply's first non-blank character: a reader, ``None`` (text), or
        ``False`` to wait for more text (only when not ``eof``)."""
        return None

    # -- the StreamParser protocol ---------------------------------------------------

    def feed(self, text: str) -> list[Event]:
        """Consume a delta; return the events it makes certain."""
        if (self._state == _TEXT and not self._pending and not self._lead
                and not self._at_start and text and self._firsts.search(text) is None):
            chunk = self._held.push(text)  # prose: the common case
            return [TextEvent(chunk)] if chunk else []
        out: list[Event] = []
        try:
            self._run(self._pending + text, out, eof=False)
        except Exception as exc:  # a parser bug must never take down a chat
            out.append(DiagnosticEvent("parser_error", f"{self.family} parser failed: {exc!r}"))
        return out

    def close(self) -> list[Event]:
        """End of reply: settle what is held and flush it."""
        out: list[Event] = []
        try:
            self._run(self._pending, out, eof=True)
            rest = self._held.release()
            if rest and not self._lead:
                out.append(TextEvent(rest))
        except Exception as exc:
            out.append(DiagnosticEvent("parser_error", f"{self.family} parser failed: {exc!r}"))
        return out

    # -- the loop --------------------------------------------------------------------

    def _run(self, data: str, out: list[Event], eof: bool) -> None:
        self._pending = ""
        pos = 0
        n = len(data)
        while pos < n or (eof and self._state == _SECTION):
            if self._state == _SECTION:
                pos = self._scan_section(data, pos, out, eof)
            else:
                pos = self._scan_text(data, pos, out, eof)
            if pos < 0:
                return

    def _hold(self, data: str, pos: int) -> int:
        self._pending = data[pos:]
        return -1

    def _scan_text(self, data: str, pos: int, out: list[Event], eof: bool) -> int:
        if self._lead or self._at_start:
            k = skip_blanks(data, pos)
            if self._at_start and k > pos:
                self._held.push(data[pos:k])
            pos = k
            if pos >= len(data):
                return pos
            self._lead = False
            if self._at_start:
                found = self.open_at_start(data, pos, eof)
                if found is False:
                    return self._hold(data, pos)
                self._at_start = False
                if isinstance(found, bool) or found is None:
                    return pos
                self._begin_section(found, "")
                return pos
        match = self._marker_re.search(data, pos)
        if match is None:
            safe = len(data) if eof else partial_marker_start(
                data, pos, self._markers, self._firsts, self._longest)
            self._emit_text(data[pos:safe], out)
            return self._hold(data, safe) if safe < len(data) else len(data)
        k = match.start()
        marker = match.group()
        self._emit_text(data[pos:k], out)
        end = match.end()
        if marker in self._drops:
            self._held.drop()
            return end
        reader = self.open_section(marker)
        if reader is None:
            self._emit_text(marker, out)
            return end
        self._begin_section(reader, marker)
        return end

    def _begin_section(self, reader: SectionReader, marker: str) -> None:
        self._section_blanks = self._held.release()
        self._section_calls = False
        if marker:
            reader.raw.insert(0, marker)
        self._reader = reader
        self._state = _SECTION

    def _emit_text(self, text: str, out: list[Event]) -> None:
        chunk = self._held.push(text)
        if chunk:
            out.append(TextEvent(chunk))

    def _scan_section(self, data: str, pos: int, out: list[Event], eof: bool) -> int:
        reader = self._reader
        assert reader is not None
        before = len(out)
        status, at = reader.feed(data, pos, out, eof)
        if not self._section_calls:
            self._section_calls = any(type(e) is ToolCallEvent for e in out[before:])
        if status == MORE:
            if eof:  # a reader must settle at the end; treat a stuck one as a failure
                status = FAIL
                reader.failure = reader.failure or "unclosed_call"
                at = len(data)
                reader.raw.append(data[pos:])
            else:
                return self._hold(data, at)
        self._state = _TEXT
        self._reader = None
        if status == DONE:
            self._section_blanks = ""
            self._lead = True
            return at
        raw = "".join(reader.raw)
        # the blanks before the marker were a separator only if a call came of it
        blanks = "" if self._section_calls else self._section_blanks
        self._section_blanks = ""
        if blanks or raw:
            out.append(TextEvent(blanks + raw))
        if reader.failure != NOT_A_CALL:
            out.append(DiagnosticEvent(reader.failure or "malformed_call",
                                       reader.message or f"not a call in the {self.family} "
                                       "format; shown as text", raw))
        return at

