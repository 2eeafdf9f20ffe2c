"""Streaming parser for pythonic tool calls (Liquid LFM2.5).

The template writes the calls of a turn as a Python list of calls between
special tokens::

    <|tool_call_start|>[get_weather(city='Paris', days=3), note(text='hi')]<|tool_call_end|>

Keyword values are Python literals, except that the template writes a string
argument as ``'`` + the raw text + ``'``, without escaping: it may hold raw
newlines, quotes and backslashes. So a string argument is read as the raw text
between its quotes, exactly as the template wrote it (a backslash is kept,
not read as an escape), and its closing quote counts only when what follows
is another keyword of the tool (by the schema's names, not yet given) or the
end of the call. Every other value (numbers, ``True``/``None``, lists and
dicts, whose strings the template does escape, JSON's ``true``/``null``) is
scanned to its end and read by :func:`toolwire.parse.tagged_stream.python_literal`,
which parses it with ``ast`` and never evaluates anything.

String arguments stream as argument deltas; the parser never raises, and a
call list that cannot be read becomes text plus a diagnostic.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, Final

from toolwire.conversation.schema import ToolSchemaIndex
from toolwire.events import (
    DiagnosticEvent,
    Event,
    TextEvent,
    ToolCallDeltaEvent,
    ToolCallEvent,
    ToolCallStartEvent,
)
from toolwire.parse.streaming import HeldWhitespace
from toolwire.parse.tagged_stream import TokenSet, is_literal, python_literal

__all__ = ["CALLS_CLOSE", "CALLS_OPEN", "PythonicParser"]

CALLS_OPEN: Final = "<|tool_call_start|>"
CALLS_CLOSE: Final = "<|tool_call_end|>"

_MAX_NAME: Final = 256
_MAX_GAP: Final = 64
_BLANKS = re.compile(r"[ \t\r\n]*")
_NAME = re.compile(r"[A-Za-z_][\w.\-]*")
_KEYWORD = re.compile(r"([A-Za-z_]\w*)[ \t]*=(?!=)")
_OPEN = TokenSet((CALLS_OPEN,))
_CLOSE = TokenSet((CALLS_CLOSE,))
_OTHER_SPECIALS = re.compile(r"""[\\'"()\[\]{},<]""")
_PARTIAL_KEYWORD = re.compile(r"[A-Za-z_]\w*[ \t]*")

# states
_TEXT = 0
_LIST_OPEN = 1
_CALL_NAME = 2
_ARG = 3
_VALUE_START = 4
_STRING = 5
_OTHER = 6
_AFTER_ARG = 7
_AFTER_CALL = 8
_LIST_END = 9
_MALFORMED = 10

_NEED_MORE = -1
_LITERAL = -2


class _Call:
    __slots__ = ("arguments", "index", "known", "name")

    def __init__(self, index: int, name: str, known: dict[str, Any] | None) -> None:
        self.index = index
        self.name = name
        self.known = known
        self.arguments: dict[str, Any] = {}

    def may_start(self, param: str) -> bool:
        if param in self.arguments:
            return False
        return self.known is None or param in self.known


class PythonicParser:
    """One reply's parser for pythonic call lists; ``feed`` deltas, then ``close``."""

    def __init__(self, tools: Mapping[str, Any]) -> None:
        self._schemas = ToolSchemaIndex(tools)
        self._state = _TEXT
        self._pending = ""
        self._held = HeldWhitespace()
        self._lead = False
        self._calls = 0
        self._call: _Call | None = None
        self._raw: list[str] = []
        self._param = ""
        self._quote = "'"
        self._parts: list[str] = []
        self._depth = 0
        self._in_string = ""
        self._malformed_code = ""

    # -- public protocol -------------------------------------------------------

    def feed(self, text: str) -> list[Event]:
        """Consume a delta; return the events it makes certain."""
        if not self._pending and text:
            if self._state == _TEXT and not self._lead and "<" not in text:
                chunk = self._held.push(text)
                return [TextEvent(chunk)] if chunk else []
            if self._state == _STRING and self._quote not in text and self._call is not None:
                call = self._call
                self._parts.append(text)
                self._raw.append(text)
                return [ToolCallDeltaEvent(call.index, call.name, text, self._param)]
        out: list[Event] = []
        try:
            self._run(self._pending + text, out, eof=False)
        except Exception as exc:  # a parser bug must never take down a chat
            self._pending = ""
            out.append(DiagnosticEvent("parser_error", f"pythonic parser failed: {exc!r}"))
        return out

    def close(self) -> list[Event]:
        """End of reply: decide what is still held, flush it."""
        out: list[Event] = []
        try:
            self._run(self._pending, out, eof=True)
            self._finish(out)
        except Exception as exc:
            out.append(DiagnosticEvent("parser_error", f"pythonic parser failed: {exc!r}"))
        return out

    # -- the state machine -------------------------------------------------------

    def _run(self, data: str, out: list[Event], eof: bool) -> None:
        self._pending = ""
        pos = 0
        n = len(data)
        scanners = {
            _TEXT: self._scan_text, _LIST_OPEN: self._scan_list_open,
            _CALL_NAME: self._scan_call_name, _ARG: self._scan_arg,
            _VALUE_START: self._scan_value_start, _STRING: self._scan_string,
            _OTHER: self._scan_other, _AFTER_ARG: self._scan_after_arg,
            _AFTER_CALL: self._scan_after_call, _LIST_END: self._scan_list_end,
            _MALFORMED: self._scan_malformed,
        }
        while True:
            state = self._state
            pos = scanners[state](data, pos, out, eof)
            if pos < 0:
                return
            if pos >= n and self._state == state:
                return

    def _hold(self, data: str, pos: int) -> int:
        self._pending = data[pos:]
        return -1

    def _take(self, data: str, start: int, end: int) -> None:
        if end > start:
            self._raw.append(data[start:end])

    def _blanks(self, data: str, pos: int) -> int:
        match = _BLANKS.match(data, pos)
        end = match.end() if match else pos
        self._take(data, pos, end)
        return end

    def _need(self, data: str, pos: int, eof: bool) -> int:
        """The text so far cannot tell: wait, or at the end it is malformed."""
        if eof:
            return self._to_malformed(pos, "unclosed_call")
        return self._hold(data, pos)

    def _at_end(self, pos: int, eof: bool) -> int:
        """All text so far is consumed: wait for more, or at the end it is unclosed."""
        return self._to_malformed(pos, "unclosed_call") if eof else pos

    def _to_malformed(self, pos: int, code: str) -> int:
        self._state = _MALFORMED
        self._malformed_code = code
        self._call = None
        return pos

    # TEXT -------------------------------------------------------------------------

    def _scan_text(self, data: str, pos: int, out: list[Event], eof: bool) -> int:
        if self._lead:
            match = _BLANKS.match(data, pos)
            pos = match.end() if match else pos
            if pos >= len(data):
                return pos
            self._lead = False
        match_open = _OPEN.find(data, pos)
        if match_open is None:
            safe = len(data) if eof else _OPEN.partial(data, pos)
            self._emit_text(data[pos:safe], out)
            return self._hold(data, safe) if safe < len(data) else len(data)
        self._emit_text(data[pos:match_open.start()], out)
        self._held.drop()
        self._raw = [CALLS_OPEN]
        self._state = _LIST_OPEN
        return match_open.end()

    def _emit_text(self, text: str, out: list[Event]) -> None:
        chunk = self._held.push(text)
        if chunk:
            out.append(TextEvent(chunk))

    # the list and its calls ---------------------------------------------------------

    def _scan_list_open(self, data: str, pos: int, out: list[Event], eof: bool) -> int:
        pos = self._blanks(data, pos)
        if pos >= len(data):
            return self._at_end(pos, eof)
        if data[pos] != "[":
            return self._to_malformed(pos, "malformed_call")
        self._take(data, pos, pos + 1)
        self._state = _CALL_NAME
        return pos + 1

    def _scan_call_name(self, data: str, pos: int, out: list[Event], eof: bool) -> int:
        pos = self._blanks(data, pos)
        n = len(data)
        if pos >= n:
            return self._at_end(pos, eof)
        if data[pos] == "]":
            self._take(data, pos, pos + 1)
            self._state = _LIST_END
            return pos + 1
        match = _NAME.match(data, pos)
        if match is None:
            return self._to_malformed(pos, "malformed_call")
        end = match.end()
        if end - pos > _MAX_NAME:
            return self._to_malformed(pos, "malformed_call")
        paren = _BLANKS.match(data, end)
        after = paren.end() if paren else end
        if after >= n:
            return self._need(data, pos, eof)
        if data[after] != "(":
            return self._to_malformed(pos, "malformed_call")
        name = data[pos:end]
        self._take(data, pos, after + 1)
        call = _Call(self._calls, name, self._schemas.parameters(name))
        self._calls += 1
        self._call = call
        out.append(ToolCallStartEvent(index=call.index, name=name))
        self._state = _ARG
        return after + 1

    def _scan_arg(self, data: str, pos: int, out: list[Event], eof: bool) -> int:
        pos = self._blanks(data, pos)
        n = len(data)
        if pos >= n:
            return self._at_end(pos, eof)
        if data[pos] == ")":
            self._take(data, pos, pos + 1)
            self._complete_call(out)
            return pos + 1
        match = _KEYWORD.match(data, pos)
        if match is None:
            if not eof and n - pos <= _MAX_NAME and _PARTIAL_KEYWORD.fullmatch(data, pos):
                return self._hold(data, pos)  # a keyword still being written
            return self._to_malformed(pos, "malformed_call")
        if match.end() >= n and not eof:
            return self._hold(data, pos)  # '=' might yet be '=='
        self._take(data, pos, match.end())
        self._param = match.group(1)
        self._state = _VALUE_START
        return match.end()

    def _scan_value_start(self, data: str, pos: int, out: list[Event], eof: bool) -> int:
        pos = self._blanks(data, pos)
        n = len(data)
        if pos >= n:
            return self._at_end(pos, eof)
        self._parts = []
        if data[pos] in "'\"":
            self._quote = data[pos]
            self._take(data, pos, pos + 1)
            self._state = _STRING
            return pos + 1
        self._depth = 0
        self._in_string = ""
        self._state = _OTHER
        return pos

    # a quoted string argument ---------------------------------------------------------

    def _scan_string(self, data: str, pos: int, out: list[Event], eof: bool) -> int:
        call = self._call
        assert call is not None
        quote = self._quote
        n = len(data)
        search = pos
        while True:
            k = data.find(quote, search)
            if k < 0:
                self._string_piece(data[pos:n], out)
                if eof:
                    return self._to_malformed(n, "unclosed_call")
                return n
            verdict = self._after_string(data, k + 1, eof)
            if verdict == _LITERAL:
                search = k + 1
                continue
            self._string_piece(data[pos:k], out)
            if verdict == _NEED_MORE:
                return self._hold(data, k)
            self._take(data, k, k + 1)
            self._set_argument("".join(self._parts), out)
            return k + 1

    def _string_piece(self, text: str, out: list[Event]) -> None:
        if text:
            self._raw.append(text)
            self._parts.append(text)
            call = self._call
            assert call is not None
            out.append(ToolCallDeltaEvent(call.index, call.name, text, self._param))

    def _after_string(self, data: str, at: int, eof: bool) -> int:
        """Whether the quote before ``at`` closes the string (see the module docstring)."""
        n = len(data)
        j = at
        limit = at + _MAX_GAP
        while j < n and j < limit and data[j] in " \t\r\n":
            j += 1
        if j >= n:
            if eof:
                return at
            return _NEED_MORE if j < limit else _LITERAL
        if j >= limit:
            return _LITERAL
        if data[j] == ")":
            return self._after_call_end(data, j + 1, eof)
        if data[j] != ",":
            return _LITERAL
        k = j + 1
        while k < n and k < j + _MAX_GAP and data[k] in " \t\r\n":
            k += 1
        match = _KEYWORD.match(data, k)
        if match is None or match.end() >= n:
            if not eof and n - k <= _MAX_NAME and (k >= n or _PARTIAL_KEYWORD.fullmatch(data, k)
                                                   or _KEYWORD.fullmatch(data, k)):
                return _NEED_MORE
            return _LITERAL
        call = self._call
        assert call is not None
        name = match.group(1)
        return at if name != self._param and call.may_start(name) else _LITERAL

    def _after_call_end(self, data: str, at: int, eof: bool) -> int:
        """After a call's ``)``: another call, the list's end, or the reply's end."""
        n = len(data)
        j = at
        limit = at + _MAX_GAP
        while j < n and j < limit and data[j] in " \t\r\n":
            j += 1
        if j >= n:
            return at if eof else (_NEED_MORE if j < limit else _LITERAL)
        if data[j] in ",]" or data.startswith(CALLS_CLOSE, j):
            return at
        if not eof and _CLOSE.is_prefix(data, j):
            return _NEED_MORE
        return _LITERAL

    # any other value --------------------------------------------------------------------

    def _scan_other(self, data: str, pos: int, out: list[Event], eof: bool) -> int:
        n = len(data)
        search = pos
        while True:
            match = _OTHER_SPECIALS.search(data, search)
            if match is None:
                self._other_piece(data, pos, n)
                if eof:
                    return self._to_malformed(n, "unclosed_call")
                return n
            k = match.start()
            ch = data[k]
            quote = self._in_string
            if quote:
                if ch == "\\":
                    if k + 1 >= n:
                        self._other_piece(data, pos, k)
                        return self._need(data, k, eof)
                    search = k + 2
                elif ch == quote:
                    self._in_string = ""
                    search = k + 1
                else:
                    search = k + 1
                continue
            if ch == "<":
                if data.startswith(CALLS_CLOSE, k):  # the list ended inside a value
                    self._other_piece(data, pos, k)
                    return self._to_malformed(k, "malformed_call")
            elif ch in "'\"":
                self._in_string = ch
            elif ch in "([{":
                self._depth += 1
            elif ch in ")]}" and self._depth > 0:
                self._depth -= 1
            elif ch in ",)" and self._depth == 0:
                self._other_piece(data, pos, k)
                value = python_literal("".join(self._parts))
                if not is_literal(value):
                    return self._to_malformed(k, "malformed_call")
                self._set_argument(value, out)
                return k
            search = k + 1

    def _other_piece(self, data: str, start: int, end: int) -> None:
        if end > start:
            piece = data[start:end]
            self._parts.append(piece)
            self._raw.append(piece)

    def _set_argument(self, value: Any, out: list[Event]) -> None:
        call = self._call
        assert call is not None
        call.arguments[self._param] = value
        self._parts = []
        self._state = _AFTER_ARG

    # between arguments and calls ----------------------------------------------------------

    def _scan_after_arg(self, data: str, pos: int, out: list[Event], eof: bool) -> int:
        pos = self._blanks(data, pos)
        if pos >= len(data):
            return self._at_end(pos, eof)
        ch = data[pos]
        if ch not in ",)":
            return self._to_malformed(pos, "malformed_call")
        self._take(data, pos, pos + 1)
        if ch == ",":
            self._state = _ARG
        else:
            self._complete_call(out)
        return pos + 1

    def _complete_call(self, out: list[Event]) -> None:
        call = self._call
        assert call is not None
        out.append(ToolCallEvent(name=call.name, arguments=call.arguments, index=call.index))
        self._call = None
        self._raw = []
        self._state = _AFTER_CALL

    def _scan_after_call(self, data: str, pos: int, out: list[Event], eof: bool) -> int:
        pos = self._blanks(data, pos)
        if pos >= len(data):
            if eof:  # the list's end was cut off (a stop token): the calls are complete
                self._raw = []
                self._state = _TEXT
            return pos
        ch = data[pos]
        if ch == ",":
            self._take(data, pos, pos + 1)
            self._state = _CALL_NAME
            return pos + 1
        if ch == "]":
            self._take(data, pos, pos + 1)
            self._state = _LIST_END
            return pos + 1
        return self._scan_list_end(data, pos, out, eof)

    def _scan_list_end(self, data: str, pos: int, out: list[Event], eof: bool) -> int:
        pos = self._blanks(data, pos)
        n = len(data)
        if pos >= n:
            if eof:
                self._raw = []
                self._state = _TEXT
            return pos
        if data.startswith(CALLS_CLOSE, pos):
            self._raw = []
            self._state = _TEXT
            self._lead = True
            return pos + len(CALLS_CLOSE)
        if not eof and _CLOSE.is_prefix(data, pos):
            return self._hold(data, pos)
        if eof and _CLOSE.is_prefix(data, pos):  # cut inside the closing token
            self._raw = []
            self._state = _TEXT
            return n
        return self._to_malformed(pos, "malformed_call")

    # MALFORMED ------------------------------------------------------------------------------

    def _scan_malformed(self, data: str, pos: int, out: list[Event], eof: bool) -> int:
        match = _CLOSE.find(data, pos)
        if match is not None:
            self._take(data, pos, match.end())
            self._flush_malformed(out)
            return match.end()
        safe = len(data) if eof else _CLOSE.partial(data, pos)
        self._take(data, pos, safe)
        if eof:
            self._malformed_code = self._malformed_code or "unclosed_call"
            self._flush_malformed(out)
            return len(data)
        return self._hold(data, safe) if safe < len(data) else len(data)

    def _flush_malformed(self, out: list[Event]) -> None:
        raw = "".join(self._raw)
        self._raw = []
        code = self._malformed_code or "malformed_call"
        message = ("the reply ended inside a pythonic call list; shown as text"
                   if code == "unclosed_call" else
                   "text inside <|tool_call_start|> is not a list of calls; shown as text")
        if raw:
            out.append(TextEvent(raw))
        out.append(DiagnosticEvent(code, message, raw))
        self._malformed_code = ""
        self._call = None
        self._state = _TEXT
        self._lead = True

    def _finish(self, out: list[Event]) -> None:
        if self._state not in (_TEXT, _MALFORMED):
            self._to_malformed(0, "unclosed_call")
        if self._state == _MALFORMED:
            self._flush_malformed(out)
        rest = self._held.release()
        if rest and not self._lead:
            out.append(TextEvent(rest))

