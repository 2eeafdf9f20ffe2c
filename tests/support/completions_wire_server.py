"""A loopback stand-in for serving engines' text-completion endpoints, for tests.

:class:`EngineStandIn` is the scripted server of
:mod:`tests.support.openai_wire_server` (each completion request gets the next
queued reply: a stream, a failure or a hang) plus fixed answers by method and
path, so a test can make it say it is vLLM, SGLang or llama-server
(``GET /v1/models``, ``GET /props``) and answer ``POST /tokenize``.

Chunk builders write both stream shapes: :func:`completion_chunks` the
OpenAI-style ``text_completion`` chunks of ``/v1/completions``,
:func:`llama_chunks` the events of llama-server's native ``/completion``.
Only error paths and exact chunkings are tested against it; the real
engine is llama-cpp-python's server (``tests/backends/test_completions_real.py``).
"""

from __future__ import annotations

import json
import socket
from collections.abc import Mapping, Sequence
from typing import Any

from tests.support import openai_wire_server as wire

__all__ = [
    "EngineStandIn",
    "completion_chunk",
    "completion_chunks",
    "llama_chunks",
    "llama_stream",
    "models_listing",
]


def completion_chunk(text: str = "", finish: str | None = None) -> dict[str, Any]:
    """One ``text_completion`` chunk."""
    return {"id": "cmpl-test", "object": "text_completion", "created": 1, "model": "m",
            "choices": [{"index": 0, "text": text, "logprobs": None,
                         "finish_reason": finish}]}


def completion_chunks(pieces: Sequence[str], *, finish: str = "stop",
                      usage: tuple[int, int] | None = None) -> list[dict[str, Any]]:
    """A reply as ``/v1/completions`` streams it: one chunk per piece, then the finish."""
    chunks = [completion_chunk(piece) for piece in pieces]
    chunks.append(completion_chunk("", finish))
    if usage is not None:
        chunks.append({"id": "cmpl-test", "object": "text_completion", "created": 1,
                       "model": "m", "choices": [],
                       "usage": {"prompt_tokens": usage[0], "completion_tokens": usage[1],
                                 "total_tokens": sum(usage)}})
    return chunks


def llama_chunks(pieces: Sequence[str], *, stop_type: str = "eos",
                 predicted: int | None = None) -> list[dict[str, Any]]:
    """A reply as llama-server's ``/completion`` streams it (``stop`` on the last event)."""
    chunks: list[dict[str, Any]] = [{"content": piece, "stop": False, "tokens": [1]}
                                    for piece in pieces]
    chunks.append({"content": "", "stop": True, "stop_type": stop_type,
                   "tokens_predicted": len(pieces) if predicted is None else predicted,
                   "tokens_evaluated": 7, "timings": {"predicted_n": len(pieces)}})
    return chunks


def llama_stream(pieces: Sequence[str], **options: Any) -> wire.Stream:
    """A native stream (no ``[DONE]``, which llama-server does not send)."""
    return wire.Stream(llama_chunks(pieces, **options), done=False)


def models_listing(owner: str, model: str = "served-model",
                   max_model_len: int | None = None) -> dict[str, Any]:
    """A ``GET /v1/models`` answer whose ``owned_by`` names the engine."""
    entry: dict[str, Any] = {"id": model, "object": "model", "owned_by": owner}
    if max_model_len is not None:
        entry["max_model_len"] = max_model_len
    return {"object": "list", "data": [entry]}


class _RoutedHandler(wire._Handler):
    def setup(self) -> None:
        super().setup()
        # a reply in several small writes must not wait for delayed ACKs (Nagle)
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def do_GET(self) -> None:
        if not self._answer_route("GET"):
            super().do_GET()

    def do_POST(self) -> None:
        if not self._answer_route("POST"):
            super().do_POST()

    def _answer_route(self, method: str) -> bool:
        owner = self.server.owner
        assert isinstance(owner, EngineStandIn)
        route = owner.routes.get((method, self.path))
        if route is None:
            return False
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        try:
            body: Any = json.loads(raw) if raw else None
        except ValueError:
            body = raw.decode("utf-8", "replace")
        owner.routed.append(wire.Recorded(method, self.path,
                                          {k.lower(): v for k, v in self.headers.items()}, body))
        status, answer = route
        self._send_json(status, answer)
        return True


class EngineStandIn(wire.WireServer):
    """The scripted server, plus fixed answers by ``(method, path)``.

    :ivar routes: ``{(method, path): (status, JSON body)}``, answered before
        the queue is consulted.
    :ivar routed: the requests answered from :attr:`routes`.
    """

    def __init__(self, routes: Mapping[tuple[str, str], tuple[int, Any]] | None = None) -> None:
        super().__init__()
        self.routes: dict[tuple[str, str], tuple[int, Any]] = dict(routes or {})
        self.routed: list[wire.Recorded] = []
        self._server.RequestHandlerClass = _RoutedHandler

    @property
    def root(self) -> str:
        """The engine's address (without ``/v1``)."""
        return f"http://127.0.0.1:{self.port}"

    def completion_bodies(self) -> list[Any]:
        """The JSON bodies of the completion requests (not probes or tokenize calls)."""
        return [r.body for r in self.requests]
