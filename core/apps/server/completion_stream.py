"""A backend turn's events as an OpenAI chat completion: streamed chunks or one response.

:class:`CompletionBuilder` reads one turn's items (``text``, ``reasoning``,
``tool_call_start`` / ``tool_call_delta`` / ``tool_call_end``, ``error``, then the
``TurnEnd``) and writes ``chat.completion.chunk`` payloads as they come; at the
end it writes the finishing chunk (and the usage chunk when asked), or the whole
``chat.completion`` body for a non-streaming request. Both forms come from the
same state, so a streamed reply concatenates to exactly the non-streamed one.
Text and reasoning stream as the model writes them; a call goes out whole when
the model has finished it, so what a client receives as a call is always a
call the parser read, with exactly its typed arguments.

Two request options are enforced here, on what the model writes: ``stop``
strings end the reply's text (the text before the first one is kept), and
``parallel_tool_calls: false`` ends the reply after its first complete call.
Either sets :attr:`CompletionBuilder.should_stop`, and the route then stops the
model.

With ``logprobs`` asked, the turn's ``token_logprob`` events are lined up with the
content (:class:`.completion_logprobs.TokenLedger`): each content chunk carries
``logprobs.content`` for the tokens it completes, and the whole response all of
them.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ...events import ErrorEvent, Event
from ...vocabulary.backend import TurnEnd
from .reply_assembly import (
    DroppedCall,
    ReplyAssembler,
    ReplyCall,
    ReplyPiece,
    ReplyReasoning,
    ReplyText,
    StopMatcher,
)
from .responses import JsonResponse, openai_error_body, turn_error_status
from .sse import DONE_FRAME, data_frame

__all__ = ["CompletionBuilder", "DroppedCall", "StopMatcher", "openai_error_response",
           "openai_usage"]


def openai_usage(usage: Mapping[str, Any] | None) -> dict[str, int]:
    """A backend's usage as OpenAI's ``usage`` object."""
    usage = usage or {}
    prompt = int(usage.get("prompt_tokens") or 0)
    completion = int(usage.get("completion_tokens") or 0)
    return {"prompt_tokens": prompt, "completion_tokens": completion,
            "total_tokens": prompt + completion}


def openai_error_response(error: ErrorEvent, *, prompt: str = "messages",
                          reply_format: str = "response_format") -> JsonResponse:
    """A failed turn as OpenAI's error (see :func:`.responses.turn_error_status`),
    ``param`` naming the request's field concerned: ``prompt`` for a prompt over the
    context, ``reply_format`` or ``tool_choice`` for what the grammar cannot enforce."""
    status, code = turn_error_status(error)
    param = None
    if code == "context_length_exceeded":
        param = prompt
    elif code == "grammar_unsupported":
        param = reply_format if error.message.startswith("response_format") else "tool_choice"
    return JsonResponse(status, openai_error_body(status, error.message, param=param, code=code))


class CompletionBuilder:
    """Builds one chat completion from one backend turn.

    The reply is read by :class:`~.reply_assembly.ReplyAssembler` (the same for
    every API the server speaks); this writes its pieces as chunks. A call is sent
    when the model has finished writing it: its header and its arguments,
    ``json.dumps`` of the typed arguments, in one chunk. So the arguments are
    always exactly the call's final value (one JSON object, each key once), and a
    call the model never finished (the token limit cut it) is never sent as a
    call: it is listed in the choice's ``dropped_tool_calls`` extension field
    instead. Reasoning goes out as ``reasoning_content`` and, beside it, as
    ``reasoning`` (the name vLLM and Ollama now write).

    :param completion_id: the ``chatcmpl-...`` id.
    :param created: the Unix time stamp of the request.
    :param model: the model id to report.
    :param make_call_id: makes a call id when the parser gave none.
    :param stop: stop strings (``stop``).
    :param parallel_tool_calls: ``False``: end after the first complete call.
    :param include_usage: chunks carry ``usage: null`` and a usage chunk ends the stream.
    :param legacy_functions: answer in the deprecated ``functions`` shape:
        ``function_call`` instead of ``tool_calls`` (one call at most), and
        ``finish_reason: "function_call"``.
    :param logprobs: report the content tokens' log probabilities (OpenAI's
        ``logprobs``), from the turn's ``token_logprob`` events.
    """

    def __init__(self, completion_id: str, created: int, model: str, *,
                 make_call_id: Callable[[int], str], stop: Sequence[str] = (),
                 parallel_tool_calls: bool = True, include_usage: bool = False,
                 legacy_functions: bool = False, logprobs: bool = False) -> None:
        self.completion_id = completion_id
        self.created = created
        self.model = model
        self.legacy_functions = legacy_functions
        self.include_usage = include_usage
        self.logprobs = logprobs
        self.reply = ReplyAssembler(make_call_id=make_call_id, stop=stop,
                                    parallel_tool_calls=parallel_tool_calls
                                    and not legacy_functions, logprobs=logprobs)
        self._content: list[str] = []
        self._reasoning: list[str] = []

    @property
    def error(self) -> ErrorEvent | None:
        """The turn's first error, if any."""
        return self.reply.error

    @property
    def should_stop(self) -> bool:
        """A stop string or the one call allowed has ended the reply: stop the model."""
        return self.reply.should_stop

    ping_frame = None
    """The chat-completions stream has no ping."""

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

    def opening(self) -> list[dict[str, Any]]:
        """The stream's opening: :meth:`first_chunk`."""
        return [self.first_chunk()]

    def frames(self, payloads: list[dict[str, Any]]) -> bytes:
        """Chunks as ``data:`` frames."""
        return b"".join(data_frame(chunk) for chunk in payloads)

    def closing_frames(self) -> bytes:
        """:meth:`closing_chunks`, then ``[DONE]``."""
        return self.frames(self.closing_chunks()) + DONE_FRAME

    def failure_frames(self, error: ErrorEvent) -> bytes:
        """An error after the first chunk: one ``data: {"error": ...}`` frame, then ``[DONE]``."""
        body = openai_error_body(500, error.message, code=error.kind)
        body["error"]["type"] = "server_error"
        return data_frame(body) + DONE_FRAME

    def cancelled_frames(self) -> bytes:
        """``[DONE]`` alone."""
        return DONE_FRAME

    def error_response(self, error: ErrorEvent) -> JsonResponse:
        """A turn that failed before its first chunk, as OpenAI's error response."""
        return openai_error_response(error)

    def feed(self, item: Event | TurnEnd) -> list[dict[str, Any]]:
        """Take one item of the turn; return the chunks it adds (often one, maybe none)."""
        pieces = self.reply.feed(item)
        return [self._chunk(piece) for piece in pieces] if pieces else []

    def _chunk(self, piece: ReplyPiece) -> dict[str, Any]:
        if type(piece) is str:
            self._content.append(piece)
            return self.chunk({"content": piece})
        if isinstance(piece, ReplyCall):
            function = {"name": piece.name, "arguments": piece.arguments}
            if self.legacy_functions:
                return self.chunk({"function_call": function})
            return self.chunk({"tool_calls": [{"index": piece.position, "id": piece.id,
                                               "type": "function", "function": function}]})
        if isinstance(piece, ReplyReasoning):
            self._reasoning.append(piece.text)
            return self.chunk({"reasoning_content": piece.text, "reasoning": piece.text})
        assert isinstance(piece, ReplyText)
        self._content.append(piece.text)
        chunk = self.chunk({"content": piece.text})
        chunk["choices"][0]["logprobs"] = {"content": piece.logprobs, "refusal": None}
        return chunk

    # -- the end -------------------------------------------------------------------------

    @property
    def finish_reason(self) -> str:
        """``stop``, ``length``, ``tool_calls`` or ``function_call``, from the turn's
        end and what was read."""
        reason = self.reply.finish_reason
        return "function_call" if reason == "tool_calls" and self.legacy_functions else reason

    @property
    def usage(self) -> dict[str, int]:
        """The turn's token counts in OpenAI's form."""
        return openai_usage(self.reply.usage)

    def _choice_extras(self) -> dict[str, Any]:
        if not self.reply.dropped:
            return {}
        return {"dropped_tool_calls": [d.to_dict() for d in self.reply.dropped]}

    def closing_chunks(self) -> list[dict[str, Any]]:
        """The held-back text, the finishing chunk (with ``dropped_tool_calls`` when a
        call was left unfinished) and (when asked) the usage chunk."""
        chunks = [self._chunk(piece) for piece in self.reply.settle()]
        rest = self.reply.finish_logprobs()
        last = self.chunk({}, self.finish_reason)
        if rest:
            last["choices"][0]["logprobs"] = {"content": rest, "refusal": None}
        last["choices"][0].update(self._choice_extras())
        chunks.append(last)
        if self.include_usage:
            chunks.append({"id": self.completion_id, "object": "chat.completion.chunk",
                           "created": self.created, "model": self.model,
                           "system_fingerprint": None, "choices": [], "usage": self.usage})
        return chunks

    def response(self) -> dict[str, Any]:
        """The whole ``chat.completion`` body (call after the turn has ended)."""
        for piece in self.reply.settle():
            self._chunk(piece)
        self.reply.finish_logprobs()
        message: dict[str, Any] = {"role": "assistant",
                                   "content": "".join(self._content) or None}
        if self._reasoning:
            message["reasoning_content"] = message["reasoning"] = "".join(self._reasoning)
        calls: list[dict[str, Any]] = [{"id": c.id, "type": "function",
                  "function": {"name": c.name, "arguments": c.arguments}}
                 for c in self.reply.calls]
        if calls and self.legacy_functions:
            message["function_call"] = dict(calls[0]["function"])
        elif calls:
            message["tool_calls"] = calls
        elif message["content"] is None:
            message["content"] = ""
        logprobs = None if not self.logprobs else {"content": self.reply.logprobs,
                                                   "refusal": None}
        choice = {"index": 0, "message": message, "logprobs": logprobs,
                  "finish_reason": self.finish_reason, **self._choice_extras()}
        return {"id": self.completion_id, "object": "chat.completion", "created": self.created,
                "model": self.model, "system_fingerprint": None, "choices": [choice],
                "usage": self.usage}
