"""A ``POST /v1/chat`` request's own settings: read-only, and which tools to offer.

A client (the dashboard's per-conversation settings) may narrow what the
server's chat offers for one reply, never widen it:

* ``"read_only": true`` offers and runs only read-only tools (a server started
  with ``--read-only`` stays read-only whatever the request says);
* ``"tool_names": [...]`` offers only the named tools (names the server does not
  have are ignored, so a conversation saved against another server still works;
  ``[]`` offers none).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import attrs

from ...vocabulary.tools import ToolRegistry

if TYPE_CHECKING:
    from ...conversation.chat import Chat

__all__ = ["ChatOptions", "apply_chat_options", "parse_chat_options"]


@attrs.frozen
class ChatOptions:
    """What one request asks of its chat.

    :ivar read_only: offer and run only read-only tools.
    :ivar tool_names: offer only these tools; ``None`` offers all.
    """

    read_only: bool = False
    tool_names: frozenset[str] | None = None


def parse_chat_options(data: Mapping[str, Any]) -> ChatOptions:
    """Read ``read_only`` and ``tool_names`` from a ``/v1/chat`` body (both optional).

    :raises ValueError: ``read_only`` is not a boolean, or ``tool_names`` is not a
        list of strings.
    """
    read_only = data.get("read_only", False)
    if not isinstance(read_only, bool):
        raise ValueError('"read_only" must be true or false')
    names = data.get("tool_names")
    if names is None:
        return ChatOptions(read_only)
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
        raise ValueError('"tool_names" must be a list of tool names')
    return ChatOptions(read_only, frozenset(names))


def apply_chat_options(chat: Chat, options: ChatOptions) -> None:
    """Narrow ``chat`` to what ``options`` ask (read-only, a subset of its tools)."""
    if options.read_only:
        chat.read_only = True
    if options.tool_names is not None:
        kept = ToolRegistry(t for t in chat.registry if t.name in options.tool_names)
        chat.registry = kept
        chat.dispatcher.registry = kept
