"""A backend turn's events as an OpenAI chat completion: streamed chunks or one response.

:class:`CompletionBuilder` reads one turn's items (``text``, ``reasoning``,
``tool_call_start`` / ``tool_call_delta`` / ``tool_call``, ``error``, then the
``TurnEnd``) and writes ``chat.completion.chunk`` payloads as they come; at the
end it writes the finishing chunk (and the usage chunk when asked), or the whole
``chat.completion`` body for a non-streaming request. Both forms come from the
same state, so a streamed reply concatenates to exactly the non-streamed one.

Two request options are enforced here, on what the model writes: ``stop``
strings end the reply's text (the text before the first one is kept), and
``parallel_tool_calls: false`` ends the reply after its first complete call.
Either sets :attr:`CompletionBuilder.should_stop`, and the route then stops the
model.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import attrs

from ...events import (
    ErrorEvent,
    Event,
    ReasoningEvent,
    TextEvent,
    ToolCallDeltaEvent,
    ToolCallEndEvent,
    ToolCallEvent,
    ToolCallStartEvent,
)
from ...vocabulary.backend import TurnEnd
from .tool_arguments import ArgumentsWriter

__all__ = ["CompletionBuilder", "StopMatcher", "openai_usage"]


class StopMatcher:
    """Finds the first stop string in text that arrives in pieces.

    Holds back the end of the text that could still begin a stop string, so no
    part of one is ever released.
    """

    def __init__(self, stops: Sequence[str]) -> None:
        self.stops = tuple(s for s in stops if s)
        self._held = ""
        self.matched = False

    def feed(self, text: str) -> str:
        """Take text; return what is certain to come before any stop string."""
        if self.matched:
            return ""
        if not self.stops:
            return text
        buffer = self._held + text
        found = [i for i in (buffer.find(s) for s in self.stops) if i >= 0]
        if found:
            self.matched = True
            self._held = ""
            return buffer[:min(found)]
        hold = max((k for stop in self.stops for k in range(min(len(stop) - 1, len(buffer)), 0, -1)
                    if buffer.endswith(stop[:k])), default=0)
        self._held = buffer[len(buffer) - hold:] if hold else ""
        return buffer[:len(buffer) - hold]

    def flush(self) -> str:
        """Release the held-back text (the text ended, or something else came first)."""
        held, self._held = self._held, ""
        return held


def openai_usage(usage: Mapping[str, Any] | None) -> dict[str, int]:
    """A backend's usage as OpenAI's ``usage`` object."""
    usage = usage or {}
    prompt = int(usage.get("prompt_tokens") or 0)
    completion = int(usage.get("completion_tokens") or 0)
    return {"prompt_tokens": prompt, "completion_tokens": completion,
            "total_tokens": prompt + completion}


@attrs.define
class _Call:
    index: int
    id: str
    name: str
    writer: ArgumentsWriter = attrs.Factory(ArgumentsWriter)
    complete: bool = False


class CompletionBuilder:
    """Builds one chat completion from one backend turn.

    :param completion_id: the ``chatcmpl-...`` id.
    :param created: the Unix time stamp of the request.
    :param model: the model id to report.
    :param make_call_id: makes a call id when the parser gave none.
    :param stop: stop strings (``stop``).
    :param parallel_tool_calls: ``False``: end after the first complete call.
    :param include_usage: chunks carry ``usage: null`` and a usage chunk ends the stream.
    """

    def __init__(self, completion_id: str, created: int, model: str, *,
                 make_call_id: Callable[[int], str], stop: Sequence[str] = (),
                 parallel_tool_calls: bool = True, include_usage: bool = False) -> None:
        self.completion_id = completion_id
        self.created = created
        self.model = model
        self.make_call_id = make_call_id
        self.parallel_tool_calls = parallel_tool_calls
        self.include_usage = include_usage
        self._stop = StopMatcher(stop)
        self._content: list[str] = []
        self._reasoning: list[str] = []
        self._calls: dict[int, _Call] = {}
        self._end: TurnEnd | None = None
        self.error: ErrorEvent | None = None
        self.should_stop = False

    # -- chunks --------------------------------------------------------------------------

    def chunk(self, delta: Mapping[str, Any], finish_reason: str | None = None) -> dict[str, Any]:
        """A ``chat.completion.chunk`` payload with one choice's ``delta``."""
        payload: dict[str, Any] = {
            "id": self.completion_id, "object": "chat.completion.chunk",
            "created": self.created, "model": self.model, "system_fingerprint": None,
            "choices": [{"index": 0, "delta": dict(delta), "logprobs": None,
                         "finish_reason": finish_reason}]}
        if self.include_usage:
            payload["usage"] = None
        return payload

    def first_chunk(self) -> dict[str, Any]:
        """The stream's first chunk: the assistant's role."""
        return self.chunk({"role": "assistant", "content": ""})

    def feed(self, item: Event | TurnEnd) -> list[dict[str, Any]]:
        """Take one item of the turn; return the chunks it adds (often one, maybe none)."""
        if isinstance(item, TurnEnd):
            self._end = item
            return []
        if self.should_stop:
            return []
        if isinstance(item, TextEvent):
            return self._content_chunks(self._stop.feed(item.text))
        chunks = self._content_chunks(self._stop.flush())
        if isinstance(item, ReasoningEvent):
            if item.text:
                self._reasoning.append(item.text)
                chunks.append(self.chunk({"reasoning_content": item.text}))
        elif isinstance(item, ToolCallStartEvent):
            chunks.extend(self._start_call(item.index, item.name, item.id))
        elif isinstance(item, ToolCallDeltaEvent):
            call = self._calls.get(item.index) or self._new_call(item.index, item.name, item.id,
                                                                 chunks)
            if call is not None:
                chunks.extend(self._arguments(call, call.writer.feed(item.text, item.parameter)))
        elif isinstance(item, ToolCallEndEvent | ToolCallEvent):  # the latter: older backends
            call = self._calls.get(item.index) or self._new_call(item.index, item.name, item.id,
                                                                 chunks)
            if call is not None and not call.complete:
                call.complete = True
                chunks.extend(self._arguments(call, call.writer.finish(item.arguments)))
                if not self.parallel_tool_calls:
                    self.should_stop = True
        elif isinstance(item, ErrorEvent):
            self.error = self.error or item
        return chunks

    def _content_chunks(self, text: str) -> list[dict[str, Any]]:
        chunks: list[dict[str, Any]] = []
        if text:
            self._content.append(text)
            chunks.append(self.chunk({"content": text}))
        if self._stop.matched:
            self.should_stop = True
        return chunks

    def _start_call(self, index: int, name: str, given_id: str) -> list[dict[str, Any]]:
        chunks: list[dict[str, Any]] = []
        if index not in self._calls:
            self._new_call(index, name, given_id, chunks)
        return chunks

    def _new_call(self, index: int, name: str, given_id: str,
                  chunks: list[dict[str, Any]]) -> _Call | None:
        if not self.parallel_tool_calls and self._calls:
            return None  # only the first call of the reply is answered
        call = _Call(len(self._calls), given_id or self.make_call_id(index), name)
        self._calls[index] = call
        chunks.append(self.chunk({"tool_calls": [{
            "index": call.index, "id": call.id, "type": "function",
            "function": {"name": name, "arguments": ""}}]}))
        return call

    def _arguments(self, call: _Call, fragment: str) -> list[dict[str, Any]]:
        if not fragment:
            return []
        return [self.chunk({"tool_calls": [{"index": call.index,
                                            "function": {"arguments": fragment}}]})]

    # -- the end -------------------------------------------------------------------------

    @property
    def finish_reason(self) -> str:
        """``stop``, ``length`` or ``tool_calls``, from the turn's end and what was read."""
        if self._stop.matched:
            return "stop"
        if self._end is not None and self._end.reason == "length":
            return "length"
        if any(call.complete for call in self._calls.values()):
            return "tool_calls"
        return "stop"

    @property
    def usage(self) -> dict[str, int]:
        """The turn's token counts in OpenAI's form."""
        return openai_usage(self._end.usage if self._end else None)

    def closing_chunks(self) -> list[dict[str, Any]]:
        """The held-back text, the close of unfinished calls, the finishing chunk and
        (when asked) the usage chunk."""
        chunks = self._content_chunks(self._stop.flush())
        for call in self._calls.values():
            if not call.complete:
                chunks.extend(self._arguments(call, call.writer.close_unfinished()))
        chunks.append(self.chunk({}, self.finish_reason))
        if self.include_usage:
            chunks.append({"id": self.completion_id, "object": "chat.completion.chunk",
                           "created": self.created, "model": self.model,
                           "system_fingerprint": None, "choices": [], "usage": self.usage})
        return chunks

    def response(self) -> dict[str, Any]:
        """The whole ``chat.completion`` body (call after the turn has ended)."""
        self.closing_chunks()  # completes the held text and unfinished calls
        message: dict[str, Any] = {"role": "assistant",
                                   "content": "".join(self._content) or None}
        if self._reasoning:
            message["reasoning_content"] = "".join(self._reasoning)
        if self._calls:
            message["tool_calls"] = [
                {"id": call.id, "type": "function",
                 "function": {"name": call.name, "arguments": call.writer.text}}
                for call in self._calls.values()]
        elif message["content"] is None:
            message["content"] = ""
        return {"id": self.completion_id, "object": "chat.completion", "created": self.created,
                "model": self.model, "system_fingerprint": None,
                "choices": [{"index": 0, "message": message, "logprobs": None,
                             "finish_reason": self.finish_reason}],
                "usage": self.usage}
