"""A reply that writes a call it already wrote ends there: the repeated-call rule.

Small models asked for calls (``tool_choice="required"`` with parallel calls
allowed) often write the same call again and again until the token limit, though
the grammar lets them end after every call. Running a call twice in one reply is
never what the user asked for, so a templated backend ends the turn at the first
call that is identical (same tool, same arguments) to one the reply already holds:
the repeat is dropped, generation stops, and the turn ends with ``tool_calls`` and
a ``repeated_call`` diagnostic (``docs/grammar.md``, "Repeated calls").

The rule lives here once. The templated base (``llama_cpp``, ``completions``) runs it
inside its generation loop, and a backend whose calls arrive otherwise (a remote
provider's, a scripted stand-in's) runs its turn under :func:`end_at_repeated_call`
(:func:`aend_at_repeated_call` for an async stream): a repeat ends the reply the
same way whichever backend wrote it.

A repeat is only known when its arguments are complete, but its events stream
before that. :class:`RepeatedCallStop` holds a call's ``tool_call_start`` and
``tool_call_delta`` events back only while they can still become a repeat (the
same tool's name, and arguments so far a prefix of an earlier call's); the first
delta that differs releases them, so a different call streams with almost no delay
and a repeat never reaches the caller at all.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable, Generator, Iterable, Iterator, Mapping
from typing import Any, Final

from ..events import (
    DiagnosticEvent,
    Event,
    ToolCallDeltaEvent,
    ToolCallEndEvent,
    ToolCallStartEvent,
)
from ..vocabulary.backend import TurnEnd
from ..vocabulary.cancel import CancelToken

__all__ = ["REPEATED_CALL", "RepeatedCallStop", "aend_at_repeated_call", "end_at_repeated_call"]

Item = Event | TurnEnd

REPEATED_CALL: Final = "repeated_call"
"""The diagnostic code of a reply ended at a repeated call."""

_POLL_SECONDS: Final = 0.05
_PARAMETER: Final = "\x1e"  # opens a parameter's name in a call's stream key
_VALUE: Final = "\x1f"


class _LinkedToken(CancelToken):
    """A cancel token set by its own :meth:`cancel` or by the turn's token."""

    __slots__ = ("_outer",)

    def __init__(self, outer: CancelToken) -> None:
        super().__init__()
        self._outer = outer

    @property
    def cancelled(self) -> bool:
        """Whether this token or the turn's was set."""
        return self._event.is_set() or self._outer.cancelled

    def wait(self, timeout: float | None = None) -> bool:
        """Block until either token is set or ``timeout`` passes."""
        step = _POLL_SECONDS if timeout is None else min(_POLL_SECONDS, timeout)
        waited = 0.0
        while not self.cancelled:
            if timeout is not None and waited >= timeout:
                return False
            self._event.wait(step)
            waited += step
        return True


def _arguments_key(arguments: Mapping[str, Any]) -> str:
    return json.dumps(arguments, sort_keys=True, ensure_ascii=False, default=str)


class _Written:
    """One call of the reply as it streams: its name, and its deltas as one key that
    does not depend on how the text was cut into deltas."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.stream = ""
        self._parameter: str | None = None

    def add(self, delta: ToolCallDeltaEvent) -> None:
        if delta.parameter != self._parameter:
            self._parameter = delta.parameter
            self.stream += _PARAMETER + (delta.parameter or "") + _VALUE
        self.stream += delta.text


class RepeatedCallStop:
    """Passes a reply's events on, ending the reply at a call it already holds.

    :param cancel: the turn's cancel token; :attr:`token` (give it to the runtime's
        ``generate``) is set by it, or by this rule when a call repeats.
    """

    def __init__(self, cancel: CancelToken) -> None:
        self._cancel = cancel
        self.token: CancelToken = _LinkedToken(cancel)
        self.repeat: ToolCallEndEvent | None = None
        """The repeated call that ended the reply (``None``: none did)."""
        self._done: list[tuple[str, str, str]] = []  # (name, stream key, arguments key)
        self._current: _Written | None = None
        self._held: list[Event] = []

    @property
    def stopped(self) -> bool:
        """Whether a repeated call ended the reply."""
        return self.repeat is not None

    def _could_repeat(self, written: _Written) -> bool:
        return any(name == written.name and stream.startswith(written.stream)
                   for name, stream, _ in self._done)

    def _release(self) -> list[Event]:
        held, self._held = self._held, []
        return held

    def feed(self, events: Iterable[Event]) -> Iterator[Event]:
        """The events to pass on, in order; nothing once a call repeated."""
        for event in events:
            if self.stopped:
                return
            yield from self._one(event)

    def _one(self, event: Event) -> list[Event]:
        if isinstance(event, ToolCallStartEvent):
            released = self._release()
            self._current = _Written(event.name)
            if self._could_repeat(self._current):
                self._held.append(event)
                return released
            return [*released, event]
        if isinstance(event, ToolCallDeltaEvent) and self._current is not None:
            self._current.add(event)
            if self._held and self._could_repeat(self._current):
                self._held.append(event)
                return []
            return [*self._release(), event]
        if isinstance(event, ToolCallEndEvent):
            written = self._current or _Written(event.name)
            self._current = None
            key = _arguments_key(event.arguments)
            if any(name == event.name and arguments == key for name, _, arguments in self._done):
                self._held = []
                self.repeat = event
                self.token.cancel("repeated call")
                return []
            self._done.append((event.name, written.stream, key))
            return [*self._release(), event]
        return [*self._release(), event]

    def notice(self) -> DiagnosticEvent:
        """The ``repeated_call`` diagnostic of a reply this rule ended."""
        repeat = self.repeat
        name = repeat.name if repeat is not None else ""
        arguments = _arguments_key(repeat.arguments) if repeat is not None else "{}"
        return DiagnosticEvent(
            REPEATED_CALL,
            f"the reply wrote the call {name}({arguments}) a second time; the reply ends "
            "there and the call runs once (a reply never runs the same call twice)", raw=arguments)

    def finish(self, end: TurnEnd) -> list[Item]:
        """The turn's last items in place of the runtime's ``end``: after a repeat (and
        unless the caller cancelled), the ``repeated_call`` notice and a ``tool_calls``
        end with ``end``'s usage and timings."""
        if self.stopped and not self._cancel.cancelled:
            return [self.notice(), TurnEnd("tool_calls", end.usage, end.timings)]
        return [end]


def end_at_repeated_call(turn: Callable[[CancelToken], Iterator[Item]],
                         cancel: CancelToken) -> Generator[Item, None, None]:
    """Run ``turn(token)`` (a backend's turn: events, then a :class:`TurnEnd`) under the
    rule: a call it already wrote ends the reply, and ``token`` is set so the backend
    stops generating (it ends with ``cancelled``, which becomes ``tool_calls``).

    The backend's stream is closed when this one is, not left to the collector."""
    rule = RepeatedCallStop(cancel)
    stream = turn(rule.token)
    try:
        for item in stream:
            if isinstance(item, TurnEnd):
                yield from rule.finish(item)
                return
            yield from rule.feed((item,))
    finally:
        close = getattr(stream, "close", None)
        if close is not None:
            close()


async def aend_at_repeated_call(turn: Callable[[CancelToken], AsyncIterator[Item]],
                                cancel: CancelToken) -> AsyncIterator[Item]:
    """:func:`end_at_repeated_call` for a backend's async turn."""
    rule = RepeatedCallStop(cancel)
    stream = turn(rule.token)
    try:
        async for item in stream:
            if isinstance(item, TurnEnd):
                for last in rule.finish(item):
                    yield last
                return
            for event in rule.feed((item,)):
                yield event
    finally:
        aclose = getattr(stream, "aclose", None)
        if aclose is not None:
            await aclose()
