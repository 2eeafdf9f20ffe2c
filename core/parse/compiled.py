"""A :class:`~toolwire.parse.record.CallFormat` compiled once for the engine.

Token sets for every state of :class:`~toolwire.parse.engine.CallParser`, the
header readers, the syntax of the arguments, and the choice between whole-call
syntaxes (a JSON list or object, a pythonic list) by how a body begins.
"""

from __future__ import annotations

import functools
import re
from typing import Any, Final

from .markers import MAX_NAME, CallStart, TokenSet, compile_header, skip_blanks
from .record import Arguments, CallFormat, CallObjects, PythonicCalls, TaggedArguments
from .tagged_syntax import TaggedSyntax

__all__ = ["NEED_MORE", "CompiledFormat", "choose_whole_syntax", "compile_format"]

NEED_MORE: Final = object()
"""The text so far cannot tell; wait for the next delta."""


class CompiledFormat:
    """A :class:`CallFormat`'s token sets and header readers, built once per format."""

    def __init__(self, fmt: CallFormat) -> None:
        self.format = fmt
        openers = fmt.section_open or fmt.call_open
        if fmt.implicit_section or fmt.bare_calls:
            openers = (*openers, *fmt.call_open)
        self.openers = frozenset(openers)
        self.longest_opener = max((len(o) for o in openers), default=0)
        self.section_openers = frozenset(fmt.section_open)
        # a section's closing marker met in text closes nothing: it is dropped (stray)
        # (unless it is part of a longer marker, which it would cut short: "Action:\n```json"
        # opens what "```" closes)
        self.strays = frozenset(
            c for c in fmt.section_close
            if not any(c in t for t in (*openers, *fmt.drops, *fmt.trailers) if t != c)
        ) if fmt.section_open and fmt.strict_open else frozenset()
        self.opener_set = TokenSet(openers)
        self.text = TokenSet((*openers, *fmt.drops, *fmt.blocks, *self.strays))
        self.text_after_call = TokenSet((*openers, *fmt.drops, *fmt.trailers, *fmt.blocks,
                                         *self.strays))
        self.section_close = TokenSet(fmt.section_close)
        self.call_open = TokenSet(fmt.call_open)
        self.call_close = TokenSet(fmt.call_close)
        self.section_open = TokenSet(fmt.section_open)
        self.section_body = TokenSet((*fmt.call_open, *fmt.section_close, *fmt.section_open,
                                      fmt.separator.strip()))
        self.header_end = TokenSet((*fmt.header_end, *fmt.header_stop))
        self.header_prefixes = TokenSet(fmt.header.prefixes)
        self.read_header = compile_header(fmt.header)
        self.block_closes = {open_: TokenSet((close,)) for open_, (_, close) in fmt.blocks.items()}
        # what ends a call's arguments: its close, the section's, the next call or section
        self.arg_ends = TokenSet((*fmt.call_close, *fmt.section_close, *fmt.call_open,
                                  *fmt.section_open))
        # the family's end-of-turn tokens: met while a call is open, the turn ended there
        self.turn_ends = TokenSet(t for t in (*fmt.drops, *fmt.trailers) if t.strip())
        # what they all begin with, and its beginnings: a delta that holds none of it and
        # does not end with a beginning of it holds no end of turn (a quick test, in C)
        mark = _common_beginning(self.turn_ends.tokens)
        self.turn_mark = mark
        self.turn_mark_cuts = tuple(mark[:i] for i in range(1, len(mark)))
        # the first token at or after a position, or a beginning of one ending the text
        # (its match has no ``lastgroup``): one search in C, no Python call around it
        pattern = self.turn_ends.token_or_beginning_pattern
        self.turn_search = pattern.search if pattern is not None else None
        self.after_call = TokenSet((*fmt.section_close, *fmt.call_open, *fmt.section_open))
        self.whole_kinds: tuple[Arguments, ...] = tuple(
            k for k in fmt.kinds if isinstance(k, CallObjects | PythonicCalls))
        header_kinds = [k for k in fmt.kinds if not isinstance(k, CallObjects | PythonicCalls)]
        self.header_kind: Arguments | None = header_kinds[0] if header_kinds else None
        closers = TokenSet((*fmt.call_close, *fmt.section_close))
        self.next_call = CallStart(fmt.call_open, fmt.section_open, fmt.header,
                                   (*fmt.header_end, *fmt.header_stop))
        self.tagged = TaggedSyntax(self.header_kind, self.arg_ends, closers,
                                   TokenSet(fmt.section_close),
                                   TokenSet((*fmt.section_open, *fmt.call_open)),
                                   self.next_call, scope_holds=self.scope_holds) \
            if isinstance(self.header_kind, TaggedArguments) else None
        self.scope_close = TokenSet(fmt.section_close if fmt.section_open else fmt.call_close)
        self.resync = TokenSet((*self.scope_close.tokens, *openers))
        # inside a section, text that is not a call ends where the next call can begin:
        # past a call's closing marker, at the next call's opening one, or at the
        # section's end; a section of JSON calls one per line, at the next line's object
        self.section_resync = TokenSet((*fmt.call_close, *fmt.call_open, *fmt.section_close,
                                        *fmt.section_open)) if fmt.section_open else self.resync
        self.line_objects = bool(fmt.section_open) and any(
            isinstance(k, CallObjects) and k.container == "any" and not k.opened_list
            for k in fmt.kinds)
        self.fast_break = "".join(sorted(self.text_after_call.firsts))
        self.fast_break_one = self.fast_break if len(self.fast_break) == 1 else ""
        # what ends whole calls (a pythonic list), and the markers passing over an item
        # that is not a call stops at
        self.whole_ends = TokenSet((*fmt.section_close, *fmt.drops))
        self.whole_stops = TokenSet((*fmt.section_open, *fmt.section_close, *fmt.call_open,
                                     *fmt.call_close, *fmt.drops))
        # what the text and section scanners hold all of back, read again or not (see
        # ParseState._held_markup): the text's beginnings of markup; a section's, but
        # those its scanner reads before it looks (blanks, a separator, a whole marker)
        self.text_holds = self.text.unbroken_prefixes
        self.text_after_call_holds = self.text_after_call.unbroken_prefixes
        self.section_holds = self.scope_holds(self.section_body.held_after(
            *fmt.section_close, *fmt.call_open, fmt.separator.strip()
        ) if not self.whole_kinds else frozenset())

    def scope_holds(self, holds: frozenset[str]) -> frozenset[str]:
        """``holds``, beginnings a scope's scanner would hold all of back, less those the
        end-of-turn search of an open scope could find something in (a token, or a
        beginning of one ending it, after the first character; a token at the first):
        a delta that makes what is held one of the rest needs no search."""
        pattern = self.turn_ends.token_or_beginning_pattern
        return holds if pattern is None else _without_turn_ends(holds, pattern,
                                                                 self.turn_ends.tokens)


@functools.lru_cache(maxsize=1024)
def _without_turn_ends(holds: frozenset[str], pattern: re.Pattern[str],
                       tokens: tuple[str, ...]) -> frozenset[str]:
    """:meth:`CompiledFormat.scope_holds`, memoized (a value's beginnings are asked for at
    each value; the cache is bounded, as names in markup are the model's)."""
    return frozenset(p for p in holds if pattern.search(p, 1) is None
                     and not p.startswith(tokens))


def _common_beginning(tokens: tuple[str, ...]) -> str:
    """The longest text every token begins with."""
    if not tokens:
        return ""
    first, last = min(tokens), max(tokens)
    size = 0
    while size < min(len(first), len(last)) and first[size] == last[size]:
        size += 1
    return first[:size]


_COMPILED: dict[int, tuple[CallFormat, CompiledFormat]] = {}


def compile_format(fmt: CallFormat) -> CompiledFormat:
    """The compiled form of ``fmt`` (cached per record)."""
    cached = _COMPILED.get(id(fmt))
    if cached is not None and cached[0] is fmt:
        return cached[1]
    compiled = CompiledFormat(fmt)
    _COMPILED[id(fmt)] = (fmt, compiled)
    return compiled


def choose_whole_syntax(c: CompiledFormat, data: str, pos: int, eof: bool, *,
                        in_section: bool, first_in_section: bool) -> Any:
    """Which whole-call syntax begins at ``pos`` (:data:`NEED_MORE`; ``None``: none).

    A JSON call object begins with ``{`` (or ``[`` then ``{``, or a fence); a
    pythonic list with ``[`` then a name and ``(``. Where the format has no other
    syntax, inside its section, its only syntax is chosen whatever follows, and
    its reader says what is wrong.
    """
    ch = data[pos]
    for kind in c.whole_kinds:
        if isinstance(kind, CallObjects):
            if kind.opened_list and first_in_section:
                return kind
            if ch == "{" and kind.container != "list":
                return kind
            if ch == "`" and kind.fence:
                return kind
            if ch == "[":
                j = skip_blanks(data, pos + 1)
                if j >= len(data):
                    return NEED_MORE if not eof else None
                if data[j] == "{" or (data[j] == "]" and len(c.whole_kinds) == 1):
                    return kind
        elif isinstance(kind, PythonicCalls):
            if ch != "[" and not kind.bare:
                continue
            j = skip_blanks(data, pos + 1) if ch == "[" else pos
            k = j
            while k < len(data) and (data[k].isalnum() or data[k] in "_.-"):
                k += 1
            k = skip_blanks(data, k)
            if k >= len(data):
                if not eof and k - j <= MAX_NAME:
                    return NEED_MORE
                continue
            if k > j and data[k] == "(":
                return kind
    if len(c.whole_kinds) == 1 and c.header_kind is None and in_section:
        return c.whole_kinds[0]
    return None
