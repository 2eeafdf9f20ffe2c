"""Streaming parser for DeepSeek's special-token tool calls (R1 and V3.1).

R1 (and its distills) fence the arguments and name the call type::

    <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather
    ```json
    {"city": "Paris"}
    ```<｜tool▁call▁end｜><｜tool▁calls▁end｜>

V3.1 drops both::

    <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>{"city": "Paris"}
    <｜tool▁call▁end｜><｜tool▁calls▁end｜>

(one line in the reply).

Calls follow one another inside the section (R1 separates them with a
newline). Drifts read, as seen from R1 models and llama.cpp's parser: the
tokens spelt with ``_`` or spaces instead of ``▁``, a missing
``<｜tool▁calls▁begin｜>`` (a lone ``<｜tool▁call▁begin｜>`` opens the section), a
missing fence or closing token, and the end of the reply before
``<｜tool▁calls▁end｜>``. ``<｜end▁of▁sentence｜>`` and ``<｜Assistant｜>`` are
removed from the text: the R1-Distill-Qwen template renders the content of a
tool-call turn after them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Final

from toolwire.events import Event
from toolwire.parse.call_sections import (
    DONE,
    FAIL,
    MATCH,
    MORE,
    NO_MATCH,
    PARTIAL,
    CallNumbering,
    SectionParser,
    SectionReader,
    feed_nested,
    match_literal,
    read_name,
)
from toolwire.parse.json_calls import ArgsReader

__all__ = ["CALLS_BEGIN", "CALLS_END", "CALL_BEGIN", "CALL_END", "SEP", "DeepSeekParser"]


def _spellings(token: str) -> tuple[str, ...]:
    """The token as the template writes it, then with ``_`` and with spaces for ``▁``."""
    return (token, token.replace("▁", "_"), token.replace("▁", " "))


CALLS_BEGIN: Final = "<｜tool▁calls▁begin｜>"
CALLS_END: Final = "<｜tool▁calls▁end｜>"
CALL_BEGIN: Final = "<｜tool▁call▁begin｜>"
CALL_END: Final = "<｜tool▁call▁end｜>"
SEP: Final = "<｜tool▁sep｜>"
END_TOKENS: Final = ("<｜end▁of▁sentence｜>", "<｜Assistant｜>")

_CALLS_BEGIN = _spellings(CALLS_BEGIN)
_CALLS_END = _spellings(CALLS_END)
_CALL_BEGIN = _spellings(CALL_BEGIN)
_CALL_END = _spellings(CALL_END)
_SEP = _spellings(SEP)
_FENCE: Final = "```"
_BLANKS = " \t\r\n"

# section states
_LIST, _HEAD, _R1_NAME, _FENCE_OPEN, _ARGS, _FENCE_CLOSE, _CALL_END_STATE, _OVER = range(8)


def _match_any(data: str, pos: int, spellings: Sequence[str], eof: bool) -> tuple[int, int]:
    """``(MATCH, end)``, ``(PARTIAL, pos)`` or ``(NO_MATCH, pos)`` for any of ``spellings``."""
    partial = False
    for token in spellings:
        found = match_literal(data, pos, token, eof)
        if found == MATCH:
            return MATCH, pos + len(token)
        partial = partial or found == PARTIAL
    return (PARTIAL if partial else NO_MATCH), pos


class _ToolCallsSection:
    """From ``<｜tool▁calls▁begin｜>`` (or a lone call begin) to ``<｜tool▁calls▁end｜>``."""

    __slots__ = ("_fenced", "_name", "_numbering", "_state", "_sub", "failure", "message",
                 "raw", "started")

    def __init__(self, numbering: CallNumbering, *, in_call: bool) -> None:
        self._numbering = numbering
        self._state = _HEAD if in_call else _LIST
        self._sub: ArgsReader | None = None
        self._name = ""
        self._fenced = False
        self.raw: list[str] = []
        self.failure = ""
        self.message = ""
        self.started = 0

    def feed(self, data: str, pos: int, out: list[Event], eof: bool) -> tuple[int, int]:
        """Consume from ``pos``; see :class:`~toolwire.parse.call_sections.SectionReader`."""
        while True:
            state = self._state
            if state == _OVER:
                return DONE, pos
            if state == _ARGS:
                sub = self._sub
                assert sub is not None
                status, at = feed_nested(self, sub, data, pos, out, eof)
                if status == MORE:
                    return MORE, at
                if status == FAIL:
                    return self._fail(at, sub.failure, sub.message)
                self.raw = []
                self._state = _FENCE_CLOSE if self._fenced else _CALL_END_STATE
                pos = at
                continue
            if state in (_HEAD, _R1_NAME):
                result = self._read_head(data, pos, eof) if state == _HEAD else \
                    self._read_r1_name(data, pos, eof)
                if result is None:
                    return MORE, pos
                if result < 0:
                    return self._fail(pos, "malformed_call", "expected a tool name in the "
                                      "DeepSeek call; shown as text")
                pos = result
                continue
            pos = self._blanks(data, pos)
            if pos >= len(data):
                if not eof:
                    return MORE, pos
                if self.started and state in (_LIST, _CALL_END_STATE, _FENCE_CLOSE):
                    return DONE, pos  # the reply ended before the closing tokens
                return self._fail(pos, "unclosed_call", "the reply ended inside a DeepSeek "
                                  "call; shown as text")
            if state == _FENCE_OPEN:
                self._fenced = data.startswith(_FENCE, pos)
                if not self._fenced and not eof and _FENCE.startswith(data[pos:]):
                    return MORE, pos
                if self._fenced:
                    end = pos + len(_FENCE)
                    found = match_literal(data, end, "json", eof)
                    if found == PARTIAL:
                        return MORE, pos
                    end += 4 if found == MATCH else 0
                    self.raw.append(data[pos:end])
                    pos = end
                self._sub = ArgsReader(self._name, self._numbering)
                self._state = _ARGS
                continue
            if state == _FENCE_CLOSE:
                found = match_literal(data, pos, _FENCE, eof)
                if found == PARTIAL:
                    return MORE, pos
                if found == MATCH:
                    self.raw.append(_FENCE)
                    pos += len(_FENCE)
                self._state = _CALL_END_STATE
                continue
            # _LIST or _CALL_END_STATE: the next call, the end of this one or of all
            found, end = _match_any(data, pos, _CALL_BEGIN, eof)
            if found == MATCH:
                self.raw.append(data[pos:end])
                self._state = _HEAD
                pos = end
                continue
            partial = found == PARTIAL
            found, end = _match_any(data, pos, _CALLS_END, eof)
            if found == MATCH:
                self._state = _OVER
                return DONE, end
            partial = partial or found == PARTIAL
            if state == _CALL_END_STATE:
                found, end = _match_any(data, pos, _CALL_END, eof)
                if found == MATCH:
                    self.raw.append(data[pos:end])
                    self._state = _LIST
                    pos = end
                    continue
                partial = partial or found == PARTIAL
            if partial:
                return MORE, pos
            if self.started:
                return DONE, pos  # text follows calls whose closing tokens are missing
            return self._fail(pos, "malformed_call", "expected <｜tool▁call▁begin｜>; "
                              "shown as text")

    def _blanks(self, data: str, pos: int) -> int:
        start = pos
        n = len(data)
        while pos < n and data[pos] in _BLANKS:
            pos += 1
        if pos > start:
            self.raw.append(data[start:pos])
        return pos

    def _read_head(self, data: str, pos: int, eof: bool) -> int | None:
        """``function<｜tool▁sep｜>`` (R1) or ``NAME<｜tool▁sep｜>`` (V3.1)."""
        found, name, end = read_name(data, pos, _SEP, eof)
        if found == PARTIAL:
            return None
        if found != MATCH:
            return -1
        if name == "function":
            # R1 names the type here; V3.1 may call a tool named "function"
            k = end
            while k < len(data) and data[k] in _BLANKS:
                k += 1
            if k >= len(data) and not eof:
                return None
            if k >= len(data) or data[k] != "{":
                self.raw.append(data[pos:end])
                self._state = _R1_NAME
                return end
        self.raw.append(data[pos:end])
        self._name = name
        self._fenced = False
        self._sub = ArgsReader(name, self._numbering)
        self._state = _ARGS
        return end

    def _read_r1_name(self, data: str, pos: int, eof: bool) -> int | None:
        found, name, end = read_name(data, pos, ("\n", _FENCE, "{"), eof)
        if found == PARTIAL:
            return None
        if found != MATCH:
            return -1
        terminator = data[end - 1]
        if terminator != "\n":  # no newline before the fence or the arguments
            end -= len(_FENCE) if terminator == "`" else 1
        self.raw.append(data[pos:end])
        self._name = name
        self._state = _FENCE_OPEN
        return end

    def _fail(self, pos: int, code: str, message: str) -> tuple[int, int]:
        self.failure = code
        self.message = message
        self._state = _OVER
        return FAIL, pos


class DeepSeekParser(SectionParser):
    """One reply's parser: ``feed`` deltas, then ``close``; never raises."""

    def __init__(self, tools: Mapping[str, Any]) -> None:
        super().__init__(tools, family="deepseek", openers=(*_CALLS_BEGIN, *_CALL_BEGIN),
                         drops=END_TOKENS)

    def open_section(self, marker: str) -> SectionReader:
        """The section begins; a lone call begin is the first call of one (a drift)."""
        return _ToolCallsSection(self.numbering, in_call=marker in _CALL_BEGIN)
