"""The ``toolwire serve`` ASGI app, assembled from the route modules.

:func:`create_app` builds a Starlette app (imported only here, when an app is
made) with these routes (see ``docs/dashboard.md`` and ``docs/openai-server.md``):

* ``POST /v1/chat``, ``POST /v1/chat/{id}/cancel``: toolwire's own loop, streamed
  as events (:mod:`.chat_route`); ``POST /v1/chat/{id}/approval``: the answer to a
  write call waiting for approval (:mod:`.approvals`); ``GET /v1/tools``: the
  tools (:mod:`.tools_route`);
* ``POST /v1/chat/completions``, ``GET /v1/models``: the OpenAI-compatible API
  (:mod:`.openai_routes`); ``POST /v1/responses``: OpenAI's Responses API
  (:mod:`.responses_route`); ``POST /v1/messages``, ``POST
  /v1/messages/count_tokens``: Anthropic's Messages API (:mod:`.messages_route`);
  the three run the same path to the model (:mod:`.model_route`, :mod:`.generation`);
* ``GET /``: the dashboard page, ``GET /static/vendor/{name}``: its vendored
  scripts (:mod:`.dashboard`); ``GET /healthz`` (and ``GET /health``): liveness;
  ``GET /metrics``: the Prometheus figures (:mod:`.metrics`).

Every request first passes :class:`.request_guard.RequestGuard` (``Host``
allowlist, same-origin POSTs or the CORS origins allowed, the API key when one
is set); unknown routes and wrong methods (``404``, ``405``) answer in the error
shape of the API their path belongs to (:func:`.responses.api_of`); bodies are
read under the bounds of :class:`.limits.ServerLimits`. All routes share one
model and its :class:`.model_queue.ModelQueue`: replies run one at a time, in
arrival order.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from ...errors import ToolwireError
from ...extras import extra_hint
from ...limits import ServerLimits
from ...vocabulary.backend import Backend
from ...vocabulary.openai_messages import NO_RESULT_TEXT, messages_from_openai
from .chat_request import ChatRequest, parse_chat_request
from .chat_route import CHAT_ID_HEADER
from .crash_status import CrashIsUnavailable
from .dashboard import dashboard_html, page_headers
from .http_input import RequestError
from .metrics import ServerMetrics
from .model_queue import ModelQueue
from .request_guard import LOOPBACK_HOSTS, HostPolicy, parse_origin
from .responses import JsonResponse, Receive, Scope, Send, error_response
from .served_model import ChatFactory, LoadedModel, ServedModel
from .server_state import ServerState

if TYPE_CHECKING:
    from starlette.applications import Starlette

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


class _Page:
    """``GET /``: the dashboard page with its security headers."""

    def __init__(self) -> None:
        html = dashboard_html()
        self.body = html.encode("utf-8")
        self.headers = [(b"content-type", b"text/html; charset=utf-8"),
                        (b"content-length", str(len(self.body)).encode()),
                        *((k.lower().encode(), v.encode())
                          for k, v in page_headers(html).items())]

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": self.headers})
        await send({"type": "http.response.body", "body": self.body})


class _Health:
    """``GET /healthz`` and ``GET /health``: ``ok`` (200) once the model is ready, else
    ``loading``/``failed`` (503); with a model worker, its state (``ready`` or
    ``restarting``) and restarts too."""

    def __init__(self, state: ServerState) -> None:
        self.state = state

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        state = self.state
        model = state.model
        if model.loaded is None:
            body: dict[str, Any] = {"status": model.state, "model": model.label}
            if model.error:
                body["error"] = model.error
            response = JsonResponse(503, body, (("Retry-After", "5"),))
        else:
            body = {"status": "ok", "model": model.label, "busy": state.queue.busy,
                    "replies": len(state.replies)}
            worker = model.worker_status()
            if worker is not None:  # a local model in its supervised worker process
                body["worker"] = worker
            response = JsonResponse(200, body)
        await response(scope, receive, send)


_ROUTE_ERRORS = {404: ("not_found", "no route {method} {path} here (see GET /v1/models; the "
                                   "model APIs are POST /v1/chat/completions, /v1/responses "
                                   "and /v1/messages)"),
                 405: ("method_not_allowed", "{path} does not answer {method}")}


async def _route_error(request: Any, exc: Any) -> Any:
    """Starlette's 404 and 405, as JSON in the error shape of the API the path belongs
    to (:func:`.responses.api_of`: clients read it as their typed errors)."""
    path, status = request.url.path, exc.status_code
    code, message = _ROUTE_ERRORS[status]
    error = RequestError(status, message.format(method=request.method, path=path), code=code)
    return error_response(path, error, tuple(dict(exc.headers or {}).items()))


def _host_policy(allowed_hosts: Sequence[str] | HostPolicy | None) -> HostPolicy | None:
    if allowed_hosts is None or isinstance(allowed_hosts, HostPolicy):
        return allowed_hosts
    return HostPolicy(allowed_hosts)


def create_app(make_chat: ChatFactory | None = None, *, model: str = "",
               allowed_hosts: Sequence[str] | HostPolicy | None = tuple(LOOPBACK_HOSTS),
               limits: ServerLimits | None = None,
               served: ServedModel | None = None, backend: Backend | None = None,
               model_id: str | None = None, api_key: str | None = None,
               concurrent_replies: int = 1, approvals: bool = False,
               allowed_origins: Sequence[str] = (),
               ping_interval: float | None = None) -> Starlette:
    """The ``toolwire serve`` ASGI app.

    :param make_chat: builds the :class:`~toolwire.Chat` for one ``/v1/chat``
        request from its history and system prompt (``None``: keep the default);
        the chats share one backend. Leave it out when ``served`` is given.
    :param model: a label for people (the dashboard, ``/healthz``).
    :param allowed_hosts: ``Host`` names to serve (DNS-rebinding guard), or a
        :class:`~toolwire.apps.server.request_guard.HostPolicy`; ``None`` serves
        any. The default is the loopback names.
    :param limits: the server's bounds (default :class:`ServerLimits`).
    :param served: the model, possibly still loading (``toolwire serve`` loads in
        the background); default: ``make_chat``'s, ready now.
    :param backend: the backend the chat-completions route runs turns on
        (default: the one of ``make_chat``'s chats).
    :param model_id: the id OpenAI clients send as ``model`` (default ``model``,
        or ``toolwire``).
    :param api_key: when set, every ``/v1`` route and ``/metrics`` need it, as
        ``Authorization: Bearer <key>`` or ``x-api-key: <key>``.
    :param concurrent_replies: replies that may use the backend at once (``1``
        for a local model, which has one context).
    :param approvals: each call of a tool that is not read-only waits for the
        client's answer (``approval_request`` event, ``POST /v1/chat/{id}/approval``);
        this replaces the approver of ``make_chat``'s chats.
    :param allowed_origins: browser origins (``https://app.example``) that may call
        the server across sites: CORS preflights and headers for them only.
    :param ping_interval: seconds of quiet after which an Anthropic message stream
        sends a ``ping`` (default :data:`.messages_route.PING_INTERVAL`).
    :raises ToolwireError: Starlette is not installed (the ``serve`` extra).
    :raises ValueError: an allowed origin is not ``scheme://host[:port]``.
    """
    try:
        from starlette.applications import Starlette
        from starlette.middleware import Middleware
        from starlette.routing import Route
    except ImportError as exc:
        raise ToolwireError(f"the HTTP server needs the serve extra: {extra_hint('serve')} "
                            f"({exc})") from exc
    from .approval_route import ApprovalEndpoint
    from .chat_route import CancelEndpoint, ChatEndpoint
    from .dashboard import VendorEndpoint
    from .messages_route import PING_INTERVAL, CountTokensEndpoint, MessagesEndpoint
    from .metrics import MetricsEndpoint, MetricsMiddleware
    from .openai_routes import CompletionsEndpoint, ModelsEndpoint
    from .request_guard import RequestGuard
    from .responses_route import ResponsesEndpoint, StoredResponseEndpoint
    from .tools_route import ToolsEndpoint

    if served is None:
        if make_chat is None:
            raise ValueError("create_app needs make_chat or served")
        served = ServedModel(LoadedModel(make_chat, backend, model,
                                         model_id or model or "toolwire"))
    bounds = limits or ServerLimits()
    ping_interval = PING_INTERVAL if ping_interval is None else ping_interval
    if ping_interval <= 0:
        raise ValueError(f"ping_interval must be positive, not {ping_interval!r}")
    queue = ModelQueue(concurrent_replies, bounds.max_waiting)
    state = ServerState(served, bounds, queue, ask_approval=approvals)
    metrics = state.metrics = ServerMetrics(
        waiting=lambda: queue.waiting, active=lambda: queue.active,
        restarts=state.worker_restarts)
    models = ModelsEndpoint(state)
    health = _Health(state)
    stored = StoredResponseEndpoint()
    app = Starlette(
        routes=[
            Route("/", _Page(), methods=["GET"]),
            Route("/static/vendor/{name}", VendorEndpoint(), methods=["GET"]),
            Route("/healthz", health, methods=["GET"]),
            Route("/health", health, methods=["GET"]),
            Route("/metrics", MetricsEndpoint(metrics), methods=["GET"]),
            Route("/v1/chat", ChatEndpoint(state), methods=["POST"]),
            Route("/v1/chat/completions", CrashIsUnavailable(CompletionsEndpoint(state)),
                  methods=["POST"]),
            Route("/v1/responses", CrashIsUnavailable(ResponsesEndpoint(state)),
                  methods=["POST"]),
            Route("/v1/responses/{response_id:path}", stored, methods=["GET", "DELETE"]),
            Route("/v1/messages", MessagesEndpoint(state, ping_interval=ping_interval),
                  methods=["POST"]),
            Route("/v1/messages/count_tokens", CountTokensEndpoint(state), methods=["POST"]),
            Route("/v1/chat/{chat_id}/cancel", CancelEndpoint(state), methods=["POST"]),
            Route("/v1/chat/{chat_id}/approval", ApprovalEndpoint(state), methods=["POST"]),
            Route("/v1/tools", ToolsEndpoint(state), methods=["GET"]),
            Route("/v1/models", models, methods=["GET"]),
            Route("/v1/models/{model_id:path}", models, methods=["GET"]),
        ],
        exception_handlers={404: _route_error, 405: _route_error},
        middleware=[Middleware(MetricsMiddleware, metrics=metrics),
                    Middleware(RequestGuard, hosts=_host_policy(allowed_hosts),
                               api_key=api_key, max_header_bytes=bounds.max_header_bytes,
                               origins=tuple(parse_origin(o) for o in allowed_origins))],
    )
    app.state.toolwire = state
    return app


def cancel_replies(app: Starlette, reason: str = "shutdown") -> int:
    """Cancel every ``/v1/chat`` reply in progress or waiting (a server shutting down);
    return how many.

    Safe from any thread: it only sets cancel tokens.
    """
    state: ServerState = app.state.toolwire
    return state.cancel_all(reason)
