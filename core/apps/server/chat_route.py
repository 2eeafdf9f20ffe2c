"""``POST /v1/chat`` (toolwire's own loop, streamed as events) and its cancel route.

The reply runs a whole :class:`~toolwire.Chat` exchange (model turns and the
server's tools) and streams its events as server-sent events; the first item is
``{"type": "session", "id", "queued"}``, the id also in the ``X-Toolwire-Chat``
header, and the stream ends after ``done``. ``POST /v1/chat/{id}/cancel``
cancels a reply that runs or waits. A client that disconnects cancels its reply.
The body may narrow the chat (``read_only``, ``tool_names``: :mod:`.chat_options`);
with approvals on, write calls wait for ``POST /v1/chat/{id}/approval``
(:mod:`.approvals`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from ...conversation.approval import ApprovalGate
from ...events import ApprovalRequestEvent, DiagnosticEvent, DoneEvent, ErrorEvent, Event
from ...vocabulary.cancel import CancelToken
from .approvals import ReplyApprovals, with_approval_requests
from .chat_options import apply_chat_options, parse_chat_options
from .chat_request import parse_chat_request
from .http_input import ClientGone, ClientLine, RequestError, read_json_request
from .http_input import require_json_media_type as require_json
from .model_queue import QueueFullError, QueueTicket
from .responses import ASGIApp, JsonResponse, Receive, Scope, Send
from .sse import SSE_HEADERS, event_frame

if TYPE_CHECKING:
    from ...conversation.chat import Chat
    from .server_state import ServerState

__all__ = ["CHAT_ID_HEADER", "CancelEndpoint", "ChatEndpoint"]

logger = logging.getLogger("toolwire.apps.server")

CHAT_ID_HEADER = "X-Toolwire-Chat"


def _error(status: int, message: str, headers: tuple[tuple[str, str], ...] = ()) -> JsonResponse:
    return JsonResponse(status, {"error": message}, headers)


class _EventStream:
    """The ``POST /v1/chat`` response: one reply's events as server-sent events."""

    def __init__(self, state: ServerState, chat_id: str, token: CancelToken, chat: Chat,
                 message: str, ticket: QueueTicket,
                 approval_requests: asyncio.Queue[ApprovalRequestEvent] | None = None) -> None:
        self.state = state
        self.chat_id = chat_id
        self.token = token
        self.chat = chat
        self.message = message
        self.ticket = ticket
        self.approval_requests = approval_requests
        self.client = ClientLine(token)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            async with self.client.watching(receive):
                await self.client.send(send, {
                    "type": "http.response.start", "status": 200,
                    "headers": [*SSE_HEADERS, (CHAT_ID_HEADER.lower().encode(),
                                               self.chat_id.encode())]})
                await self._emit(send, {"type": "session", "id": self.chat_id,
                                        "queued": self.ticket.queued})
                await self._reply(send)
                await self.client.send(send, {"type": "http.response.body", "body": b"",
                                              "more_body": False})
        finally:
            self.ticket.release()
            self.state.replies.pop(self.chat_id, None)
            self.state.approvals.pop(self.chat_id, None)

    async def _emit(self, send: Send, payload: Mapping[str, Any]) -> None:
        await self.client.send(send, {"type": "http.response.body",
                                      "body": event_frame(payload), "more_body": True})

    def _observe(self, event: Event) -> None:
        """The loop's parser diagnostics and tokens, for ``/metrics``."""
        metrics = self.state.metrics
        if metrics is None:
            return
        if isinstance(event, DiagnosticEvent):
            metrics.observe_diagnostics((event.code,))
        elif isinstance(event, DoneEvent):
            usage = event.usage or {}
            metrics.observe_turn("chat", prompt_tokens=int(usage.get("prompt_tokens") or 0),
                                 completion_tokens=int(usage.get("completion_tokens") or 0),
                                 first_token=None, generation=None)

    async def _reply(self, send: Send) -> None:
        if not await self.ticket.wait_turn(self.token) or self.token.cancelled:
            # cancelled (or the client left) while it waited
            await self._emit(send, DoneEvent("cancelled").to_dict())
            return
        done = False
        try:
            # the loop keeps running to its done even when the client has gone (the
            # token is set then), so the model is free before the turn is given on
            async with contextlib.aclosing(self.chat.asend(self.message,
                                                           cancel=self.token)) as events:
                stream = (events if self.approval_requests is None
                          else with_approval_requests(events, self.approval_requests))
                async with contextlib.aclosing(stream) as items:
                    async for event in items:
                        done = done or isinstance(event, DoneEvent)
                        self._observe(event)
                        await self._emit(send, event.to_dict())
        except Exception as exc:
            logger.exception("reply %s failed", self.chat_id)
            if not done:
                await self._emit(send, ErrorEvent(
                    "server", f"{type(exc).__name__}: {exc}").to_dict())
                await self._emit(send, DoneEvent("error").to_dict())


class ChatEndpoint:
    """The ``POST /v1/chat`` route (an ASGI app)."""

    def __init__(self, state: ServerState) -> None:
        self.state = state

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Answer one request."""
        await (await _chat_response(self.state, scope, receive))(scope, receive, send)


async def _chat_response(state: ServerState, scope: Scope, receive: Receive) -> ASGIApp:
    loaded = state.model.loaded
    if loaded is None:
        return _error(503, f"the model is {state.model.state}", (("Retry-After", "5"),))
    limits = state.limits
    try:
        require_json(scope["headers"])
        parsed, options = await read_json_request(
            receive, scope["headers"], limits,
            lambda data: (parse_chat_request(data, limits=limits), parse_chat_options(data)))
    except ClientGone:
        return _error(400, "the client went away")  # never sent: nobody listens
    except RequestError as exc:
        return _error(exc.status, exc.message)
    except ValueError as exc:
        return _error(400, str(exc))
    def start_chat() -> Chat:
        session = loaded.make_chat(parsed.history, parsed.system)
        apply_chat_options(session, options)
        return session

    try:
        session = await asyncio.to_thread(start_chat)  # a long history is work: off the loop
    except ValueError as exc:
        return _error(400, str(exc))
    except Exception as exc:
        logger.exception("cannot start a chat")
        return _error(500, f"cannot start a chat: {type(exc).__name__}: {exc}")
    try:
        ticket = state.queue.join()
    except QueueFullError as exc:
        return _error(429, str(exc), (("Retry-After", "1"),))
    chat_id = uuid.uuid4().hex
    token = CancelToken()
    requests: asyncio.Queue[ApprovalRequestEvent] | None = None
    if state.ask_approval:
        requests = asyncio.Queue()
        put, loop = requests.put_nowait, asyncio.get_running_loop()

        def announce(event: ApprovalRequestEvent) -> None:  # from the chat's worker thread
            loop.call_soon_threadsafe(put, event)

        approvals = ReplyApprovals(token, announce, state.limits.approval_timeout)
        session.dispatcher.approval = ApprovalGate(approvals)
        state.approvals[chat_id] = approvals
    state.replies[chat_id] = token
    return _EventStream(state, chat_id, token, session, parsed.message, ticket, requests)


class CancelEndpoint:
    """The ``POST /v1/chat/{chat_id}/cancel`` route (an ASGI app)."""

    def __init__(self, state: ServerState) -> None:
        self.state = state

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Cancel the reply named in the path."""
        token = self.state.replies.get(scope["path_params"]["chat_id"])
        if token is None:
            response = _error(404, "no reply in progress has this id")
        else:
            token.cancel("user")
            response = JsonResponse(200, {"cancelled": True})
        await response(scope, receive, send)
