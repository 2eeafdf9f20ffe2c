"""Streaming parser for Hermes-style calls: JSON objects inside ``<tool_call>`` tags.

The templates render each call as::

    <tool_call>
    {"name": "get_weather", "arguments": {"city": "Paris"}}
    </tool_call>

and several calls as several blocks. The JSON is read with the shared call
readers (:mod:`toolwire.parse.json_calls`), so the arguments stream as deltas and are
decoded once. Drifts seen in real output and read here: a list of call objects
(or several objects) in one block, ``"parameters"`` instead of ``"arguments"``,
arguments encoded as a JSON string, a missing ``</tool_call>`` at the end of
the reply, and a call object missing its final ``}`` right before
``</tool_call>`` (read, with a ``repaired_call`` diagnostic).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from toolwire.events import DiagnosticEvent, Event
from toolwire.parse.call_sections import (
    DONE,
    FAIL,
    MATCH,
    MORE,
    PARTIAL,
    CallNumbering,
    SectionParser,
    SectionReader,
    feed_nested,
    match_literal,
)
from toolwire.parse.json_calls import CallListReader, CallObjectReader, CallShape

__all__ = ["CLOSE_CALL", "OPEN_CALL", "HermesCallBlock", "HermesJsonParser"]

OPEN_CALL: Final = "<tool_call>"
CLOSE_CALL: Final = "</tool_call>"

_SHAPE = CallShape(name_keys=("name",), args_keys=("arguments", "parameters"))
_BLANKS = " \t\r\n"

# section states
_BODY, _CALL, _AFTER, _REPAIR, _OVER = range(5)


class HermesCallBlock:
    """One ``<tool_call>`` block after its opening tag: call objects (or a list of them),
    then the closing tag. A :class:`~toolwire.parse.call_sections.SectionReader`; another
    family whose models drift into this JSON (Qwen3-Coder) may read such a block with it.
    """

    __slots__ = ("_numbering", "_state", "_sub", "failure", "message", "raw", "started")

    def __init__(self, numbering: CallNumbering) -> None:
        self._numbering = numbering
        self._state = _BODY
        self._sub: CallObjectReader | CallListReader | None = None
        self.raw: list[str] = []
        self.failure = ""
        self.message = ""
        self.started = 0

    def feed(self, data: str, pos: int, out: list[Event], eof: bool) -> tuple[int, int]:
        """Consume from ``pos``; see :class:`~toolwire.parse.call_sections.SectionReader`."""
        n = len(data)
        while True:
            state = self._state
            if state == _CALL:
                sub = self._sub
                assert sub is not None
                status, at = feed_nested(self, sub, data, pos, out, eof)
                if status == MORE:
                    return MORE, at
                if status == DONE:
                    self.raw = []
                    self._state = _AFTER
                    pos = at
                    continue
                if isinstance(sub, CallObjectReader) and sub.complete_but_unclosed:
                    self._state = _REPAIR
                    pos = at
                    continue
                return self._fail(at, sub.failure, sub.message)
            if state == _REPAIR:
                found = match_literal(data, pos, CLOSE_CALL, eof)
                if found == PARTIAL:
                    return MORE, pos
                sub = self._sub
                if found == MATCH and isinstance(sub, CallObjectReader) and sub.force_close(out):
                    out.append(DiagnosticEvent(
                        "repaired_call", "the call object lacked its closing '}' before "
                        "</tool_call>; read as closed", "".join(self.raw)))
                    self.raw = []
                    self._state = _AFTER
                    continue
                return self._fail(pos, "malformed_call",
                                  "the call object is not closed; shown as text")
            if state == _OVER:
                return DONE, pos
            start = pos
            while pos < n and data[pos] in _BLANKS:
                pos += 1
            if pos > start:
                self.raw.append(data[start:pos])
            if pos >= n:
                if not eof:
                    return MORE, n
                if state == _AFTER:  # the reply ended without </tool_call>: tolerated
                    return DONE, n
                return self._fail(n, "unclosed_call", "the reply ended inside <tool_call>; "
                                  "shown as text")
            c = data[pos]
            if c == "{" or (c == "[" and state == _BODY):
                self._sub = CallObjectReader(_SHAPE, self._numbering) if c == "{" else \
                    CallListReader(_SHAPE, self._numbering)
                self._state = _CALL
                continue
            if state == _AFTER:
                found = match_literal(data, pos, CLOSE_CALL, eof)
                if found == MATCH:
                    self._state = _OVER
                    return DONE, pos + len(CLOSE_CALL)
                if found == PARTIAL:
                    return MORE, pos
                out.append(DiagnosticEvent("unclosed_call",
                                           "a call ended without </tool_call>", ""))
                return DONE, pos
            code = "xml_in_tool_call" if data.startswith("<function=", pos) else "malformed_call"
            return self._fail(pos, code, "text inside <tool_call> tags is not a Hermes JSON "
                                         "call; shown as text")

    def _fail(self, pos: int, code: str, message: str) -> tuple[int, int]:
        self.failure = code
        self.message = message
        self._state = _OVER
        return FAIL, pos


class HermesJsonParser(SectionParser):
    """One reply's parser: ``feed`` deltas, then ``close``; never raises."""

    def __init__(self, tools: Mapping[str, Any]) -> None:
        super().__init__(tools, family="hermes_json", openers=(OPEN_CALL,))

    def open_section(self, marker: str) -> SectionReader:
        """Every ``<tool_call>`` opens a block."""
        return HermesCallBlock(self.numbering)
