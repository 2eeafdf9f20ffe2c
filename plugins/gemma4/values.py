"""Gemma 4's object syntax for call arguments.

The template writes arguments as ``{key:value,...}`` with unquoted, sorted keys;
strings sit between ``<|"|>`` tokens, booleans are ``true``/``false``, ``None``
prints as ``None`` and numbers as Python prints them; lists are ``[...]``::

    {city:<|"|>Paris<|"|>,days:3,opts:{a:[1,None,true]}}

:class:`GemmaBody` reads a call body in one pass, streaming top-level string
values as argument deltas; :func:`read_gemma_object` decodes a complete body.
"""

from __future__ import annotations

import json
import re
from typing import Any, Final

__all__ = ["QUOTE", "GemmaBody", "read_gemma_object"]

QUOTE: Final = '<|"|>'
_SCALARS: Final[dict[str, Any]] = {"true": True, "false": False, "null": None, "None": None,
                                   "True": True, "False": False}
_STRUCTURE = re.compile(r'[{}\[\],:]|<\|"\|>')
_SCALAR_END = re.compile(r"[,}\]]")
_BLANKS = re.compile(r"\s*")
_KEY_FORBIDDEN = re.compile(r'[,{}\[\]"]|<\|')


class _Reader:
    """Recursive descent over a complete body."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.pos = 0

    def blanks(self) -> None:
        match = _BLANKS.match(self.text, self.pos)
        if match:
            self.pos = match.end()

    def value(self, depth: int) -> Any:
        if depth > 200:
            raise ValueError("nested too deeply")
        self.blanks()
        text = self.text
        if text.startswith(QUOTE, self.pos):
            return self.string()
        if text.startswith("{", self.pos):
            return self.mapping(depth)
        if text.startswith("[", self.pos):
            return self.sequence(depth)
        return self.scalar()

    def string(self) -> str:
        start = self.pos + len(QUOTE)
        end = self.text.find(QUOTE, start)
        if end < 0:
            raise ValueError("unterminated string")
        self.pos = end + len(QUOTE)
        return self.text[start:end]

    def key(self) -> str:
        self.blanks()
        if self.text.startswith(QUOTE, self.pos):
            name = self.string()
        else:
            end = self.text.find(":", self.pos)
            if end < 0:
                raise ValueError("key without ':'")
            name = self.text[self.pos:end].strip()
            if _KEY_FORBIDDEN.search(name):
                raise ValueError("bad key")
            self.pos = end
        self.blanks()
        if not self.text.startswith(":", self.pos) or not name:
            raise ValueError("bad key")
        self.pos += 1
        return name

    def mapping(self, depth: int) -> dict[str, Any]:
        self.pos += 1
        out: dict[str, Any] = {}
        self.blanks()
        if self.text.startswith("}", self.pos):
            self.pos += 1
            return out
        while True:
            name = self.key()
            out[name] = self.value(depth + 1)
            self.blanks()
            if self.text.startswith(",", self.pos):
                self.pos += 1
                continue
            if self.text.startswith("}", self.pos):
                self.pos += 1
                return out
            raise ValueError("expected ',' or '}'")

    def sequence(self, depth: int) -> list[Any]:
        self.pos += 1
        out: list[Any] = []
        self.blanks()
        if self.text.startswith("]", self.pos):
            self.pos += 1
            return out
        while True:
            out.append(self.value(depth + 1))
            self.blanks()
            if self.text.startswith(",", self.pos):
                self.pos += 1
                continue
            if self.text.startswith("]", self.pos):
                self.pos += 1
                return out
            raise ValueError("expected ',' or ']'")

    def scalar(self) -> Any:
        match = _SCALAR_END.search(self.text, self.pos)
        end = match.start() if match else len(self.text)
        word = self.text[self.pos:end].strip()
        self.pos = end
        if not word:
            raise ValueError("empty value")
        if word in _SCALARS:
            return _SCALARS[word]
        try:
            number = json.loads(word)
        except ValueError:
            return word  # an unquoted word: the model meant text
        if isinstance(number, int | float) and not isinstance(number, bool):
            return number
        return word


def read_gemma_object(text: str) -> dict[str, Any] | None:
    """Decode a complete ``{key:value,...}`` body (``None`` when it is not one)."""
    reader = _Reader(text)
    try:
        reader.blanks()
        if not text.startswith("{", reader.pos):
            return None
        value = reader.mapping(0)
        reader.blanks()
    except (ValueError, RecursionError):
        return None
    if reader.pos != len(text):
        return None
    return value


class GemmaBody:
    """A Gemma call body read in one pass; top-level strings stream as deltas."""

    __slots__ = ("_carry", "_depth", "_expect_key", "_in_string", "_key", "_key_parts",
                 "_parts", "_top_string")

    def __init__(self) -> None:
        self._parts: list[str] = []
        self._carry = ""
        self._depth = 0
        self._in_string = False
        self._top_string = False
        self._expect_key = False
        self._key = ""
        self._key_parts: list[str] = []

    def feed(self, text: str) -> list[tuple[str | None, str]]:
        """Keep the piece; return deltas of top-level string values it holds."""
        self._parts.append(text)
        data = self._carry + text
        self._carry = ""
        out: list[tuple[str | None, str]] = []
        pos = 0
        n = len(data)
        while pos < n:
            if self._in_string:
                end = data.find(QUOTE, pos)
                if end < 0:
                    safe = _partial_quote(data, pos)
                    self._string_piece(data[pos:safe], out)
                    self._carry = data[safe:]
                    return out
                self._string_piece(data[pos:end], out)
                self._in_string = False
                pos = end + len(QUOTE)
                continue
            match = _STRUCTURE.search(data, pos)
            if match is None:
                safe = _partial_quote(data, pos)
                self._key_text(data[pos:safe])
                self._carry = data[safe:]
                return out
            self._key_text(data[pos:match.start()])
            self._structure(match.group(0))
            pos = match.end()
        return out

    def _key_text(self, text: str) -> None:
        if self._expect_key and self._depth == 1 and text:
            self._key_parts.append(text)

    def _string_piece(self, text: str, out: list[tuple[str | None, str]]) -> None:
        if not text:
            return
        if self._top_string:
            out.append((self._key, text))
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

    def finish(self) -> dict[str, Any] | None:
        """Decode the whole body."""
        return read_gemma_object("".join(self._parts))


def _partial_quote(data: str, start: int) -> int:
    """Where a trailing proper prefix of the quote token begins (``len(data)`` if none)."""
    n = len(data)
    for k in range(max(start, n - len(QUOTE) + 1), n):
        if QUOTE.startswith(data[k:]):
            return k
    return n
