"""Streaming parser for Mistral's ``[TOOL_CALLS]`` markup, in its three generations.

* Mistral Nemo (v3 tokenizer): a JSON list after the marker::

      [TOOL_CALLS][{"name": "get_weather", "arguments": {"city": "Paris"}, "id": "a1b2c3d4e"}]

* Devstral, Ministral 3 (v11+): the name, then ``[ARGS]`` and the arguments,
  one marker per call::

      [TOOL_CALLS]get_weather[ARGS]{"city": "Paris"}[TOOL_CALLS]ping[ARGS]{}

* Mistral Small 3.2: the same with the call id between ``[CALL_ID]`` and ``[ARGS]``.

Drifts read: a single call object instead of a list, blanks after the marker,
and a second ``name[ARGS]{...}`` written without repeating ``[TOOL_CALLS]``.
The id a model writes is not kept: the chat loop gives every call a fresh
9-character id (the form these templates demand).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from toolwire.events import Event
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
    read_name,
)
from toolwire.parse.json_calls import ArgsReader, CallListReader, CallObjectReader, CallShape

__all__ = ["ARGS", "CALL_ID", "TOOL_CALLS", "MistralParser"]

TOOL_CALLS: Final = "[TOOL_CALLS]"
ARGS: Final = "[ARGS]"
CALL_ID: Final = "[CALL_ID]"

_SHAPE = CallShape(name_keys=("name",), args_keys=("arguments", "parameters"))
_BLANKS = " \t\r\n"

# section states
_HEAD, _NAMED, _CALL_ID, _CALL, _AFTER_ARGS, _OVER = range(6)


class _ToolCallsSection:
    """What follows ``[TOOL_CALLS]``: a JSON list (Nemo) or ``name[CALL_ID]id[ARGS]{...}``."""

    __slots__ = ("_name", "_numbering", "_state", "_sub", "failure", "message", "raw", "started")

    def __init__(self, numbering: CallNumbering) -> None:
        self._numbering = numbering
        self._state = _HEAD
        self._sub: SectionReader | None = None
        self._name = ""
        self.raw: list[str] = []
        self.failure = ""
        self.message = ""
        self.started = 0

    def feed(self, data: str, pos: int, out: list[Event], eof: bool) -> tuple[int, int]:
        """Consume from ``pos``; see :class:`~toolwire.parse.call_sections.SectionReader`."""
        n = len(data)
        while True:
            state = self._state
            if state == _OVER:
                return DONE, pos
            if state == _CALL:
                sub = self._sub
                assert sub is not None
                status, at = feed_nested(self, sub, data, pos, out, eof)
                if status == MORE:
                    return MORE, at
                if status == FAIL:
                    return self._fail(at, sub.failure, sub.message)
                self.raw = []
                self._state = _AFTER_ARGS if isinstance(sub, ArgsReader) else _OVER
                pos = at
                continue
            if state == _HEAD:
                start = pos
                while pos < n and data[pos] in _BLANKS:
                    pos += 1
                if pos > start:
                    self.raw.append(data[start:pos])
                if pos >= n:
                    if eof:
                        return self._fail(n, "unclosed_call", "the reply ended after "
                                          "[TOOL_CALLS]; shown as text")
                    return MORE, n
                if data[pos] in "[{":
                    self._sub = CallListReader(_SHAPE, self._numbering) if data[pos] == "[" \
                        else CallObjectReader(_SHAPE, self._numbering)
                    self._state = _CALL
                    continue
                self._state = _NAMED
            if self._state in (_NAMED, _AFTER_ARGS):
                found, name, end = read_name(data, pos, (ARGS, CALL_ID), eof)
                if found == PARTIAL:
                    return MORE, pos
                if found != MATCH:
                    if self._state == _AFTER_ARGS:
                        return DONE, pos  # text follows the calls
                    return self._fail(pos, "malformed_call", "expected a tool name and [ARGS] "
                                      "after [TOOL_CALLS]; shown as text")
                self.raw.append(data[pos:end])
                self._name = name
                pos = end
                if data.endswith(CALL_ID, 0, end):
                    self._state = _CALL_ID
                    continue
                self._sub = ArgsReader(name, self._numbering)
                self._state = _CALL
                continue
            # _CALL_ID: the model's own id, up to [ARGS]
            found, _, end = read_name(data, pos, (ARGS,), eof)
            if found == PARTIAL:
                return MORE, pos
            if found != MATCH:
                return self._fail(pos, "malformed_call", "expected [ARGS] after the call id; "
                                  "shown as text")
            self.raw.append(data[pos:end])
            pos = end
            self._sub = ArgsReader(self._name, self._numbering)
            self._state = _CALL

    def _fail(self, pos: int, code: str, message: str) -> tuple[int, int]:
        self.failure = code
        self.message = message
        self._state = _OVER
        return FAIL, pos


class MistralParser(SectionParser):
    """One reply's parser: ``feed`` deltas, then ``close``; never raises."""

    def __init__(self, tools: Mapping[str, Any]) -> None:
        super().__init__(tools, family="mistral", openers=(TOOL_CALLS,))

    def open_section(self, marker: str) -> SectionReader:
        """Every ``[TOOL_CALLS]`` opens a section."""
        return _ToolCallsSection(self.numbering)
