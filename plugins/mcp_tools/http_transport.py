"""Streamable HTTP with each message bounded while it is read.

The SDK reads a JSON answer whole (``response.aread()``) and bounds an SSE event
only by refusing it, which fails the whole stream. So toolwire gives the SDK an
HTTP client of its own whose transport wraps every response body before the SDK
sees it:

* a JSON body is one message, read through a
  :class:`~.message_cut.MessageReader` (at most ``max_message_bytes`` kept);
* an event stream is split into events (a blank line ends one; ``\\r\\n`` and
  ``\\r`` line ends are read as ``\\n``), each read the same way;
* a message over the bound is replaced by the one
  :func:`~.message_cut.cut_message` makes: the first part of a tool result,
  marked as cut, or an error for any other answer to the POST's request. A cut
  event that answers no request (the server's own stream) is dropped.

Compression would let a small body grow without bound after this check, so
requests ask for ``Accept-Encoding: identity``, and a compressed answer is
refused (an error for the request it answers).
"""

from __future__ import annotations

import codecs
import json
from collections.abc import AsyncIterator, Mapping

import httpx2

from .message_cut import MessageReader, Oversized
from .session_messages import cut_json

__all__ = ["BoundingTransport", "bounded_http_client"]

_CONNECT_TIMEOUT = 30.0
_READ_TIMEOUT = 300.0  # a server may hold an event stream open between messages
_MAX_REQUEST_ID_BYTES = 1024 * 1024


def bounded_http_client(headers: Mapping[str, str], *, max_message_bytes: int
                        ) -> httpx2.AsyncClient:
    """An HTTP client for the SDK whose responses are bounded per message."""
    return httpx2.AsyncClient(
        headers=dict(headers), timeout=httpx2.Timeout(_CONNECT_TIMEOUT, read=_READ_TIMEOUT),
        transport=BoundingTransport(httpx2.AsyncHTTPTransport(), max_message_bytes))


class BoundingTransport(httpx2.AsyncBaseTransport):
    """Wraps ``inner``: JSON bodies and SSE events cut at ``limit`` bytes while read."""

    def __init__(self, inner: httpx2.AsyncBaseTransport, limit: int) -> None:
        self._inner = inner
        self._limit = limit

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        request.headers["Accept-Encoding"] = "identity"
        answers = _request_id(request)
        response = await self._inner.handle_async_request(request)
        kind = response.headers.get("content-type", "").lower()
        stream: httpx2.AsyncByteStream
        encoding = response.headers.get("content-encoding", "identity").strip().lower()
        if encoding not in ("", "identity"):
            await response.aclose()
            body = _refusal(answers, f"the MCP server compressed its answer ({encoding}) "
                                     "although toolwire asked it not to")
            return httpx2.Response(response.status_code, request=request, content=body,
                                   headers={"content-type": "application/json"})
        if kind.startswith("application/json"):
            stream = _JSONBody(_stream(response), self._limit, answers)
        elif kind.startswith("text/event-stream"):
            stream = _EventStream(_stream(response), self._limit, answers)
        else:
            return response
        headers = [(name, value) for name, value in response.headers.raw
                   if name.lower() != b"content-length"]
        return httpx2.Response(response.status_code, headers=headers, stream=stream,
                               extensions=response.extensions, request=request)

    async def aclose(self) -> None:
        await self._inner.aclose()


def _stream(response: httpx2.Response) -> httpx2.AsyncByteStream:
    stream = response.stream
    assert isinstance(stream, httpx2.AsyncByteStream)
    return stream


def _request_id(request: httpx2.Request) -> int | str | None:
    """The id of the JSON-RPC request a POST carries (``None`` for anything else)."""
    if request.method != "POST":
        return None
    try:
        body = request.content
    except httpx2.RequestNotRead:
        return None
    if len(body) > _MAX_REQUEST_ID_BYTES:
        return None
    try:
        message = json.loads(body)
    except ValueError:
        return None
    found = message.get("id") if isinstance(message, dict) and "method" in message else None
    return found if isinstance(found, int | str) and not isinstance(found, bool) else None


def _refusal(answers: int | str | None, why: str) -> bytes:
    if answers is None:
        return b""
    return json.dumps({"jsonrpc": "2.0", "id": answers,
                       "error": {"code": -32603, "message": why}}).encode("utf-8")


class _JSONBody(httpx2.AsyncByteStream):
    """A JSON body: one message, within the bound or cut."""

    def __init__(self, inner: httpx2.AsyncByteStream, limit: int,
                 answers: int | str | None) -> None:
        self._inner = inner
        self._limit = limit
        self._answers = answers

    async def __aiter__(self) -> AsyncIterator[bytes]:
        reader = MessageReader(self._limit)
        async for chunk in self._inner:
            reader.feed(chunk)
        data = reader.finish()
        if isinstance(data, Oversized):
            data = cut_json(data, request_id=self._answers) or b""
        if data:
            yield data

    async def aclose(self) -> None:
        await self._inner.aclose()


class _EventStream(_JSONBody):
    """An SSE stream, passed on event by event, each event within the bound or cut."""

    async def __aiter__(self) -> AsyncIterator[bytes]:
        self._event = MessageReader(self._limit)
        self._ended_line = False  # the event's last byte so far is a line end
        carried_cr = False
        async for chunk in self._inner:
            data, carried_cr = _unix_lines(chunk, carried_cr)
            for out in self._split(data):
                yield out
        for out in self._split(b"\n" if carried_cr else b""):
            yield out
        for out in self._finish():
            yield out

    def _split(self, data: bytes) -> list[bytes]:
        """Feed ``data`` (``\n`` line ends); the events it completes."""
        done: list[bytes] = []
        pos = 0
        if self._ended_line and data[:1] == b"\n":
            pos = 1
            done += self._finish()
        while (blank := data.find(b"\n\n", pos)) >= 0:
            self._event.feed(data[pos:blank + 1])
            pos = blank + 2
            done += self._finish()
        self._event.feed(data[pos:])
        if pos < len(data):
            self._ended_line = data.endswith(b"\n")
        elif pos:
            self._ended_line = False
        return done

    def _finish(self) -> list[bytes]:
        """The bytes of the event that just ended (with its blank line), if any."""
        if self._event.empty:
            return []
        data = self._event.finish()
        if isinstance(data, bytes):
            return [data + b"\n"] if data.strip() else []
        cut = _cut_event(data, self._answers)
        return [cut] if cut else []


def _unix_lines(chunk: bytes, carried_cr: bool) -> tuple[bytes, bool]:
    """``chunk`` with ``\\r\\n`` and ``\\r`` as ``\\n``; a final ``\\r`` waits for the next."""
    if carried_cr:
        chunk = b"\r" + chunk
    carry = chunk.endswith(b"\r")
    if carry:
        chunk = chunk[:-1]
    if b"\r" in chunk:
        chunk = chunk.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
    return chunk, carry


def _cut_event(over: Oversized, answers: int | str | None) -> bytes | None:
    """The event standing for an oversized one: its data's message, cut."""
    head = codecs.getincrementaldecoder("utf-8")("replace").decode(over.head, final=False)
    kind, event_id, data = "message", "", []
    for line in head.split("\n"):
        name, _, value = line.partition(":")
        value = value[1:] if value.startswith(" ") else value
        if name == "event":
            kind = value
        elif name == "id":
            event_id = value
        elif name == "data":
            data.append(value)
    if kind != "message" or not data:
        return None
    tail_lines = over.tail.decode("utf-8", "replace").split("\n")
    tail = "\n".join(line[5:].removeprefix(" ") if line.startswith("data:") else line
                     for line in tail_lines[:1] + [t for t in tail_lines[1:]
                                                   if t.startswith("data:")])
    message = cut_json(Oversized(head="\n".join(data).encode("utf-8"),
                                 tail=tail.encode("utf-8"), size=over.size, limit=over.limit),
                       request_id=answers)
    if message is None:
        return None
    prefix = f"id: {event_id}\n" if event_id and "\n" not in event_id else ""
    return f"event: message\n{prefix}data: ".encode() + message + b"\n\n"

