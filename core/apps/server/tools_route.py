"""``GET /v1/tools``: the tools the server's chats offer, and what runs them.

The answer is JSON::

    {"model": "<label>", "model_id": "<id>", "backend": "<backend name>",
     "read_only": <the server offers only read-only tools>,
     "approvals": <write calls wait for the client's approval>,
     "tools": [{"name", "description", "parameters", "read_only", "offered"}, ...]}

``read_only`` on a tool says it changes nothing; ``offered`` is false for a write
tool of a read-only server (listed, never offered). ``503`` while the model loads.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from .responses import JsonResponse, Receive, Scope, Send

if TYPE_CHECKING:
    from ...conversation.chat import Chat
    from .server_state import ServerState

__all__ = ["ToolsEndpoint", "tools_listing"]

logger = logging.getLogger("toolwire.apps.server")


def tools_listing(chat: Chat) -> list[dict[str, Any]]:
    """The tools of ``chat``, each with its schema, access and whether it is offered."""
    offered = {t.name for t in chat.dispatcher.offered_tools()}
    return [{"name": t.name, "description": t.description, "parameters": dict(t.parameters),
             "read_only": t.read_only, "offered": t.name in offered}
            for t in chat.registry]


class ToolsEndpoint:
    """The ``GET /v1/tools`` route (an ASGI app)."""

    def __init__(self, state: ServerState) -> None:
        self.state = state

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Describe the tools of a chat the server would make now."""
        await self._response()(scope, receive, send)

    def _response(self) -> JsonResponse:
        served = self.state.model
        loaded = served.loaded
        if loaded is None:
            return JsonResponse(503, {"error": f"the model is {served.state}"},
                                (("Retry-After", "5"),))
        try:
            chat = loaded.make_chat((), None)
        except Exception as exc:
            logger.exception("cannot start a chat")
            return JsonResponse(500, {"error": f"cannot start a chat: "
                                               f"{type(exc).__name__}: {exc}"})
        return JsonResponse(200, {
            "model": served.label, "model_id": served.model_id,
            "backend": str(getattr(chat.backend, "name", "") or type(chat.backend).__name__),
            "read_only": chat.read_only, "approvals": self.state.ask_approval,
            "tools": tools_listing(chat)})
