"""Plain ASGI responses and the three error shapes the server answers with.

Each path belongs to one API, and its errors come in that API's shape
(:func:`api_of`):

* the OpenAI routes (``/v1/chat/completions``, ``/v1/responses``, ``/v1/models``,
  and any other ``/v1`` path that is not toolwire's own or Anthropic's): OpenAI's
  error object ``{"error": {"message", "type", "param", "code"}}``, which the
  OpenAI SDKs turn into their typed exceptions;
* the Anthropic routes (``/v1/messages`` and below): Anthropic's ``{"type":
  "error", "error": {"type", "message"}}`` with Anthropic's status codes
  (``529 overloaded_error`` where the server is briefly unavailable);
* toolwire's own routes (``/v1/chat``, ``/v1/tools``, the dashboard, ``/healthz``
  and every other path): ``{"error": "<message>"}``.

These are plain ASGI callables, usable from a route or a middleware, without
importing Starlette.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, MutableMapping, Sequence
from typing import Any

from ...events import ErrorEvent
from .http_input import RequestError
from .sse import json_text

__all__ = [
    "ANTHROPIC_OVERLOADED",
    "ASGIApp",
    "JsonResponse",
    "anthropic_error_body",
    "anthropic_status",
    "api_of",
    "error_body",
    "error_response",
    "openai_error_body",
    "turn_error_status",
]

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

_OPENAI_PATHS = ("/v1/chat/completions", "/v1/models", "/v1/responses")
_ANTHROPIC_PATHS = ("/v1/messages",)
_TOOLWIRE_PATHS = ("/v1/chat", "/v1/tools")
ANTHROPIC_OVERLOADED = 529
"""Anthropic's status for a service that is briefly unavailable (its SDKs retry it)."""
_ANTHROPIC_TYPES = {400: "invalid_request_error", 401: "authentication_error",
                    403: "permission_error", 404: "not_found_error",
                    405: "invalid_request_error", 408: "timeout_error",
                    413: "request_too_large", 415: "invalid_request_error",
                    429: "rate_limit_error", 431: "request_too_large",
                    ANTHROPIC_OVERLOADED: "overloaded_error"}
_ERROR_TYPES = {400: "invalid_request_error", 401: "invalid_request_error",
                403: "permission_error", 404: "invalid_request_error", 405: "invalid_request_error",
                408: "invalid_request_error", 413: "invalid_request_error",
                415: "invalid_request_error", 429: "rate_limit_error"}


class JsonResponse:
    """A JSON response as a plain ASGI app.

    :param status: the HTTP status.
    :param body: the JSON-ready body.
    :param headers: extra headers (``Retry-After``, ``WWW-Authenticate``...).
    """

    def __init__(self, status: int, body: Any,
                 headers: Sequence[tuple[str, str]] = ()) -> None:
        self.status = status
        self.body = json_text(body).encode()
        self.headers = [(b"content-type", b"application/json"),
                        (b"content-length", str(len(self.body)).encode()),
                        *((k.lower().encode("latin-1"), v.encode("latin-1"))
                          for k, v in headers)]

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Send the response."""
        await send({"type": "http.response.start", "status": self.status,
                    "headers": self.headers})
        await send({"type": "http.response.body", "body": self.body})


def _under(path: str, roots: tuple[str, ...]) -> bool:
    return any(path == p or path.startswith(p + "/") for p in roots)


def api_of(path: str) -> str:
    """The API ``path`` belongs to: ``openai``, ``anthropic`` or ``toolwire``."""
    if _under(path, _ANTHROPIC_PATHS):
        return "anthropic"
    if _under(path, _OPENAI_PATHS):
        return "openai"
    if _under(path, _TOOLWIRE_PATHS) or not _under(path, ("/v1",)):
        return "toolwire"
    return "openai"  # an unknown /v1 route: OpenAI's clients are the ones who guess paths


def anthropic_status(status: int) -> int:
    """The status Anthropic answers where the server answers ``status``: ``529`` for
    a service briefly unavailable (``503``), the same otherwise."""
    return ANTHROPIC_OVERLOADED if status == 503 else status


def anthropic_error_body(status: int, message: str) -> dict[str, Any]:
    """Anthropic's error object for ``status`` (its own status, :func:`anthropic_status`)."""
    kind = _ANTHROPIC_TYPES.get(anthropic_status(status), "api_error")
    return {"type": "error", "error": {"type": kind, "message": message}}


def error_body(path: str, status: int, message: str, *, param: str | None = None,
               code: str | None = None) -> dict[str, Any]:
    """The error body of the API ``path`` belongs to."""
    api = api_of(path)
    if api == "anthropic":
        return anthropic_error_body(status, message)
    if api == "openai":
        return openai_error_body(status, message, param=param, code=code)
    return {"error": message}


def turn_error_status(error: ErrorEvent) -> tuple[int, str]:
    """A failed turn's status and code in every API: ``400`` for what the request
    asked that cannot be done (a prompt over the context: ``context_length_exceeded``;
    a ``tool_choice`` or reply format the model's grammar cannot enforce:
    ``grammar_unsupported``), ``500`` for the rest (the error's kind as the code)."""
    if error.kind == "context":
        return 400, "context_length_exceeded"
    if error.kind == "grammar":
        return 400, "grammar_unsupported"
    return 500, error.kind


def openai_error_body(status: int, message: str, *, param: str | None = None,
                      code: str | None = None) -> dict[str, Any]:
    """OpenAI's error object for ``status``."""
    kind = _ERROR_TYPES.get(status, "server_error")
    return {"error": {"message": message, "type": kind, "param": param, "code": code}}


def error_response(path: str, error: RequestError,
                   headers: Sequence[tuple[str, str]] = ()) -> JsonResponse:
    """``error`` in the shape (and, for Anthropic, the status) of the API ``path``
    belongs to."""
    body: Mapping[str, Any] = error_body(path, error.status, error.message,
                                         param=error.param, code=error.code)
    status = anthropic_status(error.status) if api_of(path) == "anthropic" else error.status
    return JsonResponse(status, body, headers)
