"""``POST /v1/responses``: OpenAI's Responses API on the served model (Codex CLI, the Agents SDK).

Stateless: every request carries its conversation (``store`` is accepted and
nothing is kept; ``previous_response_id`` is a ``400`` that says so). The body is
read by :mod:`.responses_request`, the turn runs on the same path as chat
completions (:class:`.model_route.ModelRoute`), and :mod:`.responses_stream`
writes the response. ``GET /v1/responses/{id}`` answers ``404``: no response is
stored.
"""

from __future__ import annotations

import uuid
from typing import Any

from ...vocabulary.backend import Backend
from .completion_request import CompletionRequest
from .model_route import ModelRoute
from .responses import JsonResponse, Receive, Scope, Send, openai_error_body
from .responses_request import ResponsesRequest, parse_responses_request
from .responses_stream import ResponseWriter

__all__ = ["ResponsesEndpoint", "StoredResponseEndpoint"]


class ResponsesEndpoint(ModelRoute):
    """``POST /v1/responses`` (an ASGI app)."""

    api = "responses"

    def parse(self, data: Any, scope: Scope) -> tuple[CompletionRequest, ResponsesRequest]:
        """The Responses body (:func:`.responses_request.parse_responses_request`)."""
        return parse_responses_request(data, self.state.limits)

    def writer(self, parsed: CompletionRequest, extra: ResponsesRequest,
               backend: Backend) -> ResponseWriter:
        """A :class:`.responses_stream.ResponseWriter` for this request."""
        return ResponseWriter("resp_" + uuid.uuid4().hex, self.state.model.model_id,
                              names=extra.names, echo=extra.echo,
                              ignored_tools=extra.ignored_tools,
                              make_call_id=backend.make_call_id, stop=parsed.stop,
                              parallel_tool_calls=parsed.parallel_tool_calls,
                              max_calls=parsed.max_calls, logprobs=parsed.logprobs is not None)


class StoredResponseEndpoint:
    """``GET`` and ``DELETE /v1/responses/{id}``: ``404``, nothing is stored."""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        asked = scope.get("path_params", {}).get("response_id", "")
        body = openai_error_body(404, f"no response {asked!r} is stored here: this server "
                                      "keeps no responses (send the whole conversation as "
                                      "input)", param="response_id", code="not_found")
        await JsonResponse(404, body)(scope, receive, send)
