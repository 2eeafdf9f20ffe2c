"""What a parser plugin provides, and the pipeline that streams a reply through it.

A *parser plugin* registers a :class:`ParserSpec`: a family name, a ``detect``
function that scores a chat template, and a factory for a :class:`StreamParser`.
A stream parser is fed the reply's text in deltas of any size and returns the
events it is sure of; ``close()`` flushes what is left at the end of the reply.

*Stream filters* (:class:`StreamFilterSpec`) run before the parser, in order of
priority; the reasoning filter that turns ``<think>`` blocks into ``reasoning``
events is one. :class:`ReplyPipeline` chains filters and a parser.

Two facts about a reply come from outside its text: what the generation prompt
left open (:class:`PromptState`, or the prompt's tail, which filters read it
from) and why the reply ended (:data:`EndReason`, given to ``close``). A call
still open when a reply was cut by the token limit (``"length"``) is never
recovered as a call: its arguments may be cut short.
"""

from __future__ import annotations

import enum
import functools
import inspect
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Final, Literal, Protocol, get_args, runtime_checkable

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
    "END_REASONS",
    "EndReason",
    "FilterContext",
    "ParsedReply",
    "ParserSpec",
    "PromptState",
    "ReplyPipeline",
    "StreamFilter",
    "StreamFilterSpec",
    "StreamParser",
    "collect_reply",
    "merge_events",
]


EndReason = Literal["stop", "length"]
"""Why a reply ended: ``"stop"`` (the model ended its turn: a stop token, or the
backend's stop sequence) or ``"length"`` (cut by the token limit)."""

END_REASONS: Final[tuple[str, ...]] = get_args(EndReason)
"""The values of :data:`EndReason`."""


class PromptState(enum.Enum):
    """What the generation prompt left open when the reply began.

    A live turn knows it from the prompt's tail (``<think>\\n`` at its end opens a
    block); a stored reply is parsed as its live turn was when the caller says so.

    :cvar UNKNOWN: not known (a stored reply): a reasoning filter waits to see
        whether a lone closing tag shows that the reply began inside reasoning.
    :cvar THINK_OPEN: the prompt opened a reasoning block: the reply begins inside it.
    :cvar THINK_CLOSED: the prompt opened none, or closed it (``<think></think>``):
        the reply begins as text.
    """

    UNKNOWN = "unknown"
    THINK_OPEN = "think_open"
    THINK_CLOSED = "think_closed"

    @classmethod
    def from_tail(cls, prompt_tail: str, open_tag: str) -> PromptState:
        """The state a prompt ending in ``prompt_tail`` leaves for reasoning opened by
        ``open_tag`` (an empty tail: unknown)."""
        if not prompt_tail:
            return cls.UNKNOWN
        return cls.THINK_OPEN if prompt_tail.rstrip().endswith(open_tag) else cls.THINK_CLOSED


@runtime_checkable
class StreamParser(Protocol):
    """Turns a model's reply text into events, one delta at a time.

    Implementations keep a cursor and never rescan consumed text; ``feed`` and
    ``close`` never raise on any input (text that cannot be a call is text).
    ``close`` may take the reply's :data:`EndReason` as ``end_reason`` (every
    built-in parser does); :class:`ReplyPipeline` passes it to a stage whose
    ``close`` has that parameter.
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
    :ivar prompt_state: what the prompt left open, when the caller says so (a
        stored reply); ``None``: read it from :attr:`prompt_tail`
        (:meth:`start_state`).
    :ivar call_open: the markers that open the family's calls (from its record).
    :ivar call_close: the markers that close them, and the end-of-turn tokens the
        family writes after its calls (a reasoning filter that has not yet decided
        whether a stored reply began inside reasoning treats a complete call as the
        end of that doubt; one inside a block that never closes, as a call).
    """

    family: str | None = None
    chat_template: str | None = None
    prompt_tail: str = ""
    call_open: tuple[str, ...] = ()
    call_close: tuple[str, ...] = ()
    prompt_state: PromptState | None = None

    def start_state(self, open_tag: str) -> PromptState:
        """What the prompt left open for a reasoning block opened by ``open_tag``."""
        if self.prompt_state is not None:
            return self.prompt_state
        return PromptState.from_tail(self.prompt_tail, open_tag)


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

    def run(self, deltas: Iterable[str], end_reason: EndReason = "stop") -> list[Event]:
        """A whole reply: every delta in turn, then its end; all the events."""
        out: list[Event] = []
        for delta in deltas:
            out.extend(self.feed(delta))
        out.extend(self.close(end_reason))
        return out

    def close(self, end_reason: EndReason = "stop") -> list[Event]:
        """Flush every stage, in order, at the end of the reply.

        :param end_reason: why the reply ended. Under ``"length"`` a call still
            open at the end is not recovered; a stage whose ``close`` cannot be
            told so has every call it completes at the end withheld, with a
            ``truncated_call`` diagnostic.
        """
        if end_reason not in END_REASONS:
            raise ValueError(f"end_reason must be one of {END_REASONS}, not {end_reason!r}")
        out: list[Event] = []
        for i in range(len(self._stages)):
            try:
                closed = _close_stage(self._stages[i], end_reason)
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


_UNFINISHED: Final = frozenset({"unclosed_call", "malformed_call"})
"""What a parser reports for a call the reply's end left unfinished (or unreadable)."""


def _close_stage(stage: StreamParser, end_reason: EndReason) -> list[Event]:
    """``stage.close()``, told the end reason where its ``close`` takes it.

    Under ``"length"`` a call the end of the reply leaves unfinished is reported as
    ``truncated_call`` whatever the stage calls it (the cut, not the model, left it so),
    and a stage that cannot be told has every call it completes at the end withheld.
    """
    told = _takes_end_reason(type(stage))
    closed = stage.close(end_reason=end_reason) if told else stage.close()  # type: ignore[call-arg]
    if end_reason == "stop":
        return closed
    out: list[Event] = []
    for event in closed:
        if isinstance(event, ToolCallEndEvent) and not told:
            event = DiagnosticEvent("truncated_call", f"the reply was cut by the token limit "
                                    f"before call {event.name!r} was closed; it is not run",
                                    event.name)
        elif isinstance(event, DiagnosticEvent) and event.code in _UNFINISHED:
            event = DiagnosticEvent("truncated_call", "the reply was cut by the token limit "
                                    "inside a tool call; shown as text", event.raw)
        out.append(event)
    return out


@functools.cache
def _takes_end_reason(kind: type[StreamParser]) -> bool:
    try:
        return "end_reason" in inspect.signature(kind.close).parameters
    except (TypeError, ValueError):
        return False


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
