"""The event stream a chat emits, for terminals, scripts and dashboards.

Every event is a frozen attrs record with a stable JSON shape: ``to_dict()``
returns a dict whose ``"type"`` field names the event; ``event_from_dict``
reads one back. ``docs/events.md`` documents each shape.

Parsers and backends emit records for what they read from a model (``text``,
``reasoning``, ``tool_call_start``, ``tool_call_delta``, ``tool_call_end``,
``diagnostic``); a parser leaves ``id`` empty and the chat loop fills in the call
id before the event reaches the caller. Each event says one thing:
``tool_call_end`` is "the model finished writing this call" (a parser's or a
backend's word), ``tool_call`` is "this call runs now" (the chat loop's word, after
it took the call from the reply).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, ClassVar

import attrs

__all__ = [
    "ApprovalRequestEvent",
    "DiagnosticEvent",
    "DoneEvent",
    "ErrorEvent",
    "Event",
    "NoParserEvent",
    "ReasoningEvent",
    "TextEvent",
    "TokenLogprobEvent",
    "ToolCallDeltaEvent",
    "ToolCallEndEvent",
    "ToolCallEvent",
    "ToolCallStartEvent",
    "ToolResultEvent",
    "event_from_dict",
]


def _freeze_mapping(value: Mapping[str, Any] | None) -> Mapping[str, Any]:
    return dict(value or {})


@attrs.frozen
class _EventBase:
    type: ClassVar[str] = ""

    def to_dict(self) -> dict[str, Any]:
        """This event as JSON-ready data, with its ``"type"`` first."""
        data: dict[str, Any] = {"type": self.type}
        data.update(attrs.asdict(self, recurse=False))
        for key, value in data.items():
            if isinstance(value, tuple):
                data[key] = list(value)
            elif isinstance(value, Mapping):
                data[key] = dict(value)
        return data


@attrs.frozen
class TextEvent(_EventBase):
    """A piece of the reply's visible text."""

    type: ClassVar[str] = "text"
    text: str


@attrs.frozen
class ReasoningEvent(_EventBase):
    """A piece of the model's reasoning (a ``<think>`` block or analysis channel)."""

    type: ClassVar[str] = "reasoning"
    text: str


@attrs.frozen
class ToolCallStartEvent(_EventBase):
    """The model began writing a call: its name is known, arguments follow."""

    type: ClassVar[str] = "tool_call_start"
    index: int
    name: str
    id: str = ""


@attrs.frozen
class ToolCallDeltaEvent(_EventBase):
    """A piece of a call's arguments while the model writes them.

    ``parameter`` names the parameter whose text this is (tagged formats stream
    string values parameter by parameter); it is ``None`` when the arguments
    travel as one JSON text.
    """

    type: ClassVar[str] = "tool_call_delta"
    index: int
    name: str
    text: str
    parameter: str | None = None
    id: str = ""


@attrs.frozen
class ToolCallEndEvent(_EventBase):
    """The model finished writing a call: its arguments, typed by the tool's schema.

    Parsers and backends emit it when a call's markup (or its streamed
    ``tool_calls`` entry) is complete. It is not yet validated or run: the chat
    loop takes it from the reply and announces the call with a
    :class:`ToolCallEvent` when it runs it.
    """

    type: ClassVar[str] = "tool_call_end"
    name: str
    arguments: Mapping[str, Any] = attrs.field(converter=_freeze_mapping, factory=dict)
    id: str = ""
    index: int = 0


@attrs.frozen
class ToolCallEvent(_EventBase):
    """A call the chat loop runs now, with its arguments typed by the tool's schema.

    Emitted by the loop just before it validates and runs the call (its
    :class:`ToolResultEvent` follows). What a parser or backend read is a
    :class:`ToolCallEndEvent`.
    """

    type: ClassVar[str] = "tool_call"
    name: str
    arguments: Mapping[str, Any] = attrs.field(converter=_freeze_mapping, factory=dict)
    id: str = ""
    index: int = 0


@attrs.frozen
class ToolResultEvent(_EventBase):
    """What a tool returned (or why it failed), exactly as the model reads it.

    ``error_kind`` says why a call failed: ``unknown_tool``, ``invalid_arguments``,
    ``read_only``, ``tool_error``, ``timeout``, or ``cancelled`` (the reply was
    cancelled after the call was announced and it did not run).
    """

    type: ClassVar[str] = "tool_result"
    id: str
    name: str
    content: str
    is_error: bool = False
    error_kind: str | None = None


@attrs.frozen
class ApprovalRequestEvent(_EventBase):
    """A call of a tool that changes things waits for the user's approval.

    Sent between the call's ``tool_call`` and its ``tool_result`` by a server that
    asks its client before writes (``toolwire serve --approvals``); the answer
    goes to ``POST /v1/chat/{reply id}/approval``. ``id`` is the call's id;
    ``arguments`` are the model's, as the ``tool_call`` showed them.
    """

    type: ClassVar[str] = "approval_request"
    id: str
    name: str
    arguments: Mapping[str, Any] = attrs.field(converter=_freeze_mapping, factory=dict)


@attrs.frozen
class DiagnosticEvent(_EventBase):
    """Something in the model's output was not what its format expects.

    ``code`` is machine-readable (``malformed_call``, ``json_in_tool_call``,
    ``unclosed_call``, ``call_in_final_turn``, ...); ``raw`` is the text concerned.
    """

    type: ClassVar[str] = "diagnostic"
    code: str
    message: str
    raw: str = ""


@attrs.frozen
class NoParserEvent(_EventBase):
    """No parser plugin claims the model's template: calls stay text, none run."""

    type: ClassVar[str] = "no_parser"
    message: str
    seen_markers: tuple[str, ...] = attrs.field(converter=tuple, default=())


@attrs.frozen
class ErrorEvent(_EventBase):
    """The reply failed or was cut short; ``kind`` says why (see ``docs/events.md``)."""

    type: ClassVar[str] = "error"
    kind: str
    message: str


@attrs.frozen
class DoneEvent(_EventBase):
    """The exchange ended; always the last event.

    ``reason`` is ``stop`` (a normal answer), ``cancelled``, ``error`` or
    ``length`` (the model hit its token limit). ``usage`` and ``timings`` are
    filled when the backend reports them.
    """

    type: ClassVar[str] = "done"
    reason: str
    turns: int = 0
    usage: Mapping[str, Any] | None = None
    timings: Mapping[str, Any] | None = None


def _byte_values(value: Iterable[int]) -> tuple[int, ...]:
    return tuple(value)


def _alternatives(value: Any) -> tuple[Mapping[str, Any], ...]:
    return tuple(dict(entry) for entry in value or ())


@attrs.frozen
class TokenLogprobEvent(_EventBase):
    """One generated token's log probability, for a turn that asked for them
    (``ModelRequest.logprobs``); it comes just before the events that reading the
    token's text produced.

    ``text`` is what the token added to the reply's text (whole characters: ``""``
    for a token that ends inside a character, whose text comes with the token that
    completes it), ``bytes`` the token's own bytes, ``logprob`` its natural-log
    probability under the model's distribution before sampling, and
    ``top_logprobs`` the most likely tokens at that step, most likely first, each
    ``{"token", "logprob", "bytes"}``.
    """

    type: ClassVar[str] = "token_logprob"
    text: str
    logprob: float
    bytes: tuple[int, ...] = attrs.field(converter=_byte_values, default=())
    top_logprobs: tuple[Mapping[str, Any], ...] = attrs.field(converter=_alternatives,
                                                              default=())


Event = (
    TextEvent
    | ReasoningEvent
    | ToolCallStartEvent
    | ToolCallDeltaEvent
    | ToolCallEndEvent
    | ToolCallEvent
    | ToolResultEvent
    | ApprovalRequestEvent
    | DiagnosticEvent
    | NoParserEvent
    | ErrorEvent
    | DoneEvent
    | TokenLogprobEvent
)

_BY_TYPE: dict[str, type[_EventBase]] = {
    cls.type: cls
    for cls in (TextEvent, ReasoningEvent, ToolCallStartEvent, ToolCallDeltaEvent,
                ToolCallEndEvent, ToolCallEvent, ToolResultEvent, ApprovalRequestEvent,
                DiagnosticEvent, NoParserEvent, ErrorEvent, DoneEvent, TokenLogprobEvent)
}


def event_from_dict(data: Mapping[str, Any]) -> Event:
    """Read an event back from its ``to_dict()`` form.

    :raises ValueError: the ``"type"`` is unknown or a field is missing.
    """
    kind = data.get("type")
    cls = _BY_TYPE.get(kind) if isinstance(kind, str) else None
    if cls is None:
        raise ValueError(f"unknown event type {kind!r}")
    fields = {k: v for k, v in data.items() if k != "type"}
    try:
        event: Event = cls(**fields)  # type: ignore[assignment]
    except TypeError as exc:
        raise ValueError(f"bad {kind} event: {exc}") from exc
    return event
