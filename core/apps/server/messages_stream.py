"""A backend turn as an Anthropic Messages API message: its stream of events or one object.

:class:`MessageWriter` shapes the pieces :class:`.reply_assembly.ReplyAssembler`
reads from the turn (the same for every API) as content blocks, in the order the
model wrote them: ``thinking`` (the reasoning), ``text``, ``tool_use`` (``input``
the call's arguments typed by the tool's schema, ``id`` the call's id). Streamed::

    message_start
    content_block_start, content_block_delta (thinking_delta...; signature_delta),
      content_block_stop
    content_block_start, content_block_delta (text_delta...), content_block_stop
    content_block_start, content_block_delta (input_json_delta), content_block_stop
    message_delta (stop_reason, stop_sequence, usage), message_stop

and ``ping`` events while the model is quiet (a call being written goes out whole,
once finished). ``stop_reason`` is ``tool_use`` when the reply called,
``max_tokens`` at the token limit (a call the limit cut is not a call: it is listed
in the ``dropped_tool_calls`` extension), ``stop_sequence`` when a stop sequence
ended the text (``stop_sequence`` says which), else ``end_turn``.

A thinking block's ``signature`` is the SHA-256 of its text (base64): toolwire
needs no signature back, but clients keep thinking blocks only with one.
"""

from __future__ import annotations

import base64
import hashlib
import json
import uuid
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final

from ...events import ErrorEvent
from .reply_assembly import EventWriter, ReplyAssembler, ReplyCall, ReplyPiece, ReplyReasoning
from .responses import JsonResponse, anthropic_error_body, turn_error_status

__all__ = ["PING_FRAME", "STOP_REASONS", "MessageWriter", "anthropic_error", "new_message_id",
           "thinking_signature"]

STOP_REASONS: Final = {"tool_calls": "tool_use", "length": "max_tokens", "stop": "end_turn"}
"""Each reply's finish as Anthropic's ``stop_reason`` (``stop_sequence`` aside)."""

PING_FRAME: Final = b'event: ping\ndata: {"type":"ping"}\n\n'


def thinking_signature(text: str) -> str:
    """A thinking block's ``signature``: the SHA-256 of its text, base64."""
    return base64.b64encode(hashlib.sha256(text.encode("utf-8", "surrogatepass"))
                            .digest()).decode()


def anthropic_error(error: ErrorEvent) -> JsonResponse:
    """A failed turn as Anthropic's error: ``400 invalid_request_error`` for what the
    request asked that cannot be done (a prompt over the context, a ``tool_choice`` or
    format the grammar cannot enforce), ``529 overloaded_error`` when the model worker
    crashed (the next request is answered), ``500 api_error`` for the rest."""
    status, _ = turn_error_status(error)
    if error.kind == "model_crashed":
        status = 503
    body = anthropic_error_body(status, error.message)
    return JsonResponse(529 if status == 503 else status, body,
                        (("Retry-After", "1"),) if status == 503 else ())


class MessageWriter(EventWriter):
    """Writes one message (see the module).

    :param message_id: the ``msg_...`` id.
    :param model: the model id to report.
    :param make_call_id: makes a call id when the parser gave none.
    :param stop: stop sequences.
    :param parallel_tool_calls: ``False``: end after the first complete call.
    :param ignored_tools: the tools left out of the prompt.
    """

    ping_frame = PING_FRAME

    def __init__(self, message_id: str, model: str, *, make_call_id: Callable[[int], str],
                 stop: Sequence[str] = (), parallel_tool_calls: bool = True,
                 ignored_tools: Sequence[Mapping[str, str]] = ()) -> None:
        self.id = message_id
        self.model = model
        self.ignored_tools = [dict(t) for t in ignored_tools]
        self.reply = ReplyAssembler(make_call_id=make_call_id, stop=stop,
                                    parallel_tool_calls=parallel_tool_calls)
        self.content: list[dict[str, Any]] = []
        self._open: str | None = None  # the kind of the block being written
        self._parts: list[str] = []  # its text so far, joined when it closes

    # -- events --------------------------------------------------------------------------

    def opening(self) -> list[dict[str, Any]]:
        """``message_start``, its message empty."""
        return [{"type": "message_start", "message": {
            "id": self.id, "type": "message", "role": "assistant", "model": self.model,
            "content": [], "stop_reason": None, "stop_sequence": None,
            "usage": {"input_tokens": 0, "output_tokens": 0}}}]

    def piece(self, piece: ReplyPiece, events: list[dict[str, Any]]) -> None:
        """Add the events of one piece of the reply to ``events``."""
        index = len(self.content) - 1
        if isinstance(piece, ReplyCall):
            self._close(events)
            arguments = piece.arguments
            block = {"type": "tool_use", "id": piece.id, "name": piece.name, "input": {}}
            self.content.append({**block, "input": _loads(arguments)})
            events.append({"type": "content_block_start", "index": index + 1,
                           "content_block": block})
            events.append({"type": "content_block_delta", "index": index + 1,
                           "delta": {"type": "input_json_delta", "partial_json": arguments}})
            events.append({"type": "content_block_stop", "index": index + 1})
            return
        kind = "thinking" if isinstance(piece, ReplyReasoning) else "text"
        text = piece if type(piece) is str else piece.text  # type: ignore[union-attr]
        if self._open != kind:
            self._close(events)
            self._open = kind
            index += 1
            start = {"type": "thinking", "thinking": "", "signature": ""} if kind == "thinking" \
                else {"type": "text", "text": ""}
            self.content.append(dict(start))
            events.append({"type": "content_block_start", "index": index,
                           "content_block": start})
        self._parts.append(text)
        delta = {"type": "thinking_delta", "thinking": text} if kind == "thinking" \
            else {"type": "text_delta", "text": text}
        events.append({"type": "content_block_delta", "index": index, "delta": delta})

    def _close(self, events: list[dict[str, Any]]) -> None:
        kind, self._open = self._open, None
        if kind is None:
            return
        index = len(self.content) - 1
        block = self.content[index]
        block[kind], self._parts = "".join(self._parts), []
        if kind == "thinking":
            block["signature"] = thinking_signature(block["thinking"])
            events.append({"type": "content_block_delta", "index": index,
                           "delta": {"type": "signature_delta",
                                     "signature": block["signature"]}})
        events.append({"type": "content_block_stop", "index": index})

    # -- the end -------------------------------------------------------------------------

    @property
    def stop_reason(self) -> str:
        """``end_turn``, ``tool_use``, ``max_tokens`` or ``stop_sequence``."""
        if self.reply.stop_sequence is not None:
            return "stop_sequence"
        return STOP_REASONS[self.reply.finish_reason]

    def _usage(self) -> dict[str, int]:
        usage = self.reply.usage
        return {"input_tokens": int(usage.get("prompt_tokens") or 0),
                "output_tokens": int(usage.get("completion_tokens") or 0)}

    def _settle(self) -> list[dict[str, Any]]:
        events: list[dict[str, Any]] = []
        for piece in self.reply.settle():
            self.piece(piece, events)
        self._close(events)
        return events

    def _extras(self) -> dict[str, Any]:
        extras: dict[str, Any] = {}
        if self.reply.dropped:
            extras["dropped_tool_calls"] = [d.to_dict() for d in self.reply.dropped]
        if self.ignored_tools:
            extras["ignored_tools"] = self.ignored_tools
        return extras

    def closing_frames(self) -> bytes:
        """The open block's end, ``message_delta`` and ``message_stop``."""
        events = self._settle()
        events.append({"type": "message_delta",
                       "delta": {"stop_reason": self.stop_reason,
                                 "stop_sequence": self.reply.stop_sequence},
                       "usage": self._usage(), **self._extras()})
        events.append({"type": "message_stop"})
        return self.frames(events)

    def failure_frames(self, error: ErrorEvent) -> bytes:
        """An ``error`` event (Anthropic's shape)."""
        status = 529 if error.kind == "model_crashed" else 500
        return self.frames([anthropic_error_body(status, error.message)])

    def cancelled_frames(self) -> bytes:
        """An ``overloaded_error`` event: the server stopped before the turn came."""
        return self.frames([anthropic_error_body(529, "the server stopped this message")])

    def error_response(self, error: ErrorEvent) -> JsonResponse:
        """A turn that failed before anything was sent, as Anthropic's error response."""
        return anthropic_error(error)

    def response(self) -> dict[str, Any]:
        """The whole message object (after the turn has ended)."""
        self._settle()
        return {"id": self.id, "type": "message", "role": "assistant", "model": self.model,
                "content": self.content, "stop_reason": self.stop_reason,
                "stop_sequence": self.reply.stop_sequence, "usage": self._usage(),
                **self._extras()}


def _loads(arguments: str) -> dict[str, Any]:
    value = json.loads(arguments)
    return value if isinstance(value, dict) else {}


def new_message_id() -> str:
    """A fresh ``msg_...`` id."""
    return "msg_" + uuid.uuid4().hex
