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

import functools
import json
import re
from typing import Any, Final

from ..events import Event
from .markers import TokenSet, skip_blanks
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

    One pass with a cursor: the bracket depth outside strings says where the body
    ends, and the body is decoded once, at its end. In a notation without escapes
    (Gemma 4's) a top-level string value is the raw text between its quote tokens,
    so it streams as ``tool_call_delta`` events named by its key while the model
    writes it. With escapes (Python's ``str()`` of a dict) a string's text is not
    its value until its escapes are decoded, which needs the whole string: such a
    value arrives with the call, not as deltas.

    :param syntax: the notation.
    :param call: the call being read.
    """

    __slots__ = ("_any_quote", "_call", "_depth", "_expect_key", "_key", "_key_parts",
                 "_quote", "_quote_sets", "_quotes", "_stream", "_structure", "_syntax",
                 "_top_string")

    def __init__(self, syntax: ObjectLiteral, call: CallContext) -> None:
        super().__init__()
        self._syntax = syntax
        self._call = call
        self._quotes = syntax.quotes()
        self._structure = _structure(self._quotes)
        self._any_quote, self._quote_sets = _quote_sets(self._quotes)
        self._stream = not syntax.escapes
        self._depth = 0
        self._quote = ""  # the quote of the string being read, "" outside strings
        self._top_string = False  # that string is a top-level value (it streams)
        self._expect_key = False  # at depth 1, between '{' or ',' and ':'
        self._key = ""
        self._key_parts: list[str] = []

    def plain_delta(self, text: str) -> list[Event] | None:
        """A top-level string value being written, no quote token in sight: taken whole."""
        if not self._top_string or not text or self._quote in text \
                or self._quote_sets[self._quote].partial(text, 0) < len(text):
            return None
        self.raw.append(text)
        return [self._call.delta(text, self._key)]

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
        while pos < n:
            if self._quote:
                end = self._string_end(data, pos)
                stop = end if end >= 0 else (n if eof else self._string_hold(data, pos))
                self._string_text(data, pos, stop, out)
                if end < 0:
                    return self.unclosed(n) if eof else (MORE, stop)
                self.take(data, end, end + len(self._quote))
                pos = end + len(self._quote)
                self._quote = ""
                self._top_string = False
                continue
            match = self._structure.search(data, pos)
            if match is None:
                safe = n if eof else self._any_quote.partial(data, pos)
                self._key_text(data[pos:safe])
                self.take(data, pos, safe)
                return self.unclosed(n) if eof else (MORE, safe)
            k = match.start()
            token = match.group(0)
            self._key_text(data[pos:k])
            self.take(data, pos, match.end())
            pos = match.end()
            if self._token(token):
                return self._finish(pos)
        return self.unclosed(n) if eof else (MORE, n)

    def _token(self, token: str) -> bool:
        """Structure outside strings; ``True`` at the body's closing bracket."""
        depth = self._depth
        if token in self._quotes:
            self._quote = token
            self._top_string = self._stream and depth == 1 and not self._expect_key
        elif token in "{[":
            self._depth = depth + 1
            if depth == 0:
                self._expect_key = True
                self._key_parts = []
        elif token in "}]":
            self._depth = depth - 1
            return self._depth == 0
        elif depth == 1 and token == ",":
            self._expect_key = True
            self._key_parts = []
        elif depth == 1 and token == ":" and self._expect_key:
            self._key = "".join(self._key_parts).strip()
            self._expect_key = False
        return False

    def _key_text(self, text: str) -> None:
        if self._stream and self._expect_key and self._depth == 1 and text:
            self._key_parts.append(text)

    def _string_text(self, data: str, start: int, end: int, out: list[Event]) -> None:
        """Text inside the open string: a top-level value's streams, a key's is kept."""
        if end <= start:
            return
        text = data[start:end]
        self.raw.append(text)
        if self._top_string:
            out.append(self._call.delta(text, self._key))
        elif self._stream and self._expect_key and self._depth == 1:
            self._key_parts.append(text)

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
        return self._quote_sets[self._quote].partial(data, pos)

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


@functools.lru_cache(maxsize=32)
def _structure(quotes: tuple[str, ...]) -> re.Pattern[str]:
    """What matters outside strings: brackets, separators and the quote tokens."""
    return re.compile("|".join([r"[{}\[\],:]", *map(re.escape, quotes)]))


@functools.lru_cache(maxsize=32)
def _quote_sets(quotes: tuple[str, ...]) -> tuple[TokenSet, dict[str, TokenSet]]:
    """The quote tokens as one set, and each alone (where a delta's end may begin one)."""
    return TokenSet(quotes), {quote: TokenSet((quote,)) for quote in quotes}
