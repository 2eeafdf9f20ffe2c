"""Finding markers in streamed text, and reading the headers between them.

:class:`TokenSet` finds the earliest of a set of literal tokens, and tells
whether the end of the text so far may be the start of one (that tail is held
back until the next delta decides). :func:`compile_header` turns a
:class:`~toolwire.parse.record.Header` into a function that reads a header's
text. What counts as a name is decided once, here, for every family.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Iterable
from typing import Any, Final

import attrs

from .record import Header

__all__ = [
    "MAX_GAP",
    "MAX_NAME",
    "NOTHING_HELD",
    "CallStart",
    "HeaderFields",
    "TokenSet",
    "attribute",
    "attributes",
    "compile_header",
    "skip_blanks",
    "token_set",
    "valid_attribute_name",
    "valid_name",
]

MAX_NAME: Final = 256
"""The longest tool or parameter name read from markup."""
MAX_GAP: Final = 64
"""Blanks allowed between a closing marker and the marker that confirms it."""
NOTHING_HELD: Final[frozenset[str]] = frozenset()
"""No beginning of markup that a scanner would hold all of back again is held back (what
a reader or the engine's parse state says after every other hold, or none)."""

_NAME_CHARS = r"[^\s<>\"'{}()\[\],|｜;=]"
_NAME_RE = re.compile(_NAME_CHARS + "{1,256}")
_BLANKS = re.compile(r"[ \t\r\n]*")
_CONTROL_RE = re.compile(r"[\x00-\x1f\x7f]")
_ATTR_RE = re.compile(r"""([A-Za-z_][\w:.-]*)\s*=\s*(?:"([^"]*)"|'([^']*)')""")
_ENTITIES = {"&quot;": '"', "&apos;": "'", "&lt;": "<", "&gt;": ">", "&amp;": "&"}
_ENTITY_RE = re.compile("|".join(map(re.escape, _ENTITIES)))
_HOLES = {
    "name": f"(?P<name>{_NAME_CHARS}{{1,256}})",
    "id": r"(?P<id>[^\s<>\"']{1,128})",
    "index": r"(?P<index>[0-9]{1,9})",
    "kind": r"(?P<kind>[A-Za-z_]{1,32})",
    "any": r"[^\s<>\"']{1,128}",
}
_HOLE_RE = re.compile(r"\{(name|id|index|kind|any)\}")


def valid_name(name: str) -> bool:
    """Whether ``name`` can be a tool or parameter name.

    No blanks, quotes, brackets, pipes, ``;`` or ``=``, and not starting with ``/``
    (a closing tag's name); at most :data:`MAX_NAME` characters.
    """
    return _NAME_RE.fullmatch(name) is not None and not name.startswith("/")


def valid_attribute_name(name: str) -> bool:
    """Whether ``name``, read from a quoted attribute (entities decoded), can be a name.

    The quotes delimit it, so it may hold what a bare name may not (a parameter key
    with ``"`` written as ``&quot;``); only control characters, and more than
    :data:`MAX_NAME` characters, are refused.
    """
    return 0 < len(name) <= MAX_NAME and _CONTROL_RE.search(name) is None


def skip_blanks(data: str, pos: int) -> int:
    """The first position at or after ``pos`` that is not a blank."""
    if pos >= len(data) or data[pos] not in " \t\r\n":  # (most often: no call into ``re``,
        return pos  # whose every match allocates its stack)
    match = _BLANKS.match(data, pos)
    return match.end() if match else pos


def attributes(header: str) -> dict[str, str]:
    """Every ``key="value"`` of a tag header, XML entities decoded."""
    found: dict[str, str] = {}
    for match in _ATTR_RE.finditer(header):
        value = match.group(2) if match.group(2) is not None else match.group(3)
        found.setdefault(match.group(1), _ENTITY_RE.sub(lambda m: _ENTITIES[m.group(0)], value))
    return found


def attribute(header: str, key: str) -> str | None:
    """The value of ``key="..."`` in a tag header, XML entities decoded."""
    return attributes(header).get(key)


class TokenSet:
    """A set of literal tokens: find the earliest one, or a trailing partial one.

    :param tokens: the tokens (any first character; longer ones win at one position).

    :ivar search: ``search(data, pos[, endpos])``, what :meth:`find` does, as the compiled
        pattern's own method: the engine's scanners call it once or more per delta, and
        it runs without a Python call around it.
    :ivar prefixes: the tokens' proper beginnings (a test of one is a set lookup, no call).
    """

    __slots__ = ("__dict__", "firsts", "longest", "prefixes", "regex", "search", "tokens")

    def __init__(self, tokens: Iterable[str]) -> None:
        self.tokens = tuple(sorted({t for t in tokens if t}, key=len, reverse=True))
        self.regex = re.compile("|".join(map(re.escape, self.tokens))) if self.tokens else None
        self.search: Callable[..., re.Match[str] | None] = (
            self.regex.search if self.regex is not None else _NOTHING.search)
        self.firsts = frozenset(t[0] for t in self.tokens)
        self.longest = max((len(t) for t in self.tokens), default=0)
        self.prefixes = frozenset(t[:i] for t in self.tokens for i in range(1, len(t)))

    def __bool__(self) -> bool:
        return bool(self.tokens)

    def __contains__(self, token: object) -> bool:
        return token in self.tokens

    def find(self, data: str, pos: int, endpos: int | None = None) -> re.Match[str] | None:
        """The earliest token at or after ``pos`` (ending by ``endpos``, when given)."""
        if self.regex is None:
            return None
        if endpos is None:
            return self.regex.search(data, pos)
        return self.regex.search(data, pos, endpos)

    def at(self, data: str, pos: int) -> str | None:
        """The token that starts exactly at ``pos``, if any (where only whether one does
        matters, ``data.startswith(tokens, pos)`` answers without a Python call)."""
        if pos < len(data) and data[pos] in self.firsts and data.startswith(self.tokens, pos):
            for token in self.tokens:  # (which one: the longest, they are sorted so)
                if data.startswith(token, pos):
                    return token
        return None

    def partial(self, data: str, start: int) -> int:
        """Where a trailing proper prefix of a token begins (``len(data)`` if none).

        Looks only at the last ``longest - 1`` characters of ``data[start:]``.
        """
        n = len(data)
        low = max(start, n - self.longest + 1)
        best = n
        prefixes = self.prefixes
        for first in self.firsts:  # where a token may begin: found, not stepped through
            k = data.find(first, low, best)
            while k >= 0:
                if data[k:] in prefixes:
                    best = k
                    break
                k = data.find(first, k + 1, best)
        return best

    @functools.cached_property
    def unbroken_prefixes(self) -> frozenset[str]:
        """The proper beginnings that hold no whole token: a scanner of this set holds all
        of such a text back (:meth:`find` finds nothing in it, :meth:`partial` is 0)."""
        return frozenset(p for p in self.prefixes if self.find(p, 0) is None)

    def held_after(self, *read_first: str) -> frozenset[str]:
        """Of :attr:`unbroken_prefixes`, those a scanner that first skips blanks and reads
        any of ``read_first`` (empty ones ignored) at the position still holds all of back."""
        first = tuple(t for t in read_first if t)
        return frozenset(p for p in self.unbroken_prefixes
                         if skip_blanks(p, 0) == 0 and not p.startswith(first))

    @functools.cached_property
    def token_or_beginning_pattern(self) -> re.Pattern[str] | None:
        """The pattern :meth:`token_or_beginning` searches with (``None``: no tokens)."""
        if not self.tokens:
            return None
        trie: dict[str, Any] = {}
        for token in self.tokens:  # the proper beginnings, as a trie: one walk per start
            node = trie
            for char in token[:-1]:
                node = node.setdefault(char, {})
        # One alternative per first character, which it begins with as a literal, so the
        # search skips in C to where a token can begin (a pattern opening with a group
        # tries every position: twice the cost a delta). After that character: a whole
        # token (group ``t<i>``, tokens in their order) or, at the end, a proper beginning.
        firsts = list(dict.fromkeys(token[0] for token in self.tokens))
        alternatives = []
        for index, first in enumerate(firsts):
            rests = "|".join(re.escape(t[1:]) for t in self.tokens if t[0] == first)
            alternative = f"{re.escape(first)}(?:(?P<t{index}>{rests})"
            if first in trie:
                rest = _trie_pattern(trie[first])
                alternative += "|" + (f"(?:{rest})?+" if rest else "") + r"\Z"
            alternatives.append(alternative + ")")
        return re.compile("|".join(alternatives))

    def token_or_beginning(self, data: str, pos: int) -> re.Match[str] | None:
        """The earliest token at or after ``pos`` (its match has a ``lastgroup``), or,
        where none comes first, the beginning of one that ends ``data``; in one search."""
        pattern = self.token_or_beginning_pattern
        return pattern.search(data, pos) if pattern is not None else None

    def touches(self, text: str) -> bool:
        """Whether ``text`` holds a token, or ends with the beginning of one."""
        tokens = self.tokens
        prefixes = self.prefixes
        for first in self.firsts:
            k = text.find(first)
            while k >= 0:
                if text.startswith(tokens, k) or text[k:] in prefixes:
                    return True
                k = text.find(first, k + 1)
        return False

    def is_prefix(self, data: str, start: int) -> bool:
        """Whether ``data[start:]`` is a proper prefix of a token (more text may complete it)."""
        if len(data) - start >= self.longest:  # too long to be a proper prefix (no slice)
            return False
        return data[start:] in self.prefixes


_NOTHING: Final = re.compile(r"(?!)")
"""A pattern that matches nowhere (the search of an empty :class:`TokenSet`)."""


def _trie_pattern(node: dict[str, Any]) -> str:
    """A regular expression matching a non-empty path down ``node`` (each step optional
    after the first)."""
    parts = []
    for char, child in sorted(node.items()):
        rest = _trie_pattern(child)
        parts.append(re.escape(char) + (f"(?:{rest})?+" if rest else ""))
    return "|".join(parts)


@functools.lru_cache(maxsize=1024)
def token_set(tokens: tuple[str, ...]) -> TokenSet:
    """A shared :class:`TokenSet` of ``tokens`` (built once: readers ask per value)."""
    return TokenSet(tokens)


@attrs.frozen
class HeaderFields:
    """What a header says.

    :ivar name: the tool or parameter name.
    :ivar call_id: the call id, when the markup writes one.
    :ivar kind: the value kind the header implies (``string``, ``json``, or ``None``).
    """

    name: str
    call_id: str = ""
    kind: str | None = None


HeaderReader = Callable[[str], HeaderFields | None]


def compile_header(header: Header) -> HeaderReader:
    """A function reading a header's text into :class:`HeaderFields` (``None``: not one)."""
    kinds = dict(header.kinds)

    def kind_of(value: str | None) -> str | None:
        if value is None or not kinds:
            return None
        return kinds.get(value.strip(), kinds.get("*"))

    if header.attributes:
        keys = dict(header.attributes)

        def read_attributes(text: str) -> HeaderFields | None:
            found = attributes(text)
            name = found.get(keys.get("name", "name"), "").strip()
            if not valid_attribute_name(name):
                return None
            call_id = found.get(keys["id"], "") if "id" in keys else ""
            kind = kind_of(found.get(keys["kind"])) if "kind" in keys else None
            return HeaderFields(name, text.strip() if header.id_is_header else call_id, kind)

        return read_attributes
    patterns = [re.compile(r"\s*" + _pattern_regex(p) + r"\s*", re.DOTALL)
                for p in header.patterns]

    def read_patterns(text: str) -> HeaderFields | None:
        for pattern in patterns:
            match = pattern.fullmatch(text)
            if match is None:
                continue
            groups = match.groupdict()
            name = groups.get("name") or ""
            if not valid_name(name):
                continue
            call_id = text.strip() if header.id_is_header else (groups.get("id") or "")
            return HeaderFields(name, call_id, kind_of(groups.get("kind")))
        return None

    return read_patterns


def _pattern_regex(pattern: str) -> str:
    out: list[str] = []
    pos = 0
    seen: set[str] = set()
    for match in _HOLE_RE.finditer(pattern):
        out.append(re.escape(pattern[pos:match.start()]))
        hole = match.group(1)
        # a hole written twice is one value, checked equal (a name in a header and again
        # in the call's own markup: Muse Glimmer's to=NAME ... name="NAME")
        out.append(f"(?P={hole})" if hole in seen and hole != "any" else _HOLES[hole])
        seen.add(hole)
        pos = match.end()
    out.append(re.escape(pattern[pos:]))
    return "".join(out)


class CallStart:
    """Whether a call's opening markup begins at a position: the next call, read ahead.

    A call begins with its opening marker (after a section's, when one opens the
    block) and a header that reads as a name, up to a marker that ends it. Only
    that bounded lookahead is read; nothing is consumed.

    :param call_open: the markers opening one call (none: the header comes first).
    :param section_open: the markers opening a block of calls.
    :param header: how the call's header names the tool.
    :param header_ends: the markers that end a call's header (consumed or not).
    """

    __slots__ = ("_calls", "_ends", "_limit", "_prefixes", "_read", "_sections")

    def __init__(self, call_open: Iterable[str], section_open: Iterable[str], header: Header,
                 header_ends: Iterable[str]) -> None:
        self._calls = TokenSet(call_open)
        self._sections = TokenSet(section_open)
        self._ends = TokenSet(header_ends)
        self._prefixes = TokenSet(header.prefixes)
        self._read = compile_header(header)
        self._limit = MAX_NAME + MAX_GAP + self._ends.longest

    def __bool__(self) -> bool:
        return bool(self._ends) and bool(self._calls or self._sections)

    def at(self, data: str, pos: int, eof: bool) -> bool | None:
        """``True`` when a call's opening markup and a readable header begin at ``pos``;
        ``None`` when the text so far cannot tell (more may come); else ``False``."""
        n = len(data)
        section = self._sections.at(data, pos)
        if section is not None:
            after = skip_blanks(data, pos + len(section))
            if after >= n:
                return None if not eof and after - pos < len(section) + MAX_GAP else False
            if self._calls:
                return self._opened_call(data, after, eof, first=False)
            return self._header(data, after, eof)
        return self._opened_call(data, pos, eof, first=True)

    def _opened_call(self, data: str, pos: int, eof: bool, *, first: bool) -> bool | None:
        marker = self._calls.at(data, pos)
        if marker is None:
            cut = self._calls.is_prefix(data, pos) or (first and self._sections.is_prefix(
                data, pos))
            return None if cut and not eof else False
        return self._header(data, pos + len(marker), eof)

    def _header(self, data: str, start: int, eof: bool) -> bool | None:
        start = skip_blanks(data, start)
        prefix = self._prefixes.at(data, start)
        if prefix is not None:  # a prefix that may be written: with it or without it
            skipped = self._header(data, start + len(prefix), eof)
            if skipped is not False:
                return skipped
        match = self._ends.search(data, start, start + self._limit)
        if match is None:
            return None if not eof and len(data) < start + self._limit else False
        return self._read(data[start:match.start()]) is not None
