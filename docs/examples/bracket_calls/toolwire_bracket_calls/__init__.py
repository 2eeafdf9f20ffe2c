"""toolwire-bracket-calls: an example toolwire parser plugin.

Models of this (made-up) family write a tool call as one bracketed line::

    Let me look.
    [[call search {"query": "alex", "limit": 5}]]

The plugin is this one module: a ``detect`` function that recognises chat
templates rendering that markup, a streaming parser, and the
``register_parsers`` hook that hands both to toolwire. ``pyproject.toml``
publishes the module in the ``toolwire`` entry-point group.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from typing import Any

import toolwire
from toolwire import DiagnosticEvent, Event, ParserSpec, StreamParser, TextEvent, ToolCallEvent

__all__ = ["FAMILY", "BracketCallParser", "detect", "register_parsers"]

FAMILY = "bracket_calls"
OPEN = "[[call "
CLOSE = "]]"
_MAX_NAME = 128
_IN_STRING = re.compile(r'["\\]')  # what matters inside a JSON string
_STRUCTURE = re.compile(r'["{}\[\]]')  # what matters outside one
_NAME_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.-")


def detect(template: str) -> float:
    """Score a chat template: ``0.8`` when it renders ``[[call NAME {json}]]``, else ``0.0``."""
    return 0.8 if OPEN in template else 0.0


class BracketCallParser:
    """Turns one reply into events, a delta at a time; never raises.

    It keeps a cursor: each character is looked at once. Outside a call, only a
    trailing ``[[call `` prefix (at most six characters) and trailing blanks are
    held back. Inside a call it scans the JSON arguments with a small state
    machine (string, escape, nesting depth) to find where the object ends, so
    ``]]`` inside a string value does not end the call.
    """

    def __init__(self, tools: Mapping[str, Any]) -> None:
        self._tools = tools  # JSON arguments carry their types; names are not checked here
        self._pending = ""  # a possible start of OPEN at the end of the text so far
        self._blank = ""  # trailing whitespace, dropped if a call follows
        self._calls = 0
        self._in_call = False
        self._raw: list[str] = []  # blanks before the call, then its text so far
        self._phase = "name"  # inside a call: name, json, close
        self._name: list[str] = []
        self._depth = 0
        self._in_string = False
        self._escaped = False
        self._closing = 0

    def feed(self, text: str) -> list[Event]:
        """Consume the next delta; return the events it makes certain."""
        out: list[Event] = []
        try:
            self._run(self._pending + text, out)
        except Exception as exc:  # a parser bug must never take down a chat
            out.append(DiagnosticEvent("parser_error", f"bracket_calls failed: {exc!r}"))
        return out

    def close(self) -> list[Event]:
        """The reply ended: flush what is held back."""
        out: list[Event] = []
        if self._in_call:
            self._abandon(out, "unclosed_call", "the reply ended inside a [[call ...]]")
        self._text(self._pending, out)
        self._pending = ""
        if self._blank:
            out.append(TextEvent(self._blank))
            self._blank = ""
        return out

    # -- outside a call -------------------------------------------------------------

    def _run(self, data: str, out: list[Event]) -> None:
        self._pending = ""
        pos = 0
        while pos < len(data):
            if self._in_call:
                pos = self._scan_call(data, pos, out)
                continue
            found = data.find(OPEN, pos)
            if found < 0:
                keep = _partial_suffix(data, pos, OPEN)
                self._text(data[pos:len(data) - keep], out)
                self._pending = data[len(data) - keep:]
                return
            self._text(data[pos:found], out)
            self._start_call()
            pos = found + len(OPEN)

    def _text(self, text: str, out: list[Event]) -> None:
        if not text:
            return
        combined = self._blank + text
        shown = combined.rstrip()
        self._blank = combined[len(shown):]
        if shown:
            out.append(TextEvent(shown))

    # -- inside a call ----------------------------------------------------------------

    def _start_call(self) -> None:
        # Blanks before a call only separate it from the text: dropped, unless the
        # call turns out to be malformed.
        self._raw = [self._blank, OPEN]
        self._blank = ""
        self._in_call = True
        self._phase = "name"
        self._name = []
        self._depth = 0
        self._in_string = False
        self._escaped = False
        self._closing = 0

    def _scan_call(self, data: str, pos: int, out: list[Event]) -> int:
        """Read call characters from ``pos``; return where the scan stopped."""
        start = pos
        while pos < len(data):
            char = data[pos]
            if self._phase == "name":
                if char == " " and self._name:
                    self._phase = "json"
                elif char in _NAME_CHARS and len(self._name) < _MAX_NAME:
                    self._name.append(char)
                else:
                    return self._malformed(data, start, pos, out)
            elif self._phase == "json":
                if self._depth == 0 and char != "{":
                    return self._malformed(data, start, pos, out)
                pos = self._scan_json(data, pos)
                if self._depth == 0:
                    self._phase = "close"
                continue
            else:
                if char != CLOSE[self._closing]:
                    return self._malformed(data, start, pos, out)
                self._closing += 1
                if self._closing == len(CLOSE):
                    self._raw.append(data[start:pos + 1])
                    self._finish_call(out)
                    return pos + 1
            pos += 1
        self._raw.append(data[start:pos])
        return pos

    def _scan_json(self, data: str, pos: int) -> int:
        """Follow the JSON object from ``pos``; stop after its end or at the end of ``data``.

        A regular expression jumps to the next character that matters, so a long
        string value costs one search rather than a loop over its characters.
        """
        while pos < len(data):
            if self._in_string and self._escaped:  # the character after a backslash
                self._escaped = False
                pos += 1
                continue
            found = (_IN_STRING if self._in_string else _STRUCTURE).search(data, pos)
            if found is None:
                return len(data)
            pos = found.end()
            char = found.group()
            if self._in_string:
                if char == "\\":
                    self._escaped = True
                else:
                    self._in_string = False
            elif char == '"':
                self._in_string = True
            elif char in "{[":
                self._depth += 1
            else:
                self._depth -= 1
                if self._depth == 0:
                    return pos
        return pos

    def _finish_call(self, out: list[Event]) -> None:
        name = "".join(self._name)
        body = "".join(self._raw[1:])[len(OPEN) + len(name) + 1:-len(CLOSE)]
        try:
            arguments = json.loads(body)
        except ValueError:
            arguments = None
        if not isinstance(arguments, dict):
            self._abandon(out, "malformed_call", "the arguments are not a JSON object")
            return
        out.append(ToolCallEvent(name=name, arguments=arguments, index=self._calls))
        self._calls += 1
        self._in_call = False

    def _malformed(self, data: str, start: int, pos: int, out: list[Event]) -> int:
        """Not a call after all: show its text; rescan from the character that broke it."""
        self._raw.append(data[start:pos])
        self._abandon(out, "malformed_call", "[[call ...]] without a name and JSON object")
        return pos

    def _abandon(self, out: list[Event], code: str, message: str) -> None:
        raw = "".join(self._raw)
        self._in_call = False
        self._raw = []
        out.append(TextEvent(raw))
        out.append(DiagnosticEvent(code, message, raw))


def _partial_suffix(data: str, start: int, tag: str) -> int:
    """The length of the longest end of ``data[start:]`` that begins ``tag``."""
    for size in range(min(len(tag) - 1, len(data) - start), 0, -1):
        if tag.startswith(data[len(data) - size:]):
            return size
    return 0


def _create(tools: Mapping[str, Any]) -> StreamParser:
    return BracketCallParser(tools)


@toolwire.hookimpl
def register_parsers(register: Callable[[ParserSpec], None]) -> None:
    """Register the ``bracket_calls`` family."""
    register(ParserSpec(name=FAMILY, detect=detect, create=_create,
                        description="[[call NAME {json}]] bracketed calls (example plugin)"))
