"""Streaming parser for the Qwen3.5 / Qwen3-Coder XML tool-call markup.

The templates render a call as::

    <tool_call>
    <function=NAME>
    <parameter=P>
    VALUE
    </parameter>
    </function>
    </tool_call>

The parser is a state machine over a cursor: each delta is scanned once with
``str.find``; only a short tail that may be the start of a tag is held back, so
the total work is linear in the reply. String parameters stream as argument
deltas while the model writes them.

A closing ``</parameter>`` counts only when what follows is another parameter of
the tool (by the schema's names), ``</function>``, or the end of the reply; a
``<parameter=`` counts only for a known, not yet given parameter. So a value may
itself contain those tags (code that writes this very format). What stays
ambiguous is a value containing ``</parameter>`` directly followed by a real
next tag of the same call; the parser then reads the earliest end.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from toolwire.conversation.schema import ToolSchemaIndex
from toolwire.events import (
    DiagnosticEvent,
    Event,
    TextEvent,
    ToolCallDeltaEvent,
    ToolCallEvent,
    ToolCallStartEvent,
)
from toolwire.parse.streaming import HeldWhitespace, partial_tag_start

__all__ = ["QwenXmlParser"]

OPEN_CALL = "<tool_call>"
CLOSE_CALL = "</tool_call>"
OPEN_FUNC = "<function="
CLOSE_FUNC = "</function>"
OPEN_PARAM = "<parameter="
CLOSE_PARAM = "</parameter>"

_MAX_NAME = 256
_MAX_GAP = 64  # blanks allowed between a closing tag and the tag that confirms it
_NAME_RE = re.compile(r"[^<>\n]{1,256}")

# states
_TEXT = 0
_CALL_HEAD = 1  # after <tool_call>, before <function=NAME>
_FUNC_BODY = 2  # between parameters
_VALUE = 3  # inside a parameter value
_AFTER_FUNC = 4  # after </function>, expecting </tool_call>
_MALFORMED = 5  # inside <tool_call> tags holding something that is not this markup

_NEED_MORE = -1
_LITERAL = -2


_VALUE_TAGS = (CLOSE_PARAM, OPEN_PARAM, CLOSE_FUNC)
_VALUE_TAG_RE = re.compile("|".join(re.escape(t) for t in _VALUE_TAGS))
_BLANKS = re.compile(r"[ \t\r\n]*")


def _skip_blanks(data: str, pos: int) -> int:
    match = _BLANKS.match(data, pos)
    return match.end() if match else pos


def _is_partial(data: str, start: int, tags: tuple[str, ...]) -> bool:
    """Whether ``data[start:]`` is a proper prefix of one of ``tags`` (more may come)."""
    remaining = len(data) - start
    return any(remaining < len(t) and t.startswith(data[start:]) for t in tags)


class _Call:
    """The call being read: its name, arguments so far and raw markup."""

    __slots__ = ("arguments", "given", "index", "known", "name", "raw")

    def __init__(self, index: int, name: str, known: dict[str, Any] | None) -> None:
        self.index = index
        self.name = name
        self.known = known  # the tool's parameters, or None for an unknown tool
        self.arguments: dict[str, Any] = {}
        self.given: set[str] = set()
        self.raw: list[str] = []

    def may_start(self, param: str) -> bool:
        """Whether ``<parameter=param>`` can be a real tag here."""
        if self.known is None:
            return param not in self.given
        return param in self.known and param not in self.given


class QwenXmlParser:
    """One reply's parser: ``feed`` deltas, then ``close``; never raises."""

    def __init__(self, tools: Mapping[str, Any]) -> None:
        self._schemas = ToolSchemaIndex(tools)
        self._state = _TEXT
        self._pending = ""
        self._held = HeldWhitespace()
        self._lead = False  # drop blanks after a call
        self._call: _Call | None = None
        self._calls = 0
        self._param = ""
        self._value_parts: list[str] = []
        self._value_start = False  # the single newline after <parameter=P> is not yet seen
        self._value_string = True
        self._malformed_code = ""
        self._malformed_parts: list[str] = []

    # -- public protocol -------------------------------------------------

    def feed(self, text: str) -> list[Event]:
        """Consume a delta; return the events it makes certain."""
        if not self._pending and "<" not in text and text:
            # Fast paths for the two hot states: prose, and a string value being written.
            state = self._state
            if state == _TEXT and not self._lead:
                chunk = self._held.push(text)
                return [TextEvent(chunk)] if chunk else []
            if state == _VALUE and not self._value_start and text[-1] != "\n":
                call = self._call
                if call is not None:
                    self._value_parts.append(text)
                    call.raw.append(text)
                    if self._value_string:
                        return [ToolCallDeltaEvent(call.index, call.name, text, self._param)]
                    return []
        out: list[Event] = []
        try:
            self._run(self._pending + text, out, eof=False)
        except Exception as exc:  # a parser bug must never take down a chat
            out.append(DiagnosticEvent("parser_error", f"qwen_xml parser failed: {exc!r}"))
        return out

    def close(self) -> list[Event]:
        """End of reply: decide what is still held, flush it."""
        out: list[Event] = []
        try:
            self._run(self._pending, out, eof=True)
            self._finish(out)
        except Exception as exc:
            out.append(DiagnosticEvent("parser_error", f"qwen_xml parser failed: {exc!r}"))
        return out

    # -- the state machine -------------------------------------------------

    def _run(self, data: str, out: list[Event], eof: bool) -> None:
        self._pending = ""
        pos = 0
        n = len(data)
        while True:
            state = self._state
            if state == _TEXT:
                pos = self._scan_text(data, pos, out, eof)
            elif state == _VALUE:
                pos = self._scan_value(data, pos, out, eof)
            elif state == _FUNC_BODY:
                pos = self._scan_func_body(data, pos, out, eof)
            elif state == _CALL_HEAD:
                pos = self._scan_call_head(data, pos, out, eof)
            elif state == _AFTER_FUNC:
                pos = self._scan_after_func(data, pos, out, eof)
            else:
                pos = self._scan_malformed(data, pos, out, eof)
            if pos < 0:  # the state needs more text: keep the rest for the next delta
                return
            if pos >= n and self._state == state:
                return

    def _hold(self, data: str, pos: int) -> int:
        self._pending = data[pos:]
        return -1

    def _consume_raw(self, data: str, start: int, end: int) -> None:
        if self._call is not None and end > start:
            self._call.raw.append(data[start:end])

    # TEXT -----------------------------------------------------------------

    def _scan_text(self, data: str, pos: int, out: list[Event], eof: bool) -> int:
        if self._lead:
            pos = _skip_blanks(data, pos)
            if pos >= len(data):
                return pos
            self._lead = False
        k = data.find(OPEN_CALL, pos)
        if k >= 0:
            self._emit_text(data[pos:k], out)
            self._held.drop()
            self._start_call_head(OPEN_CALL)
            return k + len(OPEN_CALL)
        safe = len(data) if eof else partial_tag_start(data, pos, (OPEN_CALL,))
        self._emit_text(data[pos:safe], out)
        if safe < len(data):
            return self._hold(data, safe)
        return len(data)

    def _emit_text(self, text: str, out: list[Event]) -> None:
        chunk = self._held.push(text)
        if chunk:
            out.append(TextEvent(chunk))

    def _start_call_head(self, opening: str) -> None:
        self._state = _CALL_HEAD
        self._call = None
        self._malformed_parts = [opening]

    # CALL_HEAD ------------------------------------------------------------

    def _scan_call_head(self, data: str, pos: int, out: list[Event], eof: bool) -> int:
        start = _skip_blanks(data, pos)
        if start >= len(data):
            self._malformed_parts.append(data[pos:])
            return len(data)
        if data.startswith(OPEN_FUNC, start):
            end = data.find(">", start + len(OPEN_FUNC), start + len(OPEN_FUNC) + _MAX_NAME + 1)
            if end < 0:
                if len(data) - start < len(OPEN_FUNC) + _MAX_NAME + 1 and not eof:
                    self._malformed_parts.append(data[pos:start])
                    return self._hold(data, start)
                return self._to_malformed(data, pos, "malformed_call")
            name = data[start + len(OPEN_FUNC):end].strip()
            if not name or not _NAME_RE.fullmatch(name):
                return self._to_malformed(data, pos, "malformed_call")
            self._malformed_parts.append(data[pos:end + 1])
            self._open_function(name, out)
            return end + 1
        if not eof and _is_partial(data, start, (OPEN_FUNC,)):
            self._malformed_parts.append(data[pos:start])
            return self._hold(data, start)
        code = "json_in_tool_call" if data.startswith("{", start) else "malformed_call"
        return self._to_malformed(data, pos, code)

    def _open_function(self, name: str, out: list[Event]) -> None:
        call = _Call(self._calls, name, self._schemas.parameters(name))
        self._calls += 1
        call.raw = self._malformed_parts
        self._malformed_parts = []
        self._call = call
        self._state = _FUNC_BODY
        out.append(ToolCallStartEvent(index=call.index, name=name))

    def _to_malformed(self, data: str, pos: int, code: str) -> int:
        self._state = _MALFORMED
        self._malformed_code = code
        if self._call is not None:
            self._malformed_parts = self._call.raw
            self._call = None
        return pos

    # MALFORMED --------------------------------------------------------------

    def _scan_malformed(self, data: str, pos: int, out: list[Event], eof: bool) -> int:
        k = data.find(CLOSE_CALL, pos)
        if k >= 0:
            end = k + len(CLOSE_CALL)
            self._malformed_parts.append(data[pos:end])
            self._flush_malformed(out)
            return end
        safe = len(data) if eof else partial_tag_start(data, pos, (CLOSE_CALL,))
        self._malformed_parts.append(data[pos:safe])
        if safe < len(data):
            return self._hold(data, safe)
        return len(data)

    def _flush_malformed(self, out: list[Event]) -> None:
        raw = "".join(self._malformed_parts)
        self._malformed_parts = []
        code = self._malformed_code or "malformed_call"
        message = {
            "json_in_tool_call": "JSON inside <tool_call> tags is not a call in the Qwen XML "
                                 "format (expected <function=NAME>); shown as text",
            "unclosed_call": "the reply ended inside a tool call; shown as text",
        }.get(code, "text inside <tool_call> tags is not a call in the Qwen XML format; "
                    "shown as text")
        out.append(TextEvent(raw))
        out.append(DiagnosticEvent(code, message, raw))
        self._state = _TEXT
        self._lead = True
        self._call = None

    # FUNC_BODY --------------------------------------------------------------

    def _scan_func_body(self, data: str, pos: int, out: list[Event], eof: bool) -> int:
        call = self._call
        assert call is not None
        start = _skip_blanks(data, pos)
        if start >= len(data):
            self._consume_raw(data, pos, len(data))
            return len(data)
        if data.startswith(OPEN_PARAM, start):
            name_start = start + len(OPEN_PARAM)
            end = data.find(">", name_start, name_start + _MAX_NAME + 1)
            if end < 0:
                if len(data) - name_start <= _MAX_NAME and not eof:
                    self._consume_raw(data, pos, start)
                    return self._hold(data, start)
                return self._to_malformed(data, pos, "malformed_call")
            param = data[name_start:end].strip()
            self._consume_raw(data, pos, end + 1)
            self._param = param
            self._value_parts = []
            self._value_start = True
            self._value_string = self._schemas.is_string(call.name, param)
            self._state = _VALUE
            return end + 1
        if data.startswith(CLOSE_FUNC, start):
            end = start + len(CLOSE_FUNC)
            self._consume_raw(data, pos, end)
            self._state = _AFTER_FUNC
            return end
        if data.startswith(CLOSE_CALL, start):  # </function> missing
            end = start + len(CLOSE_CALL)
            self._consume_raw(data, pos, end)
            self._complete_call(out)
            return end
        if not eof and _is_partial(data, start, (OPEN_PARAM, CLOSE_FUNC, CLOSE_CALL)):
            self._consume_raw(data, pos, start)
            return self._hold(data, start)
        return self._to_malformed(data, pos, "malformed_call")

    # VALUE ------------------------------------------------------------------

    def _scan_value(self, data: str, pos: int, out: list[Event], eof: bool) -> int:
        call = self._call
        assert call is not None
        n = len(data)
        if self._value_start:
            if pos >= n:
                if eof:
                    return self._to_malformed_unclosed(data, pos)
                return self._hold(data, pos)
            if data[pos] == "\n":
                self._consume_raw(data, pos, pos + 1)
                pos += 1
            self._value_start = False
        search = pos
        while True:
            match = _VALUE_TAG_RE.search(data, search)
            if match is None:
                end = n if eof else partial_tag_start(data, search, _VALUE_TAGS)
                if not eof and end > pos and data[end - 1] == "\n":
                    end -= 1
                self._value_piece(data, pos, end, out)
                if eof:
                    return self._to_malformed_unclosed(data, end)
                if end < n:
                    return self._hold(data, end)
                return n
            k = match.start()
            verdict = self._classify_value_tag(data, k, call, eof)
            if verdict == _LITERAL:
                search = k + 1
                continue
            end = k - 1 if k > pos and data[k - 1] == "\n" else k
            if verdict == _NEED_MORE:
                self._value_piece(data, pos, end, out)
                return self._hold(data, end)
            self._value_piece(data, pos, end, out)
            self._consume_raw(data, end, verdict)
            self._finish_value(call, out)
            return verdict

    def _value_piece(self, data: str, start: int, end: int, out: list[Event]) -> None:
        if end <= start:
            return
        piece = data[start:end]
        self._value_parts.append(piece)
        assert self._call is not None
        self._call.raw.append(piece)
        if self._value_string:
            out.append(ToolCallDeltaEvent(index=self._call.index, name=self._call.name,
                                          text=piece, parameter=self._param))

    def _to_malformed_unclosed(self, data: str, pos: int) -> int:
        self._consume_raw(data, pos, len(data))
        self._to_malformed(data, len(data), "unclosed_call")
        return len(data)

    def _classify_value_tag(self, data: str, k: int, call: _Call, eof: bool) -> int:
        """Decide what the ``<`` at ``k`` inside a value is.

        :returns: the position where the function body resumes when the tag ends
            the value, ``_LITERAL`` when it is part of the value, or ``_NEED_MORE``.
        """
        if data.startswith(CLOSE_PARAM, k):
            after = k + len(CLOSE_PARAM)
            follow = self._follows_value(data, after, call, eof, allow_eof=True)
            if follow == _NEED_MORE or follow == _LITERAL:
                return follow
            return after
        if data.startswith(OPEN_PARAM, k) or data.startswith(CLOSE_FUNC, k):
            # a missing </parameter>: the next tag itself ends the value
            follow = self._follows_value(data, k, call, eof, allow_eof=False)
            if follow == _NEED_MORE or follow == _LITERAL:
                return follow
            return k
        return _LITERAL

    def _follows_value(self, data: str, at: int, call: _Call, eof: bool,
                       allow_eof: bool) -> int:
        """Check that a real tag (or the end of the reply) starts at ``at`` after blanks."""
        n = len(data)
        j = at
        limit = at + _MAX_GAP
        while j < n and j < limit and data[j] in " \t\r\n":
            j += 1
        if j >= n:
            if eof:
                return j if allow_eof else _LITERAL
            return _NEED_MORE if j < limit else _LITERAL
        if j >= limit:
            return _LITERAL
        if data.startswith(OPEN_PARAM, j):
            name_start = j + len(OPEN_PARAM)
            end = data.find(">", name_start, name_start + _MAX_NAME + 1)
            if end < 0:
                if not eof and n - name_start <= _MAX_NAME:
                    return _NEED_MORE
                return _LITERAL
            name = data[name_start:end].strip()
            return j if name != self._param and call.may_start(name) else _LITERAL
        if data.startswith(CLOSE_FUNC, j):
            return self._follows_function_end(data, j + len(CLOSE_FUNC), eof)
        if data.startswith(CLOSE_CALL, j):
            return j
        if not eof and _is_partial(data, j, (OPEN_PARAM, CLOSE_FUNC, CLOSE_CALL)):
            return _NEED_MORE
        return _LITERAL

    def _follows_function_end(self, data: str, at: int, eof: bool) -> int:
        n = len(data)
        j = at
        limit = at + _MAX_GAP
        while j < n and j < limit and data[j] in " \t\r\n":
            j += 1
        if j >= n:
            return j if eof else (_NEED_MORE if j < limit else _LITERAL)
        if j >= limit:
            return _LITERAL
        if data.startswith(CLOSE_CALL, j) or data.startswith(OPEN_CALL, j):
            return j
        if not eof and _is_partial(data, j, (CLOSE_CALL, OPEN_CALL)):
            return _NEED_MORE
        return _LITERAL

    def _finish_value(self, call: _Call, out: list[Event]) -> None:
        raw = "".join(self._value_parts)
        self._value_parts = []
        param = self._param
        if param in call.given:
            out.append(DiagnosticEvent("duplicate_parameter",
                                       f"parameter {param!r} of {call.name!r} given twice; "
                                       "the last value is used", param))
        call.given.add(param)
        call.arguments[param] = raw if self._value_string else \
            self._schemas.coerce(call.name, param, raw)
        self._state = _FUNC_BODY

    # AFTER_FUNC -------------------------------------------------------------

    def _scan_after_func(self, data: str, pos: int, out: list[Event], eof: bool) -> int:
        start = _skip_blanks(data, pos)
        if start >= len(data):
            self._consume_raw(data, pos, len(data))
            if eof:
                self._complete_call(out)
            return len(data)
        if data.startswith(CLOSE_CALL, start):
            self._consume_raw(data, pos, start + len(CLOSE_CALL))
            self._complete_call(out)
            return start + len(CLOSE_CALL)
        if not eof and _is_partial(data, start, (CLOSE_CALL, OPEN_FUNC, OPEN_CALL)):
            self._consume_raw(data, pos, start)
            return self._hold(data, start)
        if data.startswith(OPEN_FUNC, start):  # a second function inside one <tool_call>
            self._complete_call(out)
            self._start_call_head(OPEN_CALL)
            return start
        self._complete_call(out)
        out.append(DiagnosticEvent("unclosed_call", "a call ended without </tool_call>", ""))
        return start

    def _complete_call(self, out: list[Event]) -> None:
        call = self._call
        assert call is not None
        out.append(ToolCallEvent(name=call.name, arguments=call.arguments, index=call.index))
        self._call = None
        self._state = _TEXT
        self._lead = True

    # end of reply -------------------------------------------------------------

    def _finish(self, out: list[Event]) -> None:
        state = self._state
        if state == _FUNC_BODY and self._call is not None:
            out.append(DiagnosticEvent(
                "unclosed_call",
                f"the reply ended inside call {self._call.name!r} after a complete parameter; "
                "the call is kept", ""))
            self._complete_call(out)
        elif state == _AFTER_FUNC and self._call is not None:
            self._complete_call(out)
        elif state in (_MALFORMED, _CALL_HEAD, _VALUE):
            if state != _MALFORMED:
                self._to_malformed(self._pending, 0, "unclosed_call")
            self._flush_malformed(out)
        rest = self._held.release()
        if rest and not self._lead:
            out.append(TextEvent(rest))
