"""Reading calls written as Python: ``[get_weather(city='Paris', days=3), note(text='hi')]``.

One reader, streaming argument by argument, for both ways templates and models
write Python calls (:class:`~toolwire.parse.record.PythonicCalls`):

* **escaped strings** (Llama 3.2 models write ``"a \\"b\\""`` and triple quotes):
  a string ends at its first unescaped closing quote and is read as Python;
* **raw strings** (the LFM2.5 template writes ``'`` + the text + ``'`` without
  escaping, so a value may hold quotes, newlines and backslashes): a string is
  the raw text between its quotes, and its closing quote counts only at a
  structural boundary, when what follows is ``, name=`` (any name: an argument
  the schema does not know still reaches dispatch, which tells the model) or
  the call's ``)`` followed by another call, the list's end or the section's.

Other values (numbers, ``True``/``None``, lists and dicts, JSON's
``true``/``null``) are scanned to their end and read with
:func:`~toolwire.parse.values.python_literal`, which never evaluates anything.
Names may be Python keywords (``f(from="x")``) and Llama's built-in tool syntax
``brave_search.call(...)`` names the tool ``brave_search``. String values stream
as argument deltas; ``None`` is ``None`` only where the parameter's schema allows
null. Positional arguments cannot be named without guessing: the call is malformed.
"""

from __future__ import annotations

import re
from typing import Any, Final

from ..events import (
    DiagnosticEvent,
    Event,
    TextEvent,
    ToolCallDeltaEvent,
    ToolCallEndEvent,
    ToolCallStartEvent,
)
from ..vocabulary.schema import ToolSchemaIndex
from .markers import MAX_GAP, MAX_NAME, TokenSet, skip_blanks
from .readers import DONE, GO, MORE, NOT_A_CALL, CallNumbering, ReaderBase
from .record import PythonicCalls
from .values import NOT_LITERAL, python_literal

__all__ = ["PythonicCallsReader", "calls_from_source"]

_NAME = re.compile(r"[A-Za-z_][\w.\-]*")
_KEYWORD = re.compile(r"([A-Za-z_]\w*)[ \t]*=(?!=)")
_PARTIAL_KEYWORD = re.compile(r"[A-Za-z_]\w*[ \t]*")
_OTHER_SPECIALS = re.compile(r"[\\'\"()\[\]{},<]")
_NEED_MORE: Final = -1
_LITERAL: Final = -2

# states
_START, _CALL_NAME, _ARG, _VALUE_START, _STRING, _OTHER, _AFTER_ARG, _AFTER_CALL, \
    _OVER, _AFTER_STRING, _SKIP = range(11)
_SKIP_SPECIALS = re.compile(r"[\\'\"()\[\]{},<]")
_ITEM_END, _MARKUP, _NOT_YET = range(3)


class PythonicCallsReader(ReaderBase):
    """Reads a list of pythonic calls (or one bare call) and emits their events.

    :param syntax: the family's pythonic syntax.
    :param numbering: the reply's call numbering.
    :param schemas: the tools' schemas (the null rule).
    :param ends: markers that may follow the calls (the section's close): a raw
        string's quote counts before them too.
    :param stops: the family's markers: passing over a list item that is not a call
        stops at them (the engine reads on from there; default: ``ends``).
    :param strict: text that is not a call list is plain text until a call began.
    """

    __slots__ = ("_args", "_call_index", "_calls_read", "_depth", "_ends", "_escaped",
                 "_in_list", "_in_string", "_item_from", "_joined", "_name", "_numbering",
                 "_param", "_parts", "_quote", "_schemas", "_skip_message", "_stops",
                 "_strict", "_syntax", "_unshown")

    def __init__(self, syntax: PythonicCalls, numbering: CallNumbering, schemas: ToolSchemaIndex,
                 *, ends: TokenSet | None = None, stops: TokenSet | None = None,
                 strict: bool = False) -> None:
        super().__init__()
        self._syntax = syntax
        self._numbering = numbering
        self._schemas = schemas
        self._ends = ends or TokenSet(())
        self._stops = stops or self._ends
        self._strict = strict
        self._state = _START
        self._in_list = False
        self._call_index = -1
        self._name = ""
        self._args: dict[str, Any] = {}
        self._param = ""
        self._parts: list[str] = []
        self._quote = ""
        self._in_string = ""
        self._depth = 0
        self._joined: list[str] = []
        self._item_from = -1  # where the list item being read begins in ``raw``
        self._skip_message = ""
        self._calls_read = 0
        self._escaped = False  # a skipped item's text ended right after a backslash
        self._unshown: list[Event] = []  # skipped items before any call: text if one comes

    # -- the protocol ---------------------------------------------------------------

    def plain_delta(self, text: str) -> list[Event] | None:
        """A string argument's text with no quote (and, escaped, not ending with a backslash,
        which may escape what comes next): taken whole, escapes as written, as
        :meth:`_scan_string` takes it."""
        if self._state != _STRING or self._quote[0] in text or (
                not self._syntax.raw_strings and text.endswith("\\")):
            return None
        self.raw.append(text)  # what _string_piece does, inline: this runs once per token
        self._parts.append(text)
        return [ToolCallDeltaEvent(self._call_index, self._name, text, self._param)]

    def _structure(self, data: str, pos: int, out: list[Event],
                   eof: bool) -> tuple[int, int]:
        """The step of the states between names, arguments and values: blanks, then the
        next piece of the list's structure (:meth:`_step`)."""
        n = len(data)
        start = pos
        pos = skip_blanks(data, pos)
        self.take(data, start, pos)
        if pos >= n:
            if not eof:
                return MORE, n
            state = self._state
            if state == _AFTER_CALL:  # the reply's end shows the calls ended
                if self._in_list:
                    self.notes.append(DiagnosticEvent(
                        "unclosed_call", "the list of calls lacked its closing ']'; "
                        "it ends with the reply", ""))
                self._state = _OVER
                return DONE, n
            return self.unclosed(n)
        return self._step(self._state, data, pos, out, eof)

    def _step(self, state: int, data: str, pos: int, out: list[Event],
              eof: bool) -> tuple[int, int]:
        if state == _START:
            if data[pos] == "[":
                self.take(data, pos, pos + 1)
                self._in_list = True
                self._state = _CALL_NAME
                return GO, pos + 1
            if self._syntax.bare:
                self._state = _CALL_NAME
                return GO, pos
            return self._refuse(pos, "expected a list of calls")
        if state == _CALL_NAME:
            return self._call_name(data, pos, out, eof)
        if state == _ARG:
            return self._arg(data, pos, out, eof)
        if state == _AFTER_STRING:  # Python joins adjacent string literals
            if data[pos] in "'\"":
                state = _VALUE_START
            else:
                text = "".join(self._joined)
                self._set_argument(text, text)
                return GO, pos
        if state == _VALUE_START:
            self._parts = []
            if self._state == _VALUE_START:
                self._joined = []
            if data[pos] in "'\"":
                quote = data[pos]
                if not self._syntax.raw_strings:
                    if not eof and len(data) - pos < 3 and (quote * 3).startswith(data[pos:]):
                        return MORE, pos  # a triple quote, or an empty string?
                    if data.startswith(quote * 3, pos):
                        quote *= 3
                self._quote = quote
                self.take(data, pos, pos + len(quote))
                self._state = _STRING
                return GO, pos + len(quote)
            self._depth = 0
            self._in_string = ""
            self._state = _OTHER
            return GO, pos
        if state == _AFTER_ARG:
            if data[pos] == ",":
                self.take(data, pos, pos + 1)
                self._state = _ARG
                return GO, pos + 1
            if data[pos] == ")":
                self.take(data, pos, pos + 1)
                self._complete_call(out)
                return GO, pos + 1
            return self._refuse(pos, "expected ',' or ')' after an argument")
        # _AFTER_CALL
        if self._in_list and data[pos] == ",":
            self.take(data, pos, pos + 1)
            self._state = _CALL_NAME
            return GO, pos + 1
        if self._in_list and data[pos] == "]":
            self.take(data, pos, pos + 1)
            self._state = _OVER
            return DONE, pos + 1
        if not self._in_list:
            if self._syntax.bare and not data.startswith(self._ends.tokens, pos):
                # bare calls one after another (one per line inside a section)
                name = _NAME.match(data, pos)
                if name is not None and name.end() < len(data) and data[name.end()] == "(":
                    self._state = _CALL_NAME
                    return GO, pos
                if name is not None and name.end() >= len(data) and not eof and \
                        name.end() - pos <= MAX_NAME:
                    return MORE, pos  # a name cut by the delta: a call or text?
            self._state = _OVER
            return DONE, pos
        if data.startswith(self._ends.tokens, pos):  # the list's "]" is missing: its end shows
            self.notes.append(DiagnosticEvent("unclosed_call", "the list of calls lacked its "
                                              "closing ']'; it ends with the section", ""))
            self._state = _OVER
            return DONE, pos
        if not eof and self._ends.is_prefix(data, pos):
            return MORE, pos  # the section's end, cut short by the delta?
        return self._refuse(pos, "expected ',' or ']' after a call")

    def _refuse(self, pos: int, message: str) -> tuple[int, int]:
        if self._in_list and self._item_from >= 0 and not (self._strict and not self.started):
            return self._begin_skip(pos, message)
        self._state = _OVER
        if self._strict and not self.started:
            return self.fail(pos, NOT_A_CALL, message)
        return self.fail(pos, "malformed_call", message + "; shown as text")

    # -- a list item that is not a call -------------------------------------------------

    def _begin_skip(self, pos: int, message: str) -> tuple[int, int]:
        """A list item that is not a call: passed over to the ``,`` or ``]`` after it, so
        one malformed call never loses its neighbours (brackets and quotes are followed
        from the item's start; the section's end or the reply's first fails the list)."""
        self._skip_message = message
        self._depth, self._in_string = 0, ""
        consumed = "".join(self.raw[self._item_from:])
        del self.raw[self._item_from:]
        self._state = _SKIP
        self.raw.append(consumed)
        self._skip_to(consumed, 0)
        return GO, pos

    def _skip_to(self, data: str, pos: int) -> tuple[int, int]:
        """Follow brackets and quotes from ``pos``: ``(_ITEM_END, k)``, the item's ``,`` or
        ``]`` at depth 0; ``(_MARKUP, k)``, a marker of the family first (the list
        cannot go on: the engine reads on from there); ``(_NOT_YET, len(data))``."""
        if self._escaped:  # the character a backslash at the end of the last text escaped
            self._escaped = False
            pos += 1
        while True:
            match = _SKIP_SPECIALS.search(data, pos)
            if match is None:
                return _NOT_YET, len(data)
            k = match.start()
            ch = data[k]
            pos = k + 1
            quote = self._in_string
            if quote:
                if ch == "\\":
                    pos = k + 2
                    self._escaped = pos > len(data)
                elif ch == quote:
                    self._in_string = ""
                continue
            if ch == "<":
                if data.startswith(self._stops.tokens, k):
                    return _MARKUP, k
            elif ch in "'\"":
                self._in_string = ch
            elif ch in "([{":
                self._depth += 1
            elif ch in ")]}" and self._depth > 0:
                self._depth -= 1
            elif ch in ",]" and self._depth == 0:
                return _ITEM_END, k

    def _scan_skip(self, data: str, pos: int, out: list[Event], eof: bool) -> tuple[int, int]:
        depth, quote, escaped = self._depth, self._in_string, self._escaped
        kind, end = self._skip_to(data, pos)
        if kind == _NOT_YET and not eof:
            stop = self._stops.partial(data, pos)
            if stop < len(data):  # a marker, cut short by the delta? scan it again
                self._depth, self._in_string, self._escaped = depth, quote, escaped
                self._skip_to(data[:stop], pos)
            self.take(data, pos, stop)
            return MORE, stop
        if kind != _ITEM_END:  # no end in sight: the rest of the list is text
            self.take(data, pos, end)
            self._state = _OVER
            return self.fail(end, "malformed_call", self._skip_message + "; shown as text")
        self.take(data, pos, end)
        text = "".join(self.raw[self._item_from:])
        shown: list[Event] = [TextEvent(text), DiagnosticEvent(
            "malformed_call", self._skip_message + "; this item of the list is shown as text, "
            "the calls around it are read", text)]
        self._item_from = -1
        if data[end] == "]" and not self._calls_read:  # no item was a call: all is text
            self._state = _OVER
            return self.fail(end, "malformed_call", self._skip_message + "; shown as text")
        if self._calls_read:
            out.extend(shown)
            self.raw = []
        else:  # a list none of whose items is a call is text as a whole: keep it all
            self._unshown.extend(shown)
        self.take(data, end, end + 1)
        if data[end] == ",":
            self._state = _CALL_NAME
            return GO, end + 1
        self._state = _OVER
        return DONE, end + 1

    # -- calls and keywords ------------------------------------------------------------

    def _call_name(self, data: str, pos: int, out: list[Event], eof: bool) -> tuple[int, int]:
        n = len(data)
        if self._in_list and data[pos] == "]" and not self.started:
            return self._refuse(pos, "an empty list of calls")
        self._item_from = len(self.raw)
        match = _NAME.match(data, pos)
        if match is None or match.end() - pos > MAX_NAME:
            return self._refuse(pos, "expected a tool name")
        end = match.end()
        after = skip_blanks(data, end)
        if after >= n:
            return (MORE, pos) if not eof else self.unclosed(n)
        if data[after] != "(":
            return self._refuse(pos, "expected '(' after the tool name")
        self._name = data[pos:end].removesuffix(".call")  # Llama's built-in tool syntax
        self.take(data, pos, after + 1)
        self._call_index = self._numbering.take()
        self.started += 1
        self._args = {}
        out.append(ToolCallStartEvent(index=self._call_index, name=self._name))
        self._state = _ARG
        return GO, after + 1

    def _arg(self, data: str, pos: int, out: list[Event], eof: bool) -> tuple[int, int]:
        n = len(data)
        if data[pos] == ")":
            self.take(data, pos, pos + 1)
            self._complete_call(out)
            return GO, pos + 1
        match = _KEYWORD.match(data, pos)
        if match is None:
            if not eof and n - pos <= MAX_NAME and _PARTIAL_KEYWORD.fullmatch(data, pos):
                return MORE, pos  # a keyword still being written
            return self._refuse(pos, "a positional argument cannot be named")
        if match.end() >= n and not eof:
            return MORE, pos  # '=' might yet be '=='
        self.take(data, pos, match.end())
        self._param = match.group(1)
        self._state = _VALUE_START
        return GO, match.end()

    def _complete_call(self, out: list[Event]) -> None:
        out.extend(self._unshown)  # the items before it that were not calls: text now
        self._unshown = []
        self._calls_read += 1
        out.append(ToolCallEndEvent(name=self._name, arguments=self._args, index=self._call_index))
        self.raw = []
        self._item_from = -1
        self._state = _AFTER_CALL

    def _set_argument(self, value: Any, text: str) -> None:
        if value is None and self._schemas.refuses_null(self._name, self._param):
            value = text.strip()
        self._args[self._param] = value
        self._state = _AFTER_ARG

    # -- strings -------------------------------------------------------------------------

    def _scan_string(self, data: str, pos: int, out: list[Event], eof: bool) -> tuple[int, int]:
        quote = self._quote
        raw = self._syntax.raw_strings
        n = len(data)
        search = pos
        while True:
            k = data.find(quote, search) if raw else _closing_quote(data, search, quote)
            if k == _NEED_MORE:  # the text ends in backslashes or a part of the quote
                end = n if eof else _safe_end(data, pos, quote)  # at the end: all of it
                self._string_piece(data, pos, end, out)
                return (MORE, end) if not eof else self.unclosed(n)
            if k < 0:
                self._string_piece(data, pos, n, out)
                return self.unclosed(n) if eof else (MORE, n)
            verdict = self._after_string(data, k + len(quote), eof) if raw else k
            if verdict == _LITERAL:
                search = k + 1
                continue
            self._string_piece(data, pos, k, out)
            if verdict == _NEED_MORE:
                return MORE, k
            self.take(data, k, k + len(quote))
            text = "".join(self._parts)
            if raw:
                self._set_argument(text, text)
            else:
                value = python_literal(quote + text + quote)
                if not isinstance(value, str):
                    return self._refuse(k + len(quote), "a string argument is not a Python "
                                                         "string")
                self._joined.append(value)
                self._state = _AFTER_STRING
            return GO, k + len(quote)

    def _string_piece(self, data: str, start: int, end: int, out: list[Event]) -> None:
        if end > start:
            text = data[start:end]
            self.raw.append(text)
            self._parts.append(text)
            out.append(ToolCallDeltaEvent(self._call_index, self._name, text, self._param))

    def _after_string(self, data: str, at: int, eof: bool) -> int:
        """Whether a raw string's quote before ``at`` closes it (see the module doc)."""
        n = len(data)
        j = _skip(data, at, at + MAX_GAP)
        if j >= n:
            return at if eof else (_NEED_MORE if j < at + MAX_GAP else _LITERAL)
        if data[j] == ")":
            return self._after_call_end(data, j + 1, eof)
        if data[j] != ",":
            return _LITERAL
        k = _skip(data, j + 1, j + 1 + MAX_GAP)
        match = _KEYWORD.match(data, k)
        if match is None or match.end() >= n:
            if not eof and n - k <= MAX_NAME and (k >= n or _PARTIAL_KEYWORD.fullmatch(data, k)
                                                   or _KEYWORD.fullmatch(data, k)):
                return _NEED_MORE
            return _LITERAL
        return at

    def _after_call_end(self, data: str, at: int, eof: bool) -> int:
        """After a call's ``)``: another call, the list's end, the section's, or the reply's."""
        n = len(data)
        j = _skip(data, at, at + MAX_GAP)
        if j >= n:
            return at if eof else (_NEED_MORE if j < at + MAX_GAP else _LITERAL)
        if (self._in_list and data[j] in ",]") or data.startswith(self._ends.tokens, j):
            return at
        if not eof and self._ends.is_prefix(data, j):
            return _NEED_MORE
        if self._syntax.bare and not self._in_list:  # the next bare call, on its own line
            name = _NAME.match(data, j)
            if name is not None and name.end() < n and data[name.end()] == "(":
                return at
            if name is not None and name.end() >= n and not eof and name.end() - j <= MAX_NAME:
                return _NEED_MORE
        return _LITERAL

    # -- other values ---------------------------------------------------------------------

    def _scan_other(self, data: str, pos: int, out: list[Event], eof: bool) -> tuple[int, int]:
        n = len(data)
        search = pos
        while True:
            match = _OTHER_SPECIALS.search(data, search)
            if match is None:
                self._other_piece(data, pos, n)
                return self.unclosed(n) if eof else (MORE, n)
            k = match.start()
            ch = data[k]
            quote = self._in_string
            if quote:
                if ch == "\\":
                    if k + 1 >= n:
                        self._other_piece(data, pos, k)
                        return (MORE, k) if not eof else self.unclosed(n)
                    search = k + 2
                elif ch == quote:
                    self._in_string = ""
                    search = k + 1
                else:
                    search = k + 1
                continue
            if ch == "<" and data.startswith(self._ends.tokens, k):
                self._other_piece(data, pos, k)
                return self._refuse(k, "the calls ended inside a value")
            if ch == "<" and not eof and self._ends.is_prefix(data, k):
                self._other_piece(data, pos, k)  # the section's end, cut short by the delta?
                return MORE, k
            if ch in "'\"":
                self._in_string = ch
            elif ch in "([{":
                self._depth += 1
            elif ch in ")]}" and self._depth > 0:
                self._depth -= 1
            elif ch in ",)" and self._depth == 0:
                self._other_piece(data, pos, k)
                text = "".join(self._parts)
                value = python_literal(text)
                if value is NOT_LITERAL:
                    return self._refuse(k, "an argument value is not a literal")
                self._set_argument(value, text)
                return GO, k
            search = k + 1

    def _other_piece(self, data: str, start: int, end: int) -> None:
        if end > start:
            self.raw.append(data[start:end])
            self._parts.append(data[start:end])


def _skip(data: str, pos: int, limit: int) -> int:
    n = len(data)
    while pos < n and pos < limit and data[pos] in " \t\r\n":
        pos += 1
    return pos


def _closing_quote(data: str, start: int, quote: str) -> int:
    """The first unescaped ``quote`` at or after ``start``; ``-1``: none; ``_NEED_MORE``:
    the text ends where a backslash or a part of a triple quote leaves it open."""
    k = start
    n = len(data)
    while True:
        k = data.find(quote[0], k)
        if k < 0:
            return _NEED_MORE if data.endswith("\\") else -1
        slashes = 0
        j = k - 1
        while j >= start and data[j] == "\\":
            slashes += 1
            j -= 1
        if slashes % 2 == 0:
            if data.startswith(quote, k):
                return k
            if n - k < len(quote) and quote.startswith(data[k:]):
                return _NEED_MORE
        k += 1


def _safe_end(data: str, pos: int, quote: str) -> int:
    """Where the text may be emitted up to: before a trailing backslash run or part of a quote."""
    end = len(data.rstrip("\\"))
    for size in range(len(quote) - 1, 0, -1):
        if data[:end].endswith(quote[:size]):
            return max(end - size, pos)
    return max(end, pos)


def calls_from_source(source: str) -> list[tuple[str, dict[str, Any]]]:
    """The calls of a complete pythonic list ``[f(a=1), g()]`` (escaped Python strings).

    :raises ValueError: the text is not such a list.
    """
    reader = PythonicCallsReader(PythonicCalls(), CallNumbering(), ToolSchemaIndex({}))
    out: list[Event] = []
    text = source.strip()
    if not text.startswith("["):
        raise ValueError("not a list of calls")
    status, at = reader.feed(text, 0, out, True)
    if status != DONE or text[at:].strip() or any(isinstance(e, DiagnosticEvent) for e in out):
        raise ValueError(reader.message or "not a list of calls")
    return [(e.name, dict(e.arguments)) for e in out if isinstance(e, ToolCallEndEvent)]


PythonicCallsReader.STEPS = tuple(
    {_STRING: PythonicCallsReader._scan_string, _SKIP: PythonicCallsReader._scan_skip,
     _OTHER: PythonicCallsReader._scan_other, _OVER: ReaderBase.over}.get(
        state, PythonicCallsReader._structure) for state in range(_SKIP + 1))  # (by state)
