"""An MCP tool result as the text the model reads.

Text blocks pass through. Structured content is added as JSON, unless a text
block already says the same (servers are asked to repeat structured content as
text, and the SDK's servers wrap a plain value as ``{"result": value}``). Every
other block is described in one bracketed line (kind, media type, size, URI), so
the model knows it was there even though it cannot see an image or hear audio;
a text resource embedded in the result is included with its URI. A result
longer than ``max_result_chars`` is cut, with a note saying how much was left out (the
two together within it, so the dispatcher's own cut never hides the note); so is a
result the transport already cut while reading it (its ``_meta`` says so, see
:mod:`.message_cut`), with a note saying how large the server's answer was.

The result is untrusted: anything it holds is read defensively (by attribute,
with defaults), so a block of an unknown kind is described, never an error.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from toolwire.plugin_api import McpLimits

from .message_cut import CUT_META_KEY

__all__ = ["cut_while_read", "render_content", "render_result"]

_EMPTY = "(the MCP tool returned no content)"
_NOTHING = object()


def render_result(result: Any, *, max_chars: int = McpLimits().max_result_chars) -> str:
    """The text of a ``CallToolResult`` (its ``content`` and ``structured_content``)."""
    content = getattr(result, "content", None) or []
    structured = getattr(result, "structured_content", None)
    parts = [render_content(block) for block in content]
    if structured is not None and not _said_in_text(content, structured):
        parts.append("structured content: " + _json(structured))
    text = "\n".join(p for p in parts if p) or _EMPTY
    read_cut = cut_while_read(result)
    if read_cut is None:
        return _cut(text, max_chars)
    size, limit = read_cut
    note = (f"\n[result cut: the MCP server's answer was {size:,} bytes, more than the "
            f"{limit:,} bytes read of one message; only its first part is shown]")
    return text[:max(0, max_chars - len(note))] + note


def cut_while_read(result: Any) -> tuple[int, int] | None:
    """``(answer bytes, bound)`` when the transport cut the result while reading it."""
    meta = getattr(result, "meta", None)
    mark = meta.get(CUT_META_KEY) if isinstance(meta, dict) else None
    if not isinstance(mark, dict):
        return None
    size, limit = mark.get("bytes"), mark.get("limit")
    if isinstance(size, bool) or isinstance(limit, bool) or not isinstance(size, int) \
            or not isinstance(limit, int) or size < 0 or limit < 0:
        return None
    return size, limit


def render_content(block: Any) -> str:
    """One content block as text (described when it is not text)."""
    kind = str(getattr(block, "type", "") or "unknown")
    if kind == "text":
        return str(getattr(block, "text", ""))
    if kind in ("image", "audio"):
        return (f"[{kind}: {getattr(block, 'mime_type', None) or 'unknown type'}, "
                f"{_decoded_size(getattr(block, 'data', ''))} bytes, not shown]")
    if kind == "resource_link":
        return _describe_link(block)
    if kind == "resource":
        return _describe_resource(getattr(block, "resource", None))
    return f"[{kind} content, not shown]"


def _describe_link(block: Any) -> str:
    words = [f"[resource link: {getattr(block, 'name', '') or '(unnamed)'}",
             f"<{getattr(block, 'uri', '')}>"]
    mime = getattr(block, "mime_type", None)
    if mime:
        words.append(f"({mime})")
    description = getattr(block, "description", None)
    text = " ".join(words)
    return f"{text}: {description}]" if description else f"{text}]"


def _describe_resource(resource: Any) -> str:
    uri = getattr(resource, "uri", "")
    mime = getattr(resource, "mime_type", None)
    label = f"<{uri}>" + (f" ({mime})" if mime else "")
    text = getattr(resource, "text", None)
    if isinstance(text, str):
        return f"[resource {label}]\n{text}"
    return f"[binary resource {label}: {_decoded_size(getattr(resource, 'blob', ''))} bytes, " \
           "not shown]"


def _decoded_size(data: Any) -> int:
    """Bytes a base64 string decodes to (without decoding it)."""
    if not isinstance(data, str):
        return 0
    stripped = data.strip()
    return max(0, len(stripped) * 3 // 4 - stripped[-2:].count("="))


def _said_in_text(content: Sequence[Any], structured: Any) -> bool:
    """Whether the structured content repeats what the text blocks say: it is a text's
    value (the text itself, or the JSON it holds), or an object of one member holding
    that value (``{"result": ...}`` from the SDK's servers, ``{"content": ...}`` from the
    official filesystem server); the texts are read one by one and joined."""
    texts = [str(getattr(block, "text", "")) for block in content
             if getattr(block, "type", None) == "text"]
    inner = next(iter(structured.values())) if isinstance(structured, dict) \
        and len(structured) == 1 else _NOTHING
    for text in [*texts, "\n".join(texts)] if len(texts) > 1 else texts:
        readings: list[Any] = [text]
        try:
            readings.append(json.loads(text))
        except (ValueError, RecursionError):
            pass
        if any(structured == value or inner == value for value in readings):
            return True
    return False


def _json(value: Any) -> str:
    try:
        return json.dumps(value, ensure_ascii=False, default=str)
    except (TypeError, ValueError):
        return str(value)


def _cut(text: str, max_chars: int) -> str:
    """``text``, or its start and a note, together within ``max_chars`` (so a later cut
    at the same bound, the dispatcher's, leaves the note where the model reads it)."""
    if len(text) <= max_chars:
        return text
    note = f"\n[result cut: {len(text)} more characters not shown]"  # the longest it can be
    keep = max(0, max_chars - len(note))
    return text[:keep] + f"\n[result cut: {len(text) - keep} more characters not shown]"
