"""Bounded messages as the SDK's session reads them.

The transports hand :mod:`.message_cut` the bytes of each message; this module
turns what comes out into what the SDK expects: a ``SessionMessage`` (stdio), or
the JSON text of the message that stands for a cut one (HTTP, where the SDK
parses the body itself). A cut tool result keeps only the content blocks the SDK
accepts, so the last block, cut before its required fields, never makes the
whole result unreadable.
"""

from __future__ import annotations

import json
from typing import Any

import mcp_types
from mcp.shared.message import SessionMessage
from pydantic import ValidationError

from .message_cut import Oversized, cut_message

__all__ = ["cut_json", "read_message", "usable_block"]

def usable_block(block: Any) -> bool:
    """Whether a decoded content block is one the SDK accepts in a tool result."""
    try:
        mcp_types.CallToolResult.model_validate({"content": [block]}, by_name=False)
    except ValidationError:
        return False
    return True


def cut_json(over: Oversized, *, request_id: int | str | None = None) -> bytes | None:
    """The JSON text of the message standing for ``over``, or ``None`` (drop it)."""
    cut = cut_message(over, request_id=request_id, usable_block=usable_block)
    if cut is None:
        return None
    return json.dumps(cut, ensure_ascii=False, separators=(",", ":")).encode("utf-8")


def read_message(data: bytes | Oversized) -> SessionMessage | Exception | None:
    """One message as the session reads it: parsed, cut, an exception, or ``None`` (skip)."""
    if isinstance(data, Oversized):
        cut = cut_message(data, usable_block=usable_block)
        if cut is None:
            return None
        try:
            return SessionMessage(mcp_types.jsonrpc_message_adapter.validate_python(
                cut, by_name=False))
        except ValidationError as exc:
            return exc
    if not data.strip():
        return None
    try:
        return SessionMessage(mcp_types.jsonrpc_message_adapter.validate_json(data,
                                                                               by_name=False))
    except ValueError as exc:
        return exc
