"""One reply's toolwire pipeline, fed an engine's deltas, answering in engine-sized pieces.

An engine's serving loop hands its parser slot the text the model wrote since the
last step; :class:`ReplyStream` feeds exactly that delta to one pipeline (it never
sees, let alone re-parses, the text so far) and answers with a
:class:`ReplyPiece`: the content, the reasoning and the calls that delta settled.
The engine halves turn a piece into their own records (vLLM's ``DeltaMessage``,
SGLang's ``StreamingParseResult``).

**A call goes out whole, once the model has finished it**: one
:class:`CallPiece` with its index (0, 1, ... in the order the calls were
finished), its id, its name and its arguments, ``json.dumps`` of the typed
arguments the parser read. So the arguments streamed for a call are always
exactly its final JSON, and a call the token limit cut (the reply ended inside
it) is never sent at all: closing with ``end_reason="length"`` makes the
parser give the cut markup back as text with a ``truncated_call`` diagnostic,
and that markup is held out of the content too, as toolwire's own OpenAI
endpoint does. The same rule holds for a call's markup the parser gives back
(``unclosed_call``, ``malformed_call``) at that cut.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from typing import Any, Final

import attrs

import toolwire

__all__ = ["CallPiece", "ReplyPiece", "ReplyStream", "arguments_json"]

_GIVEN_BACK: Final = frozenset({"truncated_call", "unclosed_call", "malformed_call"})
"""Diagnostics whose ``raw`` is markup a parser gave back as text."""

_LONE_SURROGATE = re.compile("[\ud800-\udfff]")


def arguments_json(arguments: Mapping[str, Any]) -> str:
    """A call's typed arguments as the JSON text engines send (UTF-8 kept, lone
    surrogates escaped so the text can be encoded)."""
    text = json.dumps(dict(arguments), ensure_ascii=False)
    if _LONE_SURROGATE.search(text):
        text = _LONE_SURROGATE.sub(lambda m: f"\\u{ord(m.group()):04x}", text)
    return text


@attrs.frozen
class CallPiece:
    """One finished call of the reply.

    :ivar index: the call's place among the reply's calls (0, 1, ...).
    :ivar id: the call's id (the parser's, else one made for the index).
    :ivar name: the tool called.
    :ivar arguments: the arguments as JSON text (``json.dumps`` of the typed values).
    """

    index: int
    id: str
    name: str
    arguments: str


@attrs.frozen
class ReplyPiece:
    """What one delta (or the end of the reply) settled."""

    content: str = ""
    reasoning: str = ""
    calls: tuple[CallPiece, ...] = ()
    diagnostics: tuple[toolwire.DiagnosticEvent, ...] = ()

    def __bool__(self) -> bool:
        return bool(self.content or self.reasoning or self.calls)


class ReplyStream:
    """Feeds one reply's deltas to one pipeline and gathers the pieces.

    :param pipeline: the reply's pipeline (``ServedFamily.pipeline``).
    :param make_call_id: makes a call's id from its index when the parser read none.
    :param reasoning_tags: give the reasoning back as content, between these tags
        (an engine with no reasoning parser shows reasoning markup as content; a call
        written inside it is still never a call).
    """

    def __init__(self, pipeline: toolwire.ReplyPipeline,
                 make_call_id: Callable[[int], str], *,
                 reasoning_tags: tuple[str, str] | None = None) -> None:
        self._pipeline = pipeline
        self._make_call_id = make_call_id
        self._tags = reasoning_tags
        self._in_reasoning = False
        self.calls: list[toolwire.ToolCallEndEvent] = []
        """The calls finished so far, in order."""
        self.closed = False

    def feed(self, delta: str) -> ReplyPiece:
        """The pieces ``delta`` settles (nothing after :meth:`close`)."""
        if self.closed or not delta:
            return _NOTHING
        events = self._pipeline.feed(delta)
        if not events:
            return _NOTHING
        if len(events) == 1 and type(events[0]) is toolwire.TextEvent and not self._in_reasoning:
            return ReplyPiece(events[0].text)  # the common case: plain text
        return self._piece(events, cut=False)

    def close(self, end_reason: toolwire.EndReason = "stop") -> ReplyPiece:
        """The end of the reply: what the pipeline still held.

        :param end_reason: ``"length"`` when the token limit cut the reply (or the
            engine cannot say it did not): a call still open is never a call, and
            its markup is not content either.
        """
        if self.closed:
            return ReplyPiece()
        self.closed = True
        piece = self._piece(self._pipeline.close(end_reason=end_reason),
                            cut=end_reason == "length")
        if self._in_reasoning and self._tags is not None:  # the reply ended inside it
            self._in_reasoning = False
            piece = attrs.evolve(piece, content=piece.content + self._tags[1])
        return piece

    def _piece(self, events: list[toolwire.Event], *, cut: bool) -> ReplyPiece:
        content: list[str] = []
        reasoning: list[str] = []
        calls: list[CallPiece] = []
        diagnostics: list[toolwire.DiagnosticEvent] = []
        for event in events:
            if self._tags is not None and self._in_reasoning and not isinstance(
                    event, toolwire.ReasoningEvent | toolwire.DiagnosticEvent):
                self._in_reasoning = False
                content.append(self._tags[1])
            if isinstance(event, toolwire.TextEvent):
                content.append(event.text)
            elif isinstance(event, toolwire.ReasoningEvent):
                if self._tags is None:
                    reasoning.append(event.text)
                    continue
                if not self._in_reasoning:
                    self._in_reasoning = True
                    content.append(self._tags[0])
                content.append(event.text)
            elif isinstance(event, toolwire.ToolCallEndEvent):
                index = len(self.calls)
                self.calls.append(event)
                calls.append(CallPiece(index, event.id or self._make_call_id(index),
                                       event.name, arguments_json(event.arguments)))
            elif isinstance(event, toolwire.DiagnosticEvent):
                diagnostics.append(event)
                if cut and event.code in _GIVEN_BACK and event.raw:
                    _drop_tail(content, event.raw)
        return ReplyPiece("".join(content), "".join(reasoning), tuple(calls),
                          tuple(diagnostics))


_NOTHING: Final = ReplyPiece()


def _drop_tail(parts: list[str], raw: str) -> None:
    """Remove ``raw`` from the end of the text gathered so far, where it ends it."""
    text = "".join(parts)
    if text.endswith(raw):
        parts[:] = [text[:len(text) - len(raw)]]
