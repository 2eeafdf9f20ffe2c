"""Gemma 4's object syntax for call arguments.

The template writes arguments as ``{key:value,...}`` with unquoted, sorted keys;
strings sit between ``<|"|>`` tokens, booleans are ``true``/``false``, ``None``
prints as ``None`` and numbers as Python prints them; lists are ``[...]``::

    {city:<|"|>Paris<|"|>,days:3,opts:{a:[1,None,true]}}

:class:`GemmaArgsReader` reads a call body in one pass, streaming top-level string
values as argument deltas; :func:`read_gemma_object` decodes a complete body.
"""

from __future__ import annotations

import re
from typing import Any, Final

from toolwire.plugin_api import (
    DONE,
    MORE,
    CallContext,
    Event,
    ObjectLiteral,
    ReaderBase,
    read_object_literal,
)

__all__ = ["QUOTE", "SYNTAX", "GemmaArgsReader", "read_gemma_object"]

QUOTE: Final = '<|"|>'
_SCALARS: Final[dict[str, Any]] = {"true": True, "false": False, "null": None, "None": None,
                                   "True": True, "False": False}
_STRUCTURE = re.compile(r'[{}\[\],:]|<\|"\|>')
_SCALAR_END = re.compile(r"[,}\]]")
_BLANKS = re.compile(r"\s*")
_KEY_FORBIDDEN = re.compile(r'[,{}\[\]"]|<\|')


SYNTAX: Final = ObjectLiteral(quote=QUOTE, escapes=False)
"""The notation as the core's object-literal decoder reads it (derived records share it)."""


def read_gemma_object(text: str) -> dict[str, Any] | None:
    """Decode a complete ``{key:value,...}`` body (``None`` when it is not one)."""
    return read_object_literal(SYNTAX, text)


class GemmaArgsReader(ReaderBase):
    """Reads one call's ``{key:value,...}`` body, from its ``{`` to the matching ``}``.

    One pass with a cursor: the bracket depth (outside strings) says where the
    body ends; top-level string values stream as argument deltas; the whole
    body is decoded once, at its end, by :func:`read_gemma_object`.
    """

    __slots__ = ("_call", "_depth", "_expect_key", "_in_string", "_key", "_key_parts",
                 "_top_string")

    def __init__(self, call: CallContext) -> None:
        super().__init__()
        self._call = call
        self._depth = 0
        self._in_string = False
        self._top_string = False
        self._expect_key = False
        self._key = ""
        self._key_parts: list[str] = []

    def feed(self, data: str, pos: int, out: list[Event], eof: bool) -> tuple[int, int]:
        """Consume from ``pos``; see :mod:`toolwire.parse.readers`."""
        n = len(data)
        if self._depth == 0 and not self.raw:
            start = pos
            while pos < n and data[pos] in " \t\r\n":
                pos += 1
            self.take(data, start, pos)
            if pos >= n:
                return self.unclosed(n) if eof else (MORE, n)
            if data[pos] != "{":
                return self.fail(pos, "malformed_arguments", "expected Gemma arguments "
                                                             "'{...}'; shown as text")
        while pos < n:
            if self._in_string:
                end = data.find(QUOTE, pos)
                if end < 0:
                    safe = n if eof else _partial_quote(data, pos)
                    self._string_piece(data, pos, safe, out)
                    if eof:
                        return self.unclosed(n)
                    return MORE, safe
                self._string_piece(data, pos, end, out)
                self.take(data, end, end + len(QUOTE))
                self._in_string = False
                pos = end + len(QUOTE)
                continue
            match = _STRUCTURE.search(data, pos)
            if match is None:
                safe = n if eof else _partial_quote(data, pos)
                self._key_text(data[pos:safe])
                self.take(data, pos, safe)
                if eof:
                    return self.unclosed(n)
                return MORE, safe
            self._key_text(data[pos:match.start()])
            self.take(data, pos, match.end())
            self._structure(match.group(0))
            pos = match.end()
            if self._depth == 0:
                return self._finish(pos)
        return self.unclosed(n) if eof else (MORE, n)

    def _finish(self, pos: int) -> tuple[int, int]:
        arguments = read_gemma_object("".join(self.raw).strip())
        if arguments is None:
            return self.fail(pos, "malformed_arguments", "the arguments are not a Gemma "
                                                         "object; shown as text")
        self.arguments = self._null_rule(arguments)
        return DONE, pos

    def _null_rule(self, arguments: dict[str, Any]) -> dict[str, Any]:
        """``None`` stays ``None`` only where the parameter's schema allows null."""
        schemas = self._call.schemas
        name = self._call.name
        for key, value in arguments.items():
            if value is None and schemas.refuses_null(name, key):
                arguments[key] = "None"
        return arguments

    def _key_text(self, text: str) -> None:
        if self._expect_key and self._depth == 1 and text:
            self._key_parts.append(text)

    def _string_piece(self, data: str, start: int, end: int, out: list[Event]) -> None:
        if end <= start:
            return
        text = data[start:end]
        self.raw.append(text)
        if self._top_string:
            out.append(self._call.delta(text, self._key))
        elif self._expect_key and self._depth == 1:
            self._key_parts.append(text)

    def _structure(self, token: str) -> None:
        depth = self._depth
        if token == QUOTE:
            self._in_string = True
            self._top_string = depth == 1 and not self._expect_key
        elif token in "{[":
            self._depth = depth + 1
            if depth == 0:
                self._expect_key = True
                self._key_parts = []
        elif token in "}]":
            self._depth = depth - 1
        elif depth == 1 and token == ",":
            self._expect_key = True
            self._key_parts = []
        elif depth == 1 and token == ":" and self._expect_key:
            self._key = "".join(self._key_parts).strip()
            self._expect_key = False


def _partial_quote(data: str, start: int) -> int:
    """Where a trailing proper prefix of the quote token begins (``len(data)`` if none)."""
    n = len(data)
    for k in range(max(start, n - len(QUOTE) + 1), n):
        if QUOTE.startswith(data[k:]):
            return k
    return n
