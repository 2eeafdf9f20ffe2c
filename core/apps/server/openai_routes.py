"""The OpenAI-compatible routes: ``POST /v1/chat/completions`` and ``GET /v1/models``.

Any OpenAI client gets the served model's native tool calls, parsed by toolwire.
The route only generates and parses: it runs one backend turn
(``backend.stream_turn(ModelRequest(...), cancel)``) and answers with the text,
reasoning and tool calls the model wrote; the client runs the tools and sends
their results back. The path from body to turn is :class:`.model_route.ModelRoute`'s,
the same as ``/v1/responses`` and ``/v1/messages`` take: requests wait their turn
at the model in arrival order (:mod:`.model_queue`), and a client that
disconnects cancels its generation.
"""

from __future__ import annotations

import time
import uuid
from typing import TYPE_CHECKING, Any

from ...vocabulary.backend import Backend
from .completion_request import CompletionRequest, parse_completion_request
from .completion_stream import CompletionBuilder
from .http_input import header_value
from .model_route import ModelRoute
from .responses import (
    JsonResponse,
    Receive,
    Scope,
    Send,
    anthropic_error_body,
    openai_error_body,
)

if TYPE_CHECKING:
    from .server_state import ServerState

__all__ = ["CompletionsEndpoint", "ModelsEndpoint"]


def _openai_error(status: int, message: str, code: str | None = None,
                  headers: tuple[tuple[str, str], ...] = ()) -> JsonResponse:
    return JsonResponse(status, openai_error_body(status, message, code=code), headers)


class ModelsEndpoint:
    """``GET /v1/models`` and ``GET /v1/models/{model_id}`` (an ASGI app).

    The same path serves OpenAI's and Anthropic's clients: a request with the
    ``anthropic-version`` header (the Anthropic SDKs send it) gets Anthropic's shapes
    (``{"type": "model", "id", "display_name", "created_at"}``, a page with
    ``has_more``) and errors.
    """

    def __init__(self, state: ServerState) -> None:
        self.state = state

    def entry(self) -> dict[str, Any]:
        """The served model as an OpenAI ``model`` object."""
        return {"id": self.state.model.model_id, "object": "model",
                "created": self.state.started, "owned_by": "toolwire"}

    def anthropic_entry(self) -> dict[str, Any]:
        """The served model as an Anthropic ``model`` object."""
        model_id = self.state.model.model_id
        created = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(self.state.started))
        return {"type": "model", "id": model_id, "display_name": model_id,
                "created_at": created}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """List the model, or describe the one named in the path."""
        asked = scope.get("path_params", {}).get("model_id")
        anthropic = header_value(scope["headers"], b"anthropic-version") is not None
        served = self.state.model.model_id
        if asked is None and anthropic:
            response = JsonResponse(200, {"data": [self.anthropic_entry()], "has_more": False,
                                          "first_id": served, "last_id": served})
        elif asked is None:
            response = JsonResponse(200, {"object": "list", "data": [self.entry()]})
        elif asked == served:
            response = JsonResponse(200, self.anthropic_entry() if anthropic else self.entry())
        else:
            message = f"the model {asked!r} does not exist here; this server serves {served!r}"
            response = JsonResponse(404, anthropic_error_body(404, message)) if anthropic \
                else _openai_error(404, message, "model_not_found")
        await response(scope, receive, send)


class CompletionsEndpoint(ModelRoute):
    """``POST /v1/chat/completions`` (an ASGI app)."""

    api = "chat_completions"

    def parse(self, data: Any, scope: Scope) -> tuple[CompletionRequest, Any]:
        """The chat-completions body (:func:`.completion_request.parse_completion_request`)."""
        return parse_completion_request(data, self.state.limits), None

    def writer(self, parsed: CompletionRequest, extra: Any, backend: Backend) -> CompletionBuilder:
        """A :class:`.completion_stream.CompletionBuilder` for this request."""
        return CompletionBuilder(
            "chatcmpl-" + uuid.uuid4().hex, int(time.time()), self.state.model.model_id,
            make_call_id=backend.make_call_id, stop=parsed.stop,
            parallel_tool_calls=parsed.parallel_tool_calls, include_usage=parsed.include_usage,
            legacy_functions=parsed.legacy_functions, logprobs=parsed.logprobs is not None)
