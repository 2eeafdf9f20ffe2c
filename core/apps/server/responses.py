"""Plain ASGI responses and the two error shapes the server answers with.

The toolwire routes answer errors as ``{"error": "<message>"}``; the OpenAI
routes (``/v1/chat/completions``, ``/v1/models``) as OpenAI's error object
``{"error": {"message", "type", "param", "code"}}``, which the OpenAI SDKs turn
into their typed exceptions. These are plain ASGI callables, usable from a route
or a middleware, without importing Starlette.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, MutableMapping, Sequence
from typing import Any

from .http_input import RequestError
from .sse import json_text

__all__ = [
    "ASGIApp",
    "JsonResponse",
    "error_response",
    "is_openai_path",
    "openai_error_body",
]

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

_OPENAI_PATHS = ("/v1/chat/completions", "/v1/models")
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


def is_openai_path(path: str) -> bool:
    """Whether ``path`` is one of the OpenAI-compatible routes (OpenAI error shape)."""
    return any(path == p or path.startswith(p + "/") for p in _OPENAI_PATHS)


def openai_error_body(status: int, message: str, *, param: str | None = None,
                      code: str | None = None) -> dict[str, Any]:
    """OpenAI's error object for ``status``."""
    kind = _ERROR_TYPES.get(status, "server_error")
    return {"error": {"message": message, "type": kind, "param": param, "code": code}}


def error_response(path: str, error: RequestError,
                   headers: Sequence[tuple[str, str]] = ()) -> JsonResponse:
    """``error`` in the shape the route at ``path`` answers with."""
    body: Mapping[str, Any]
    if is_openai_path(path):
        body = openai_error_body(error.status, error.message, param=error.param,
                                 code=error.code)
    else:
        body = {"error": error.message}
    return JsonResponse(error.status, body, headers)
