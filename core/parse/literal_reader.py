"""Reading arguments written as an object literal that is not JSON.

Two kinds of template write a call's arguments as a mapping literal of their own,
where no closing marker ends each value and only the grammar says where a value
(and the body) ends:

* a family's own notation, as Gemma 4's ``{city:<|"|>Paris<|"|>,days:3}``: bare
  keys, strings between a quote *token* and taken raw (no escapes);
* Python's ``str()`` of a dict, ``{'city': 'Paris', 'days': 3, 'ok': True}``:
  strings in ``'`` or ``"`` (whichever Python chose for that string) with
  backslash escapes, ``True``/``None`` spelt the Python way.

:class:`~toolwire.parse.record.ObjectLiteral` describes the notation;
:class:`LiteralObjectReader` reads one call's body in one pass with a cursor
(the bracket depth outside strings says where it ends) and decodes it once at its
end. ``None`` (or ``null``) stays null only where the parameter's schema allows
null; elsewhere it is the text as written.
"""

from __future__ import annotations

import json
import re
from typing import Any, Final

from ..events import Event
from .markers import skip_blanks
from .readers import DONE, MORE, CallContext, ReaderBase
from .record import ObjectLiteral
from .values import is_literal, python_literal

__all__ = ["LiteralObjectReader", "read_object_literal"]

_SCALARS: Final[dict[str, Any]] = {"true": True, "false": False, "null": None,
                                   "True": True, "False": False, "None": None}
_BLANKS = re.compile(r"[ \t\r\n]*")
_SCALAR_END = re.compile(r"[,}\]]")
_BARE_KEY_FORBIDDEN = re.compile(r'[,{}\[\]"]')
_MAX_DEPTH: Final = 200


class _Decoder:
    """Recursive descent over a complete body in a notation with a quote token."""

    def __init__(self, syntax: ObjectLiteral, text: str) -> None:
        self.quotes = syntax.quotes()
        self.text = text
        self.pos = 0

    def blanks(self) -> None:
        match = _BLANKS.match(self.text, self.pos)
        if match:
            self.pos = match.end()

    def quote_at(self) -> str | None:
        return next((q for q in self.quotes if self.text.startswith(q, self.pos)), None)

    def value(self, depth: int) -> Any:
        if depth > _MAX_DEPTH:
            raise ValueError("nested too deeply")
        self.blanks()
        quote = self.quote_at()
        if quote is not None:
            return self.string(quote)
        if self.text.startswith("{", self.pos):
            return self.mapping(depth)
        if self.text.startswith("[", self.pos):
            return self.sequence(depth)
        return self.scalar()

    def string(self, quote: str) -> str:
        start = self.pos + len(quote)
        end = self.text.find(quote, start)
        if end < 0:
            raise ValueError("unterminated string")
        self.pos = end + len(quote)
        return self.text[start:end]

    def key(self) -> str:
        self.blanks()
        quote = self.quote_at()
        if quote is not None:
            name = self.string(quote)
        else:
            end = self.text.find(":", self.pos)
            if end < 0:
                raise ValueError("a key without ':'")
            name = self.text[self.pos:end].strip()
            if len(name) > 1 and name[0] == name[-1] == '"':  # a JSON key inside the notation
                name = _json_word(name, name)
            elif _BARE_KEY_FORBIDDEN.search(name) or any(q in name for q in self.quotes):
                raise ValueError("not a bare key")  # structure or a string inside: malformed
            self.pos = end
        self.blanks()
        if not name or not self.text.startswith(":", self.pos):
            raise ValueError("not a key")
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
            if self.after_item("}"):
                return out

    def sequence(self, depth: int) -> list[Any]:
        self.pos += 1
        out: list[Any] = []
        self.blanks()
        if self.text.startswith("]", self.pos):
            self.pos += 1
            return out
        while True:
            out.append(self.value(depth + 1))
            if self.after_item("]"):
                return out

    def after_item(self, close: str) -> bool:
        """Past a ``,`` (``False``: another item follows) or the closing bracket."""
        self.blanks()
        if self.text.startswith(",", self.pos):
            self.pos += 1
            return False
        if self.text.startswith(close, self.pos):
            self.pos += 1
            return True
        raise ValueError(f"expected ',' or {close!r}")

    def scalar(self) -> Any:
        match = _SCALAR_END.search(self.text, self.pos)
        end = match.start() if match else len(self.text)
        word = self.text[self.pos:end].strip()
        self.pos = end
        if not word:
            raise ValueError("an empty value")
        if word in _SCALARS:
            return _SCALARS[word]
        value = _json_word(word, word)  # numbers, and JSON strings written inside the notation
        return value if isinstance(value, int | float | str) and not isinstance(value, bool) \
            else word


def _json_word(word: str, default: Any) -> Any:
    """``word`` read as JSON, or ``default`` (an unquoted word: the model meant text)."""
    try:
        return json.loads(word)
    except ValueError:
        return default


def read_object_literal(syntax: ObjectLiteral, text: str) -> dict[str, Any] | None:
    """Decode a complete body ``{...}`` in ``syntax`` (``None`` when it is not one)."""
    stripped = text.strip()
    if not stripped.startswith("{"):
        return None
    if syntax.escapes:  # Python's (and JSON's) own literals, read without evaluating
        value = python_literal(stripped)
        return value if is_literal(value) and isinstance(value, dict) else None
    decoder = _Decoder(syntax, stripped)
    try:
        value = decoder.mapping(0)
        decoder.blanks()
    except (ValueError, RecursionError):
        return None
    return value if decoder.pos == len(stripped) else None


class LiteralObjectReader(ReaderBase):
    """Reads one call's ``{...}`` body, from its ``{`` to the matching ``}``.

    :param syntax: the notation.
    :param call: the call being read.
    """

    __slots__ = ("_call", "_depth", "_quote", "_syntax")

    def __init__(self, syntax: ObjectLiteral, call: CallContext) -> None:
        super().__init__()
        self._syntax = syntax
        self._call = call
        self._depth = 0
        self._quote = ""  # the quote of the string being read, "" outside strings

    def feed(self, data: str, pos: int, out: list[Event], eof: bool) -> tuple[int, int]:
        """Consume from ``pos``; see :mod:`toolwire.parse.readers`."""
        n = len(data)
        if self._depth == 0 and not self.raw:
            start = pos
            pos = skip_blanks(data, pos)
            self.take(data, start, pos)
            if pos >= n:
                return self.unclosed(n) if eof else (MORE, n)
            if data[pos] != "{":
                return self.fail(pos, "malformed_arguments", "expected arguments '{...}'; "
                                                             "shown as text")
        quotes = self._syntax.quotes()
        longest = max(len(q) for q in quotes)
        start = pos
        while pos < n:
            if self._quote:
                end = self._string_end(data, pos)
                if end < 0:
                    safe = n if eof else self._string_hold(data, pos)
                    self.take(data, start, safe)
                    return self.unclosed(n) if eof else (MORE, safe)
                pos = end + len(self._quote)
                self._quote = ""
                continue
            ch = data[pos]
            if ch in "{[":
                self._depth += 1
            elif ch in "}]":
                self._depth -= 1
                if self._depth == 0:
                    self.take(data, start, pos + 1)
                    return self._finish(pos + 1)
            else:
                quote = next((q for q in quotes if data.startswith(q, pos)), None)
                if quote is None and not eof and n - pos < longest and \
                        any(q.startswith(data[pos:]) for q in quotes):
                    self.take(data, start, pos)
                    return MORE, pos  # a quote token cut by the delta
                if quote is not None:
                    self._quote = quote
                    pos += len(quote)
                    continue
            pos += 1
        self.take(data, start, n)
        return self.unclosed(n) if eof else (MORE, n)

    def _string_end(self, data: str, pos: int) -> int:
        """Where the open string's closing quote starts (``-1``: not in ``data``)."""
        quote = self._quote
        if not self._syntax.escapes:
            return data.find(quote, pos)
        while True:
            end = data.find(quote, pos)
            escape = data.find("\\", pos)
            if end < 0 or escape < 0 or escape > end:
                return end
            if escape + 1 >= len(data):
                return -1  # the escaped character is in the next delta
            pos = escape + 2

    def _string_hold(self, data: str, pos: int) -> int:
        """Where to stop in an open string so the next delta decides: before a trailing
        escape or a trailing part of the closing quote."""
        n = len(data)
        if self._syntax.escapes:
            k = n
            while k > pos and data[k - 1] == "\\":
                k -= 1
            if (n - k) % 2:
                return n - 1  # an escape whose character is in the next delta
        return _partial(data, pos, (self._quote,))

    def _finish(self, pos: int) -> tuple[int, int]:
        arguments = read_object_literal(self._syntax, "".join(self.raw))
        if arguments is None:
            return self.fail(pos, "malformed_arguments", "the arguments are not an object "
                                                         "literal; shown as text")
        self.arguments = self._null_rule(arguments)
        return DONE, pos

    def _null_rule(self, arguments: dict[str, Any]) -> dict[str, Any]:
        """``None`` stays ``None`` only where the parameter's schema allows null."""
        schemas, name = self._call.schemas, self._call.name
        for key, value in arguments.items():
            if value is None and schemas.refuses_null(name, key):
                arguments[key] = "None"
        return arguments


def _partial(data: str, start: int, tokens: tuple[str, ...]) -> int:
    """Where a trailing proper prefix of one of ``tokens`` begins (``len(data)`` if none)."""
    n = len(data)
    longest = max(len(t) for t in tokens)
    for k in range(max(start, n - longest + 1), n):
        if any(t.startswith(data[k:]) and len(t) > n - k for t in tokens):
            return k
    return n
