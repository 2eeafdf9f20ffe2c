"""What crosses the pipe between a host and its model worker, as JSON lines.

One message a line (the supervised child's pipe, :mod:`toolwire.isolation`). The
host sends the worker the backend to build, then turns and cancels; the worker
answers ``ready`` (or ``failed``), then each turn's items and its end:

* server -> worker: ``{"backend": NAME, "options": {...}}`` (the first line), then
  ``{"op": "turn", "id": N, "request": ...}``, ``{"op": "cancel", "id": N}`` and
  ``{"op": "count", "id": N, "request": ...}`` (the tokens of the prompt a request
  renders);
* worker -> server: ``{"op": "ready", "name", "call_ids", "logprobs"}`` or ``{"op": "failed",
  "error"}``, then ``{"op": "item", "id": N, "event": EVENT}`` for each event (its
  ``to_dict()``, read back with :func:`toolwire.event_from_dict`) and ``{"op": "end",
  "id": N, "turn_end": {...}}``; a count is answered ``{"op": "counted", "id": N,
  "tokens": T}`` or ``{"op": "counted", "id": N, "error": "..."}``.

A ``failed`` answer also has ``refused`` when the backend refused an option value
(its ``ValueError``'s message), so the server raises that error as an in-process
backend would.

A request travels whole but for its tools' functions: the worker only renders the
tools and parses calls, and the host runs them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs

from ..vocabulary.backend import (
    ModelRequest,
    ReasoningRequest,
    ResponseFormat,
    SamplingOverrides,
    TurnEnd,
)
from ..vocabulary.history import Message, ToolCall
from ..vocabulary.tools import Tool

__all__ = ["decode_end", "decode_request", "encode_end", "encode_request"]


def _message(message: Message) -> dict[str, Any]:
    data = attrs.asdict(message, recurse=False)
    data["tool_calls"] = [[c.id, c.name, dict(c.arguments)] for c in message.tool_calls]
    if message.arguments is not None:
        data["arguments"] = dict(message.arguments)
    return data


def _read_message(data: Mapping[str, Any]) -> Message:
    fields = dict(data)
    fields["tool_calls"] = tuple(ToolCall(i, n, a) for i, n, a in fields.get("tool_calls", ()))
    return Message(**fields)


def _not_here(**arguments: Any) -> str:
    raise RuntimeError("a tool runs in the server, never in the model worker")


def encode_request(request: ModelRequest) -> dict[str, Any]:
    """A turn's request as JSON-ready data (the tools by their schemas)."""
    return {
        "messages": [_message(m) for m in request.messages],
        "tools": [[dict(t.schema), t.read_only] for t in request.tools],
        "final_turn": request.final_turn,
        "tool_choice": request.tool_choice,
        "parallel_tool_calls": request.parallel_tool_calls,
        "sampling": attrs.asdict(request.sampling),
        "logprobs": request.logprobs,
        "response_format": None if request.response_format is None
        else attrs.asdict(request.response_format),
        "reasoning": attrs.asdict(request.reasoning),
    }


def decode_request(data: Mapping[str, Any]) -> ModelRequest:
    """The request :func:`encode_request` wrote (tools that cannot be called here).

    :raises ValueError: the data is not such a request.
    """
    try:
        return ModelRequest(
            tuple(_read_message(m) for m in data["messages"]),
            tuple(Tool(schema, _not_here, read_only=bool(read_only))
                  for schema, read_only in data["tools"]),
            final_turn=bool(data["final_turn"]), tool_choice=data["tool_choice"],
            parallel_tool_calls=bool(data["parallel_tool_calls"]),
            sampling=SamplingOverrides(**data["sampling"]), logprobs=data.get("logprobs"),
            response_format=_read_response_format(data.get("response_format")),
            reasoning=ReasoningRequest(**(data.get("reasoning") or {})))
    except (KeyError, TypeError) as exc:
        raise ValueError(f"not a model request: {exc}") from exc


def _read_response_format(data: Mapping[str, Any] | None) -> ResponseFormat | None:
    return None if data is None else ResponseFormat(**data)


def encode_end(end: TurnEnd) -> dict[str, Any]:
    """A turn's end as JSON-ready data."""
    return {"reason": end.reason, "usage": dict(end.usage) if end.usage else None,
            "timings": dict(end.timings) if end.timings else None}


def decode_end(data: Mapping[str, Any]) -> TurnEnd:
    """The end :func:`encode_end` wrote."""
    return TurnEnd(str(data.get("reason", "error")), usage=data.get("usage"),
                   timings=data.get("timings"))

