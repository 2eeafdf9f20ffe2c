"""The state of one reply's parse, and how each scope of it ends.

:class:`ParseState` is what :class:`~toolwire.parse.engine.CallParser` keeps between
deltas (the cursor's state, the text held back, the call being read) and the
transitions every scanner shares: a call that is complete, a section that ends,
text that was not a call after all (text plus a diagnostic, then parsing goes on
after the scope's closing marker), and the end of the reply. The scanners of each
state are the engine's.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from ..events import DiagnosticEvent, Event, ReasoningEvent, TextEvent, ToolCallEndEvent
from ..vocabulary.schema import ToolSchemaIndex
from .compiled import compile_format
from .markers import NOTHING_HELD, skip_blanks
from .readers import BodyReader, CallContext, CallNumbering, ReaderBase
from .record import CallFormat
from .streaming import HeldWhitespace
from .tagged_reader import TaggedArgsReader

__all__ = ["ParseState"]

_LINE_OBJECT = re.compile(r"\n[ \t]*\{")
_TRAILING_LINE = re.compile(r"\n[ \t]*\Z")

# states
TEXT, BLOCK, SECTION, HEADER, BODY, AFTER_CALL, AFTER_CALLS, MALFORMED = range(8)


class ParseState:
    """One reply's parse state for a :class:`CallFormat`, and the scope transitions.

    :param fmt: the family's markup.
    :param tools: ``{tool name: parameters schema}`` for typing values.
    :param first_index: the index of the first call (a caller embedding this
        parser in a larger one numbers calls across it).
    """

    # slots: the scanners read these on every delta (fast, whatever their number)
    __slots__ = ("_at_start", "_block_close", "_block_kind", "_c", "_call", "_cut", "_failure",
                 "_fmt", "_gap", "_gap_open", "_header_at_start", "_held", "_held_markup",
                 "_implicit", "_in_section", "_lead", "_made_call", "_message", "_numbering",
                 "_pending", "_raw", "_reader", "_reader_holds", "_schemas", "_section_calls",
                 "_section_failures", "_separator", "_state", "_text_seen", "_turn_beginnings",
                 "_turn_cuts", "_turn_cuts_longest", "_turn_ended", "_turn_first", "_turn_from",
                 "_turn_mark", "_turn_search", "_turn_tail", "_turn_watch")

    def __init__(self, fmt: CallFormat, tools: Mapping[str, Any], *,
                 first_index: int = 0) -> None:
        self._fmt = fmt
        self._c = compile_format(fmt)
        self._schemas = ToolSchemaIndex(tools)
        self._numbering = CallNumbering(first_index)
        self._state = TEXT
        self._pending = ""
        # beginnings of markup the scanner that held ``_pending`` back would hold all of
        # back again: a delta that makes ``_pending`` one of them is appended to it, unread
        # (reading it again would end where it began); set where a scanner holds such a
        # beginning back, emptied where any other hold, or none, ends a reading
        self._held_markup = NOTHING_HELD
        self._held = HeldWhitespace()
        self._lead = False
        self._at_start = fmt.at_start
        self._header_at_start = False
        self._in_section = False
        self._section_calls = 0
        self._section_failures = 0  # malformed calls in the section, which goes on after them
        self._implicit = False  # the section was opened by a call's marker (its own missing)
        self._made_call = False
        self._separator = ""
        self._gap = ""  # the blanks before a call that text preceded (see _scan_text)
        self._gap_open = False  # blanks came after that call too
        self._text_seen = False
        self._raw: list[str] = []
        self._failure = ""
        self._message = ""
        self._reader: BodyReader | None = None
        # the reader again where it says what it holds back (a ReaderBase), else None
        self._reader_holds: ReaderBase | None = None
        self._call: CallContext | None = None
        self._block_kind = ""
        self._block_close = self._c.call_close
        self._cut = False
        self._turn_ended = False  # the scope being read ends at an end-of-turn token
        self._turn_tail = False  # what is pending is only the beginning of one, held back
        self._turn_watch = False  # what is pending may begin one: look at the next delta
        self._turn_from = 0  # where in what is pending that beginning starts (when watched)
        # what the family's end-of-turn tokens all begin with ("" when nothing: every delta
        # is looked at), the beginnings of that, its first character (None: the family has no
        # end-of-turn tokens), and the search for a token or a beginning of one ending a text
        self._turn_mark: str = self._c.turn_mark
        self._turn_cuts = self._c.turn_mark_cuts
        self._turn_cuts_longest = self._turn_cuts[::-1]
        self._turn_search = self._c.turn_search
        self._turn_first = self._turn_mark[:1] if self._c.turn_ends else None
        self._turn_beginnings = self._c.turn_ends.prefixes  # (the proper beginnings of one)

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
            self._text_seen = self._text_seen or not chunk.isspace()
            out.append(TextEvent(chunk))

    def _text_at_end(self, data: str, pos: int, out: list[Event]) -> None:
        """The reply's last text. One that ends inside a call's opening marker was cut
        there (a model that ends its turn writes its end token, not half a marker): the
        start of the marker stays text, with a ``truncated_call`` diagnostic holding it
        (where the marker is markup only: a format whose marker may be prose has none)."""
        cut = self._c.opener_set.partial(data, pos) if self._fmt.strict_open else len(data)
        self._emit_text(data[pos:cut], out)
        if cut < len(data):
            tail = data[cut:]
            self._emit_text(tail, out)
            out.append(DiagnosticEvent("truncated_call", f"the reply ended inside a "
                                       f"{self._fmt.family} call's opening marker; shown as "
                                       "text", tail))

    def _scan_block(self, data: str, pos: int, out: list[Event], eof: bool) -> int:
        """A routed block (Solar's ``<|think|>`` and ``<|content|>``): reasoning or text up
        to its closing marker."""
        if self._lead:
            pos = skip_blanks(data, pos)
            if pos >= len(data):
                return pos
            self._lead = False
        close = self._block_close
        match = close.search(data, pos)
        end = match.start() if match is not None else \
            (len(data) if eof else close.partial(data, pos))
        piece = data[pos:end]
        if self._block_kind == "reasoning":
            chunk = self._held.push(piece)
            if chunk:
                out.append(ReasoningEvent(chunk))
        else:
            self._emit_text(piece, out)
        if match is None:
            return self._hold(data, end) if end < len(data) else len(data)
        self._held.drop()
        self._state = TEXT
        self._lead = True
        return match.end()

    def _drop_separator(self) -> None:
        """A call came of the scope: the blanks before its marker were layout, not text.

        They are kept aside as the gap: text before the call and text after it, each
        side with blanks, stay apart by them (``"Checking. <call> Also."`` reads as
        ``"Checking. Also."``, not ``"Checking.Also."``).
        """
        if self._separator and self._text_seen and not self._gap:
            self._gap = self._separator
        self._separator = ""

    def _emit_raw(self, out: list[Event]) -> None:
        """What was read of the scope since its last failure is text, as that failure was
        (the closing marker of a section none of whose calls was read)."""
        raw = "".join(self._raw)
        self._raw = []
        if raw:
            self._held.drop()
            out.append(TextEvent(raw))

    def _dropped(self, raw: str, message: str, out: list[Event]) -> None:
        """Markup that is neither a call nor text (an empty section, a stray closing
        marker): removed, with a ``stray_markup`` diagnostic; blanks go as around a call."""
        self._drop_separator()
        self._raw = []
        self._in_section = self._implicit = False
        self._state = TEXT
        self._lead = True
        out.append(DiagnosticEvent("stray_markup", message, raw))

    def _begin_scope(self, token: str) -> None:
        """An opening marker: what was held before it is its separator, unless it fails."""
        self._separator = self._held.release()
        self._raw = [token] if token else []

    def _end_section(self) -> None:
        self._in_section = False
        self._implicit = False
        self._raw = []
        self._state = TEXT
        self._lead = True

    def _to_text(self, out: list[Event]) -> None:
        """What was read since the opening marker is plain text (no diagnostic)."""
        text = self._separator + "".join(self._raw)
        self._separator = ""
        self._raw = []
        self._in_section = False
        self._implicit = False
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
        self._drop_separator()
        self._gap_open = False  # the blanks after this call are still to come
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
        """Skip to the scope's closing marker (kept in the text) or the next opening one.

        Inside a section the scope is the call: one malformed call never loses the
        well-formed calls after it (see :meth:`_resync_in_section`).
        """
        c = self._c
        if not c.scope_close:
            self._flush_malformed(out)
            return pos
        if self._in_section:
            return self._resync_in_section(data, pos, out, eof)
        match = c.resync.search(data, pos)
        if match is not None:
            stop = match.start() if match.group(0) in c.openers else match.end()
            self._take(data, pos, stop)
            self._flush_malformed(out)
            return stop
        return self._malformed_tail(data, pos, c.resync.partial(data, pos), out, eof)

    def _resync_in_section(self, data: str, pos: int, out: list[Event], eof: bool) -> int:
        """In a section, text that is not a call ends past the call's closing marker, at
        the next call's opening one or the next line's call object (the section goes on
        there), or with the section's closing marker (kept in the text, as it ends)."""
        c = self._c
        match = c.section_resync.search(data, pos)
        line = _LINE_OBJECT.search(data, pos) if c.line_objects else None
        if line is not None and (match is None or line.end() <= match.start()):
            stop = line.end() - 1  # the next line's '{': a call may begin there
            self._take(data, pos, stop)
            self._flush_malformed(out, resume=True)
            return stop
        if match is None:
            safe = c.section_resync.partial(data, pos)
            if c.line_objects:
                blank = _TRAILING_LINE.search(data, pos)
                safe = min(safe, blank.start()) if blank is not None else safe
            return self._malformed_tail(data, pos, safe, out, eof)
        token = match.group(0)
        if token in c.section_openers or (token in c.section_close and token not in
                                          self._fmt.call_close):
            stop = match.start() if token in c.section_openers else match.end()
            self._take(data, pos, stop)
            self._flush_malformed(out)
            return stop
        stop = match.end() if token in self._fmt.call_close else match.start()
        self._take(data, pos, stop)
        self._flush_malformed(out, resume=True)
        return stop

    def _malformed_tail(self, data: str, pos: int, safe: int, out: list[Event],
                        eof: bool) -> int:
        """No end of the malformed text in sight: keep it, wait (or flush at the end)."""
        if eof:
            safe = len(data)
        self._take(data, pos, safe)
        if eof:
            self._flush_malformed(out)
            return len(data)
        return self._hold(data, safe) if safe < len(data) else len(data)

    def _flush_malformed(self, out: list[Event], *, resume: bool = False) -> None:
        """The malformed text and its diagnostic; ``resume``: the section goes on."""
        raw = "".join(self._raw)
        text = self._separator + raw
        self._separator = ""
        self._raw = []
        if text:
            self._held.drop()
            self._text_seen = self._text_seen or not text.isspace()
            out.append(TextEvent(text))
        out.append(DiagnosticEvent(self._failure or "malformed_call", self._message or
                                   f"not a call in the {self._fmt.family} format; shown as text",
                                   raw))
        self._failure = self._message = ""
        if resume:
            self._section_failures += 1
            self._state = SECTION
            return
        self._in_section = self._implicit = False
        self._state = TEXT

    def _finish(self, out: list[Event]) -> None:
        self._settle(out)
        if self._state == BLOCK:
            if self._block_kind == "reasoning":
                self._held.drop()  # blanks at the end of unclosed reasoning are not text
            self._state = TEXT
        rest = self._held.release()
        if rest and not self._lead:
            out.append(TextEvent(rest))

    def _settle(self, out: list[Event]) -> None:
        """What is still open ends: at the reply's end, or at the end-of-turn token the
        model wrote while a call was open."""
        state = self._state
        if state == AFTER_CALL and self._call is not None:
            if self._cut_open():
                self._truncated(0)
            else:
                self._complete_call(out)
        elif state == SECTION:
            if self._section_calls or self._section_failures:
                self._end_section()  # the calls are complete; the section's end was cut off
            elif not self._fmt.strict_open:
                self._to_text(out)
            elif self._cut:
                self._to_malformed(0, "truncated_call", "the token limit cut the reply inside "
                                                        "a tool-call section; shown as text")
            else:
                self._dropped("".join(self._raw), f"an empty {self._fmt.family} tool-call "
                              "section at the end of the reply; dropped", out)
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
