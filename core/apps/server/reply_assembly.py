"""One backend turn's items read into the pieces of a reply, for every API the server speaks.

The three model APIs (``/v1/chat/completions``, ``/v1/responses``, ``/v1/messages``)
answer from the same turn in three shapes. What the reply *is* is decided once,
here, by :class:`ReplyAssembler`; each API's writer only shapes the pieces it is
given. So the guarantees hold alike in all three:

* text and reasoning go out as the model writes them (:class:`ReplyText`,
  :class:`ReplyReasoning`);
* a call goes out once the model has finished it (:class:`ReplyCall`), with its
  arguments typed by the tool's schema and written as one JSON object, each key
  once; a call the model never finished (the token limit cut it) is never a call:
  it is listed in :attr:`ReplyAssembler.dropped` instead, and its markup, which
  the parser gave back as text, is kept out of the text;
* ``stop`` strings end the text (the text before the first one is kept) and
  ``parallel_tool_calls: false`` ends the reply after its first complete call:
  either sets :attr:`ReplyAssembler.should_stop`, and the route stops the model;
* with ``logprobs`` asked, each text piece carries the entries of the tokens it
  completes (:mod:`.completion_logprobs`).

The text of the latest ``text`` item is held back one item: when the parser then
says (a diagnostic) that it was the markup of a call it gave back, it is set
aside, and dropped if the token limit cut the reply.
"""

from __future__ import annotations

import re
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final, NamedTuple

import attrs

from ...events import (
    DiagnosticEvent,
    ErrorEvent,
    Event,
    ReasoningEvent,
    TextEvent,
    ToolCallDeltaEvent,
    ToolCallEndEvent,
    ToolCallStartEvent,
)
from ...vocabulary.backend import TurnEnd
from .completion_logprobs import TokenLedger
from .sse import event_frame, json_text

__all__ = ["DroppedCall", "EventWriter", "ReplyAssembler", "ReplyCall", "ReplyPiece",
           "ReplyReasoning", "ReplyText", "StopMatcher"]

_GIVEN_BACK: Final = frozenset({"truncated_call", "unclosed_call", "malformed_call"})
"""The diagnostics of markup a parser gave back as text (``raw`` is that text)."""


class ReplyText(NamedTuple):
    """A piece of the reply's visible text, with ``logprobs`` asked (without them, a
    text piece is the plain ``str``: the common case, kept cheap).

    :ivar logprobs: the entries (OpenAI's shape) of the tokens this piece completes.
    """

    text: str
    logprobs: list[dict[str, Any]]


class ReplyReasoning(NamedTuple):
    """A piece of the model's reasoning."""

    text: str


class ReplyCall(NamedTuple):
    """A call the model finished writing.

    :ivar position: its place among the reply's calls (0 first).
    :ivar id: its id (the family's, or a fresh one in the family's form).
    :ivar name: the tool's name as the model wrote it.
    :ivar arguments: the arguments typed by the tool's schema, as JSON text.
    """

    position: int
    id: str
    name: str
    arguments: str


ReplyPiece = str | ReplyText | ReplyReasoning | ReplyCall
"""What :meth:`ReplyAssembler.feed` hands a writer: text (a ``str``, or a
:class:`ReplyText` with its log probabilities), reasoning or a call."""


class StopMatcher:
    """Finds the first stop string in text that arrives in pieces, in linear time.

    The reply's text ends before the earliest-starting occurrence of any stop
    string, however the text was cut into pieces. Each stop string has a
    Knuth-Morris-Pratt automaton, so each character is looked at a bounded
    number of times per stop string (amortised), whatever the text and the
    stop strings repeat. The end of the text that could still begin a stop
    string is held back, so no part of one is ever released; once one has
    completed, the match is settled when no other stop string's partial match
    began before it.
    """

    def __init__(self, stops: Sequence[str]) -> None:
        self.stops = tuple(dict.fromkeys(s for s in stops if s))
        self._tables = [_failure_table(stop) for stop in self.stops]
        self._states = [0] * len(self.stops)
        self._openers = re.compile("[" + "".join(sorted({re.escape(s[0]) for s in self.stops}))
                                   + "]") if self.stops else None
        self._seen = 0  # characters fed so far
        self._released = 0  # characters given back so far
        self._pending: deque[str] = deque()  # the fed text not given back yet
        self._cut: int | None = None  # where the earliest complete stop string begins
        self._cut_by = ""
        self.matched = False

    @property
    def matched_stop(self) -> str | None:
        """The stop string that ended the text (``None`` until one has)."""
        return self._cut_by if self.matched else None

    def feed(self, text: str) -> str:
        """Take text; return what is certain to come before any stop string."""
        if self.matched:
            return ""
        if self._openers is None:
            return text
        self._pending.append(text)
        base = self._seen
        i, n = 0, len(text)
        while i < n:
            if not any(self._states):  # nothing partial: skip to a stop's first character
                found = self._openers.search(text, i)
                if found is None:
                    break
                i = found.start()
            self._step(text[i], base + i)
            i += 1
            if self._cut is not None and self._settled(base + i):
                self.matched = True
                return self._release(self._cut)
        self._seen = base + n
        safe = min(self._seen - state for state in self._states)
        return self._release(safe if self._cut is None else min(safe, self._cut))

    def _step(self, char: str, position: int) -> None:
        for k, stop in enumerate(self.stops):
            state, table = self._states[k], self._tables[k]
            while state and stop[state] != char:
                state = table[state - 1]
            if stop[state] == char:
                state += 1
            if state == len(stop):
                start = position + 1 - state
                if self._cut is None or start < self._cut:
                    self._cut, self._cut_by = start, stop
                state = table[state - 1]
            self._states[k] = state

    def _settled(self, seen: int) -> bool:
        """No stop string's partial match began before the complete one."""
        assert self._cut is not None
        return all(seen - state >= self._cut for state in self._states)

    def _release(self, upto: int) -> str:
        """The pending text up to absolute position ``upto``."""
        want = upto - self._released
        out: list[str] = []
        while want > 0 and self._pending:
            piece = self._pending[0]
            if len(piece) <= want:
                out.append(self._pending.popleft())
                want -= len(piece)
            else:
                out.append(piece[:want])
                self._pending[0] = piece[want:]
                want = 0
        released = "".join(out)
        self._released += len(released)
        if self.matched:
            self._pending.clear()
        return released

    def flush(self) -> str:
        """Release the held-back text (the text ended, or something else came first)."""
        if self.matched:
            return ""
        if self._cut is not None:
            self.matched = True
            return self._release(self._cut)
        rest = self._release(self._seen)
        self._states = [0] * len(self.stops)  # text after something else starts afresh
        return rest


def _failure_table(stop: str) -> list[int]:
    """KMP's table: for each prefix of ``stop``, its longest proper border."""
    table = [0] * len(stop)
    border = 0
    for i in range(1, len(stop)):
        while border and stop[i] != stop[border]:
            border = table[border - 1]
        if stop[i] == stop[border]:
            border += 1
        table[i] = border
    return table


@attrs.frozen
class DroppedCall:
    """A call the model began but did not finish: not returned as a call.

    :ivar name: the tool it was calling (``""`` when the cut came before its name).
    :ivar reason: ``length`` (the token limit cut it), or ``malformed`` (the
        parser read its markup as text: it is in the content).
    """

    name: str
    reason: str

    def to_dict(self) -> dict[str, str]:
        """The entry of the ``dropped_tool_calls`` extension field."""
        return {"name": self.name, "reason": self.reason}


class ReplyAssembler:
    """Reads one backend turn into reply pieces (see the module).

    :param make_call_id: makes a call id when the parser gave none.
    :param stop: stop strings.
    :param parallel_tool_calls: ``False``: end after the first complete call.
    :param logprobs: line the turn's ``token_logprob`` events up with the text.
    :param max_calls: end after this many complete calls (``None``: no bound).
    """

    def __init__(self, *, make_call_id: Callable[[int], str], stop: Sequence[str] = (),
                 parallel_tool_calls: bool = True, logprobs: bool = False,
                 max_calls: int | None = None) -> None:
        self.make_call_id = make_call_id
        self.max_calls = 1 if not parallel_tool_calls else max_calls
        self._stop = StopMatcher(stop)
        self._tail = ""  # the latest text, held one item: it may end in markup of a cut call
        # markup the parser gave back as text, written right after the tail: dropped if
        # the limit cut the reply, else released after the tail
        self._suspect = ""
        self._open: dict[int, tuple[str, str]] = {}  # parser index -> (name, id), unfinished
        self._ledger = TokenLedger() if logprobs else None
        self.calls: list[ReplyCall] = []
        """The reply's calls so far."""
        self.dropped: list[DroppedCall] = []
        """The calls the model began but did not finish (known once settled)."""
        self.logprobs: list[dict[str, Any]] = []
        """Every content token's entry so far (with ``logprobs``)."""
        self.end: TurnEnd | None = None
        """The turn's end, once it has come."""
        self.error: ErrorEvent | None = None
        """The turn's first error, if any."""
        self.diagnostics: list[DiagnosticEvent] = []
        """What the parser noticed in the model's output."""
        self.should_stop = False
        """A stop string or the one call allowed has ended the reply: stop the model."""

    def feed(self, item: Event | TurnEnd) -> list[ReplyPiece]:
        """Take one item of the turn; return the pieces it adds (often one, maybe none)."""
        if type(item) is TextEvent and self._ledger is None and not self.should_stop:
            # the common case, on its own path: the held text goes out, this one is held
            held, self._tail = self._tail, item.text
            if self._suspect:  # the markup given back came after the held text
                held, self._suspect = held + self._suspect, ""
            if not held:
                return []
            text = self._stop.feed(held)
            if self._stop.matched:
                self.should_stop = True
            return [text] if text else []
        if isinstance(item, TurnEnd):
            self.end = item
            return []
        if self.should_stop:
            return []
        if self._ledger is not None and self._ledger.take(item):
            return []
        if isinstance(item, DiagnosticEvent):
            self.diagnostics.append(item)
            named_only = any(item.raw == name for name, _ in self._open.values())
            if item.code in _GIVEN_BACK and item.raw and not named_only \
                    and self._tail.endswith(item.raw):
                # the markup ends the held text: it stays after what precedes it
                self._tail = self._tail[:len(self._tail) - len(item.raw)]
                self._suspect = item.raw + self._suspect
            return []
        pieces = self._release()
        if isinstance(item, TextEvent):
            self._tail = item.text
            return pieces
        pieces.extend(self._text(self._stop.flush()))
        if self.should_stop:
            return pieces
        if isinstance(item, ReasoningEvent):
            if item.text:
                pieces.append(ReplyReasoning(item.text))
        elif isinstance(item, ToolCallStartEvent | ToolCallDeltaEvent):
            known = self._open.get(item.index)
            self._open[item.index] = (item.name or (known[0] if known else ""),
                                      item.id or (known[1] if known else ""))
        elif isinstance(item, ToolCallEndEvent):
            call = self._finished_call(item)
            if call is not None:
                pieces.append(call)
        elif isinstance(item, ErrorEvent):
            self.error = self.error or item
        return pieces

    def _release(self) -> list[ReplyPiece]:
        """The held text is content after all (something came after it), in the order
        the model wrote it: the text, then the markup given back at its end."""
        held, self._tail, self._suspect = self._tail + self._suspect, "", ""
        if not held:
            return []
        return self._text(self._stop.feed(held))

    def _text(self, text: str) -> list[ReplyPiece]:
        pieces: list[ReplyPiece] = []
        if text:
            if self._ledger is None:
                pieces.append(text)
            else:
                entries = self._ledger.release(text)
                if self._stop.matched:  # nothing more comes: the cut tokens too
                    entries.extend(self._ledger.finish())
                self.logprobs.extend(entries)
                pieces.append(ReplyText(text, entries))
        if self._stop.matched:
            self.should_stop = True
        return pieces

    def _finished_call(self, item: ToolCallEndEvent) -> ReplyCall | None:
        opened = self._open.pop(item.index, ("", ""))
        limit = self.max_calls
        if limit is not None and len(self.calls) >= limit:
            return None  # only the reply's first calls are answered
        call = ReplyCall(len(self.calls), item.id or opened[1] or self.make_call_id(item.index),
                         item.name or opened[0], json_text(dict(item.arguments)))
        self.calls.append(call)
        if limit is not None and len(self.calls) >= limit:
            self.should_stop = True
        return call

    # -- the end -------------------------------------------------------------------------

    @property
    def finish_reason(self) -> str:
        """``stop`` (the model ended, or a stop string did), ``length`` (the token
        limit) or ``tool_calls``, from the turn's end and what was read."""
        if self._stop.matched:
            return "stop"
        if self.end is not None and self.end.reason == "length":
            return "length"
        return "tool_calls" if self.calls else "stop"

    @property
    def stop_sequence(self) -> str | None:
        """The stop string that ended the text, if one did."""
        return self._stop.matched_stop

    @property
    def usage(self) -> Mapping[str, Any]:
        """The backend's token counts for the turn (``prompt_tokens``,
        ``completion_tokens``, perhaps ``reasoning_tokens``)."""
        return (self.end.usage if self.end is not None else None) or {}

    def settle(self) -> list[ReplyPiece]:
        """At the turn's end: the held-back text; the unfinished calls set aside.

        A reply the token limit cut keeps out of its text the markup the parser
        gave back as text (an unfinished call, a section's leftover after its last
        complete call). Call once.
        """
        cut = self.end is not None and self.end.reason == "length"
        markup = ""
        if cut and self._suspect and not self.should_stop:
            markup, self._suspect = self._suspect, ""
        pieces = self._release()
        pieces.extend(self._text(self._stop.flush()))
        if not self.should_stop:
            reason = "length" if cut else "malformed"
            unfinished = [name for name, _ in self._open.values()]
            if markup and not unfinished:
                unfinished = [""]  # cut inside the call's header: its name never came
            self.dropped.extend(DroppedCall(name, reason) for name in unfinished)
        self._open.clear()
        return pieces

    def finish_logprobs(self) -> list[dict[str, Any]]:
        """The entries of content tokens still open when the reply ended (once settled)."""
        if self._ledger is None:
            return []
        rest = self._ledger.finish()
        self.logprobs.extend(rest)
        return rest


class EventWriter:
    """The base of a writer whose stream is named events (the Responses and Messages
    APIs): each piece the :attr:`reply` assembler reads goes to :meth:`piece`."""

    reply: ReplyAssembler

    def feed(self, item: Event | TurnEnd) -> list[dict[str, Any]]:
        """Take one item of the turn; return the events it adds."""
        events: list[dict[str, Any]] = []
        for piece in self.reply.feed(item):
            self.piece(piece, events)
        return events

    def piece(self, piece: ReplyPiece, events: list[dict[str, Any]]) -> None:
        """Add the events of one piece of the reply to ``events``."""
        raise NotImplementedError

    def frames(self, payloads: list[dict[str, Any]]) -> bytes:
        """Events as named server-sent events (``event: <type>``, compact JSON data)."""
        return b"".join(event_frame(p, compact=True) for p in payloads)
