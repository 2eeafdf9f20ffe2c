"""The reader protocol the engine drives, and what every reader shares.

The engine (:mod:`toolwire.parse.engine`) scans text and markup itself and hands
each call body to a *reader* made for the family's kind of arguments. A reader
is fed ``(data, pos, out, eof)`` and answers ``(status, pos)``:

* ``(MORE, p)``: everything before ``p`` is consumed; ``data[p:]`` (a short tail)
  must be given again with the next delta;
* ``(DONE, p)``: the body ended well just before ``p`` (the engine then expects
  the call's closing markup there);
* ``(FAIL, p)``: the text is not this format; what the reader consumed (its
  ``raw``) becomes text with a diagnostic.

At ``eof`` a reader answers ``DONE`` or ``FAIL``. Readers never scan consumed
text again. *Argument* readers read one call's arguments (the name came from
markup) and leave them in :attr:`BodyReader.arguments`; *call* readers read
whole calls (the names inside: JSON call objects, pythonic lists) and emit the
call events themselves, numbering calls with the engine's :class:`CallNumbering`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar, Final, Protocol

import attrs

from ..events import DiagnosticEvent, Event, ToolCallDeltaEvent
from ..vocabulary.schema import ToolSchemaIndex
from .markers import NOTHING_HELD

__all__ = [
    "DONE",
    "FAIL",
    "GO",
    "MORE",
    "NOT_A_CALL",
    "BodyReader",
    "CallContext",
    "CallNumbering",
    "ReaderBase",
]

MORE: Final = 0
DONE: Final = 1
FAIL: Final = 2
GO: Final = -1
"""A step's status (never ``feed``'s): it made progress, the reader reads on with the step
of the state it is in now (:class:`ReaderBase`)."""

NOT_A_CALL: Final = "not_a_call"
"""A reader's ``failure`` when the text was plainly text (no diagnostic)."""


class CallNumbering:
    """Hands out the index of each call of a reply, in order (0, 1, ...)."""

    __slots__ = ("next",)

    def __init__(self, first: int = 0) -> None:
        self.next = first

    def take(self) -> int:
        """The index of a call that has just begun."""
        index = self.next
        self.next += 1
        return index


@attrs.define(slots=True)
class CallContext:
    """The call an argument reader reads for.

    :ivar index: the call's index in the reply.
    :ivar name: the tool name.
    :ivar call_id: the id the markup gave, or ``""``.
    :ivar schemas: the reply's tool schemas (for typing values).
    :ivar family: the family name, for messages.
    """

    index: int
    name: str
    call_id: str
    schemas: ToolSchemaIndex
    family: str = ""

    def delta(self, text: str, parameter: str | None = None) -> ToolCallDeltaEvent:
        """A ``tool_call_delta`` event of this call."""
        return ToolCallDeltaEvent(self.index, self.name, text, parameter, self.call_id)


class BodyReader(Protocol):
    """What the engine asks of a reader (see the module doc).

    :ivar raw: text consumed and not yet part of a complete call; it becomes
        text when the reader fails.
    :ivar failure: the diagnostic code of a failure (:data:`NOT_A_CALL`: plain text).
    :ivar message: the diagnostic message of a failure.
    :ivar started: how many calls the reader has begun (call readers).
    :ivar arguments: an argument reader's result once it answered ``DONE``.
    :ivar notes: diagnostics about a call that was read after all (a repaired
        drift), emitted with the call.
    """

    raw: list[str]
    failure: str
    message: str
    started: int
    arguments: dict[str, Any] | None
    notes: list[DiagnosticEvent]

    def feed(self, data: str, pos: int, out: list[Event], eof: bool) -> tuple[int, int]:
        """Consume from ``pos``; return ``(status, pos)``."""
        ...

    def plain_delta(self, text: str) -> list[Event] | None:
        """Take a whole delta that holds no markup at all (a value being written).

        The engine offers every delta here first when nothing is pending; a
        reader that can take it without scanning returns its events, else
        ``None`` and the delta goes through :meth:`feed`. Only a speed-up:
        the events must be the ones :meth:`feed` would give.
        """
        ...


Step = Callable[[Any, str, int, list[Event], bool], tuple[int, int]]
"""One state's step of a reader: ``step(reader, data, pos, out, eof) -> (status, pos)``."""


class ReaderBase:
    """Bookkeeping every reader shares (consumed text, failure, started calls), and the loop
    of a reader written as steps.

    A reader is a state machine: :meth:`feed` runs the step of the state the reader is in
    (``STEPS[self._state]``), which answers as ``feed`` does, or :data:`GO` when it made
    progress and the step of the state it left the reader in reads on. A reader that reads
    otherwise (one JSON value) overrides :meth:`feed`.

    :cvar STEPS: the reader's step of each state, by state.
    """

    __slots__ = ("_state", "arguments", "failure", "held_markup", "message", "notes", "raw",
                 "started")

    STEPS: ClassVar[tuple[Step, ...]] = ()
    _state: int  # (set by each reader: its state, which ``STEPS`` is indexed by)

    def __init__(self) -> None:
        self.raw: list[str] = []
        self.failure = ""
        self.message = ""
        self.started = 0
        self.arguments: dict[str, Any] | None = None
        self.notes: list[DiagnosticEvent] = []
        self.held_markup = NOTHING_HELD
        """After ``MORE``: beginnings of markup the step that held ``data[pos:]`` back would
        hold all of back again (the engine appends a delta that makes the held text one of
        them to it, unread); :data:`NOTHING_HELD` after any other answer."""

    def plain_delta(self, text: str) -> list[Event] | None:
        """No shortcut: every delta goes through ``feed``."""
        return None

    def holds(self) -> frozenset[str]:
        """Beginnings of markup the reader, in the state it is in, would hold all of back
        (``MORE`` at the position it was given), events and state unchanged: what
        :attr:`held_markup` says after such a hold. None, unless a reader says so."""
        return NOTHING_HELD

    def feed(self, data: str, pos: int, out: list[Event], eof: bool) -> tuple[int, int]:
        """Consume from ``pos`` (see the module doc): each step in turn, until one answers."""
        steps = self.STEPS
        self.held_markup = NOTHING_HELD
        while True:
            status, pos = steps[self._state](self, data, pos, out, eof)
            if status != GO:
                return status, pos

    def over(self, data: str, pos: int, out: list[Event], eof: bool) -> tuple[int, int]:
        """The step of a reader whose body has ended: ``DONE``, where it ended."""
        return DONE, pos

    def take(self, data: str, start: int, end: int) -> None:
        """Record ``data[start:end]`` as consumed."""
        if end > start:
            self.raw.append(data[start:end])

    def fail(self, pos: int, code: str, message: str) -> tuple[int, int]:
        """Answer ``FAIL`` with a diagnostic code and message."""
        self.failure = code
        self.message = message
        return FAIL, pos

    def unclosed(self, pos: int) -> tuple[int, int]:
        """Fail because the reply ended inside the body."""
        return self.fail(pos, "unclosed_call", "the reply ended inside a tool call; "
                                               "shown as text")
