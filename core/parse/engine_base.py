"""The state of one reply's parse, and how each scope of it ends.

:class:`ParseState` is what :class:`~toolwire.parse.engine.CallParser` keeps between
deltas (the cursor's state, the text held back, the call being read) and the
transitions every scanner shares: a call that is complete, a section that ends,
text that was not a call after all (text plus a diagnostic, then parsing goes on
after the scope's closing marker), and the end of the reply. The scanners of each
state are the engine's.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..events import DiagnosticEvent, Event, TextEvent, ToolCallEndEvent
from ..vocabulary.schema import ToolSchemaIndex
from .compiled import compile_format
from .readers import BodyReader, CallContext, CallNumbering
from .record import CallFormat
from .streaming import HeldWhitespace
from .tagged_reader import TaggedArgsReader

__all__ = ["ParseState"]

# states
TEXT, BLOCK, SECTION, HEADER, BODY, AFTER_CALL, AFTER_CALLS, MALFORMED = range(8)


class ParseState:
    """One reply's parse state for a :class:`CallFormat`, and the scope transitions.

    :param fmt: the family's markup.
    :param tools: ``{tool name: parameters schema}`` for typing values.
    :param first_index: the index of the first call (a caller embedding this
        parser in a larger one numbers calls across it).
    """

    def __init__(self, fmt: CallFormat, tools: Mapping[str, Any], *,
                 first_index: int = 0) -> None:
        self._fmt = fmt
        self._c = compile_format(fmt)
        self._schemas = ToolSchemaIndex(tools)
        self._numbering = CallNumbering(first_index)
        self._state = TEXT
        self._pending = ""
        self._held = HeldWhitespace()
        self._lead = False
        self._at_start = fmt.at_start
        self._header_at_start = False
        self._in_section = False
        self._section_calls = 0
        self._made_call = False
        self._separator = ""
        self._raw: list[str] = []
        self._failure = ""
        self._message = ""
        self._reader: BodyReader | None = None
        self._call: CallContext | None = None
        self._block_kind = ""
        self._block_close = self._c.call_close
        self._cut = False

    @property
    def calls_started(self) -> int:
        """The index the next call would get."""
        return self._numbering.next

    def _hold(self, data: str, pos: int) -> int:
        self._pending = data[pos:]
        return -1

    def _take(self, data: str, start: int, end: int) -> None:
        if end > start:
            self._raw.append(data[start:end])

    def _emit_text(self, text: str, out: list[Event]) -> None:
        chunk = self._held.push(text)
        if chunk:
            out.append(TextEvent(chunk))

    def _begin_scope(self, token: str) -> None:
        """An opening marker: what was held before it is its separator, unless it fails."""
        self._separator = self._held.release()
        self._raw = [token] if token else []

    def _end_section(self) -> None:
        self._in_section = False
        self._raw = []
        self._state = TEXT
        self._lead = True

    def _to_text(self, out: list[Event]) -> None:
        """What was read since the opening marker is plain text (no diagnostic)."""
        text = self._separator + "".join(self._raw)
        self._separator = ""
        self._raw = []
        self._in_section = False
        self._state = TEXT
        self._emit_text(text, out)

    def _cut_open(self) -> bool:
        """The token limit cut the reply before anything marked the call's end: its
        closing marker (without one, a JSON object's or literal's last bracket ends it)."""
        return self._cut and (bool(self._fmt.call_close)
                              or isinstance(self._reader, TaggedArgsReader))

    def _truncated(self, pos: int) -> int:
        """The token limit cut the reply inside a call: it is text, never run."""
        assert self._call is not None
        name = self._call.name
        return self._to_malformed(pos, "truncated_call", f"the reply was cut by the token "
                                  f"limit before call {name!r} was closed; shown as text")

    def _complete_call(self, out: list[Event]) -> None:
        call = self._call
        reader = self._reader
        assert call is not None and reader is not None
        out.extend(reader.notes)
        out.append(ToolCallEndEvent(name=call.name, arguments=reader.arguments or {},
                                 id=call.call_id, index=call.index))
        self._call = None
        self._reader = None
        self._made_call = True
        self._section_calls += 1
        self._separator = ""  # a call came of it: the blanks before the marker were markup
        self._raw = []
        if self._in_section:
            self._state = SECTION
        else:
            self._state = TEXT
            self._lead = True

    def _to_malformed(self, pos: int, code: str, message: str) -> int:
        self._state = MALFORMED
        self._failure = code
        self._message = message
        self._call = None
        self._reader = None
        return pos

    def _scan_malformed(self, data: str, pos: int, out: list[Event], eof: bool) -> int:
        """Skip to the scope's closing marker (kept in the text) or the next opening one."""
        if not self._c.scope_close:
            self._flush_malformed(out)
            return pos
        match = self._c.resync.find(data, pos)
        if match is not None:
            stop = match.start() if match.group(0) in self._c.openers else match.end()
            self._take(data, pos, stop)
            self._flush_malformed(out)
            return stop
        safe = len(data) if eof else self._c.resync.partial(data, pos)
        self._take(data, pos, safe)
        if eof:
            self._flush_malformed(out)
            return len(data)
        return self._hold(data, safe) if safe < len(data) else len(data)

    def _flush_malformed(self, out: list[Event]) -> None:
        raw = "".join(self._raw)
        text = self._separator + raw
        self._separator = ""
        self._raw = []
        if text:
            self._held.drop()
            out.append(TextEvent(text))
        out.append(DiagnosticEvent(self._failure or "malformed_call", self._message or
                                   f"not a call in the {self._fmt.family} format; shown as text",
                                   raw))
        self._failure = self._message = ""
        self._in_section = False
        self._state = TEXT

    def _finish(self, out: list[Event]) -> None:
        state = self._state
        if state == AFTER_CALL and self._call is not None:
            if self._cut_open():
                self._truncated(0)
            else:
                self._complete_call(out)
        elif state == SECTION:
            if self._section_calls:
                self._end_section()  # the calls are complete; the section's end was cut off
            elif not self._fmt.strict_open:
                self._to_text(out)
            else:
                self._to_malformed(0, "unclosed_call", "the reply ended inside a tool-call "
                                                       "section; shown as text")
        elif state == HEADER:
            if self._header_at_start or not self._fmt.strict_open:
                self._header_at_start = False
                self._to_text(out)
            elif self._section_calls and not self._fmt.call_open:
                self._end_section()
            else:
                self._to_malformed(0, "unclosed_call", "the reply ended inside a tool call; "
                                                       "shown as text")
        if self._state == MALFORMED:
            self._failure = self._failure or "unclosed_call"
            self._flush_malformed(out)
        if self._state == BLOCK:
            if self._block_kind == "reasoning":
                self._held.drop()  # blanks at the end of unclosed reasoning are not text
            self._state = TEXT
        rest = self._held.release()
        if rest and not self._lead:
            out.append(TextEvent(rest))
