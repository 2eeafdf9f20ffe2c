"""A real HTTP server speaking the chat-completions streaming wire format, for tests.

:class:`WireServer` listens on ``127.0.0.1`` (a free port) and answers each
``POST .../chat/completions`` with the next scripted reply from its queue:

* :class:`Stream`: server-sent events ``data: {chunk}\\n\\n`` then
  ``data: [DONE]``, optionally dropping the connection after some chunks,
  pausing between chunks, or ending without ``[DONE]``;
* :class:`Fail`: an error status with a JSON (or text) body and headers;
* :class:`Hang`: accept the request and answer nothing for a while.

Every request is recorded (:class:`Recorded`: path, headers, JSON body) so
tests assert what the client sent. Chunk builders (:func:`text_chunk`,
:func:`tool_chunk`, :func:`finish_chunk`, :func:`usage_chunk`,
:func:`reply_chunks`) write the wire form of a reply.

Usage::

    with WireServer() as server:
        server.enqueue(Stream(reply_chunks("hello")))
        ... OpenAICompatBackend("custom", model="m", base_url=server.url) ...
        server.requests[0].body["messages"]
"""

from __future__ import annotations

import json
import socket
import sys
import threading
from collections import deque
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

__all__ = [
    "Fail",
    "Hang",
    "Recorded",
    "Stream",
    "WireServer",
    "call_delta",
    "finish_chunk",
    "free_port",
    "reply_chunks",
    "serve",
    "text_chunk",
    "tool_chunk",
    "usage_chunk",
]

MODEL = "test-model"


@dataclass(frozen=True)
class Stream:
    """A streamed reply.

    :ivar chunks: chunk dicts (sent as JSON) or raw strings (sent as the
        event's data as they are).
    :ivar drop_after: close the connection abruptly after this many chunks.
    :ivar delay: seconds to pause before each chunk.
    :ivar done: end with ``data: [DONE]``.
    :ivar stall_at: pause ``stall`` seconds before this chunk only.
    :ivar hold_at: send nothing from this chunk on until the server stops (a reply that
        is still coming whatever the machine's speed, for a test that cancels it).
    """

    chunks: Sequence[Mapping[str, Any] | str]
    drop_after: int | None = None
    delay: float = 0.0
    done: bool = True
    stall_at: int | None = None
    stall: float = 0.0
    hold_at: int | None = None


@dataclass(frozen=True)
class Fail:
    """An error answer: ``status`` with ``body`` (JSON when not a string)."""

    status: int
    body: Mapping[str, Any] | str = field(default_factory=dict)
    headers: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def error(cls, status: int, message: str, headers: Mapping[str, str] | None = None,
              **fields: Any) -> Fail:
        """The OpenAI error shape ``{"error": {"message": ...}}``."""
        return cls(status, {"error": {"message": message, **fields}}, dict(headers or {}))


@dataclass(frozen=True)
class Hang:
    """Read the request, then send nothing for ``seconds`` (or until shutdown)."""

    seconds: float = 30.0


Reply = Stream | Fail | Hang


@dataclass
class Recorded:
    """One request as the server received it (header names lower-cased)."""

    method: str
    path: str
    headers: dict[str, str]
    body: Any


def text_chunk(text: str, *, reasoning: str | None = None,
               reasoning_field: str = "reasoning_content") -> dict[str, Any]:
    """A chunk carrying visible text (and optionally reasoning)."""
    delta: dict[str, Any] = {}
    if reasoning is not None:
        delta[reasoning_field] = reasoning
    if text:
        delta["content"] = text
    return _chunk(delta)


def tool_chunk(*calls: Mapping[str, Any]) -> dict[str, Any]:
    """A chunk with ``delta.tool_calls`` exactly as given."""
    return _chunk({"tool_calls": [dict(c) for c in calls]})


def call_delta(index: int | None = None, *, id: str | None = None, name: str | None = None,
               arguments: str | None = None, type: str | None = None) -> dict[str, Any]:
    """One ``tool_calls`` entry; fields left ``None`` are omitted."""
    delta: dict[str, Any] = {}
    if index is not None:
        delta["index"] = index
    if id is not None:
        delta["id"] = id
    if type is not None:
        delta["type"] = type
    function: dict[str, Any] = {}
    if name is not None:
        function["name"] = name
    if arguments is not None:
        function["arguments"] = arguments
    if function:
        delta["function"] = function
    return delta


def finish_chunk(reason: str) -> dict[str, Any]:
    """The chunk carrying ``finish_reason``."""
    chunk = _chunk({})
    chunk["choices"][0]["finish_reason"] = reason
    return chunk


def usage_chunk(prompt: int, completion: int) -> dict[str, Any]:
    """The ``include_usage`` chunk (no choices)."""
    return {"id": "chatcmpl-test", "object": "chat.completion.chunk", "created": 1,
            "model": MODEL, "choices": [],
            "usage": {"prompt_tokens": prompt, "completion_tokens": completion,
                      "total_tokens": prompt + completion}}


def reply_chunks(text: str = "", calls: Sequence[tuple[str, str, Mapping[str, Any]]] = (), *,
                 piece: int = 5, finish: str | None = None,
                 usage: tuple[int, int] | None = (10, 5)) -> list[dict[str, Any]]:
    """The OpenAI-standard stream of a reply: text in pieces, then each call.

    :param calls: ``(id, name, arguments)``; arguments are sent as a JSON text
        split into ``piece``-character fragments, id and name on the first delta.
    """
    chunks: list[dict[str, Any]] = [_chunk({"role": "assistant", "content": ""})]
    for start in range(0, len(text), piece):
        chunks.append(text_chunk(text[start:start + piece]))
    for index, (call_id, name, arguments) in enumerate(calls):
        chunks.append(tool_chunk(call_delta(index, id=call_id, name=name, arguments="",
                                            type="function")))
        raw = json.dumps(dict(arguments))
        for start in range(0, len(raw), piece):
            chunks.append(tool_chunk(call_delta(index, arguments=raw[start:start + piece])))
    chunks.append(finish_chunk(finish or ("tool_calls" if calls else "stop")))
    if usage is not None:
        chunks.append(usage_chunk(*usage))
    return chunks


def _chunk(delta: Mapping[str, Any]) -> dict[str, Any]:
    return {"id": "chatcmpl-test", "object": "chat.completion.chunk", "created": 1,
            "model": MODEL,
            "choices": [{"index": 0, "delta": dict(delta), "finish_reason": None}]}


def free_port() -> int:
    """A port nothing listens on (bound, then released)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:  # quiet
        pass

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        try:
            body: Any = json.loads(raw) if raw else None
        except ValueError:
            body = raw.decode("utf-8", "replace")
        owner = self.server.owner
        owner.record(Recorded("POST", self.path, {k.lower(): v for k, v in self.headers.items()},
                              body))
        reply = owner.next_reply()
        if reply is None:
            self._send_json(500, {"error": {"message": "the test server has no reply queued"}})
        elif isinstance(reply, Fail):
            self._send_fail(reply)
        elif isinstance(reply, Hang):
            owner.stopping.wait(reply.seconds)
            self.close_connection = True
        else:
            self._send_stream(reply)

    def do_GET(self) -> None:
        self._send_json(404, {"error": {"message": "not found"}})

    def _send_json(self, status: int, body: Any, headers: Mapping[str, str] | None = None) -> None:
        data = (body if isinstance(body, str) else json.dumps(body)).encode()
        self.send_response(status)
        self.send_header("Content-Type", "text/plain" if isinstance(body, str)
                         else "application/json")
        self.send_header("Content-Length", str(len(data)))
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(data)

    def _send_fail(self, reply: Fail) -> None:
        self._send_json(reply.status, reply.body, reply.headers)

    def _write_chunked(self, data: bytes) -> None:
        self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
        self.wfile.flush()

    def _send_stream(self, reply: Stream) -> None:
        owner = self.server.owner
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        try:
            for n, chunk in enumerate(reply.chunks):
                if reply.drop_after is not None and n >= reply.drop_after:
                    self._drop()
                    return
                if n == reply.hold_at:
                    owner.stopping.wait()
                    self._drop()
                    return
                pause = reply.delay + (reply.stall if n == reply.stall_at else 0.0)
                if pause and owner.stopping.wait(pause):
                    self._drop()
                    return
                data = chunk if isinstance(chunk, str) else json.dumps(chunk)
                self._write_chunked(f"data: {data}\n\n".encode())
            if reply.drop_after is not None and reply.drop_after >= len(reply.chunks):
                self._drop()
                return
            if reply.done:
                self._write_chunked(b"data: [DONE]\n\n")
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()
        except (BrokenPipeError, ConnectionResetError, ConnectionAbortedError):
            owner.client_gone.set()
            self.close_connection = True

    def _drop(self) -> None:
        """Cut the connection mid-body: no final chunk, socket shut down."""
        self.close_connection = True
        try:
            self.wfile.flush()
            self.connection.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    owner: WireServer

    def handle_error(self, request: Any, client_address: Any) -> None:
        if isinstance(sys.exc_info()[1], ConnectionError):
            return  # a client closing a kept-alive connection
        super().handle_error(request, client_address)


class WireServer:
    """The scripted chat-completions server (a context manager).

    :ivar requests: every request received, in order.
    :ivar client_gone: set when a stream write failed because the client
        closed the connection (cancellation).
    """

    def __init__(self) -> None:
        self._replies: deque[Reply] = deque()
        self._lock = threading.Lock()
        self.requests: list[Recorded] = []
        self.stopping = threading.Event()
        self.client_gone = threading.Event()
        self._server = _Server(("127.0.0.1", 0), _Handler)
        self._server.owner = self
        self._thread = threading.Thread(target=self._server.serve_forever,
                                        kwargs={"poll_interval": 0.005},
                                        name="openai-wire-server", daemon=True)

    @property
    def port(self) -> int:
        """The port listened on."""
        port: int = self._server.server_address[1]
        return port

    @property
    def url(self) -> str:
        """The API root to give as ``base_url``."""
        return f"http://127.0.0.1:{self.port}/v1"

    def enqueue(self, *replies: Reply) -> WireServer:
        """Queue replies, answered in order, one per request."""
        with self._lock:
            self._replies.extend(replies)
        return self

    def next_reply(self) -> Reply | None:
        """The next queued reply (``None`` when the queue is empty)."""
        with self._lock:
            return self._replies.popleft() if self._replies else None

    def record(self, request: Recorded) -> None:
        """Keep a received request."""
        with self._lock:
            self.requests.append(request)

    @property
    def bodies(self) -> list[Any]:
        """The JSON bodies received."""
        return [r.body for r in self.requests]

    def pending(self) -> int:
        """How many queued replies were not used."""
        with self._lock:
            return len(self._replies)

    def start(self) -> WireServer:
        """Begin serving (done by ``with``)."""
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving and release hanging handlers."""
        self.stopping.set()
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)

    def __enter__(self) -> WireServer:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()


def serve() -> Iterator[WireServer]:
    """Generator form for a pytest fixture: ``yield from serve()``."""
    with WireServer() as server:
        yield server
