"""An MCP message over the size bound, cut while it is read.

A server's message is untrusted input of any size: a tool that returns 400 MB
must neither be held in memory whole nor parsed whole. So the transports read
each message (a line on stdio, a body or an event over HTTP) through a
:class:`MessageReader` that keeps at most ``limit`` bytes of it, plus its last
few kilobytes, and only counts the rest. A message within the bound passes as it
came. One over it becomes an :class:`Oversized` record, and :func:`cut_message`
turns that into the message the session reads instead:

* a tool result keeps what its first ``limit`` bytes hold (and the members that
  end it, such as ``isError``, when they come after the large one): every content block
  that is whole or can be closed (a text cut mid-string keeps its first part, and
  is a text block even when the cut came before its ``type``, which the Python
  SDK writes after the text),
  the structured content read so far, and ``_meta["toolwire/cut"]`` saying how
  large the answer was, which :func:`~.results.render_result` turns into the
  ``[result cut ...]`` note the model reads;
* any other answer (a tool listing, an error) becomes a JSON-RPC error naming the
  bound, so the request that asked for it fails clearly instead of waiting;
* a message that answers no request (a notification, a request from the server)
  is dropped: nothing waits for it, and toolwire serves no server requests.

The first part is read as JSON text that stops at an arbitrary byte: values
that are whole are decoded by the C decoder in one call, and only the objects
and arrays still open at the cut are walked in Python, within a number of steps.
Which request an answer belongs to is its ``id``: read from the first part, or,
when the server writes it after the result (the TypeScript SDK does), from the
members that end the message. This module imports only the standard library.
"""

from __future__ import annotations

import codecs
import json
import re
from collections.abc import Callable, Iterator
from typing import Any

import attrs

__all__ = ["CUT_META_KEY", "TAIL_BYTES", "MessageReader",
           "Oversized", "complete_prefix", "cut_message", "ending_members"]

TAIL_BYTES = 4096
"""The end of an oversized message kept to find members written after the large one."""
CUT_META_KEY = "toolwire/cut"
"""The ``_meta`` key of a tool result that was cut while it was read."""

_MAX_DEPTH = 64
_MAX_STEPS = 100_000
_MAX_ENDING_TRIES = 64
_MAX_ERROR_CHARS = 2000
_INTERNAL_ERROR = -32603
_MISSING = object()
_DECODER = json.JSONDecoder(strict=False)
_SPACE = re.compile(r"[ \t\n\r]*")
_STRING = re.compile(r'"[^"\\]*+(?:\\.[^"\\]*+)*+"', re.DOTALL)  # possessive: no backtracking
_SPLIT_ESCAPE = re.compile(r"\\(?:u[0-9a-fA-F]{0,3}|u[dD][89abAB][0-9a-fA-F]{2})?\Z")
"""An escape the cut split: ``\\``, ``\\u`` to ``\\u123``, or a high surrogate without its pair."""
_LONGEST_ESCAPE = 6
_AFTER_NUMBER = frozenset(" \t\n\r,]}")
"""What may follow a whole number (not the end of the text: the number may go on)."""


@attrs.frozen
class Oversized:
    """A message that was longer than the bound.

    :ivar head: its first ``limit`` bytes.
    :ivar tail: its last :data:`TAIL_BYTES` bytes.
    :ivar size: how many bytes it had.
    :ivar limit: the bound it passed.
    """

    head: bytes
    tail: bytes
    size: int
    limit: int


class MessageReader:
    """One message's bytes, fed in pieces: kept up to ``limit``, then only counted.

    Memory stays at ``limit`` plus :data:`TAIL_BYTES` whatever the message's size,
    and each byte is copied a bounded number of times (the pieces are joined once).
    """

    def __init__(self, limit: int) -> None:
        if limit < 1:
            raise ValueError("the message bound must be at least one byte")
        self.limit = limit
        self._reset()

    def _reset(self) -> None:
        self._parts: list[bytes] = []
        self._kept = 0
        self._tail = b""
        self.size = 0

    @property
    def empty(self) -> bool:
        """Whether nothing was fed since the last :meth:`finish`."""
        return self.size == 0

    def feed(self, piece: bytes) -> None:
        """Add the next bytes of the message."""
        if not piece:
            return
        self.size += len(piece)
        room = self.limit - self._kept
        if room > 0:
            kept = piece if len(piece) <= room else piece[:room]
            self._parts.append(kept)
            self._kept += len(kept)
        if self.size > self.limit:
            self._tail = piece[-TAIL_BYTES:] if len(piece) >= TAIL_BYTES \
                else (self._tail + piece)[-TAIL_BYTES:]

    def finish(self) -> bytes | Oversized:
        """The whole message (within the bound), or what was kept of it; then start anew."""
        if self.size <= self.limit:
            whole = b"".join(self._parts)
            self._reset()
            return whole
        over = Oversized(head=b"".join(self._parts), tail=self._tail, size=self.size,
                         limit=self.limit)
        self._reset()
        return over


# -- reading JSON that stops at an arbitrary byte ------------------------------------------


def complete_prefix(text: str) -> Any:
    """The JSON value the start ``text`` of a document holds, closed where it stops.

    Whole values are kept; an object or array open at the end is closed after its
    last usable member; a string open at the end keeps its first part; a number,
    literal or key cut in the middle is left out. Invalid text counts as the end.
    Returns ``None`` when not even the start of a value is there.
    """
    value, _, _ = _value(text, 0, 0, iter(range(_MAX_STEPS)))
    return None if value is _MISSING else value


def _value(text: str, pos: int, depth: int, steps: Iterator[int]) -> tuple[Any, int, bool]:
    """``(value or _MISSING, end, whole)`` for the value starting at ``pos``."""
    pos = _SPACE.match(text, pos).end()  # type: ignore[union-attr]
    if pos >= len(text) or next(steps, -1) < 0:
        return _MISSING, len(text), False
    try:
        value, end = _DECODER.raw_decode(text, pos)
        if not isinstance(value, int | float) or isinstance(value, bool) or \
                text[end:end + 1] in _AFTER_NUMBER:
            return value, end, True
        return _MISSING, len(text), False  # a number the cut may have ended early: 1e, 10
    except json.JSONDecodeError as exc:
        failure: int | None = exc.pos if exc.msg.startswith("Invalid") else None
    except (ValueError, RecursionError):
        failure = None
    opening = text[pos]
    if opening == '"':
        # open at the end, or an escape the cut split; a bad escape before the end is not
        split = failure is None or failure >= len(text) - _LONGEST_ESCAPE
        return (_open_string(text, pos) if split else _MISSING), len(text), False
    if depth >= _MAX_DEPTH:
        return _MISSING, len(text), False
    if opening == "{":
        return _open_object(text, pos + 1, depth + 1, steps)
    if opening == "[":
        return _open_array(text, pos + 1, depth + 1, steps)
    return _MISSING, len(text), False


def _open_object(text: str, pos: int, depth: int, steps: Iterator[int]) -> tuple[Any, int, bool]:
    found: dict[str, Any] = {}
    while next(steps, -1) >= 0:
        pos = _SPACE.match(text, pos).end()  # type: ignore[union-attr]
        if pos < len(text) and text[pos] == ",":
            pos += 1
            continue
        key = _STRING.match(text, pos)
        if key is None:
            break
        colon = _SPACE.match(text, key.end()).end()  # type: ignore[union-attr]
        if colon >= len(text) or text[colon] != ":":
            break
        value, pos, whole = _value(text, colon + 1, depth, steps)
        if value is not _MISSING:
            found[_DECODER.decode(key.group())] = value
        if not whole:
            break
    return found, len(text), False


def _open_array(text: str, pos: int, depth: int, steps: Iterator[int]) -> tuple[Any, int, bool]:
    found: list[Any] = []
    while next(steps, -1) >= 0:
        pos = _SPACE.match(text, pos).end()  # type: ignore[union-attr]
        if pos < len(text) and text[pos] == ",":
            pos += 1
            continue
        value, pos, whole = _value(text, pos, depth, steps)
        if value is not _MISSING:
            found.append(value)
        if not whole:
            break
    return found, len(text), False


def _open_string(text: str, pos: int) -> Any:
    """The first part of the string the text ends inside (``_MISSING`` for a bad one)."""
    raw = text[pos + 1:]
    for _ in range(2):  # a split escape, then the high surrogate it was the pair of
        split = _SPLIT_ESCAPE.search(raw, max(0, len(raw) - _LONGEST_ESCAPE))
        if split is None:
            break
        first = split.start()
        if (first - len(raw[:first].rstrip("\\"))) % 2:
            break  # the backslash that starts it is itself escaped: a whole "\\"
        raw = raw[:first]
    try:
        return _DECODER.decode(f'"{raw}"')
    except ValueError:
        return _MISSING


def ending_members(text: str) -> tuple[dict[str, Any], str]:
    """The members that end the object ``text`` ends with, and the text before them.

    ``...},"jsonrpc":"2.0","id":7}`` gives ``{"jsonrpc": "2.0", "id": 7}`` and the
    text up to ``}``. Members are tried from the last comma leftwards: a suffix
    that reads as one whole object ending where ``text`` ends holds members of the
    outermost object (one that started deeper would close too many). The leftmost
    such suffix, within a few tries, wins.
    """
    text = text.rstrip()
    if not text.endswith("}"):
        return {}, text
    members: dict[str, Any] = {}
    start = len(text) - 1
    position = start
    for _ in range(_MAX_ENDING_TRIES):
        comma = text.rfind(",", 0, position)
        if comma < 0:
            break
        position = comma
        try:
            found = json.loads("{" + text[comma + 1:])
        except (ValueError, RecursionError):
            continue
        if isinstance(found, dict):
            members, start = found, comma
    return members, text[:start]


# -- the message the session reads instead -------------------------------------------------


def _request_id(value: Any) -> int | str | None:
    if isinstance(value, bool) or not isinstance(value, int | str):
        return None
    return value


def _decoded_head(head: bytes) -> str:
    """The head as text, without the character the cut may have split."""
    return codecs.getincrementaldecoder("utf-8")("replace").decode(head, final=False)


def cut_message(over: Oversized, *, request_id: int | str | None = None,
                usable_block: Callable[[Any], bool] = lambda block: True,
                ) -> dict[str, Any] | None:
    """The JSON-RPC message (a dict) that stands for an oversized one, or ``None``.

    :param request_id: the request this message answers, when the transport knows
        it (an HTTP POST's); otherwise it is read from the message.
    :param usable_block: whether a content block (as decoded) is a valid one; the
        others (the last block may be cut before its required fields) are left out.
    """
    start = complete_prefix(_decoded_head(over.head))
    if not isinstance(start, dict):
        start = {}
    ending, before = ending_members(over.tail.decode("utf-8", "replace"))
    if "method" in start or "method" in ending:
        return None  # a notification or a server's request: nobody waits for it
    answers = _request_id(request_id if request_id is not None
                          else start.get("id", ending.get("id")))
    if answers is None:
        return None
    error = start.get("error", ending.get("error"))
    if isinstance(error, dict) or "result" not in start:
        return _error_answer(answers, error, over)
    result = start["result"]
    if not isinstance(result, dict) or not ({"content", "structuredContent"} & result.keys()):
        return _error_answer(answers, None, over)
    result_ending, _ = ending_members(before) if "result" not in ending else ({}, "")
    return {"jsonrpc": "2.0", "id": answers,
            "result": _cut_tool_result(result, result_ending, over, usable_block)}


def _cut_tool_result(result: dict[str, Any], result_ending: dict[str, Any], over: Oversized,
                     usable_block: Callable[[Any], bool]) -> dict[str, Any]:
    content = result.get("content")
    blocks = [dict(b) for b in content if isinstance(b, dict)] \
        if isinstance(content, list) else []
    if blocks and "type" not in blocks[-1] and isinstance(blocks[-1].get("text"), str):
        blocks[-1]["type"] = "text"  # the block the cut split, before its type (Python's order)
    cut = {**result_ending, **result, "content": [b for b in blocks if usable_block(b)]}
    if not isinstance(cut.get("isError", False), bool):
        del cut["isError"]
    cut.setdefault("resultType", "complete")  # the protocol's meaning of an absent one
    meta = cut.get("_meta")
    cut["_meta"] = {**(meta if isinstance(meta, dict) else {}), CUT_META_KEY: {
        "bytes": over.size, "read": len(over.head), "limit": over.limit}}
    return cut


def _error_answer(answers: int | str, error: Any, over: Oversized) -> dict[str, Any]:
    why = (f"the MCP server's answer was {over.size:,} bytes, more than the {over.limit:,} "
           "bytes toolwire reads of one message (max_message_bytes); only a tool result "
           "is cut to fit, any other answer is refused")
    code = _INTERNAL_ERROR
    if isinstance(error, dict):
        if isinstance(error.get("code"), int) and not isinstance(error["code"], bool):
            code = error["code"]
        message = error.get("message")
        if isinstance(message, str) and message:
            why = f"{message[:_MAX_ERROR_CHARS]} [{why}]"
    return {"jsonrpc": "2.0", "id": answers, "error": {"code": code, "message": why}}
