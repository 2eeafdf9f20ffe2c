"""Streaming parser for Llama 3.1 / 3.2 / 3.3 tool calls.

The templates render a call as the whole assistant message::

    {"name": "get_weather", "parameters": {"city": "Paris", "days": 3}}

so a call is recognised where the reply *begins* with a JSON object whose keys
are those of a call (``name``, ``parameters`` or ``arguments``, optionally
``type``); any other object is an answer that happens to be JSON and stays
text, with no diagnostic. ``<|python_tag|>`` (Llama 3.1's marker for tool
code) may precede calls anywhere. Drifts read: several call objects separated
by ``;`` or blank lines (the templates allow one call per turn, the models
sometimes write more), the pythonic list Llama 3.2 writes
(``[get_weather(city="Paris")]``, see :mod:`.pythonic`), and an echoed
``<|eom_id|>`` / ``<|eot_id|>``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from toolwire.events import Event
from toolwire.parse.call_sections import (
    DONE,
    FAIL,
    MORE,
    CallNumbering,
    SectionParser,
    SectionReader,
    feed_nested,
)
from toolwire.parse.json_calls import CallObjectReader, CallShape

from .pythonic import PYTHONIC_START, PythonicListReader

__all__ = ["PYTHON_TAG", "Llama3JsonParser"]

PYTHON_TAG: Final = "<|python_tag|>"
END_TOKENS: Final = ("<|eom_id|>", "<|eot_id|>")

_BARE_SHAPE = CallShape(name_keys=("name",), args_keys=("parameters", "arguments"),
                        strict=True, extra_keys=("type",), require_args=True)
_TAGGED_SHAPE = CallShape(name_keys=("name",), args_keys=("parameters", "arguments"))
_BLANKS = " \t\r\n"
_PYTHONIC_LOOKAHEAD: Final = 300  # a name longer than this before "(" is not a call list

# section states
_NEXT, _CALL, _SEPARATED, _OVER = range(4)


class _JsonCalls:
    """One or more call objects, separated by ``;`` or blanks."""

    __slots__ = ("_numbering", "_shape", "_state", "_sub", "failure", "message", "raw",
                 "started")

    def __init__(self, shape: CallShape, numbering: CallNumbering) -> None:
        self._shape = shape
        self._numbering = numbering
        self._state = _NEXT
        self._sub: SectionReader | None = None
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
                    self.failure, self.message = sub.failure, sub.message
                    self._state = _OVER
                    return FAIL, at
                self.raw = []
                self._state = _SEPARATED
                pos = at
                continue
            start = pos
            while pos < n and data[pos] in _BLANKS:
                pos += 1
            if pos >= n:
                if eof and state == _NEXT and not self.started:
                    self.raw.append(data[start:pos])
                    self.failure = "unclosed_call"
                    self.message = "the reply ended before the call; shown as text"
                    return FAIL, n
                if eof:
                    return DONE, n
                # blanks may separate two calls; if text follows they are dropped anyway
                self.raw.append(data[start:pos])
                return MORE, n
            c = data[pos]
            if state == _SEPARATED and c == ";":
                self.raw.append(data[start:pos + 1])
                self._state = _NEXT
                pos += 1
                continue
            if c == "{":
                self.raw.append(data[start:pos])
                self._sub = CallObjectReader(self._shape, self._numbering)
                self._state = _CALL
                continue
            if c == "[" and state == _NEXT and not self.started:
                self.raw.append(data[start:pos])
                self._sub = PythonicListReader(self._numbering)
                self._state = _CALL
                continue
            if state == _SEPARATED:
                return DONE, start  # text follows the calls
            self.raw.append(data[start:pos])
            self.failure = "malformed_call"
            self.message = "expected a call after ';' or <|python_tag|>; shown as text"
            return FAIL, pos


class Llama3JsonParser(SectionParser):
    """One reply's parser: ``feed`` deltas, then ``close``; never raises."""

    def __init__(self, tools: Mapping[str, Any]) -> None:
        super().__init__(tools, family="llama3_json", openers=(PYTHON_TAG,), drops=END_TOKENS,
                         at_start=True)

    def open_section(self, marker: str) -> SectionReader:
        """``<|python_tag|>`` opens one or more calls (JSON or pythonic)."""
        return _JsonCalls(_TAGGED_SHAPE, self.numbering)

    def open_at_start(self, data: str, pos: int, eof: bool) -> SectionReader | bool | None:
        """A reply beginning with ``{`` may be a call; with ``[name(`` a pythonic list."""
        c = data[pos]
        if c == "{":
            return _JsonCalls(_BARE_SHAPE, self.numbering)
        if c != "[":
            return None
        if PYTHONIC_START.match(data, pos):
            return PythonicListReader(self.numbering)
        tail = data[pos:pos + _PYTHONIC_LOOKAHEAD]
        if not eof and len(tail) < _PYTHONIC_LOOKAHEAD and _may_become_pythonic(tail):
            return False
        return None


def _may_become_pythonic(text: str) -> bool:
    """Whether ``text`` (shorter than the lookahead) may still grow into ``[name(``."""
    body = text[1:].lstrip()
    if not body:
        return True
    if not (body[0].isalpha() or body[0] == "_"):
        return False
    i = 1
    while i < len(body) and (body[i].isalnum() or body[i] in "_."):
        i += 1
    return not body[i:].strip()
