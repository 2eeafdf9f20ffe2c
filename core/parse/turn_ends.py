"""The family's end-of-turn tokens met while a call is open: the model ended its turn.

A family's ``drops`` and ``trailers`` are control tokens that end a model's message
(Kimi K3's ``<|end_of_msg|>``, DeepSeek's ``<｜end▁of▁sentence｜>``...). Met while a
section, call or value is open, what is open ends there as at the reply's end (an open
value too: the model was not cut) and the token is dropped. :class:`TurnEnds` is that
part of the engine's parse state: where to look for the tokens (cheaply: what they all
begin with first, then one search in C for a token or the beginning of one ending the
text) and how the text before one is read (as in any delta: only what is still held at the
token is read as at the reply's end, so the reading does not depend on the deltas). A
value's delta is offered whole to its reader with the beginning of a token held back.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import ClassVar

from ..events import DiagnosticEvent, Event
from .engine_base import BODY, SECTION, TEXT, ParseState
from .markers import NOTHING_HELD

__all__ = ["TurnEnds"]

Scanner = Callable[["TurnEnds", str, int, list[Event], bool], int]


class TurnEnds(ParseState):
    """The parse state's reading of end-of-turn tokens (see the module doc).

    :cvar SCANNERS: the engine's scanner of each state, by state.
    """

    __slots__ = ()

    SCANNERS: ClassVar[tuple[Scanner, ...]] = ()

    def _run(self, data: str, out: list[Event], eof: bool, turns: int = -1) -> None:
        """Read ``data`` (the engine's loop)."""
        raise NotImplementedError

    def _scope_holds(self) -> frozenset[str]:
        """What the open scope's scanner would hold all of back (its ``_held_markup``)."""
        if self._state == SECTION:
            return self._c.section_holds
        if self._state == BODY and self._reader_holds is not None:
            return self._reader_holds.holds()
        return NOTHING_HELD

    def _feed_value(self, text: str) -> list[Event]:
        """A value's delta that holds what the family's end-of-turn tokens begin with, or
        follows the beginning of one held back: offered to the reader whole as ever, up to
        the beginning of one that ends it, which is held back; the full path where a whole
        one is in it, or the reader will not take it (from that beginning on, the full path
        looks for them again, not where none is)."""
        if self._pending:
            text = self._pending + text
            self._pending, self._held_markup = "", NOTHING_HELD
            self._turn_tail = self._turn_watch = False
        value, keep = text, ""
        mark = self._turn_mark
        if mark and mark not in text:  # no token: at most a beginning of what they all
            if text.endswith(self._turn_cuts):  # begin with ends the delta (a '<' in code)
                for keep in self._turn_cuts_longest:
                    if text.endswith(keep):
                        value = text[:len(text) - len(keep)]
                        break
        else:
            search = self._turn_search
            assert search is not None  # (the family has end-of-turn tokens)
            found = search(text)  # (one search in C: a token, or a beginning at the end)
            if found is not None:
                if found.lastgroup is not None:  # a whole token: what is open ends there
                    return self._feed_full(text)
                value, keep = text[:found.start()], text[found.start():]
        reader = self._reader
        assert reader is not None  # (a value is being read)
        try:
            taken = reader.plain_delta(value) if value else []
        except Exception:
            taken = None  # the full path reports what is wrong
        if taken is None:
            return self._feed_full(text, len(value) if keep else -1)
        if keep:
            self._pending = keep
            self._turn_from = 0
            self._turn_tail = self._turn_watch = True
        return taken

    def _feed_full(self, text: str, turns: int = 0) -> list[Event]:
        """``text`` (what was pending included) read by the full path, end-of-turn tokens
        looked for from ``turns`` on (-1: none is in it)."""
        out: list[Event] = []
        try:
            self._run(text, out, False, turns)
        except Exception as exc:  # a parser bug must never take down a chat
            self._pending, self._held_markup = "", NOTHING_HELD
            out.append(DiagnosticEvent("parser_error", f"{self._fmt.family} parser failed: "
                                                       f"{exc!r}"))
        return out

    def _scan_scope(self, data: str, pos: int, out: list[Event], eof: bool) -> int:
        """Run the scanners while a call scope is open: the position where it ended
        (text goes on there), ``len(data)`` when all was read inside it, ``-1`` when a
        scanner holds the rest back."""
        n = len(data)
        scanners = self.SCANNERS
        while True:
            state = self._state
            if state < SECTION:
                return pos
            pos = scanners[state](self, data, pos, out, eof)
            if pos < 0:
                return -1
            if pos >= n and self._state == state and not (eof and state == BODY):
                return n

    def _scan_to_turn_end(self, data: str, pos: int, out: list[Event], eof: bool, k: int,
                          end: int) -> int:
        """A call scope, up to the family's next end-of-turn token (``drops``,
        ``trailers``): the model ended its message there, so what is still open ends
        as at the reply's end (a value too: the model was not cut), and the token is
        dropped. A tail that may begin such a token waits for the next delta.

        What the text before the token decides by itself is decided as if more were to
        come (as it is when the token arrives in a later delta); only what is still held
        at the token is read as at the reply's end."""
        if end < 0:  # the beginning of one ends the data
            at = self._scan_scope(data[:k], pos, out, False)
            if at < 0 or self._state >= SECTION:
                self._turn_from = len(self._pending)
                self._pending += data[k:]
                self._turn_watch = True
                # where the scope's scanner held nothing back, it is asked what it would
                # hold all of back, were it to read what is held now
                self._held_markup = NOTHING_HELD if self._turn_from else self._scope_holds()
                return -1
            return at  # the scope ended before the tail: the text scanner reads it
        at = self._scan_scope(data[:k], pos, out, False)
        if at >= 0 and self._state < SECTION:
            return at  # the scope ended before the token: the text scanner goes on
        held, self._pending = (self._pending, "") if at < 0 else ("", "")
        cut, self._cut = self._cut, False  # what came before the token was not cut
        self._turn_ended = True
        try:
            at = self._scan_scope(held, 0, out, True)
            if 0 <= at < len(held):  # the scope ended inside what was held: text before it
                self.SCANNERS[TEXT](self, held, at, out, True)
            self._settle(out)
        finally:
            self._turn_ended = False
            self._cut = cut
        self._held.drop()
        self._state = TEXT
        self._lead = True
        return end
