"""The one streaming engine: runs any :class:`~toolwire.parse.record.CallFormat`.

:class:`CallParser` is a stream parser (``feed`` deltas, then ``close``) for one
reply. It is one pass over a cursor: each delta is scanned with compiled
alternations from where the last one stopped; only a tail that may be the
start of a marker (or a bounded header being read) is held back, and a delta
that only lengthens a beginning of markup its scanner would hold all of back
again is appended to it unread (``ParseState._held_markup``). Text and
markup are the engine's; each call body goes to a reader made for the format's
kind of arguments (:mod:`toolwire.parse.readers`), which streams argument
deltas as the model writes them and types the values.

The rules that decide between readings of ambiguous output are written once,
here and in the readers, and hold for every family:

* blanks right before a marker that opens a call are the template's separator;
  before text that merely looked like a marker they are text, exactly;
* a marker that opens a call whose header cannot be read is a malformed call (text plus a
  diagnostic), or plain text where the format says its opening marker also occurs in prose;
* a call whose closing marker is missing is kept, with an ``unclosed_call`` diagnostic, where
  the next structural marker (the section's end, the next call) or the reply's end shows it
  ended (a reply the token limit cut, ``close(end_reason="length")``: ``truncated_call``, text);
* a body that is not the format (malformed JSON, a stray tag) becomes text, with a diagnostic,
  up to and including the scope's closing marker (or up to the next opening marker, or the
  reply's end; immediately where the scope has no closing marker), and parsing goes on there;
* the family's end-of-turn tokens (``drops``, ``trailers``) met while a section, call or
  value is open end what is open as the reply's end does (a value too: the model was not
  cut); the token is dropped;
* where a call's closing marker belongs, after arguments that ended by themselves,
  a header that reads and its arguments are the next call of the same block (Gemma 4's
  ``call:a{...}call:b{...}``); a section's opening marker ends a section still open;
* a reply that ends with the beginning of a call's opening marker was cut inside it:
  that text comes with a ``truncated_call`` diagnostic.

The engine never raises: an internal failure becomes a ``parser_error`` diagnostic.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..events import (
    DiagnosticEvent,
    Event,
    TextEvent,
    ToolCallEndEvent,
    ToolCallStartEvent,
)
from .compiled import NEED_MORE, choose_whole_syntax
from .engine_base import (
    AFTER_CALL,
    AFTER_CALLS,
    BLOCK,
    BODY,
    HEADER,
    MALFORMED,
    SECTION,
    TEXT,
    ParseState,
)
from .json_readers import CallObjectsReader, JsonArgsReader
from .literal_reader import LiteralObjectReader
from .markers import MAX_GAP, MAX_NAME, NOTHING_HELD, HeaderFields, skip_blanks
from .protocol import EndReason
from .pythonic_reader import PythonicCallsReader
from .readers import FAIL, MORE, NOT_A_CALL, BodyReader, CallContext, ReaderBase
from .record import (
    CallObjects,
    GrammarArguments,
    JsonArguments,
    ObjectLiteral,
    TaggedArguments,
)
from .tagged_reader import TaggedArgsReader
from .turn_ends import TurnEnds

__all__ = ["CallParser"]

_TEXT, _BLOCK, _SECTION, _HEADER, _BODY, _AFTER_CALL, _AFTER_CALLS, _MALFORMED = (
    TEXT, BLOCK, SECTION, HEADER, BODY, AFTER_CALL, AFTER_CALLS, MALFORMED)


class CallParser(TurnEnds):
    """One reply's parser for a :class:`CallFormat`; ``feed`` deltas, then ``close``.

    :param fmt: the family's markup.
    :param tools: ``{tool name: parameters schema}`` for typing values.
    :param first_index: the index of the first call (a caller embedding this
        parser in a larger one numbers calls across it).
    """

    __slots__ = ()

    # -- the StreamParser protocol -----------------------------------------------------

    def feed(self, text: str) -> list[Event]:
        """Consume a delta; return the events it makes certain."""
        if text and (not self._pending or self._turn_tail):
            state = self._state
            if state == _TEXT and not self._lead and not self._at_start:
                one = self._c.fast_break_one  # (markup begins with one character: one test)
                if one:
                    prose = one not in text
                else:
                    prose = True
                    for ch in self._c.fast_break:
                        if ch in text:
                            prose = False
                            break
                if prose:  # the common case
                    chunk = self._held.push(text)
                    if not chunk:
                        return []
                    if not self._text_seen:
                        self._text_seen = not chunk.isspace()
                    return [TextEvent(chunk)]
            elif state == _BODY and self._reader is not None:
                first = self._turn_first  # an end-of-turn token here, or its beginning?
                if first is not None and (self._pending or (first in text and (
                        self._turn_mark in text or text.endswith(self._turn_cuts)))):
                    return self._feed_value(text)
                try:
                    taken = self._reader.plain_delta(text)  # a value being written
                except Exception:
                    taken = None  # the full path reports what is wrong
                if taken is not None:
                    return taken
        if self._turn_watch and self._pending[self._turn_from:] + text in self._turn_beginnings:
            self._pending += text  # still only the beginning of an end-of-turn token
            return []
        if self._held_markup and (longer := self._pending + text) in self._held_markup:
            self._pending = longer  # still only a beginning its scanner holds all of back
            return []
        out: list[Event] = []
        try:
            held = self._pending
            data = held + text if held else text
            # where end-of-turn tokens are looked for (-1: nowhere): from the beginning of one
            # held back, from 0 where no scope is open, else in the new text (the rest: searched)
            first = self._turn_first
            if first is None or first not in data:
                turns = -1
            elif self._turn_watch:
                turns = self._turn_from
            elif self._state < _SECTION:
                turns = 0
            else:
                turns = len(held) if self._turn_mark in text or text.endswith(
                    self._turn_cuts) else -1
            self._run(data, out, False, turns)
        except Exception as exc:  # a parser bug must never take down a chat
            self._pending, self._held_markup = "", NOTHING_HELD
            out.append(DiagnosticEvent("parser_error", f"{self._fmt.family} parser failed: "
                                                       f"{exc!r}"))
        return out

    def close(self, end_reason: EndReason = "stop") -> list[Event]:
        """End of reply: decide what is still held, flush it (``end_reason="length"``:
        the token limit cut the reply, so a call still open is text, not a call)."""
        self._cut = end_reason == "length"
        out: list[Event] = []
        try:
            self._run(self._pending, out, True, 0)
            self._finish(out)
        except Exception as exc:
            out.append(DiagnosticEvent("parser_error", f"{self._fmt.family} parser failed: "
                                                       f"{exc!r}"))
        return out

    # -- the loop ------------------------------------------------------------------------

    def _run(self, data: str, out: list[Event], eof: bool, turns: int = -1) -> None:
        """Read ``data``; end-of-turn tokens are looked for from ``turns`` on (-1: none)."""
        self._pending, self._held_markup = "", NOTHING_HELD
        if self._turn_watch:  # (what it said of what was pending)
            self._turn_tail = self._turn_watch = False
        pos = 0
        n = len(data)
        scanners = _SCANNERS
        if turns >= 0 and (search := self._turn_search) is not None:
            # the next end-of-turn token (or a beginning ending the data), searched once a call
            # scope reads the data and again only past one passed
            at, end, searched = -1, -1, False
            while True:
                state = self._state
                if state >= _SECTION:
                    if not searched or 0 <= at < pos:
                        searched = True
                        found = search(data, pos if pos > turns else turns)
                        if found is None:
                            break  # no end of turn in what is left: the scanners alone
                        at = found.start()  # (a token, or the beginning of one ending data)
                        end = found.end() if found.lastgroup is not None else -1
                    if at < 0 or (eof and end < 0):
                        break
                    pos = self._scan_to_turn_end(data, pos, out, eof, at, end)
                    if pos < 0 or (pos >= n and self._state >= _SECTION):
                        return
                    continue
                pos = scanners[state](self, data, pos, out, eof)
                if pos < 0 or (pos >= n and self._state == state and not (eof and
                                                                          state == _BODY)):
                    return
        while True:  # (the same loop where no end of turn can be: no test per step)
            state = self._state
            pos = scanners[state](self, data, pos, out, eof)
            if pos < 0 or (pos >= n and self._state == state and not (eof and state == _BODY)):
                return

    # -- text ----------------------------------------------------------------------------

    def _scan_text(self, data: str, pos: int, out: list[Event], eof: bool) -> int:
        if self._lead or self._at_start:
            k = skip_blanks(data, pos)
            if self._at_start and k > pos:
                self._held.push(data[pos:k])
            self._gap_open = self._gap_open or (self._lead and k > pos)
            pos = k
            if pos >= len(data):
                return pos
            self._lead = False
            if self._gap:  # blanks on both sides of a call: one separator stays
                if self._gap_open:
                    self._held.push(self._gap)
                self._gap, self._gap_open = "", False
            if self._at_start:
                found = self._open_at_start(data, pos, eof)
                if found is not None:
                    return found
        tokens = self._c.text_after_call if self._made_call else self._c.text
        match = tokens.search(data, pos)
        if match is None:
            if eof:
                self._text_at_end(data, pos, out)
                return len(data)
            safe = tokens.partial(data, pos)
            self._emit_text(data[pos:safe], out)
            if safe >= len(data):
                return safe
            if not self._at_start:  # (read again, this scanner would do just this)
                self._held_markup = self._c.text_after_call_holds if self._made_call \
                    else self._c.text_holds
            return self._hold(data, safe)
        k = match.start()
        token = match.group(0)
        self._emit_text(data[pos:k], out)
        end = k + len(token)
        fmt = self._fmt
        if token in self._c.openers:
            self._begin_scope(token)
            if fmt.section_open:
                self._in_section = True
                self._section_calls = 0
                self._section_failures = 0
                self._implicit = token not in self._c.section_openers
                if not self._implicit:
                    self._state = _SECTION
                    return end
            self._state = _HEADER
            return end
        if token in fmt.blocks:
            self._held.drop()
            kind, _ = fmt.blocks[token]
            self._block_kind = kind
            self._block_close = self._c.block_closes[token]
            self._state = _BLOCK
            self._lead = True
            return end
        if token in self._c.strays:
            self._separator = self._held.release()
            self._dropped(token, f"a {fmt.family} section's closing marker with no section "
                                 "open; dropped", out)
            return end
        # a dropped token or an end-of-turn trailer: not text, nor the blanks before it
        self._held.drop()
        return end

    def _open_at_start(self, data: str, pos: int, eof: bool) -> int | None:
        """At the reply's first non-blank character: calls without their opening marker."""
        if self._c.whole_kinds:
            kind = self._choose_whole(data, pos, eof)
            if kind is NEED_MORE:
                return self._hold(data, pos)
            if kind is not None:
                self._at_start = False
                self._begin_scope("")
                self._start_whole_calls(kind, strict=True)
                return pos
        self._at_start = False
        if self._c.header_kind is None or data.startswith(self._c.call_open.tokens, pos):
            return None
        line_end = data.find("\n", pos, pos + MAX_NAME + 2)
        if line_end < 0 and not eof and len(data) - pos <= MAX_NAME:
            self._at_start = True
            return self._hold(data, pos)
        self._begin_scope("")
        self._header_at_start = True
        self._state = _HEADER
        return pos

    # -- a section -----------------------------------------------------------------------

    def _scan_section(self, data: str, pos: int, out: list[Event], eof: bool) -> int:
        fmt = self._fmt
        start = skip_blanks(data, pos)
        separator = fmt.separator.strip()
        if separator and self._section_calls and data.startswith(separator, start):
            start = skip_blanks(data, start + len(separator))
        self._take(data, pos, start)
        self._gap_open = self._gap_open or start > pos  # blanks after the last call
        n = len(data)
        if start >= n:
            return n
        token = self._c.section_close.at(data, start)
        if token is not None:
            self._gap_open = False  # what follows the closing marker decides
            if not self._section_calls:
                self._take(data, start, start + len(token))
                if self._section_failures:  # nothing in it was a call: it all is text
                    self._emit_raw(out)
                    self._end_section()
                else:
                    self._dropped("".join(self._raw), f"an empty {fmt.family} tool-call "
                                                      "section; dropped", out)
                return start + len(token)
            self._end_section()
            return start + len(token)
        if not eof and self._c.section_close.is_prefix(data, start):
            self._held_markup = self._c.section_holds
            return self._hold(data, start)  # the section's end, cut short by the delta?
        if self._c.whole_kinds:
            kind = self._choose_whole(data, start, eof)
            if kind is NEED_MORE:
                return self._hold(data, start)
            if kind is not None:
                self._start_whole_calls(kind, strict=False)
                return start
        opener = self._c.call_open.at(data, start)
        if opener is not None:
            if self._section_calls or self._section_failures:
                self._raw = []  # a later call that fails is its own text, not the section's
            self._take(data, start, start + len(opener))
            self._state = _HEADER
            return start + len(opener)
        if not eof and self._c.section_body.is_prefix(data, start):
            self._held_markup = self._c.section_holds
            return self._hold(data, start)
        if eof and self._section_calls and self._c.call_open.is_prefix(data, start) and \
                self._fmt.strict_open:
            self._end_section()  # the reply was cut inside the next call's opening marker
            self._emit_text(data[start:], out)
            out.append(DiagnosticEvent("truncated_call", f"the reply ended inside a "
                                       f"{fmt.family} call's opening marker; shown as text",
                                       data[start:]))
            return n
        if eof and self._section_calls and self._c.section_close.is_prefix(data, start):
            self._end_section()  # the reply was cut inside the section's closing marker
            return n
        if self._c.header_kind is not None and not fmt.call_open:
            self._state = _HEADER  # the call begins right at its header
            return start
        if (self._section_calls or self._section_failures) and (
                not fmt.section_close or eof or self._implicit):
            self._end_section()  # the section ends where its calls end (the blanks: text's)
            return pos
        if self._section_calls and data.startswith(self._c.section_open.tokens, start):
            # the next section opens: this one's closing marker is missing
            out.append(DiagnosticEvent("unclosed_call", f"the calls ended without "
                                       f"{fmt.section_close[0]}", ""))
            self._end_section()
            return start
        code = "json_in_tool_call" if data.startswith("{", start) else "malformed_call"
        return self._to_malformed(start, code, f"text inside a {fmt.family} tool-call section "
                                               "is not a call; shown as text")

    def _choose_whole(self, data: str, pos: int, eof: bool) -> Any:
        """Which whole-call syntax begins at ``pos`` (``NEED_MORE``; ``None``: none)."""
        return choose_whole_syntax(self._c, data, pos, eof, in_section=self._in_section,
                                   first_in_section=self._in_section
                                   and not self._section_calls)

    def _start_whole_calls(self, kind: Any, *, strict: bool) -> None:
        reader: BodyReader
        if isinstance(kind, CallObjects):
            reader = CallObjectsReader(kind, self._numbering, self._fmt.section_close,
                                       strict=strict)
        else:
            reader = PythonicCallsReader(kind, self._numbering, self._schemas,
                                         ends=self._c.whole_ends, stops=self._c.whole_stops,
                                         strict=strict)
        self._reader = self._reader_holds = reader
        self._call = None
        self._state = _BODY

    # -- one call ------------------------------------------------------------------------

    def _scan_header(self, data: str, pos: int, out: list[Event], eof: bool) -> int:
        fmt = self._fmt
        start = skip_blanks(data, pos)
        starts = [start]
        prefix = self._c.header_prefixes.at(data, start)
        if prefix is not None:  # a prefix that may be skipped: try without it first
            starts.insert(0, skip_blanks(data, start + len(prefix)))
        elif not eof and self._c.header_prefixes.is_prefix(data, start):
            return self._hold(data, pos)
        for at in starts:
            found = self._header_from(data, at, eof)
            if found is None:
                continue
            if isinstance(found, int):
                return self._hold(data, pos)
            fields, match_start, token = found
            end: int = match_start + len(token) if token in fmt.header_end else match_start
            if fields.name not in fmt.text_headers and (
                    self._header_at_start or not fmt.strict_open or self._implicit):
                # where the opening marker may be prose, only arguments after it make a call
                verdict = self._body_follows(data, end, eof)
                if verdict is None:
                    return self._hold(data, pos)
                if not verdict:
                    return self._not_a_call(data, pos, out)
            self._take(data, pos, end)
            self._header_at_start = False
            if fields.name in fmt.text_headers:
                self._raw = []
                self._separator = ""
                self._state = _TEXT
                self._lead = True
                return end
            self._start_call(fields.name, fields.call_id, out)
            return end
        # the reply ended inside the header (held till now): where no closing marker
        # gathers the unfinished call's text, the rest of the reply is that text
        cut = eof and not self._c.scope_close and len(data) - start < MAX_NAME + MAX_GAP \
            and self._c.header_end.search(data, start) is None
        return self._not_a_call(data, pos, out, rest=cut)

    def _body_follows(self, data: str, at: int, eof: bool) -> bool | None:
        """Whether the arguments begin after the header (``None``: cannot tell yet):
        JSON, or (tagged) an argument's opening marker or the call's closing one."""
        tagged = self._c.tagged
        if tagged is not None and self._implicit:
            k = skip_blanks(data, at)
            if k >= len(data):
                return False if eof else None
            ends = tagged.opens.at(data, k) or self._c.call_close.at(data, k)
            if ends is None and not eof and (tagged.opens.is_prefix(data, k)
                                             or self._c.call_close.is_prefix(data, k)):
                return None
            return ends is not None
        if not isinstance(self._c.header_kind, JsonArguments):
            return True
        k = skip_blanks(data, at)
        if k >= len(data):
            return False if eof else None
        if not eof and len(data) - k < 3 and "```".startswith(data[k:]):
            return None  # a code fence, or a backtick of prose: the next text decides
        return data[k] in '{"' or data.startswith("```", k)

    def _header_from(self, data: str, start: int,
                     eof: bool) -> tuple[HeaderFields, int, str] | int | None:
        """``(fields, end token position, end token)``, ``-1`` to wait, ``None``: not one."""
        ends = self._c.header_end
        limit = start + MAX_NAME + MAX_GAP + ends.longest
        match = ends.search(data, start, limit)
        if match is None:
            return -1 if not eof and len(data) < limit else None
        fields = self._c.read_header(data[start:match.start()])
        if fields is None:
            return None
        return fields, match.start(), match.group(0)

    def _not_a_call(self, data: str, pos: int, out: list[Event], *, rest: bool = False) -> int:
        fmt = self._fmt
        if self._implicit and not self._section_calls and not self._section_failures:
            self._to_text(out)  # prose that mentions a call's opening marker
            return pos
        if self._header_at_start or not fmt.strict_open or (
                self._section_calls and not fmt.call_open):
            # plain text after all (or, after a section's calls, the text that follows them)
            self._header_at_start = False
            if self._section_calls and not fmt.call_open:
                self._end_section()
                return pos
            self._to_text(out)
            return pos
        after = skip_blanks(data, pos)
        code = "json_in_tool_call" if data.startswith("{", after) else "malformed_call"
        if rest:
            self._take(data, pos, len(data))
            pos = len(data)
        message = (f"JSON where a {fmt.family} call's name belongs is not a call in this "
                   "format; shown as text") if code == "json_in_tool_call" else \
            f"text inside {fmt.family} tool-call markup is not a call; shown as text"
        return self._to_malformed(pos, code, message)

    def _start_call(self, name: str, call_id: str, out: list[Event]) -> None:
        call = CallContext(self._numbering.take(), name, call_id, self._schemas, self._fmt.family)
        self._call = call
        out.append(ToolCallStartEvent(index=call.index, name=name, id=call_id))
        kind = self._c.header_kind
        reader: BodyReader
        if isinstance(kind, TaggedArguments):
            assert self._c.tagged is not None
            reader = TaggedArgsReader(call, self._c.tagged)
        elif isinstance(kind, JsonArguments):
            reader = JsonArgsReader(call, fence=kind.fence)
        elif isinstance(kind, GrammarArguments):
            reader = LiteralObjectReader(kind.reader, call) \
                if isinstance(kind.reader, ObjectLiteral) else kind.reader(call)
        else:  # pragma: no cover - CallFormat refuses this
            raise TypeError("a call header without a header-based arguments syntax")
        self._reader = reader
        self._reader_holds = reader if isinstance(reader, ReaderBase) else None
        self._state = _BODY

    def _scan_body(self, data: str, pos: int, out: list[Event], eof: bool) -> int:
        reader = self._reader
        assert reader is not None
        if eof and self._turn_ended and isinstance(reader, TaggedArgsReader):
            reader.turn_ended = True  # the model ended its turn: an open value ends too
        before = len(out)
        status, at = reader.feed(data, pos, out, eof)
        if self._call is None and len(out) > before and \
                any(type(e) is ToolCallEndEvent for e in out[before:]):
            self._drop_separator()
            self._gap_open = False
            self._section_calls += 1
            self._made_call = True
        if status == MORE and eof:  # a reader must settle at the end: a stuck one failed
            reader.raw.append(data[at:])
            status, at = FAIL, len(data)
            reader.failure = reader.failure or "unclosed_call"
        if status == MORE:
            self._pending = data[at:]  # (held: the most frequent answer, no call)
            if (holding := self._reader_holds) is not None:
                self._held_markup = holding.held_markup
            return -1
        self._raw.extend(reader.raw)
        reader.raw.clear()
        if status == FAIL:
            return self._reader_failed(reader, at, out)
        if self._call is None:  # whole calls: then the section's end
            if self._raw and self._raw[-1][-1:].isspace():
                self._gap_open = True  # the reader took the blanks after its last call
            out.extend(reader.notes)
            self._raw = []
            self._reader = None
            self._state = _AFTER_CALLS
            return at
        self._state = _AFTER_CALL
        return at

    def _reader_failed(self, reader: BodyReader, at: int, out: list[Event]) -> int:
        if self._cut and reader.failure == "unclosed_call" and self._call is not None:
            return self._truncated(at)  # the token limit cut the body (prose-like openers too)
        self._reader = None
        self._call = None
        if reader.failure == NOT_A_CALL or (not self._fmt.strict_open and not reader.started
                                            and not self._section_calls):
            self._to_text(out)
            return at
        return self._to_malformed(at, reader.failure or "malformed_call",
                                  reader.message or f"not a call in the {self._fmt.family} "
                                                    "format; shown as text")

    def _scan_after_call(self, data: str, pos: int, out: list[Event], eof: bool) -> int:
        fmt = self._fmt
        start = skip_blanks(data, pos)
        n = len(data)
        if eof and self._cut_open() and (start >= n or self._c.call_close.is_prefix(data, start)):
            self._take(data, pos, n)  # cut before (or inside) the closing marker
            return self._truncated(n)
        if not fmt.call_close:
            self._complete_call(out)
            return pos
        if start >= n and not eof:
            self._take(data, pos, start)
            return n
        token = self._c.call_close.at(data, start)
        if token is not None:
            self._take(data, pos, start + len(token))
            self._complete_call(out)
            return start + len(token)
        if not eof and start < n and self._c.call_close.is_prefix(data, start):
            self._take(data, pos, start)
            return self._hold(data, start)
        if start < n and not data.startswith(self._c.after_call.tokens, start):
            following = self._next_in_block(data, start, eof)
            if following is None:
                self._take(data, pos, start)
                return self._hold(data, start)
            if following:  # several calls in one block: the closing marker ends the last
                self._take(data, pos, start)
                self._complete_call(out)
                self._state = _HEADER
                return start
        # the call's closing marker is missing. Kept when what follows shows the call ended:
        # the next structure, the end of the reply, or text in which the closing marker does
        # not come soon (when it does, the body was cut short: the call is text)
        if start < n and not data.startswith(self._c.after_call.tokens, start):
            window = data[start:start + MAX_GAP + self._c.call_close.longest]
            if self._c.call_close.search(window, 0) is not None:
                self._take(data, pos, start)  # the blanks are part of the text shown
                return self._to_malformed(start, "malformed_call",
                                          f"text after a {fmt.family} call's arguments where "
                                          f"{fmt.call_close[0]} belongs; shown as text")
            if not eof and len(window) < MAX_GAP + self._c.call_close.longest:
                self._take(data, pos, start)
                return self._hold(data, start)
        self._take(data, pos, start)
        assert self._call is not None
        said = self._reader is not None and any(n.code == "unclosed_call"
                                                for n in self._reader.notes)
        if start < n or (self._turn_ended and not said):  # the reply's end: the call ended
            out.append(DiagnosticEvent("unclosed_call", f"call {self._call.name!r} ended "
                                       f"without {fmt.call_close[0]}; it is kept", ""))
        self._complete_call(out)
        return start

    def _next_in_block(self, data: str, start: int, eof: bool) -> bool | None:
        """Whether the next call's header (and its arguments) begins at ``start``, where
        the call's closing marker belongs (``None``: cannot tell yet). A block may hold
        several calls, its closing marker written once after the last (Gemma 4's
        ``<|tool_call>call:a{...}call:b{...}<tool_call|>``, as Mistral's ``name[ARGS]``)."""
        if self._c.tagged is not None or self._c.header_kind is None:
            return False  # a tagged call's arguments end only at structure
        prefix = self._c.header_prefixes.at(data, start)
        if prefix is not None:  # a prefix that may be written (DeepSeek R1's call type)
            start = skip_blanks(data, start + len(prefix))
        elif not eof and self._c.header_prefixes.is_prefix(data, start):
            return None
        found = self._header_from(data, start, eof)
        if found is None:
            return False
        if isinstance(found, int):
            return None
        fields, match_start, token = found
        if fields.name in self._fmt.text_headers:
            return False
        end = match_start + len(token) if token in self._fmt.header_end else match_start
        return self._body_follows(data, end, eof)

    def _scan_after_calls(self, data: str, pos: int, out: list[Event], eof: bool) -> int:
        """After whole calls: the section's closing marker, where the format has one."""
        fmt = self._fmt
        start = skip_blanks(data, pos)
        self._gap_open = self._gap_open or start > pos  # blanks after the last call
        n = len(data)
        if not fmt.section_close or not self._in_section:
            self._end_section()
            return pos
        if start >= n:
            if eof:
                self._end_section()
            return n
        token = self._c.section_close.at(data, start)
        if token is not None:
            self._gap_open = False  # what follows the closing marker decides
            self._end_section()
            return start + len(token)
        if self._c.section_close.is_prefix(data, start):
            if not eof:
                return self._hold(data, start)
            self._end_section()  # the reply was cut inside the section's closing marker
            return n
        if self._c.openers and any(data.startswith(o, start) for o in self._c.openers):
            self._end_section()
            return start
        if not eof and n - start < self._c.longest_opener and any(
                o.startswith(data[start:]) for o in self._c.openers):
            return self._hold(data, start)  # another opening marker, cut short by the delta?
        out.append(DiagnosticEvent("unclosed_call", f"the calls ended without "
                                   f"{fmt.section_close[0]}", ""))
        self._end_section()
        return start


_SCANNERS: tuple[Callable[[CallParser, str, int, list[Event], bool], int], ...] = (
    CallParser._scan_text, CallParser._scan_block, CallParser._scan_section,
    CallParser._scan_header, CallParser._scan_body, CallParser._scan_after_call,
    CallParser._scan_after_calls, ParseState._scan_malformed)
"""The scanner of each state, indexed by state (unbound: no reference cycle per parser)."""

CallParser.SCANNERS = _SCANNERS  # type: ignore[assignment]  # (the turn-end reading's too)
