"""The OpenAI-compatible routes: ``POST /v1/chat/completions`` and ``GET /v1/models``.

Any OpenAI client gets the served model's native tool calls, parsed by toolwire.
The route only generates and parses: it runs one backend turn
(``backend.stream_turn(ModelRequest(...), cancel)``) and answers with the text,
reasoning and tool calls the model wrote; the client runs the tools and sends
their results back. Requests wait their turn at the model in arrival order
(:mod:`.model_queue`); a client that disconnects cancels its generation.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from ...events import ErrorEvent
from ...parse.protocol import merge_events
from ...vocabulary.backend import Backend, ModelRequest, SamplingOverrides
from ...vocabulary.cancel import CancelToken
from ...vocabulary.tool_choice import TOOL_CHOICE_MODES, named_tool_choice
from .backend_thread import stream_backend_turn
from .call_id_forms import CallIdForm, with_template_ids
from .completion_request import CompletionRequest, parse_completion_request
from .completion_stream import CompletionBuilder
from .http_input import ClientGone, RequestError, read_json_request
from .http_input import require_json_media_type as require_json
from .model_queue import QueueFullError, QueueTicket
from .responses import (
    ASGIApp,
    JsonResponse,
    Receive,
    Scope,
    Send,
    error_response,
    openai_error_body,
)
from .sse import DONE_FRAME, SSE_HEADERS, data_frame

if TYPE_CHECKING:
    from .app import ServerState

__all__ = ["CompletionsEndpoint", "ModelsEndpoint", "model_request_for", "turn_error_response"]

logger = logging.getLogger("toolwire.apps.server")

Chunks = list[dict[str, Any]]


def model_request_for(parsed: CompletionRequest,
                      ids: CallIdForm | None = None) -> ModelRequest:
    """The backend turn a chat-completions request asks for.

    ``tool_choice`` (``"none"`` offers no tools; ``"required"`` and a named tool
    are enforced by a local model's grammar) and ``parallel_tool_calls`` go to
    the backend, and so do ``temperature``, ``top_p``, ``max_tokens`` and
    ``seed`` (as :class:`~toolwire.SamplingOverrides`: each replaces the served
    model's own setting for this request; a local model's reply is capped at the
    smaller of the request's ``max_tokens`` and its own), and so does
    ``response_format`` (a local model's grammar). ``stop`` is applied here, on
    the text (:class:`.completion_stream.CompletionBuilder`). Call ids that do
    not fit ``ids``, the form the model's template wants, are rewritten to it
    (:mod:`.call_id_forms`). ``logprobs`` asks the backend for each token's
    log probability.
    """
    sampling = SamplingOverrides(temperature=parsed.temperature, top_p=parsed.top_p,
                                 max_tokens=parsed.max_tokens, seed=parsed.seed)
    messages = tuple(with_template_ids(parsed.messages, ids))
    choice = parsed.tool_choice
    named = choice not in TOOL_CHOICE_MODES  # a tool's name, checked against the tools
    return ModelRequest(messages, parsed.offered_tools,
                        tool_choice=named_tool_choice(choice) if named
                        else choice if parsed.offered_tools else "auto",
                        parallel_tool_calls=parsed.parallel_tool_calls, sampling=sampling,
                        response_format=parsed.response_format, logprobs=parsed.logprobs)


def _openai_error(status: int, message: str, code: str | None = None,
                  headers: tuple[tuple[str, str], ...] = ()) -> JsonResponse:
    return JsonResponse(status, openai_error_body(status, message, code=code), headers)


class ModelsEndpoint:
    """``GET /v1/models`` and ``GET /v1/models/{model_id}`` (an ASGI app)."""

    def __init__(self, state: ServerState) -> None:
        self.state = state

    def entry(self) -> dict[str, Any]:
        """The served model as an OpenAI ``model`` object."""
        return {"id": self.state.model.model_id, "object": "model",
                "created": self.state.started, "owned_by": "toolwire"}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """List the model, or describe the one named in the path."""
        asked = scope.get("path_params", {}).get("model_id")
        if asked is None:
            response = JsonResponse(200, {"object": "list", "data": [self.entry()]})
        elif asked == self.state.model.model_id:
            response = JsonResponse(200, self.entry())
        else:
            response = _openai_error(404, f"the model {asked!r} does not exist here; this "
                                          f"server serves {self.state.model.model_id!r}",
                                     "model_not_found")
        await response(scope, receive, send)


class CompletionsEndpoint:
    """``POST /v1/chat/completions`` (an ASGI app)."""

    def __init__(self, state: ServerState) -> None:
        self.state = state
        self._forms: dict[int, tuple[Backend, CallIdForm | None]] = {}

    def id_form(self, backend: Backend) -> CallIdForm | None:
        """The call-id form of ``backend``'s template (learnt once per backend)."""
        known = self._forms.get(id(backend))
        if known is None or known[0] is not backend:
            known = self._forms[id(backend)] = (backend, CallIdForm.of(backend.make_call_id))
        return known[1]

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Answer one request: a stream of chunks or one completion."""
        response = await self._respond(scope, receive)
        await response(scope, receive, send)

    async def _respond(self, scope: Scope, receive: Receive) -> ASGIApp:
        state = self.state
        if state.model.loaded is None:
            return _openai_error(503, f"the model is {state.model.state}; try again shortly",
                                 "model_loading", (("Retry-After", "5"),))
        limits = state.limits
        try:
            require_json(scope["headers"])
            parsed = await read_json_request(
                receive, scope["headers"], limits,
                lambda data: parse_completion_request(data, limits))
            if parsed.model != state.model.model_id:
                raise RequestError(404, f"the model {parsed.model!r} does not exist here; this "
                                        f"server serves {state.model.model_id!r}",
                                   param="model", code="model_not_found")
            if parsed.logprobs is not None:
                _check_logprobs(state.model.backend())
            backend = state.model.backend()
            # rewriting every call id of a long conversation is work too: off the loop
            request = await asyncio.to_thread(model_request_for, parsed,
                                              self.id_form(backend))
            ticket = state.queue.join()
        except ClientGone:
            return JsonResponse(400, {})  # never sent: nobody listens
        except RequestError as exc:
            return error_response(scope["path"], exc)
        except QueueFullError as exc:
            return _openai_error(429, str(exc), "queue_full", (("Retry-After", "1"),))
        builder = CompletionBuilder(
            "chatcmpl-" + uuid.uuid4().hex, int(time.time()), state.model.model_id,
            make_call_id=backend.make_call_id, stop=parsed.stop,
            parallel_tool_calls=parsed.parallel_tool_calls, include_usage=parsed.include_usage,
            legacy_functions=parsed.legacy_functions, logprobs=parsed.logprobs is not None)
        turn = _Turn(state, ticket, request, builder)
        if parsed.stream:
            return _ChunkStream(turn)
        return await turn.complete(receive)


def _check_logprobs(backend: Backend) -> None:
    """A ``400`` naming ``logprobs`` for a backend that cannot give them (only one
    whose ``token_logprobs`` is ``True`` can: the local llama.cpp backend)."""
    if not getattr(backend, "token_logprobs", False):
        raise RequestError(400, f"logprobs: the {backend.name} backend this server runs does "
                                "not give token log probabilities (a local llama.cpp "
                                "model does)", param="logprobs", code="logprobs_unsupported")


class _Turn:
    """One request's generation: wait for the model, run the turn, feed the builder."""

    def __init__(self, state: ServerState, ticket: QueueTicket, request: ModelRequest,
                 builder: CompletionBuilder) -> None:
        self.state = state
        self.ticket = ticket
        self.request = request
        self.builder = builder
        self.token = CancelToken()
        self.client_gone = False

    async def watch_disconnect(self, receive: Receive) -> None:
        """Cancel the generation when the client disconnects."""
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                self.client_gone = True
                self.token.cancel("disconnected")
                return

    async def run(self, emit: Callable[[Chunks], Awaitable[None]] | None = None) -> bool:
        """Generate; pass each item's chunks to ``emit``. ``False`` when cancelled first."""
        self.state.generations.add(self.token)
        try:
            if not await self.ticket.wait_turn(self.token) or self.token.cancelled:
                return False
            backend = self.state.model.backend()
            async with contextlib.aclosing(
                    stream_backend_turn(backend, self.request, self.token)) as items:
                async for batch in items:
                    # what came together goes out together: adjacent deltas joined
                    chunks = [chunk for item in merge_events(batch)  # type: ignore[arg-type]
                              for chunk in self.builder.feed(item)]
                    if chunks and emit is not None:
                        await emit(chunks)
                    if self.builder.should_stop and not self.token.cancelled:
                        self.token.cancel("finished")  # a stop string or the one call: enough
            return True
        finally:
            self.state.generations.discard(self.token)
            self.ticket.release()

    async def complete(self, receive: Receive) -> ASGIApp:
        """The non-streaming answer: the whole completion, or the error."""
        watcher = asyncio.create_task(self.watch_disconnect(receive))
        try:
            finished = await self.run()
        finally:
            watcher.cancel()
        if not finished or self.client_gone:
            return JsonResponse(499, {})  # never sent: nobody listens
        if self.builder.error is not None:
            return turn_error_response(self.builder.error)
        return JsonResponse(200, self.builder.response())


def turn_error_response(error: ErrorEvent) -> JsonResponse:
    """A failed turn as OpenAI's error: ``400`` for what the request asked that cannot
    be done (a prompt over the context, a ``tool_choice`` or ``response_format``
    the model's grammar cannot enforce), ``500`` for the rest."""
    if error.kind == "context":
        return JsonResponse(400, openai_error_body(400, error.message, param="messages",
                                                   code="context_length_exceeded"))
    if error.kind == "grammar":
        param = "response_format" if error.message.startswith("response_format") \
            else "tool_choice"
        return JsonResponse(400, openai_error_body(400, error.message, param=param,
                                                   code="grammar_unsupported"))
    return _openai_error(500, error.message, error.kind)


class _ChunkStream:
    """The streaming answer: ``chat.completion.chunk`` events, then ``[DONE]``.

    The response starts with the turn's first chunk, not before: a turn that fails
    before the model writes anything (a prompt over the context, a grammar that
    cannot enforce the request) answers with the same status and error object as
    a non-streaming request.
    """

    def __init__(self, turn: _Turn) -> None:
        self.turn = turn
        self.started = False

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        turn = self.turn
        watcher = asyncio.create_task(turn.watch_disconnect(receive))

        async def emit(chunks: Chunks) -> None:
            await self._emit(send, chunks)

        try:
            finished = await turn.run(emit)
            error = turn.builder.error
            if turn.client_gone:
                return
            if not self.started and finished and error is not None:
                with contextlib.suppress(OSError):
                    await turn_error_response(error)(scope, receive, send)
                return
            if finished and error is not None:
                body = openai_error_body(500, error.message, code=error.kind)
                body["error"]["type"] = "server_error"
                await self._start(send)
                await self._send(send, data_frame(body), more=True)
            elif finished:
                await self._emit(send, turn.builder.closing_chunks())
            else:
                await self._start(send)
            await self._send(send, DONE_FRAME, more=False)
        finally:
            turn.ticket.release()
            watcher.cancel()

    async def _emit(self, send: Send, chunks: Chunks) -> None:
        if not self.started:
            await self._start(send)
            chunks = [self.turn.builder.first_chunk(), *chunks]
        await self._send(send, b"".join(data_frame(c) for c in chunks), more=True)

    async def _start(self, send: Send) -> None:
        if self.started:
            return
        self.started = True
        try:
            await send({"type": "http.response.start", "status": 200,
                        "headers": list(SSE_HEADERS)})
        except OSError:
            self.turn.client_gone = True
            self.turn.token.cancel("disconnected")

    async def _send(self, send: Send, body: bytes, *, more: bool) -> None:
        if self.turn.client_gone:
            return
        try:
            await send({"type": "http.response.body", "body": body, "more_body": more})
        except OSError:
            self.turn.client_gone = True
            self.turn.token.cancel("disconnected")
