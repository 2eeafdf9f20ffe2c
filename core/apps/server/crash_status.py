"""A model worker's crash answered as ``503 Service Unavailable``, not ``500``.

The model worker (:mod:`toolwire.backends.model_worker`) ends a turn whose process
died with an ``error`` of kind ``model_crashed``; the completions and Responses
routes answer a failed turn with ``500``. A turn whose worker crashed is a service
that is briefly unavailable, which OpenAI clients retry: :class:`CrashIsUnavailable`
turns that answer into ``503`` with ``Retry-After``.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from ...backends.model_worker import CRASH_KIND
from .responses import Receive, Scope, Send

__all__ = ["CrashIsUnavailable"]


class CrashIsUnavailable:
    """An ASGI wrapper: an OpenAI error response whose code is ``model_crashed``
    answers ``503`` with ``Retry-After`` instead of ``500``.

    The completions route answers a failed turn with ``500``; a turn whose model
    worker crashed is a service that is briefly unavailable, which OpenAI clients
    retry.
    """

    def __init__(self, app: Callable[[Scope, Receive, Send], Any]) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        held: list[Any] = []

        async def relay(message: Any) -> None:
            if message["type"] == "http.response.start" and message.get("status") == 500:
                held.append(message)
                return
            if held and message["type"] == "http.response.body":
                start = dict(held.pop())
                if _crash_code(message.get("body", b"")):
                    start["status"] = 503
                    start["headers"] = [*start.get("headers", ()), (b"retry-after", b"1")]
                await send(start)
            await send(message)

        await self.app(scope, receive, relay)


def _crash_code(body: bytes) -> bool:
    try:
        data = json.loads(body or b"null")
    except ValueError:
        return False
    error = data.get("error") if isinstance(data, dict) else None
    return isinstance(error, dict) and error.get("code") == CRASH_KIND
