"""``POST /v1/chat/{chat_id}/approval``: the client's answer to a write call that waits
for it (:mod:`.approvals` says how a reply waits)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from .approvals import parse_approval_answer
from .http_input import ClientGone, RequestError, decode_json_body, read_body
from .http_input import require_json_media_type as require_json
from .responses import JsonResponse, Receive, Scope, Send

if TYPE_CHECKING:
    from .server_state import ServerState

__all__ = ["ApprovalEndpoint"]


class ApprovalEndpoint:
    """The ``POST /v1/chat/{chat_id}/approval`` route (an ASGI app)."""

    def __init__(self, state: ServerState) -> None:
        self.state = state

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Answer the call named in the body, of the reply named in the path."""
        await (await self._response(scope, receive))(scope, receive, send)

    async def _response(self, scope: Scope, receive: Receive) -> JsonResponse:
        limits = self.state.limits
        try:
            require_json(scope["headers"])
            body = await read_body(receive, scope["headers"],
                                   limit=min(limits.approval_body_bytes, limits.max_body_bytes),
                                   timeout=limits.body_timeout)
            call_id, answer = parse_approval_answer(
                decode_json_body(body, max_depth=limits.max_json_depth))
        except ClientGone:
            return JsonResponse(400, {"error": "the client went away"})
        except RequestError as exc:
            return JsonResponse(exc.status, {"error": exc.message})
        except ValueError as exc:
            return JsonResponse(400, {"error": str(exc)})
        if not self.state.ask_approval:
            return JsonResponse(404, {"error": "this server does not ask for approvals "
                                               "(toolwire serve --approvals)"})
        approvals = self.state.approvals.get(scope["path_params"]["chat_id"])
        if approvals is None or not approvals.answer(call_id, answer):
            return JsonResponse(404, {"error": "no call of a reply in progress with these ids "
                                               "waits for approval"})
        return JsonResponse(200, {"answered": answer.value})
