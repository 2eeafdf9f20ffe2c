"""Server-sent events framing, shared by the toolwire stream and the model APIs' streams.

Payloads are JSON written with real UTF-8 characters; a lone surrogate (which a
model's JSON escapes can produce) is written as its ``\\uXXXX`` escape, so the
bytes are always valid UTF-8 and the JSON always reads back to the same text.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any, Final

__all__ = ["DONE_FRAME", "SSE_HEADERS", "data_frame", "event_frame", "json_text"]

SSE_HEADERS: Final[tuple[tuple[bytes, bytes], ...]] = (
    (b"content-type", b"text/event-stream; charset=utf-8"),
    (b"cache-control", b"no-cache"),
    (b"x-accel-buffering", b"no"),
)
"""The response headers of every event stream (no proxy buffering)."""

DONE_FRAME: Final = b"data: [DONE]\n\n"
"""The OpenAI stream's last frame."""

_LONE_SURROGATE = re.compile("[\ud800-\udfff]")


def json_text(value: Any, *, compact: bool = False) -> str:
    """``value`` as JSON text with UTF-8 characters and lone surrogates escaped."""
    text = json.dumps(value, ensure_ascii=False,
                      separators=(",", ":") if compact else (", ", ": "))
    if _LONE_SURROGATE.search(text):
        text = _LONE_SURROGATE.sub(lambda m: f"\\u{ord(m.group()):04x}", text)
    return text


def event_frame(payload: Mapping[str, Any], *, compact: bool = False) -> bytes:
    """An event as a named SSE frame: ``event: <type>`` then ``data: <JSON>`` (the
    toolwire stream's, and the Responses and Messages APIs' with ``compact`` JSON)."""
    return (f"event: {payload.get('type', 'message')}\n"
            f"data: {json_text(payload, compact=compact)}\n\n").encode()


def data_frame(payload: Mapping[str, Any]) -> bytes:
    """An unnamed SSE frame with compact JSON data (the OpenAI stream's form)."""
    return f"data: {json_text(payload, compact=True)}\n\n".encode()
