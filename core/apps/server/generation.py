"""One request's generation, and its answer, shared by every model API the server speaks.

``/v1/chat/completions``, ``/v1/responses`` and ``/v1/messages`` each read their
body into the same :class:`~toolwire.ModelRequest` and then take the same path:
a place in the one :class:`.model_queue.ModelQueue`, one backend turn in a worker
thread (:func:`.backend_thread.stream_backend_turn`), its items read by one
:class:`.reply_assembly.ReplyAssembler`. Only the last step differs: an API's
:class:`ReplyWriter` shapes the pieces as that API's payloads.

:class:`Generation` runs the turn; :class:`StreamAnswer` sends it as server-sent
events, and :meth:`Generation.complete` as one JSON body. Both keep the same
promises in every API:

* a request that waits for the model gets no byte until its turn comes, and a
  client that disconnects (or leaves the line) cancels its generation;
* the stream starts with the reply's first piece, not before: a turn that fails
  before the model wrote anything (a prompt over the context, a grammar that
  cannot enforce the request) answers with the same status and error body as a
  non-streaming request, never an error inside a ``200`` stream;
* a stop string or the one call allowed stops the model at once;
* after the start, a writer that has a ping sends it whenever the model has
  been quiet for ``ping_interval`` seconds (a long call being written, which goes
  out whole).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, Protocol

from ...events import DiagnosticEvent, ErrorEvent, Event
from ...parse.protocol import merge_events
from ...vocabulary.backend import ModelRequest, TurnEnd
from ...vocabulary.cancel import CancelToken
from .backend_thread import stream_backend_turn
from .http_input import ClientLine
from .model_queue import QueueTicket
from .reply_assembly import ReplyAssembler
from .responses import ASGIApp, JsonResponse, Receive, Scope, Send
from .sse import SSE_HEADERS

if TYPE_CHECKING:
    from .server_state import ServerState

__all__ = ["Generation", "ReplyWriter", "StreamAnswer"]

Payloads = list[dict[str, Any]]


class ReplyWriter(Protocol):
    """An API's shape of one reply (a chat completion, a response, a message).

    It reads the turn through its :attr:`reply` assembler and writes payloads;
    framing them as server-sent events is its job too, since the APIs frame
    differently (``data:`` lines and ``[DONE]``, or named events).
    """

    reply: ReplyAssembler

    @property
    def ping_frame(self) -> bytes | None:
        """An event that says the stream is alive (``None``: the API has none)."""
        ...

    def feed(self, item: Event | TurnEnd) -> Payloads:
        """Take one item of the turn; return the payloads it adds."""
        ...

    def opening(self) -> Payloads:
        """The payloads that open a stream, sent before its first piece."""
        ...

    def frames(self, payloads: Payloads) -> bytes:
        """Payloads as server-sent events."""
        ...

    def closing_frames(self) -> bytes:
        """The end of a stream whose turn ended (without an error)."""
        ...

    def failure_frames(self, error: ErrorEvent) -> bytes:
        """The end of a stream whose turn failed after the stream started."""
        ...

    def cancelled_frames(self) -> bytes:
        """The end of a stream cancelled before its turn came (a shutdown)."""
        ...

    def error_response(self, error: ErrorEvent) -> JsonResponse:
        """A turn that failed before anything was sent, as the API's error response."""
        ...

    def response(self) -> dict[str, Any]:
        """The whole non-streamed body (after the turn has ended)."""
        ...


class Generation:
    """One request's generation: wait for the model, run the turn, feed the writer.

    :param state: the server's shared state (the model, the queue, the metrics).
    :param ticket: the request's place in line.
    :param request: the turn to run.
    :param writer: the API's writer.
    :param api: the API's name for the metrics (``chat_completions``...).
    """

    def __init__(self, state: ServerState, ticket: QueueTicket, request: ModelRequest,
                 writer: ReplyWriter, api: str) -> None:
        self.state = state
        self.ticket = ticket
        self.request = request
        self.writer = writer
        self.api = api
        self.token = CancelToken()
        self.client = ClientLine(self.token)
        self.arrived = time.perf_counter()
        self.first_token_at: float | None = None

    async def run(self, emit: Callable[[Payloads], Awaitable[None]] | None = None, *,
                  idle: Callable[[], Awaitable[None]] | None = None,
                  idle_seconds: float | None = None) -> bool:
        """Generate; pass each batch's payloads to ``emit``, and call ``idle`` after
        ``idle_seconds`` without an item. ``False`` when cancelled before its turn."""
        state = self.state
        state.generations.add(self.token)
        reply = self.writer.reply
        try:
            if not await self.ticket.wait_turn(self.token) or self.token.cancelled:
                return False
            backend = state.model.backend()
            async with contextlib.aclosing(stream_backend_turn(
                    backend, self.request, self.token,
                    idle=idle_seconds if idle is not None else None)) as items:
                async for batch in items:
                    if not batch:
                        assert idle is not None
                        await idle()
                        continue
                    if self.first_token_at is None and _has_output(batch):
                        self.first_token_at = time.perf_counter()
                    # what came together goes out together: adjacent deltas joined
                    payloads = [payload for item in merge_events(batch)  # type: ignore[arg-type]
                                for payload in self.writer.feed(item)]
                    if payloads and emit is not None:
                        await emit(payloads)
                    if reply.should_stop and not self.token.cancelled:
                        self.token.cancel("finished")  # a stop string or the one call: enough
            return True
        finally:
            state.generations.discard(self.token)
            self.ticket.release()
            self._observe()

    def _observe(self) -> None:
        """The turn's figures for ``/metrics``."""
        metrics = self.state.metrics
        if metrics is None:
            return
        reply = self.writer.reply
        usage = reply.usage
        metrics.observe_turn(
            self.api, prompt_tokens=int(usage.get("prompt_tokens") or 0),
            completion_tokens=int(usage.get("completion_tokens") or 0),
            first_token=None if self.first_token_at is None
            else self.first_token_at - self.arrived,
            generation=None if self.first_token_at is None
            else time.perf_counter() - self.first_token_at,
            diagnostics=[d.code for d in reply.diagnostics])

    async def complete(self, receive: Receive) -> ASGIApp:
        """The non-streaming answer: the whole body, or the error."""
        async with self.client.watching(receive):
            finished = await self.run()
        if not finished or self.client.gone:
            return JsonResponse(499, {})  # never sent: nobody listens
        error = self.writer.reply.error
        if error is not None:
            return self.writer.error_response(error)
        return JsonResponse(200, self.writer.response())


def _has_output(batch: list[Any]) -> bool:
    return any(isinstance(item, Event) and not isinstance(item, DiagnosticEvent | ErrorEvent)
               and item.type != "token_logprob" for item in batch)


class StreamAnswer:
    """The streaming answer of a :class:`Generation`, as server-sent events.

    :param generation: the generation to send.
    :param ping_interval: seconds of quiet after which the writer's ping is sent
        (once the stream has started).
    """

    def __init__(self, generation: Generation, ping_interval: float | None = None) -> None:
        self.generation = generation
        self.ping_interval = ping_interval
        self.started = False

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        generation = self.generation
        writer = generation.writer

        async def emit(payloads: Payloads) -> None:
            await self._emit(send, payloads)

        async def ping() -> None:
            if self.started and writer.ping_frame is not None:
                await self._send(send, writer.ping_frame, more=True)

        try:
            async with generation.client.watching(receive):
                pinging = self.ping_interval is not None and writer.ping_frame is not None
                finished = await generation.run(emit, idle=ping if pinging else None,
                                                idle_seconds=self.ping_interval)
                error = writer.reply.error
                if generation.client.gone:
                    return
                if not self.started and finished and error is not None:
                    with contextlib.suppress(OSError):
                        await writer.error_response(error)(scope, receive, send)
                    return
                if finished and error is not None:
                    await self._start(send)
                    await self._send(send, writer.failure_frames(error), more=False)
                elif finished:
                    if not self.started:
                        await self._start(send)
                        await self._send(send, writer.frames(writer.opening()), more=True)
                    await self._send(send, writer.closing_frames(), more=False)
                else:
                    await self._start(send)
                    await self._send(send, writer.cancelled_frames(), more=False)
        finally:
            generation.ticket.release()

    async def _emit(self, send: Send, payloads: Payloads) -> None:
        writer = self.generation.writer
        if not self.started:
            await self._start(send)
            payloads = [*writer.opening(), *payloads]
        await self._send(send, writer.frames(payloads), more=True)

    async def _start(self, send: Send) -> None:
        if self.started:
            return
        self.started = True
        await self.generation.client.send(send, {"type": "http.response.start", "status": 200,
                                                 "headers": list(SSE_HEADERS)})

    async def _send(self, send: Send, body: bytes, *, more: bool) -> None:
        await self.generation.client.send(send, {"type": "http.response.body", "body": body,
                                                 "more_body": more})
