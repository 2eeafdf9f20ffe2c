"""Applying an ``"auto"`` grammar lazily: free text until the calls' opening marker.

A runtime samples freely and feeds each piece of text it produced to a
:class:`TriggerWatch`. When the text so far ends with one of the family's
call-opening markers (one that began where a piece began, outside a reasoning
block at the reply's start), the watch answers a :class:`Switch` to the
grammar of the rest of the calls after that marker, and the runtime samples
under it from the next token on. Families whose calls may stand bare at the
reply's start (Llama 3's JSON) begin under :attr:`ToolGrammar.start
<toolwire.grammar.ToolGrammar.start>`, which the watch drops (``Switch("")``)
once the reply's first character shows it is not a call.

Watching costs one ``endswith`` per piece; no text is scanned twice. A marker
the model writes in the middle of a token is not a place the grammar can start
from, so that call is left unconstrained (the parser still reads it).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import attrs

if TYPE_CHECKING:
    from .build import ToolGrammar

__all__ = ["Switch", "TriggerWatch"]

_BLANKS = " \t\r\n"


@attrs.frozen
class Switch:
    """Sample under ``grammar`` from now on (``""``: without a grammar).

    :ivar marker: the opening marker that was written (``""`` when the start
        grammar is dropped).
    """

    grammar: str
    marker: str = ""


class TriggerWatch:
    """Finds where an ``"auto"`` reply opens its calls; see the module doc.

    :param grammar: a lazy :class:`~toolwire.grammar.ToolGrammar`.
    """

    def __init__(self, grammar: ToolGrammar) -> None:
        self._continuations = dict(grammar.continuations)
        self._bare_starts = grammar.bare_starts
        self._start_grammar = bool(grammar.start)
        self._opens = dict(grammar.reasoning_tags)
        self._close = grammar.reasoning[1] if grammar.reasoning is not None else ""
        self._state = "reasoning" if self._close else "start"
        self._held = ""  # text at the start that may yet be a reasoning tag
        self._window = ""  # the text's last characters: enough to hold any marker or tag
        self._keep = max((len(t) for t in (*self._continuations, *self._opens,
                                           *self._opens.values(), self._close)), default=1)
        self._pos = 0
        self._starts: list[int] = []  # where recent pieces began
        self.done = not self._continuations and not self._start_grammar

    def feed(self, piece: str) -> Switch | None:
        """Take the next piece of the reply; a :class:`Switch` when the grammar changes."""
        if self.done or not piece:
            return None
        self._starts.append(self._pos)
        self._pos += len(piece)
        self._window += piece
        try:
            if self._state == "reasoning":
                return self._in_reasoning()
            if self._state == "start":
                return self._content(piece)
            return self._marker()
        finally:
            self._window = self._window[-self._keep:]
            floor = self._pos - self._keep
            while self._starts and self._starts[0] < floor:
                self._starts.pop(0)

    def _in_reasoning(self) -> Switch | None:
        at = self._window.find(self._close)
        if at < 0:
            return None
        rest = self._window[at + len(self._close):]
        self._state = "start"
        return self._content(rest) if rest else None

    def _content(self, text: str) -> Switch | None:
        """Text after the reply's start (or a reasoning block): reasoning again, or content."""
        stripped = (self._held + text).lstrip(_BLANKS)
        self._held = ""
        if not stripped:
            return None
        for open_tag, close in self._opens.items():
            if stripped.startswith(open_tag):
                self._state, self._close = "reasoning", close
                self._opens = {}  # only a block at the very start is reasoning
                return self._in_reasoning()
            if open_tag.startswith(stripped):
                self._held = stripped  # the opening tag may still be arriving
                return None
        self._state = "free"
        if self._bare_starts and stripped[0] in self._bare_starts:
            self.done = True  # the start grammar is writing the bare calls
            return None
        switch = self._marker()
        if switch is None and self._start_grammar:
            self._start_grammar = False
            return Switch("")
        return switch

    def _marker(self) -> Switch | None:
        for marker, rest in self._continuations.items():
            if self._window.endswith(marker) and self._pos - len(marker) in self._starts:
                self.done = True
                return Switch(rest, marker)
        return None
