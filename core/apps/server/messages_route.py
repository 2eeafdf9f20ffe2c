"""``POST /v1/messages`` and ``POST /v1/messages/count_tokens``: Anthropic's Messages API
on the served model (Claude Code, the ``anthropic`` SDKs).

The body is read by :mod:`.messages_request`, the turn runs on the same path as
chat completions (:class:`.model_route.ModelRoute`: one queue, one worker, one
parser, one grammar), and :mod:`.messages_stream` writes the message. The
``beta`` query, ``anthropic-version`` and ``anthropic-beta`` headers are accepted
(the server answers one version of the API: the one these routes document).
Errors are Anthropic's ``{"type": "error", "error": {"type", "message"}}`` with
Anthropic's status codes. Auth (``--api-key``) takes ``x-api-key`` or
``Authorization: Bearer``.

``count_tokens`` renders the request's prompt exactly as a turn would (system
prompt, conversation, tool block and reasoning switches) and counts it with the
model's tokenizer, waiting its turn at the model like any request.
"""

from __future__ import annotations

import asyncio
from typing import Any

from ...backends.model_worker import CRASH_KIND
from ...errors import TemplateError, ToolwireError
from ...vocabulary.backend import Backend
from .completion_request import CompletionRequest
from .http_input import RequestError
from .messages_request import MessagesRequest, parse_messages_request
from .messages_stream import MessageWriter, new_message_id
from .model_route import Admitted, ModelRoute
from .responses import (
    ANTHROPIC_OVERLOADED,
    ASGIApp,
    JsonResponse,
    Receive,
    Scope,
    anthropic_error_body,
    anthropic_status,
)

__all__ = ["CountTokensEndpoint", "MessagesEndpoint"]

PING_INTERVAL = 10.0
"""Seconds of quiet after which a message stream sends a ``ping``."""


class MessagesEndpoint(ModelRoute):
    """``POST /v1/messages`` (an ASGI app)."""

    api = "messages"

    def parse(self, data: Any, scope: Scope) -> tuple[CompletionRequest, MessagesRequest]:
        """The Messages body (:func:`.messages_request.parse_messages_request`)."""
        return parse_messages_request(data, self.state.limits)

    def writer(self, parsed: CompletionRequest, extra: MessagesRequest,
               backend: Backend) -> MessageWriter:
        """A :class:`.messages_stream.MessageWriter` for this request."""
        return MessageWriter(new_message_id(), self.state.model.model_id,
                             make_call_id=backend.make_call_id, stop=parsed.stop,
                             parallel_tool_calls=parsed.parallel_tool_calls,
                             ignored_tools=extra.ignored_tools)

    def refuse(self, scope: Scope, error: RequestError,
               headers: tuple[tuple[str, str], ...] = ()) -> JsonResponse:
        """``error`` as Anthropic's error object, with Anthropic's status."""
        status = anthropic_status(error.status)
        if status == ANTHROPIC_OVERLOADED and not headers:
            headers = (("Retry-After", "1"),)
        return JsonResponse(status, anthropic_error_body(error.status, error.message), headers)


class CountTokensEndpoint(MessagesEndpoint):
    """``POST /v1/messages/count_tokens``: ``{"input_tokens": N}`` (an ASGI app)."""

    api = "count_tokens"

    def parse(self, data: Any, scope: Scope) -> tuple[CompletionRequest, MessagesRequest]:
        """The body of a Messages request without ``max_tokens``."""
        return parse_messages_request(data, self.state.limits, counting=True)

    def check(self, parsed: CompletionRequest, backend: Backend) -> None:
        """Refuse a backend that cannot count a prompt's tokens (a remote provider).

        :raises RequestError: ``400`` with code ``count_unsupported``.
        """
        if not callable(getattr(backend, "prompt_tokens", None)):
            raise RequestError(400, f"the {backend.name} backend this server runs cannot "
                                    "count a prompt's tokens (a local model can)",
                               code="count_unsupported")

    async def respond(self, scope: Scope, receive: Receive) -> ASGIApp:
        """Count the prompt's tokens, in line with the turns at the model."""
        admitted = await self.admit(scope, receive)
        if not isinstance(admitted, Admitted):
            return admitted
        count = admitted.backend.prompt_tokens  # type: ignore[attr-defined]
        try:
            if not await admitted.ticket.wait_turn():
                return JsonResponse(499, {})  # never sent: the server is stopping
            tokens = await asyncio.get_running_loop().run_in_executor(None, count,
                                                                      admitted.request)
        except TemplateError as exc:
            return self.refuse(scope, RequestError(400, f"the chat template failed: {exc}"))
        except Exception as exc:  # a backend's failure: the error, never a traceback
            crashed = isinstance(exc, ToolwireError) and getattr(exc, "kind", "") == CRASH_KIND
            return self.refuse(scope, RequestError(503 if crashed else 500,
                                                   f"could not count the prompt: {exc}"))
        finally:
            admitted.ticket.release()
        return JsonResponse(200, {"input_tokens": int(tokens)})
