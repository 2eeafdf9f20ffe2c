"""What a parser plugin provides, and the pipeline that streams a reply through it.

A *parser plugin* registers a :class:`ParserSpec`: a family name, a ``detect``
function that scores a chat template, and a factory for a :class:`StreamParser`.
A stream parser is fed the reply's text in deltas of any size and returns the
events it is sure of; ``close()`` flushes what is left at the end of the reply.

*Stream filters* (:class:`StreamFilterSpec`) run before the parser, in order of
priority; the reasoning filter that turns ``<think>`` blocks into ``reasoning``
events is one. :class:`ReplyPipeline` chains filters and a parser.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Protocol, runtime_checkable

import attrs

from ..boundaries import must_propagate
from ..events import (
    DiagnosticEvent,
    Event,
    ReasoningEvent,
    TextEvent,
    ToolCallDeltaEvent,
    ToolCallEndEvent,
)
from ..vocabulary.call_ids import default_call_id

__all__ = [
    "FilterContext",
    "ParsedReply",
    "ParserSpec",
    "ReplyPipeline",
    "StreamFilter",
    "StreamFilterSpec",
    "StreamParser",
    "collect_reply",
    "merge_events",
]


@runtime_checkable
class StreamParser(Protocol):
    """Turns a model's reply text into events, one delta at a time.

    Implementations keep a cursor and never rescan consumed text; ``feed`` and
    ``close`` never raise on any input (text that cannot be a call is text).
    """

    def feed(self, text: str) -> list[Event]:
        """Consume the next delta; return the events now certain."""
        ...

    def close(self) -> list[Event]:
        """The reply ended: return every event still held back."""
        ...


StreamFilter = StreamParser
"""A stream filter has the same shape as a parser: text in, events out."""


@attrs.frozen
class ParserSpec:
    """A parser plugin's registration record.

    :ivar name: the family name users select it by (``qwen_xml``).
    :ivar detect: scores a chat template source: ``0.0`` means "not mine", up to
        ``1.0`` for certain. The highest score among all parsers wins.
    :ivar create: builds a fresh :class:`StreamParser` for one reply, given the
        offered tools as ``{tool name: parameters schema}`` (for typing values).
    :ivar make_call_id: makes the id of the ``index``-th call of a reply, in the
        form the family's template requires.
    :ivar description: one line for ``toolwire plugins``.
    :ivar format: the family's :class:`~toolwire.parse.record.CallFormat` when
        the parser is the engine running a record (grammars, conformance markers
        and ``toolwire detect`` read it); ``None`` for a hand-written parser.
    """

    name: str
    detect: Callable[[str], float]
    create: Callable[[Mapping[str, Any]], StreamParser]
    make_call_id: Callable[[int], str] = default_call_id
    description: str = ""
    plugin: str = ""
    format: Any = None


@attrs.frozen
class FilterContext:
    """What a stream-filter factory knows about the reply it will filter.

    :ivar family: the selected parser family, or ``None`` when there is none.
    :ivar chat_template: the template source (``None`` for remote providers).
    :ivar prompt_tail: the end of the rendered prompt (e.g. an open ``<think>``).
    :ivar call_open: the markers that open the family's calls (from its record).
    :ivar call_close: the markers that close them (a reasoning filter that has
        not yet decided whether a stored reply began inside reasoning treats a
        complete call as the end of that doubt).
    """

    family: str | None = None
    chat_template: str | None = None
    prompt_tail: str = ""
    call_open: tuple[str, ...] = ()
    call_close: tuple[str, ...] = ()


@attrs.frozen
class StreamFilterSpec:
    """A stream filter plugin's registration record.

    :ivar priority: lower runs earlier; filters never depend on registration order.
    :ivar create: returns a filter for one reply, or ``None`` where it does not apply.
    """

    name: str
    priority: int
    create: Callable[[FilterContext], StreamFilter | None]
    description: str = ""
    plugin: str = ""


class ReplyPipeline:
    """Stream filters followed by a parser: one reply's path from text to events.

    The pipeline is also the stages' error boundary. A stage (a plugin's parser
    or filter) whose ``feed`` or ``close`` raises, whatever it raises, is
    reported as one ``parser_error`` diagnostic and from then on passes text
    through unchanged; the delta it failed on goes on as text. The reply is kept
    instead of ending in an error (the host's own Ctrl-C still ends it, see
    :mod:`toolwire.boundaries`).
    """

    class _PassThrough:
        """What a failed stage becomes: text in, the same text out."""

        def feed(self, text: str) -> list[Event]:
            return [TextEvent(text)] if text else []

        def close(self) -> list[Event]:
            return []

    def __init__(self, filters: Sequence[StreamFilter], parser: StreamParser | None) -> None:
        self._stages: list[StreamParser] = [*filters, *([parser] if parser is not None else [])]

    def feed(self, text: str) -> list[Event]:
        """Push a delta through every stage."""
        return self._feed_from(0, text)

    def close(self) -> list[Event]:
        """Flush every stage, in order, at the end of the reply."""
        out: list[Event] = []
        for i in range(len(self._stages)):
            try:
                closed = self._stages[i].close()
            except BaseException as exc:
                closed = self._failed(i, "close", exc, "")
            for event in closed:
                if type(event) is TextEvent and i + 1 < len(self._stages):
                    out.extend(self._feed_from(i + 1, event.text))
                else:
                    out.append(event)
        return out

    def _feed_from(self, index: int, text: str) -> list[Event]:
        stages = self._stages
        if index >= len(stages):
            return [TextEvent(text)] if text else []
        try:
            events = stages[index].feed(text)
        except BaseException as exc:
            events = self._failed(index, "feed", exc, text)
        if index + 1 == len(stages):
            return events
        if len(events) == 1 and type(events[0]) is TextEvent:  # the common case: plain text
            return self._feed_from(index + 1, events[0].text)
        out: list[Event] = []
        for event in events:
            if type(event) is TextEvent:
                out.extend(self._feed_from(index + 1, event.text))
            else:
                out.append(event)
        return out

    def _failed(self, index: int, method: str, exc: BaseException, text: str) -> list[Event]:
        """Report a stage that raised, replace it with a pass-through, keep ``text``."""
        if must_propagate(exc):
            raise exc
        stage = self._stages[index]
        self._stages[index] = self._PassThrough()
        detail = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
        diagnostic = DiagnosticEvent(
            "parser_error", f"{type(stage).__name__}.{method} raised {detail}; the rest of "
            "the reply is passed on as text", text)
        return [diagnostic, TextEvent(text)] if text else [diagnostic]


def merge_events(events: Iterable[Event]) -> list[Event]:
    """Join adjacent text, reasoning and same-parameter argument deltas.

    Two chunkings of one reply give the same merged events: this is the form to
    compare in tests and to store.
    """
    out: list[Event] = []
    for event in events:
        if out:
            last = out[-1]
            if isinstance(event, TextEvent) and isinstance(last, TextEvent):
                out[-1] = TextEvent(last.text + event.text)
                continue
            if isinstance(event, ReasoningEvent) and isinstance(last, ReasoningEvent):
                out[-1] = ReasoningEvent(last.text + event.text)
                continue
            if (
                isinstance(event, ToolCallDeltaEvent)
                and isinstance(last, ToolCallDeltaEvent)
                and (event.index, event.parameter, event.id)
                == (last.index, last.parameter, last.id)
            ):
                out[-1] = attrs.evolve(last, text=last.text + event.text)
                continue
        if isinstance(event, TextEvent | ReasoningEvent | ToolCallDeltaEvent) and not event.text:
            continue
        out.append(event)
    return out


@attrs.frozen
class ParsedReply:
    """A whole reply parsed at once: ``toolwire.parse_reply``'s result.

    ``to_dict()`` (and item access, ``reply["tool_calls"]``) gives the JSON shape
    printed by ``toolwire parse``.
    """

    content: str
    reasoning: str
    tool_calls: tuple[ToolCallEndEvent, ...]
    diagnostics: tuple[DiagnosticEvent, ...]
    family: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """``{"content", "reasoning", "tool_calls": [{"name", "arguments"}], "diagnostics"}``."""
        return {
            "content": self.content,
            "reasoning": self.reasoning,
            "tool_calls": [{"name": c.name, "arguments": dict(c.arguments)}
                           for c in self.tool_calls],
            "diagnostics": [{"code": d.code, "message": d.message, "raw": d.raw}
                            for d in self.diagnostics],
        }

    def __getitem__(self, key: str) -> Any:
        return self.to_dict()[key]


def collect_reply(events: Iterable[Event], family: str | None = None) -> ParsedReply:
    """Fold a reply's events into a :class:`ParsedReply`."""
    text: list[str] = []
    reasoning: list[str] = []
    calls: list[ToolCallEndEvent] = []
    diagnostics: list[DiagnosticEvent] = []
    for event in events:
        if isinstance(event, TextEvent):
            text.append(event.text)
        elif isinstance(event, ReasoningEvent):
            reasoning.append(event.text)
        elif isinstance(event, ToolCallEndEvent):
            calls.append(event)
        elif isinstance(event, DiagnosticEvent):
            diagnostics.append(event)
    return ParsedReply("".join(text), "".join(reasoning), tuple(calls), tuple(diagnostics),
                       family)
