"""A :class:`~toolwire.parse.record.TaggedArguments` compiled once per format.

The token sets :class:`~toolwire.parse.tagged_reader.TaggedArgsReader` reads a call's
tagged arguments with (what ends them, what opens one, what confirms a value closed,
the next call, the family's end-of-turn tokens), and two small text helpers.
"""

from __future__ import annotations

from collections.abc import Callable

from .markers import CallStart, TokenSet, compile_header
from .record import TaggedArguments

__all__ = ["TaggedSyntax", "inside_json_string", "partial_token"]


class TaggedSyntax:
    """A :class:`~toolwire.parse.record.TaggedArguments` compiled once per format.

    :param args: the record.
    :param ends: markers that end a call's arguments (the call's close, the
        section's close, the next call's opening), from the engine.
    :param closers: the call's and the section's closing markers (a value whose
        own closing tag is missing may end at one of them).
    :param after_close: what confirms a call's end met inside a value (the
        section's end; the end of the reply confirms it too).
    :param nests: markers that open a section or a call: met inside a value, they
        open a block nested in it, which its closers close (a file that holds a call).
    :param next_call: reads ahead whether the next call's opening markup begins at a
        position (the rule of the next call, see the module doc).
    :param scope_holds: of beginnings a step would hold all of back, those that need no
        end-of-turn search (the engine's
        :meth:`~toolwire.parse.compiled.CompiledFormat.scope_holds`; all, by default).
    """

    def __init__(self, args: TaggedArguments, ends: TokenSet, closers: TokenSet,
                 after_close: TokenSet, nests: TokenSet | None = None,
                 next_call: CallStart | None = None, *,
                 scope_holds: Callable[[frozenset[str]], frozenset[str]] = lambda h: h
                 ) -> None:
        self.args = args
        self.scope_holds = scope_holds
        self.nests = nests or TokenSet(())
        self.next_call = next_call if next_call else None
        self.ends = ends
        self.closers = closers
        self.after_ends = after_close
        self.read_header = compile_header(args.header)
        self.header_ends = TokenSet(args.header_end)
        self.opens = TokenSet(args.spelt(args.open))
        self.named_close = any("{name}" in c for c in args.closes())
        self.static_closes = TokenSet(c for c in args.closes() if "{name}" not in c)
        self.block = args.json_block
        self.block_open = TokenSet((args.json_block[0],)) if args.json_block else TokenSet(())
        self.block_end = TokenSet((args.json_block[1],)) if args.json_block else TokenSet(())
        self.structure = TokenSet((*self.opens.tokens, *ends.tokens,
                                   *((args.json_block[0],) if args.json_block else ())))
        # what, right after a value's closing tag, shows it closed (without a header)
        self.confirms = TokenSet((*closers.tokens, *self.block_open.tokens))
        self.separator = args.separator.strip()
        # what the step between arguments holds all of back, read again or not: beginnings
        # of structure, but those it reads before it looks (blanks, the separator, a marker)
        self.between_holds = scope_holds(self.structure.held_after(
            *self.ends.tokens, *self.opens.tokens, *self.block_open.tokens, self.separator))


def partial_token(data: str, start: int, token: str) -> int:
    """Where a trailing proper prefix of ``token`` begins (``len(data)`` if none)."""
    n = len(data)
    for k in range(max(start, n - len(token) + 1), n):
        if token.startswith(data[k:]):
            return k
    return n


def inside_json_string(text: str) -> bool:
    """Whether JSON text ends inside a string literal (quotes counted, escapes skipped)."""
    inside = False
    i = text.find('"')
    while i >= 0:
        if inside:
            backslashes = 0
            j = i - 1
            while j >= 0 and text[j] == "\\":
                backslashes += 1
                j -= 1
            if backslashes % 2 == 0:
                inside = False
        else:
            inside = True
        i = text.find('"', i + 1)
    return inside
