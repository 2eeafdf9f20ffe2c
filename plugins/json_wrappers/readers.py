"""Section readers for the JSON-wrapper formats (see :mod:`.formats`).

Three shapes cover them all:

* :class:`WrappedCalls`: a JSON list of call objects, or call objects one
  after another, optionally fenced with ```` ```json ````, up to a closing marker
  (``<TOOLCALL>[...]</TOOLCALL>``, ``<tool_calls>...</tool_calls>``,
  ``functools[...]``, ``Action: ```json [...] ``` ``...);
* :class:`FunctionTag`: Functionary v3.1's ``<function=NAME>{json}</function>``;
* :class:`Recipient`: Functionary v3.2's ``>>>NAME\\n{json}`` (``>>>all\\n`` is text).
"""

from __future__ import annotations

from typing import Final

from toolwire.events import Event
from toolwire.parse.call_sections import (
    DONE,
    FAIL,
    MATCH,
    MORE,
    NOT_A_CALL,
    PARTIAL,
    CallNumbering,
    SectionReader,
    feed_nested,
    match_literal,
    read_name,
)
from toolwire.parse.json_calls import ArgsReader, CallListReader, CallObjectReader, CallShape

__all__ = ["FunctionTag", "Recipient", "WrappedCalls"]

FENCE: Final = "```"
_BLANKS = " \t\r\n"

# WrappedCalls states
_FENCE_OPEN, _BODY, _CALL, _AFTER, _OVER = range(5)


class _Section:
    """Bookkeeping shared by the readers: consumed text, failure, started calls."""

    __slots__ = ("_numbering", "_sub", "failure", "message", "raw", "started")

    def __init__(self, numbering: CallNumbering) -> None:
        self._numbering = numbering
        self._sub: SectionReader | None = None
        self.raw: list[str] = []
        self.failure = ""
        self.message = ""
        self.started = 0

    def _blanks(self, data: str, pos: int) -> int:
        start = pos
        n = len(data)
        while pos < n and data[pos] in _BLANKS:
            pos += 1
        if pos > start:
            self.raw.append(data[start:pos])
        return pos

    def _feed_sub(self, data: str, pos: int, out: list[Event], eof: bool) -> tuple[int, int]:
        sub = self._sub
        assert sub is not None
        status, at = feed_nested(self, sub, data, pos, out, eof)
        if status == FAIL:
            self.failure, self.message = sub.failure, sub.message
        elif status == DONE:
            self.raw = []
        return status, at

    def _fail(self, pos: int, code: str, message: str) -> tuple[int, int]:
        self.failure = code
        self.message = message
        return FAIL, pos


class WrappedCalls(_Section):
    """Calls as JSON inside a wrapper: a list, or objects one after another.

    :param close: the closing marker (``""``: the section ends after the calls).
    :param several_objects: objects may follow one another (MiniMax-M1 writes
        one per line); otherwise one object or one list.
    :param fence: the calls may sit in a ```` ```json ```` fence (Command R+).
    :param opened_list: the ``[`` was part of the opening marker.
    :param plain_opener: the opening marker also occurs in prose (``Action:``,
        a role name): when no JSON follows it, it is text, with no diagnostic.
    """

    __slots__ = ("_close", "_fence", "_fenced", "_objects", "_plain", "_shape", "_state")

    def __init__(self, shape: CallShape, numbering: CallNumbering, *, close: str = "",
                 several_objects: bool = False, fence: bool = False, opened_list: bool = False,
                 plain_opener: bool = False) -> None:
        super().__init__(numbering)
        self._shape = shape
        self._close = close
        self._objects = several_objects
        self._fence = fence
        self._fenced = False
        self._plain = plain_opener
        self._state = _FENCE_OPEN if fence else _BODY
        if opened_list:
            self._sub = CallListReader(shape, numbering, opened=True)
            self._state = _CALL

    def feed(self, data: str, pos: int, out: list[Event], eof: bool) -> tuple[int, int]:
        """Consume from ``pos``; see :class:`~toolwire.parse.call_sections.SectionReader`."""
        while True:
            state = self._state
            if state == _OVER:
                return DONE, pos
            if state == _CALL:
                status, at = self._feed_sub(data, pos, out, eof)
                if status != DONE:
                    if status == FAIL:
                        self._state = _OVER
                    return status, at
                self._state = _AFTER
                pos = at
                continue
            pos = self._blanks(data, pos)
            if pos >= len(data):
                if not eof:
                    return MORE, pos
                if state == _AFTER:
                    return DONE, pos  # the reply ended before the closing marker
                return self._refuse(pos, "unclosed_call", "the reply ended inside a tool-call "
                                    "section; shown as text")
            if state == _FENCE_OPEN:
                found = match_literal(data, pos, FENCE, eof)
                if found == PARTIAL:
                    return MORE, pos
                if found == MATCH:
                    end = pos + len(FENCE)
                    tag = match_literal(data, end, "json", eof)
                    if tag == PARTIAL:
                        return MORE, pos
                    end += 4 if tag == MATCH else 0
                    self.raw.append(data[pos:end])
                    self._fenced = True
                    pos = end
                self._state = _BODY
                continue
            c = data[pos]
            if c == "[" and state == _BODY:
                self._sub = CallListReader(self._shape, self._numbering)
                self._state = _CALL
                continue
            if c == "{" and (state == _BODY or self._objects):
                self._sub = CallObjectReader(self._shape, self._numbering)
                self._state = _CALL
                continue
            if state == _BODY:
                return self._refuse(pos, "malformed_call", "expected JSON calls after the "
                                    "marker; shown as text")
            # _AFTER: the closing fence, the closing marker, or the end of the section
            if self._fenced:
                found = match_literal(data, pos, FENCE, eof)
                if found == PARTIAL:
                    return MORE, pos
                if found == MATCH:
                    self._fenced = False
                    self.raw.append(FENCE)
                    pos += len(FENCE)
                    continue
            if not self._close:
                self._state = _OVER
                return DONE, pos
            found = match_literal(data, pos, self._close, eof)
            if found == PARTIAL:
                return MORE, pos
            self._state = _OVER
            if found == MATCH:
                return DONE, pos + len(self._close)
            return DONE, pos  # the closing marker is missing: text follows the calls

    def _refuse(self, pos: int, code: str, message: str) -> tuple[int, int]:
        self._state = _OVER
        return self._fail(pos, NOT_A_CALL if self._plain and not self.started else code, message)


# FunctionTag / Recipient states
_NAME, _ARGS, _CLOSE = range(3)


class FunctionTag(_Section):
    """``<function=NAME>{json}</function>`` (Functionary v3.1), after ``<function=``."""

    __slots__ = ("_state",)

    CLOSE: Final = "</function>"

    def __init__(self, numbering: CallNumbering) -> None:
        super().__init__(numbering)
        self._state = _NAME

    def feed(self, data: str, pos: int, out: list[Event], eof: bool) -> tuple[int, int]:
        """Consume from ``pos``; see :class:`~toolwire.parse.call_sections.SectionReader`."""
        while True:
            if self._state == _NAME:
                found, name, end = read_name(data, pos, (">",), eof)
                if found == PARTIAL:
                    return MORE, pos
                if found != MATCH:
                    return self._fail(pos, "malformed_call", "expected NAME> after <function=; "
                                      "shown as text")
                self.raw.append(data[pos:end])
                self._sub = ArgsReader(name, self._numbering)
                self._state = _ARGS
                pos = end
            elif self._state == _ARGS:
                status, at = self._feed_sub(data, pos, out, eof)
                if status != DONE:
                    return status, at
                self._state = _CLOSE
                pos = at
            else:
                pos = self._blanks(data, pos)
                found = match_literal(data, pos, self.CLOSE, eof)
                if found == PARTIAL or (pos >= len(data) and not eof):
                    return MORE, pos
                if found == MATCH:
                    return DONE, pos + len(self.CLOSE)
                return DONE, pos  # </function> missing: text (or the next call) follows


class Recipient(_Section):
    """``NAME\\n{json}`` after Functionary v3.2's ``>>>`` (or at the reply's start).

    The recipient ``all`` means the text that follows is for the user. A line
    that is not ``NAME\\n`` is text; after ``>>>`` (not at the start), a name
    followed by something other than JSON arguments is a malformed call.
    """

    __slots__ = ("_at_start", "_state")

    TEXT_RECIPIENT: Final = "all"

    def __init__(self, numbering: CallNumbering, *, at_start: bool) -> None:
        super().__init__(numbering)
        self._at_start = at_start
        self._state = _NAME

    def feed(self, data: str, pos: int, out: list[Event], eof: bool) -> tuple[int, int]:
        """Consume from ``pos``; see :class:`~toolwire.parse.call_sections.SectionReader`."""
        if self._state == _NAME:
            found, name, end = read_name(data, pos, ("\n",), eof)
            if found == PARTIAL:
                return MORE, pos
            if found != MATCH:
                return self._fail(pos, NOT_A_CALL, "not a recipient line")
            if name == self.TEXT_RECIPIENT:
                self._state = _CLOSE
                return DONE, end
            k = end
            while k < len(data) and data[k] in _BLANKS:
                k += 1
            if k >= len(data) and not eof:
                return MORE, pos
            if k >= len(data) or data[k] not in '{"':
                code = NOT_A_CALL if self._at_start else "malformed_call"
                return self._fail(pos, code, f"no JSON arguments for {name!r} after >>>; "
                                  "shown as text")
            self.raw.append(data[pos:end])
            self._sub = ArgsReader(name, self._numbering)
            self._state = _ARGS
            pos = end
        if self._state == _ARGS:
            status, at = self._feed_sub(data, pos, out, eof)
            if status == DONE:
                self._state = _CLOSE
            return status, at
        return DONE, pos
