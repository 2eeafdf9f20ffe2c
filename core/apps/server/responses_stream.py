"""A backend turn as an OpenAI Responses API response: typed stream events or one object.

:class:`ResponseWriter` shapes the pieces :class:`.reply_assembly.ReplyAssembler`
reads from the turn (the same for every API). The output is a list of items in
the order the model wrote them: a ``reasoning`` item (the reasoning as one
``summary_text`` part), a ``message`` item (its ``output_text``), a
``function_call`` item per call (``arguments`` the typed arguments as JSON text,
``call_id`` the call's id, ``name`` and ``namespace`` as the client named the
tool). Streamed, every event carries a ``sequence_number`` from 0::

    response.created, response.in_progress,
    response.output_item.added, response.reasoning_summary_part.added,
      response.reasoning_summary_text.delta..., response.reasoning_summary_text.done,
      response.reasoning_summary_part.done, response.output_item.done,
    response.output_item.added, response.content_part.added,
      response.output_text.delta..., response.output_text.done,
      response.content_part.done, response.output_item.done,
    response.output_item.added, response.function_call_arguments.delta,
      response.function_call_arguments.done, response.output_item.done,
    response.completed (or response.incomplete)

A call goes out whole once the model has finished it (one arguments delta, the
same text as the ``done`` event), so its arguments are never corrected; a call
the token limit cut is not a call: the response is ``incomplete`` with
``incomplete_details.reason`` ``max_output_tokens`` and lists it in the
``dropped_tool_calls`` extension. Tools left out of the prompt are listed in
``ignored_tools``. A failure after the stream started is ``response.failed``.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ...events import ErrorEvent
from .completion_stream import openai_error_response
from .reply_assembly import (
    EventWriter,
    ReplyAssembler,
    ReplyCall,
    ReplyPiece,
    ReplyReasoning,
    ReplyText,
)
from .responses import JsonResponse
from .responses_request import ToolNames

__all__ = ["ResponseWriter", "responses_usage"]


def responses_usage(usage: Mapping[str, Any]) -> dict[str, Any]:
    """A backend's usage as the Responses API's ``usage`` object."""
    prompt = int(usage.get("prompt_tokens") or 0)
    completion = int(usage.get("completion_tokens") or 0)
    return {"input_tokens": prompt, "input_tokens_details": {"cached_tokens": 0},
            "output_tokens": completion,
            "output_tokens_details": {"reasoning_tokens": int(usage.get("reasoning_tokens") or 0)},
            "total_tokens": prompt + completion}


class _Item:
    """The output item being written: its kind, index, id and text so far."""

    __slots__ = ("id", "index", "kind", "parts")

    def __init__(self, kind: str, index: int) -> None:
        self.kind = kind
        self.index = index
        prefix = "rs" if kind == "reasoning" else "msg"
        self.id = f"{prefix}_{uuid.uuid4().hex}"
        self.parts: list[str] = []


class ResponseWriter(EventWriter):
    """Writes one response (see the module).

    :param response_id: the ``resp_...`` id.
    :param model: the model id to report.
    :param names: the tools' names for the client (namespaces).
    :param echo: request fields the response object repeats.
    :param ignored_tools: the tools left out of the prompt.
    :param make_call_id: makes a call id when the parser gave none.
    :param stop: stop strings.
    :param parallel_tool_calls: ``False``: end after the first complete call.
    :param max_calls: end after this many calls (``max_tool_calls``).
    :param logprobs: report the text's token log probabilities.
    """

    ping_frame = None
    """The Responses stream has no ping."""

    def __init__(self, response_id: str, model: str, *, names: ToolNames,
                 echo: Mapping[str, Any], ignored_tools: Sequence[Mapping[str, str]],
                 make_call_id: Callable[[int], str], stop: Sequence[str] = (),
                 parallel_tool_calls: bool = True, max_calls: int | None = None,
                 logprobs: bool = False) -> None:
        self.id = response_id
        self.model = model
        self.names = names
        self.echo = echo
        self.ignored_tools = [dict(t) for t in ignored_tools]
        self.created_at = int(time.time())
        self.reply = ReplyAssembler(make_call_id=make_call_id, stop=stop,
                                    parallel_tool_calls=parallel_tool_calls,
                                    max_calls=max_calls, logprobs=logprobs)
        self.logprobs = logprobs
        self.output: list[dict[str, Any]] = []
        self._open: _Item | None = None
        self._sequence = 2  # 0 and 1 are the opening's, sent before the first piece's events
        self._logprobs: list[dict[str, Any]] = []

    # -- events --------------------------------------------------------------------------

    def _event(self, kind: str, **fields: Any) -> dict[str, Any]:
        payload = {"type": kind, "sequence_number": self._sequence, **fields}
        self._sequence += 1
        return payload

    def opening(self) -> list[dict[str, Any]]:
        """``response.created`` and ``response.in_progress``."""
        snapshot = self.body("in_progress")
        return [{"type": "response.created", "sequence_number": 0, "response": snapshot},
                {"type": "response.in_progress", "sequence_number": 1, "response": snapshot}]

    def piece(self, piece: ReplyPiece, events: list[dict[str, Any]]) -> None:
        """Add the events of one piece of the reply to ``events``."""
        if isinstance(piece, ReplyCall):
            self._close(events)
            self._call(piece, events)
            return
        kind = "reasoning" if isinstance(piece, ReplyReasoning) else "message"
        text = piece if type(piece) is str else piece.text  # type: ignore[union-attr]
        item = self._open
        if item is None or item.kind != kind:
            self._close(events)
            item = self._begin(kind, events)
        item.parts.append(text)
        if kind == "reasoning":
            events.append(self._event("response.reasoning_summary_text.delta", item_id=item.id,
                                      output_index=item.index, summary_index=0, delta=text))
        else:
            entries = piece.logprobs if isinstance(piece, ReplyText) else []
            self._logprobs.extend(entries)
            events.append(self._event("response.output_text.delta", item_id=item.id,
                                      output_index=item.index, content_index=0,
                                      delta=text, logprobs=entries))

    def _begin(self, kind: str, events: list[dict[str, Any]]) -> _Item:
        item = self._open = _Item(kind, len(self.output))
        self.output.append({})  # its place, filled when it is done
        if kind == "reasoning":
            events.append(self._event("response.output_item.added", output_index=item.index,
                                      item={"id": item.id, "type": "reasoning",
                                            "summary": [], "status": "in_progress"}))
            events.append(self._event("response.reasoning_summary_part.added", item_id=item.id,
                                      output_index=item.index, summary_index=0,
                                      part={"type": "summary_text", "text": ""}))
        else:
            events.append(self._event("response.output_item.added", output_index=item.index,
                                      item={"id": item.id, "type": "message",
                                            "role": "assistant", "status": "in_progress",
                                            "content": []}))
            events.append(self._event("response.content_part.added", item_id=item.id,
                                      output_index=item.index, content_index=0,
                                      part=self._text_part("")))
        return item

    def _text_part(self, text: str) -> dict[str, Any]:
        part: dict[str, Any] = {"type": "output_text", "text": text, "annotations": []}
        if self.logprobs:
            part["logprobs"] = list(self._logprobs) if text else []
        return part

    def _close(self, events: list[dict[str, Any]], status: str = "completed") -> None:
        item, self._open = self._open, None
        if item is None:
            return
        text = "".join(item.parts)
        if item.kind == "reasoning":
            part = {"type": "summary_text", "text": text}
            done = {"id": item.id, "type": "reasoning", "summary": [part], "status": status}
            events.append(self._event("response.reasoning_summary_text.done", item_id=item.id,
                                      output_index=item.index, summary_index=0, text=text))
            events.append(self._event("response.reasoning_summary_part.done", item_id=item.id,
                                      output_index=item.index, summary_index=0, part=part))
        else:
            part = self._text_part(text)
            done = {"id": item.id, "type": "message", "role": "assistant", "status": status,
                    "content": [part]}
            events.append(self._event("response.output_text.done", item_id=item.id,
                                      output_index=item.index, content_index=0, text=text,
                                      logprobs=part.get("logprobs", [])))
            events.append(self._event("response.content_part.done", item_id=item.id,
                                      output_index=item.index, content_index=0, part=part))
            self._logprobs = []
        self.output[item.index] = done
        events.append(self._event("response.output_item.done", output_index=item.index,
                                  item=done))

    def _call(self, call: ReplyCall, events: list[dict[str, Any]]) -> None:
        index = len(self.output)
        name, namespace = self.names.for_client(call.name)
        item: dict[str, Any] = {"id": f"fc_{uuid.uuid4().hex}", "type": "function_call",
                                "status": "in_progress", "call_id": call.id, "name": name,
                                "arguments": ""}
        if namespace is not None:
            item["namespace"] = namespace
        events.append(self._event("response.output_item.added", output_index=index,
                                  item=dict(item)))
        events.append(self._event("response.function_call_arguments.delta", item_id=item["id"],
                                  output_index=index, delta=call.arguments))
        events.append(self._event("response.function_call_arguments.done", item_id=item["id"],
                                  output_index=index, arguments=call.arguments, name=name))
        item.update(arguments=call.arguments, status="completed")
        self.output.append(item)
        events.append(self._event("response.output_item.done", output_index=index, item=item))

    # -- the end -------------------------------------------------------------------------

    def _settle(self) -> list[dict[str, Any]]:
        events: list[dict[str, Any]] = []
        for piece in self.reply.settle():
            self.piece(piece, events)
        rest = self.reply.finish_logprobs()
        if rest and self._open is not None and self._open.kind == "message":
            self._logprobs.extend(rest)
        self._close(events, "incomplete" if self._status() == "incomplete" else "completed")
        return events

    def _status(self) -> str:
        return "incomplete" if self.reply.finish_reason == "length" else "completed"

    def body(self, status: str | None = None) -> dict[str, Any]:
        """The response object (``status`` for a snapshot of one in progress)."""
        final = status is None
        status = status or self._status()
        body: dict[str, Any] = {
            "id": self.id, "object": "response", "created_at": self.created_at,
            "status": status, "model": self.model, "error": None,
            "incomplete_details": {"reason": "max_output_tokens"}
            if status == "incomplete" else None,
            "output": [item for item in self.output if item] if final else [],
            "usage": responses_usage(self.reply.usage) if final else None,
            **self.echo}
        if final and self.reply.dropped:
            body["dropped_tool_calls"] = [d.to_dict() for d in self.reply.dropped]
        if self.ignored_tools:
            body["ignored_tools"] = self.ignored_tools
        return body

    def closing_frames(self) -> bytes:
        """The open item's end, then ``response.completed`` (or ``response.incomplete``)."""
        events = self._settle()
        body = self.body()
        kind = "response.incomplete" if body["status"] == "incomplete" else "response.completed"
        events.append(self._event(kind, response=body))
        return self.frames(events)

    def failure_frames(self, error: ErrorEvent) -> bytes:
        """``response.failed`` with the error."""
        body = self.body("failed")
        body["error"] = {"code": error.kind, "message": error.message}
        return self.frames([self._event("response.failed", response=body)])

    def cancelled_frames(self) -> bytes:
        """``response.failed``: the server stopped before the turn came."""
        return self.failure_frames(ErrorEvent("cancelled", "the server stopped this response"))

    def error_response(self, error: ErrorEvent) -> JsonResponse:
        """A turn that failed before anything was sent, as OpenAI's error response."""
        return openai_error_response(error, prompt="input", reply_format="text.format")

    def response(self) -> dict[str, Any]:
        """The whole response object (after the turn has ended)."""
        self._settle()
        return self.body()
