"""The ``toolwire serve`` HTTP app: chat over server-sent events, plus a dashboard page.

:func:`create_app` builds a Starlette (ASGI) app around a *chat factory*, a
callable that makes one :class:`~toolwire.Chat` per request from the request's
history. Endpoints (see ``docs/dashboard.md``):

* ``POST /v1/chat`` with ``{"messages": [...]}`` in the OpenAI message shape:
  answers the last user message, the earlier messages being the history, and
  streams the reply's events as server-sent events (``data: <event JSON>``). The
  first item is ``{"type": "session", "id": ..., "queued": ...}``; the same id is
  in the ``X-Toolwire-Chat`` response header. The stream ends after ``done``.
* ``POST /v1/chat/{id}/cancel``: cancel that reply (404 when the id is unknown
  or the reply has finished).
* ``GET /``: the reference dashboard page. ``GET /healthz``: a liveness probe.

The model is shared by all requests, so replies run one at a time (an
:class:`asyncio.Lock`); a request that waits still gets its ``session`` item at
once and may be cancelled while it waits. A client that disconnects cancels its
reply. There is no authentication: the app refuses requests whose ``Host`` is
not an allowed name (DNS rebinding) and cross-origin POSTs (another web page
driving the tools), but it is meant for 127.0.0.1 only.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import functools
import hashlib
import json
import logging
import re
import uuid
from collections.abc import Callable, Mapping, Sequence
from importlib import resources
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import attrs
from starlette.applications import Starlette
from starlette.datastructures import Headers
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, Response
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send
from starlette.types import Message as ASGIMessage

from ...conversation.cancel import CancelToken
from ...conversation.chat import Chat
from ...conversation.history import Message
from ...conversation.openai_messages import NO_RESULT_TEXT, messages_from_openai
from ...events import DoneEvent, ErrorEvent

__all__ = [
    "CHAT_ID_HEADER",
    "LOOPBACK_HOSTS",
    "NO_RESULT_TEXT",
    "ChatFactory",
    "ChatRequest",
    "cancel_replies",
    "create_app",
    "dashboard_html",
    "messages_from_openai",
    "parse_chat_request",
]

logger = logging.getLogger("toolwire.apps.server.app")

ChatFactory = Callable[[Sequence[Message], str | None], Chat]
"""``make_chat(history, system_prompt) -> Chat``; ``system_prompt`` is ``None``
unless the request began with system messages (then it replaces the default)."""

CHAT_ID_HEADER = "X-Toolwire-Chat"
LOOPBACK_HOSTS: frozenset[str] = frozenset({"127.0.0.1", "localhost", "::1"})
MAX_BODY_BYTES = 8 * 1024 * 1024

_SSE_HEADERS = [
    (b"content-type", b"text/event-stream; charset=utf-8"),
    (b"cache-control", b"no-cache"),
    (b"x-accel-buffering", b"no"),
]


# -- OpenAI-shape messages -> toolwire messages ------------------------------------


@attrs.frozen
class ChatRequest:
    """A parsed ``POST /v1/chat`` body.

    :ivar history: the messages before the last user message.
    :ivar system: the leading system messages' text, or ``None`` when there are none.
    :ivar message: the last user message's text, the one to answer.
    """

    history: tuple[Message, ...]
    system: str | None
    message: str


def parse_chat_request(data: Any, make_id: Callable[[int], str] | None = None) -> ChatRequest:
    """Read a ``POST /v1/chat`` body: ``{"messages": [...]}`` (other keys are ignored).

    The last message must be the user's: it is the one answered. Leading system
    messages become the system prompt (joined by blank lines).

    :raises ValueError: the body is not of that shape.
    """
    if not isinstance(data, Mapping):
        raise ValueError('the body must be a JSON object: {"messages": [...]}')
    records = data.get("messages")
    if not isinstance(records, list) or not records:
        raise ValueError('"messages" must be a non-empty list')
    last_user = next((i for i in range(len(records) - 1, -1, -1)
                      if isinstance(records[i], Mapping) and records[i].get("role") == "user"),
                     None)
    if last_user is None:
        raise ValueError("there is no user message to answer")
    if last_user != len(records) - 1:
        raise ValueError("the last message must be the user message to answer")
    messages = messages_from_openai(records, make_id)
    message = messages.pop().content
    if not message.strip():
        raise ValueError("the user message is empty")
    system_parts: list[str] = []
    while messages and messages[0].role == "system":
        system_parts.append(messages.pop(0).content)
    system = "\n\n".join(system_parts) if system_parts else None
    return ChatRequest(tuple(messages), system, message)


# -- the dashboard page -------------------------------------------------------------


@functools.cache
def dashboard_html() -> str:
    """The reference dashboard page (``static/dashboard.html`` beside this module), read once."""
    resource = resources.files("toolwire.apps.server").joinpath("static/dashboard.html")
    if resource.is_file():
        return resource.read_text(encoding="utf-8")
    # a strictly editable install links only the modules: read the source tree's copy
    return (Path(__file__).resolve().parent / "static" / "dashboard.html").read_text(
        encoding="utf-8")


def _content_security_policy(html: str) -> str:
    """Allow exactly the page's own inline scripts (by hash) and nothing from elsewhere."""
    hashes = " ".join(
        "'sha256-" + base64.b64encode(hashlib.sha256(body.encode("utf-8")).digest()).decode()
        + "'"
        for body in re.findall(r"<script>(.*?)</script>", html, flags=re.DOTALL))
    return (f"default-src 'none'; script-src {hashes}; style-src 'unsafe-inline'; "
            "connect-src 'self'; img-src 'self' data:; base-uri 'none'; form-action 'none'; "
            "frame-ancestors 'none'")


# -- request guard ------------------------------------------------------------------


def _hostname(host: str) -> str:
    """The name part of a ``Host`` header (``[::1]:8765`` -> ``::1``)."""
    host = host.strip().lower()
    if host.startswith("["):
        return host[1:host.find("]")] if "]" in host else host
    return host.rsplit(":", 1)[0] if host.count(":") == 1 else host


def _json_error(status: int, message: str) -> JSONResponse:
    return JSONResponse({"error": message}, status_code=status)


class _LocalGuard:
    """Refuse unknown ``Host`` names and cross-origin POSTs (a pure ASGI middleware)."""

    def __init__(self, app: ASGIApp, allowed_hosts: frozenset[str] | None) -> None:
        self.app = app
        self.allowed_hosts = allowed_hosts

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            headers = Headers(scope=scope)
            host = headers.get("host", "")
            refusal = None
            if self.allowed_hosts is not None and _hostname(host) not in self.allowed_hosts:
                refusal = f"host {host!r} is not allowed"
            elif scope["method"] not in ("GET", "HEAD", "OPTIONS"):
                origin = headers.get("origin")
                if origin is not None and urlsplit(origin).netloc.lower() != host.lower():
                    refusal = f"cross-origin request from {origin!r} refused"
            if refusal is not None:
                await _json_error(403, refusal)(scope, receive, send)
                return
        await self.app(scope, receive, send)


# -- the app ------------------------------------------------------------------------


class _ServerState:
    """What the endpoints share: the chat factory, the model lock, live replies."""

    def __init__(self, make_chat: ChatFactory, model: str, max_body_bytes: int) -> None:
        self.make_chat = make_chat
        self.model = model
        self.max_body_bytes = max_body_bytes
        self.lock = asyncio.Lock()
        self.replies: dict[str, CancelToken] = {}

    def cancel_all(self, reason: str) -> int:
        tokens = list(self.replies.values())
        for token in tokens:
            token.cancel(reason)
        return len(tokens)


def _sse_frame(payload: Mapping[str, Any]) -> bytes:
    data = json.dumps(payload, ensure_ascii=False, separators=(", ", ": "))
    return f"event: {payload.get('type', 'message')}\ndata: {data}\n\n".encode()


class _EventStream:
    """The ``POST /v1/chat`` response: one reply's events as server-sent events."""

    def __init__(self, state: _ServerState, chat_id: str, token: CancelToken, chat: Chat,
                 message: str) -> None:
        self.state = state
        self.chat_id = chat_id
        self.token = token
        self.chat = chat
        self.message = message
        self.client_gone = False

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        watcher = asyncio.create_task(self._watch_disconnect(receive))
        try:
            await self._send(send, {"type": "http.response.start", "status": 200,
                                    "headers": [*_SSE_HEADERS, (CHAT_ID_HEADER.lower().encode(),
                                                                self.chat_id.encode())]})
            await self._emit(send, {"type": "session", "id": self.chat_id,
                                    "queued": self.state.lock.locked()})
            await self._reply(send)
            await self._send(send, {"type": "http.response.body", "body": b"",
                                    "more_body": False})
        finally:
            watcher.cancel()
            self.state.replies.pop(self.chat_id, None)

    async def _watch_disconnect(self, receive: Receive) -> None:
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                self.client_gone = True
                self.token.cancel("disconnected")
                return

    async def _send(self, send: Send, message: ASGIMessage) -> None:
        if self.client_gone:
            return
        try:
            await send(message)
        except OSError:
            self.client_gone = True
            self.token.cancel("disconnected")

    async def _emit(self, send: Send, payload: Mapping[str, Any]) -> None:
        await self._send(send, {"type": "http.response.body", "body": _sse_frame(payload),
                                "more_body": True})

    async def _reply(self, send: Send) -> None:
        async with self.state.lock:
            if self.token.cancelled:  # cancelled (or the client left) while it waited
                await self._emit(send, DoneEvent("cancelled").to_dict())
                return
            done = False
            try:
                # the loop keeps running to its done even when the client has gone (the
                # token is set then), so the model is free before the lock is released
                async with contextlib.aclosing(self.chat.asend(self.message,
                                                               cancel=self.token)) as events:
                    async for event in events:
                        done = done or isinstance(event, DoneEvent)
                        await self._emit(send, event.to_dict())
            except Exception as exc:
                logger.exception("reply %s failed", self.chat_id)
                if not done:
                    await self._emit(send, ErrorEvent(
                        "server", f"{type(exc).__name__}: {exc}").to_dict())
                    await self._emit(send, DoneEvent("error").to_dict())


async def _read_body(request: Request, limit: int) -> bytes | None:
    """The request body, or ``None`` as soon as it is known to exceed ``limit`` bytes."""
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit:
        return None
    body = bytearray()
    async for chunk in request.stream():
        body.extend(chunk)
        if len(body) > limit:
            return None
    return bytes(body)


def create_app(make_chat: ChatFactory, *, model: str = "",
               allowed_hosts: Sequence[str] | None = tuple(LOOPBACK_HOSTS),
               max_body_bytes: int = MAX_BODY_BYTES) -> Starlette:
    """The ``toolwire serve`` ASGI app.

    :param make_chat: builds the :class:`~toolwire.Chat` for one request from its
        history and system prompt (``None``: keep the default); the chats share one
        backend, and the app runs one reply at a time.
    :param model: a label for the dashboard and ``/healthz``.
    :param allowed_hosts: ``Host`` names to serve (DNS-rebinding guard); ``None``
        serves any. The default is the loopback names.
    :param max_body_bytes: the largest ``POST /v1/chat`` body accepted.
    """
    state = _ServerState(make_chat, model, max_body_bytes)
    page = dashboard_html()
    page_headers = {"Cache-Control": "no-store", "X-Content-Type-Options": "nosniff",
                    "Content-Security-Policy": _content_security_policy(page)}

    async def index(request: Request) -> Response:
        return HTMLResponse(page, headers=page_headers)

    async def healthz(request: Request) -> Response:
        return JSONResponse({"status": "ok", "model": state.model,
                             "busy": state.lock.locked(), "replies": len(state.replies)})

    async def chat(request: Request) -> Any:
        media_type = request.headers.get("content-type", "").split(";")[0].strip().lower()
        if media_type != "application/json":
            return _json_error(415, "send the body as application/json")
        body = await _read_body(request, state.max_body_bytes)
        if body is None:
            return _json_error(413, f"the body is larger than {state.max_body_bytes} bytes")
        try:
            data = json.loads(body)
        except ValueError as exc:
            return _json_error(400, f"the body is not valid JSON: {exc}")
        try:
            parsed = parse_chat_request(data)
        except ValueError as exc:
            return _json_error(400, str(exc))
        try:
            session = state.make_chat(parsed.history, parsed.system)
        except ValueError as exc:
            return _json_error(400, str(exc))
        except Exception as exc:
            logger.exception("cannot start a chat")
            return _json_error(500, f"cannot start a chat: {type(exc).__name__}: {exc}")
        chat_id = uuid.uuid4().hex
        token = CancelToken()
        state.replies[chat_id] = token
        return _EventStream(state, chat_id, token, session, parsed.message)

    async def cancel(request: Request) -> Response:
        token = state.replies.get(request.path_params["chat_id"])
        if token is None:
            return _json_error(404, "no reply in progress has this id")
        token.cancel("user")
        return JSONResponse({"cancelled": True})

    hosts = None if allowed_hosts is None else frozenset(h.lower() for h in allowed_hosts)
    app = Starlette(
        routes=[
            Route("/", index, methods=["GET"]),
            Route("/healthz", healthz, methods=["GET"]),
            Route("/v1/chat", chat, methods=["POST"]),
            Route("/v1/chat/{chat_id}/cancel", cancel, methods=["POST"]),
        ],
        middleware=[Middleware(_LocalGuard, allowed_hosts=hosts)],
    )
    app.state.toolwire = state
    return app


def cancel_replies(app: Starlette, reason: str = "shutdown") -> int:
    """Cancel every reply in progress or waiting (a server shutting down); return how many.

    Safe from any thread: it only sets cancel tokens.
    """
    state: _ServerState = app.state.toolwire
    return state.cancel_all(reason)
