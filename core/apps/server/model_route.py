"""What every model API route does before its writer takes over: one door for three APIs.

``POST /v1/chat/completions``, ``POST /v1/responses`` and ``POST /v1/messages``
differ in their body and their answer's shape, not in the path between: the
model must be ready, the body is JSON read under the server's bounds, the model
asked for is the one served, the request takes its place in the one queue, its
call ids are rewritten to the template's form, and the same
:class:`~.generation.Generation` runs the turn. :class:`ModelRoute` is that
path; a route subclasses it with its parser (:meth:`ModelRoute.parse`), its
writer (:meth:`ModelRoute.writer`) and, unless it is OpenAI's, its error shape
(:meth:`ModelRoute.refuse`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Final

import attrs

from ...vocabulary.backend import Backend, ModelRequest, SamplingOverrides
from ...vocabulary.tool_choice import TOOL_CHOICE_MODES, named_tool_choice
from .call_id_forms import CallIdForm, with_template_ids
from .completion_request import CompletionRequest
from .generation import Generation, ReplyWriter, StreamAnswer
from .http_input import ClientGone, RequestError, read_json_request
from .http_input import require_json_media_type as require_json
from .model_queue import QueueFullError, QueueTicket
from .responses import ASGIApp, JsonResponse, Receive, Scope, Send, error_response

if TYPE_CHECKING:
    from .server_state import ServerState

__all__ = ["Admitted", "ModelRoute", "id_form", "model_request_for"]

_ID_FORMS: Final = "call_id_forms"


def model_request_for(parsed: CompletionRequest,
                      ids: CallIdForm | None = None) -> ModelRequest:
    """The backend turn a request asks for (whichever API it came through).

    ``tool_choice`` (``"none"`` offers no tools; ``"required"`` and a named tool
    are enforced by a local model's grammar) and ``parallel_tool_calls`` go to
    the backend, and so do ``temperature``, ``top_p``, ``top_k``, ``max_tokens``
    and ``seed`` (as :class:`~toolwire.SamplingOverrides`: each replaces the
    served model's own setting for this request; a local model's reply is capped
    at the smaller of the request's ``max_tokens`` and its own), the reply's
    format (a local model's grammar) and the reasoning switches (the template's).
    Stop strings are applied on the text (:mod:`.reply_assembly`). Call ids that
    do not fit ``ids``, the form the model's template wants, are rewritten to it
    (:mod:`.call_id_forms`). ``logprobs`` asks the backend for each token's log
    probability.
    """
    sampling = SamplingOverrides(temperature=parsed.temperature, top_p=parsed.top_p,
                                 top_k=parsed.top_k, max_tokens=parsed.max_tokens,
                                 seed=parsed.seed)
    messages = tuple(with_template_ids(parsed.messages, ids))
    choice = parsed.tool_choice
    named = choice not in TOOL_CHOICE_MODES  # a tool's name, checked against the tools
    return ModelRequest(messages, parsed.offered_tools,
                        tool_choice=named_tool_choice(choice) if named
                        else choice if parsed.offered_tools else "auto",
                        parallel_tool_calls=parsed.parallel_tool_calls
                        and parsed.max_calls != 1, sampling=sampling,
                        response_format=parsed.response_format, logprobs=parsed.logprobs,
                        reasoning=parsed.reasoning)


def id_form(state: ServerState, backend: Backend) -> CallIdForm | None:
    """The call-id form of ``backend``'s template (learnt once per backend)."""
    forms: dict[int, tuple[Backend, CallIdForm | None]] = state.caches.setdefault(_ID_FORMS, {})
    known = forms.get(id(backend))
    if known is None or known[0] is not backend:
        known = forms[id(backend)] = (backend, CallIdForm.of(backend.make_call_id))
    return known[1]


@attrs.frozen
class Admitted:
    """A request read, checked and in line for the model.

    :ivar parsed: the checked request.
    :ivar extra: what else the route's writer needs from the body.
    :ivar backend: the served model's backend.
    :ivar ticket: the request's place in line (release it when done).
    :ivar request: the backend turn it asks for.
    """

    parsed: CompletionRequest
    extra: Any
    backend: Backend
    ticket: QueueTicket
    request: ModelRequest


class ModelRoute:
    """A model API route (an ASGI app): parse, check, queue, generate, answer.

    :param state: the server's shared state.
    :param ping_interval: seconds of quiet after which a stream's writer pings
        (``None``: never; only writers with a ping use it).
    """

    api = ""
    """The API's name in ``/metrics`` (``chat_completions``, ``responses``, ``messages``)."""

    def __init__(self, state: ServerState, *, ping_interval: float | None = None) -> None:
        self.state = state
        self.ping_interval = ping_interval

    # -- what a route provides -----------------------------------------------------------

    def parse(self, data: Any, scope: Scope) -> tuple[CompletionRequest, Any]:
        """The checked request, and what else the route's writer needs from the body.

        :raises RequestError: the body is wrong (its field named).
        """
        raise NotImplementedError

    def writer(self, parsed: CompletionRequest, extra: Any, backend: Backend) -> ReplyWriter:
        """The writer of this request's answer."""
        raise NotImplementedError

    def refuse(self, scope: Scope, error: RequestError,
               headers: tuple[tuple[str, str], ...] = ()) -> JsonResponse:
        """``error`` in the route's shape: OpenAI's error object unless the API has its own."""
        return error_response(scope["path"], error, headers)

    def check(self, parsed: CompletionRequest, backend: Backend) -> None:
        """Refuse what the backend cannot do before queueing (``logprobs``...).

        :raises RequestError: the request asks what the backend cannot give.
        """
        if parsed.logprobs is not None and not getattr(backend, "token_logprobs", False):
            raise RequestError(400, f"logprobs: the {backend.name} backend this server runs "
                                    "does not give token log probabilities (a local llama.cpp "
                                    "model does)", param="logprobs",
                               code="logprobs_unsupported")

    # -- the path ------------------------------------------------------------------------

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Answer one request: a stream of events or one body."""
        response = await self.respond(scope, receive)
        await response(scope, receive, send)

    async def read(self, scope: Scope, receive: Receive) -> tuple[Any, Any]:
        """The request's JSON body, read under the server's bounds and parsed
        (:meth:`parse`) off the event loop (:func:`.http_input.read_json_request`).

        :raises RequestError: ``415``, ``413``, ``408``, ``400``, or from :meth:`parse`.
        :raises ClientGone: the client left before its body arrived.
        """
        require_json(scope["headers"])
        return await read_json_request(receive, scope["headers"], self.state.limits,
                                       lambda data: self.parse(data, scope))

    def unavailable(self, scope: Scope) -> JsonResponse | None:
        """The answer while the model is not ready (``503``, retry later), else ``None``."""
        model = self.state.model
        if model.loaded is not None:
            return None
        return self.refuse(scope, RequestError(503, f"the model is {model.state}; try again "
                                                    "shortly", code="model_loading"),
                           (("Retry-After", "5"),))

    def check_model(self, asked: str) -> None:
        """Refuse a model other than the one served (``404``).

        :raises RequestError: ``404`` naming ``model``.
        """
        served = self.state.model.model_id
        if asked != served:
            raise RequestError(404, f"the model {asked!r} does not exist here; this server "
                                    f"serves {served!r}", param="model", code="model_not_found")

    async def admit(self, scope: Scope, receive: Receive) -> Admitted | ASGIApp:
        """Read, check and queue the request: its place in line, or the refusal to send."""
        waiting = self.unavailable(scope)
        if waiting is not None:
            return waiting
        state = self.state
        try:
            parsed, extra = await self.read(scope, receive)
            self.check_model(parsed.model)
            backend = state.model.backend()
            self.check(parsed, backend)
            ticket = state.queue.join()
        except ClientGone:
            return JsonResponse(400, {})  # never sent: nobody listens
        except RequestError as exc:
            return self.refuse(scope, exc)
        except QueueFullError as exc:
            return self.refuse(scope, RequestError(429, str(exc), code="queue_full"),
                               (("Retry-After", "1"),))
        return Admitted(parsed, extra, backend, ticket,
                        model_request_for(parsed, id_form(state, backend)))

    async def respond(self, scope: Scope, receive: Receive) -> ASGIApp:
        """The answer to one request (checked, queued and generated)."""
        admitted = await self.admit(scope, receive)
        if not isinstance(admitted, Admitted):
            return admitted
        parsed = admitted.parsed
        generation = Generation(self.state, admitted.ticket, admitted.request,
                                self.writer(parsed, admitted.extra, admitted.backend), self.api)
        if parsed.stream:
            return StreamAnswer(generation, self.ping_interval)
        return await generation.complete(receive)
