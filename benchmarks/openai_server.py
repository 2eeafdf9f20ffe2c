"""Benchmark: the OpenAI-compatible endpoint's cost over the in-process loop, and under load.

A scripted fast backend (no model: it yields one ``text`` event per token, or the
deltas of a tool call's string argument) stands in for the model, so what is
measured is the server: the worker thread's hand-off to the event loop, chunk
building, JSON, SSE framing, HTTP, and a client reading the frames.

* **added cost per token**: one client streams a reply of N tokens from
  ``POST /v1/chat/completions`` (server in its own process, uvicorn, as
  ``toolwire serve`` runs it); the same reply through ``toolwire.Chat.send`` in
  process is the baseline. Cost = (endpoint - in-process) / N.
* **32 concurrent streaming clients** against a backend that serves replies
  concurrently: tokens per second sustained, and the added latency per chunk
  (from the backend yielding the token to the client reading its frame; the
  token carries its own time stamp, ``time.perf_counter`` is the same clock in
  both processes). Unpaced (as fast as the server goes) and paced at 50 tokens
  per second per client (a fast local model).
* **stop strings**: the ``stop`` matcher against a model repeating one character
  (24,000 characters one at a time, a 3,001-character stop string it never
  completes): CPU seconds (22.9 s before the matcher became linear).
* **response_format**: the grammar's first build (``json_object`` and a schema of
  nested properties, each alone and with a tool under ``"auto"``), and the decode
  time per token of the tiny real llama.cpp model without a grammar and under
  each one.
* **logprobs**: the completion builder's CPU time per token with ``logprobs`` (a
  ``token_logprob`` event and a text event per token, lined up with the content)
  and without (the text event alone), and the tiny real model's CPU time per
  token without log probabilities, with ``top_logprobs: 0`` and with 20.
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from toolwire import CancelToken, Chat, ModelRequest, TurnEnd
from toolwire.events import (
    Event,
    TextEvent,
    ToolCallDeltaEvent,
    ToolCallEndEvent,
    ToolCallStartEvent,
)

from .harness import print_table, time_runs, write_results

__all__ = ["FastBackend", "run"]

BENCHMARK = "openai_server"
CLIENTS = 32


class FastBackend:
    """Replies of ``tokens`` text events (or argument deltas), optionally paced.

    The request's last user message may be ``"args"`` (stream a tool call's string
    argument instead of text) or ``"stamp"`` (each token is its own emit time).
    Stateless, so it serves any number of replies at once.
    """

    name = "fast"

    def __init__(self, tokens: int, pace: float = 0.0) -> None:
        self.tokens = tokens
        self.pace = pace

    def make_call_id(self, index: int) -> str:
        """Fixed-form ids."""
        return f"call_{index}"

    def stream_turn(self, request: ModelRequest, cancel: CancelToken) -> Iterator[Event | TurnEnd]:
        """Yield the reply's events, checking ``cancel`` between tokens."""
        mode = request.messages[-1].content
        if mode == "args":
            yield ToolCallStartEvent(0, "write")
        parts: list[str] = []
        next_at = time.perf_counter()
        for i in range(self.tokens):
            if cancel.cancelled:
                yield TurnEnd("cancelled")
                return
            if self.pace:
                next_at += self.pace
                delay = next_at - time.perf_counter()
                if delay > 0:
                    time.sleep(delay)
            if mode == "args":
                parts.append(f"w{i} ")
                yield ToolCallDeltaEvent(0, "write", parts[-1], "content")
            elif mode == "stamp":
                yield TextEvent(f"{time.perf_counter():.7f} ")
            else:
                yield TextEvent(f"w{i} ")
        if mode == "args":
            yield ToolCallEndEvent("write", {"content": "".join(parts)}, index=0)
        yield TurnEnd("stop", usage={"prompt_tokens": 1, "completion_tokens": self.tokens})


# -- the server process --------------------------------------------------------------------


def serve(port: int, tokens: int, pace: float) -> None:
    """Serve :class:`FastBackend` as ``toolwire serve`` would (run in a child process)."""
    import uvicorn

    from toolwire.apps.server.app import create_app
    from toolwire.apps.server.uvicorn_server import uvicorn_config
    from toolwire.limits import ServerLimits

    backend = FastBackend(tokens, pace)
    limits = ServerLimits(max_waiting=CLIENTS * 2, max_connections=CLIENTS * 4)
    app = create_app(lambda history, system: Chat(backend, history=history), model="fast",
                     backend=backend, limits=limits, concurrent_replies=CLIENTS)
    uvicorn.Server(uvicorn_config(app, host="127.0.0.1", port=port, limits=limits,
                                  log_level="warning")).run()


class _Server:
    def __init__(self, tokens: int, pace: float) -> None:
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            self.port = int(probe.getsockname()[1])
        root = Path(__file__).resolve().parents[1]
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "benchmarks.openai_server", "--serve", str(self.port),
             str(tokens), str(pace)], cwd=root, env={**os.environ, "TOOLWIRE_LOAD_PLUGINS": ""})
        deadline = time.monotonic() + 30
        while True:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                return
            except OSError:
                if time.monotonic() > deadline or self.proc.poll() is not None:
                    raise RuntimeError("the benchmark server did not start") from None
                time.sleep(0.05)

    def close(self) -> None:
        self.proc.terminate()
        self.proc.wait(10)


# -- the clients ------------------------------------------------------------------------------


async def _stream(port: int, mode: str, latencies: list[float] | None) -> int:
    """One streaming request; return the chunks read (stamps go to ``latencies``)."""
    body = json.dumps({"model": "fast", "stream": True,
                       "messages": [{"role": "user", "content": mode}]}).encode()
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                 b"Content-Type: application/json\r\nContent-Length: "
                 + str(len(body)).encode() + b"\r\n\r\n" + body)
    while (await reader.readline()) not in (b"\r\n", b""):
        pass
    chunks, buffer = 0, b""
    while True:  # chunked transfer encoding
        size = int((await reader.readline()).strip() or b"0", 16)
        if size == 0:
            break
        buffer += (await reader.readexactly(size + 2))[:-2]
        now = time.perf_counter()
        *frames, buffer = buffer.split(b"\n\n")
        for frame in frames:
            if frame == b"data: [DONE]":
                continue
            chunks += 1
            if latencies is not None:
                content = json.loads(frame[6:])["choices"][0]["delta"].get("content") or ""
                latencies.extend(now - float(stamp) for stamp in content.split())
    writer.close()
    return chunks


def _clients(port: int, count: int, mode: str,
             latencies: list[float] | None) -> tuple[int, float]:
    async def all_of() -> list[int]:
        return list(await asyncio.gather(*(_stream(port, mode, latencies)
                                           for _ in range(count))))

    started = time.perf_counter()
    chunks = asyncio.run(all_of())
    return sum(chunks), time.perf_counter() - started


def _in_process(tokens: int, mode: str) -> None:
    chat = Chat(FastBackend(tokens))
    for _ in chat.send(mode):
        pass


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


PERSON_SCHEMA: dict[str, Any] = {
    "type": "object", "additionalProperties": False,
    "required": ["name", "age", "mood", "tags", "address"],
    "properties": {
        "name": {"type": "string", "maxLength": 40}, "age": {"type": "integer"},
        "mood": {"enum": ["happy", "sad", "tired"]},
        "tags": {"type": "array", "items": {"type": "string"}, "maxItems": 5},
        "address": {"type": "object", "additionalProperties": False,
                    "required": ["city", "zip"],
                    "properties": {"city": {"type": "string"},
                                   "zip": {"anyOf": [{"type": "string"}, {"type": "null"}]}}}}}


def _stop_matcher_rows() -> list[dict[str, Any]]:
    from toolwire.apps.server.completion_stream import StopMatcher

    matcher = StopMatcher(["a" * 3000 + "b"])
    started = time.process_time()
    for _ in range(24_000):
        matcher.feed("a")
    seconds = time.process_time() - started
    return [{"benchmark": BENCHMARK, "case": "stop_matcher", "reply_chars": 24_000,
             "stop_chars": 3001, "cpu_s": seconds, "before_cpu_s": 22.9}]


def _grammar_build_rows() -> list[dict[str, Any]]:
    """First builds (caches cleared) of the response_format grammar of a turn."""
    from toolwire.grammar.build import clear_grammar_cache
    from toolwire.grammar.response_format import clear_response_format_cache
    from toolwire.grammar.turn import turn_grammar
    from toolwire.testing import isolated_plugin_manager
    from toolwire.vocabulary.backend import ResponseFormat
    from toolwire.vocabulary.history import Message
    from toolwire.vocabulary.tools import Tool

    parser = isolated_plugin_manager().parser("hermes_json")
    tool = Tool(schema={"name": "lookup", "parameters": PERSON_SCHEMA}, function=print)
    rows = []
    for label, fmt in (("json_object", ResponseFormat("json_object")),
                       ("json_schema", ResponseFormat("json_schema", PERSON_SCHEMA, "p", True))):
        for tools in ((), (tool,)):
            request = ModelRequest((Message("user", "hi"),), tools, response_format=fmt)

            def build(r: ModelRequest = request) -> None:
                clear_grammar_cache()
                clear_response_format_cache()
                turn_grammar(r, parser, template="", prompt_tail="\n")

            rows.append({"benchmark": BENCHMARK, "case": "response_format_build",
                         "format": label, "tools": "one, auto" if tools else "none",
                         "build_ms": time_runs(build, runs=20)["median_ms"]})
    return rows


def _decode_rows(quick: bool) -> list[dict[str, Any]]:
    """The tiny real model's decode time per token, without a grammar and under each."""
    import tempfile

    from toolwire.plugins.llama_cpp import LlamaCppBackend
    from toolwire.templates.default_template import DEFAULT_CHAT_TEMPLATE
    from toolwire.testing import isolated_plugin_manager, write_tiny_gguf
    from toolwire.testing.tiny_gguf import TINY_BACKEND_OPTIONS
    from toolwire.vocabulary.backend import ResponseFormat, SamplingOverrides
    from toolwire.vocabulary.history import Message

    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as folder:
        path = write_tiny_gguf(Path(folder) / "tiny.gguf", DEFAULT_CHAT_TEMPLATE)
        backend = LlamaCppBackend(path, n_ctx=4096, max_tokens=2000, temperature=1.0,
                                  plugins=isolated_plugin_manager(),
                                  **TINY_BACKEND_OPTIONS)  # type: ignore[arg-type]
        try:
            for _ in backend.stream_turn(ModelRequest((Message("user", "warm up"),)),
                                         CancelToken()):
                pass
            for label, fmt in (("none", None), ("json_object", ResponseFormat("json_object")),
                               ("json_schema", ResponseFormat("json_schema", PERSON_SCHEMA,
                                                              "p", True))):
                tokens, seconds = 0, 0.0
                for seed in range(3 if quick else 10):
                    request = ModelRequest((Message("user", "Describe a person."),),
                                           response_format=fmt,
                                           sampling=SamplingOverrides(seed=seed,
                                                                      max_tokens=400))
                    for item in backend.stream_turn(request, CancelToken()):
                        if isinstance(item, TurnEnd):
                            tokens += int((item.usage or {}).get("completion_tokens", 0))
                            seconds += float((item.timings or {}).get("generation", 0.0))
                rows.append({"benchmark": BENCHMARK, "case": "response_format_decode",
                             "grammar": label, "tokens": tokens,
                             "us_per_token": seconds / max(tokens, 1) * 1e6})
        finally:
            backend.close()
    for row in rows:
        row["overhead_us_per_token"] = row["us_per_token"] - rows[0]["us_per_token"]
    return rows


def _builder_logprobs_rows(quick: bool) -> list[dict[str, Any]]:
    """The completion builder's CPU time per token, with and without logprobs (CPU
    time: the machine may be busy)."""
    from toolwire.apps.server.completion_stream import CompletionBuilder
    from toolwire.events import TokenLogprobEvent

    tokens = 2_000 if quick else 10_000
    top = [{"token": f"t{k}", "logprob": -1.0 - k, "bytes": [116, 48 + k]} for k in range(5)]
    texts = [TextEvent(f"w{i} ") for i in range(tokens)]
    paired = [item for i, text in enumerate(texts)
              for item in (TokenLogprobEvent(text.text, -0.5, text.text.encode(), top), text)]
    rows = []
    for label, items, logprobs in (("off", texts, False), ("on, top_logprobs 5", paired, True)):
        def build(items: list[Any] = items, logprobs: bool = logprobs) -> None:
            builder = CompletionBuilder("chatcmpl-b", 0, "m", make_call_id=str,
                                        logprobs=logprobs)
            for item in items:
                builder.feed(item)
            builder.feed(TurnEnd("stop"))
            builder.closing_chunks()

        build()  # warm up
        seconds = []
        for _ in range(5 if quick else 15):
            started = time.thread_time()
            build()
            seconds.append(time.thread_time() - started)
        rows.append({"benchmark": BENCHMARK, "case": "logprobs_builder", "logprobs": label,
                     "tokens": tokens,
                     "cpu_us_per_token": statistics.median(seconds) / tokens * 1e6,
                     "min_cpu_us_per_token": min(seconds) / tokens * 1e6})
    return rows


def _decode_logprobs_rows(quick: bool) -> list[dict[str, Any]]:
    """The tiny real model's CPU time per token (its turn's, prompt included), without
    and with logprobs, the three interleaved."""
    import tempfile

    from toolwire.plugins.llama_cpp import LlamaCppBackend
    from toolwire.templates.default_template import DEFAULT_CHAT_TEMPLATE
    from toolwire.testing import isolated_plugin_manager, write_tiny_gguf
    from toolwire.testing.tiny_gguf import TINY_BACKEND_OPTIONS
    from toolwire.vocabulary.backend import SamplingOverrides
    from toolwire.vocabulary.history import Message

    totals: dict[str, list[float]] = {"off": [0, 0], "top_logprobs 0": [0, 0],
                                      "top_logprobs 20": [0, 0]}
    asked = {"off": None, "top_logprobs 0": 0, "top_logprobs 20": 20}
    with tempfile.TemporaryDirectory() as folder:
        path = write_tiny_gguf(Path(folder) / "tiny.gguf", DEFAULT_CHAT_TEMPLATE)
        backend = LlamaCppBackend(path, n_ctx=4096, max_tokens=2000, temperature=1.0,
                                  plugins=isolated_plugin_manager(),
                                  **TINY_BACKEND_OPTIONS)  # type: ignore[arg-type]
        try:
            for _ in backend.stream_turn(ModelRequest((Message("user", "warm up"),)),
                                         CancelToken()):
                pass
            for seed in range(3 if quick else 30):  # interleaved: the same load for each
                for label, top in asked.items():
                    request = ModelRequest((Message("user", "Describe a person."),),
                                           sampling=SamplingOverrides(seed=seed,
                                                                      max_tokens=400),
                                           logprobs=top)
                    started = time.thread_time()  # llama.cpp computes on this thread
                    for item in backend.stream_turn(request, CancelToken()):
                        if isinstance(item, TurnEnd):
                            totals[label][0] += int((item.usage or {})["completion_tokens"])
                    totals[label][1] += time.thread_time() - started
        finally:
            backend.close()
    off = totals["off"][1] / max(totals["off"][0], 1) * 1e6
    return [{"benchmark": BENCHMARK, "case": "logprobs_decode", "logprobs": label,
             "tokens": int(n), "cpu_us_per_token": seconds / max(n, 1) * 1e6,
             "overhead_us_per_token": seconds / max(n, 1) * 1e6 - off}
            for label, (n, seconds) in totals.items()]


def run(quick: bool = False) -> list[dict[str, Any]]:
    """Measure the added cost per token, 32 concurrent clients, the stop matcher, the
    response_format grammar and logprobs."""
    rows: list[dict[str, Any]] = []
    tokens = 500 if quick else 2_000
    server = _Server(tokens, 0.0)
    try:
        for mode, label in (("text", "content tokens"), ("args", "argument deltas")):
            base = time_runs(lambda m=mode: _in_process(tokens, m), runs=5)
            http = time_runs(lambda m=mode: _clients(server.port, 1, m, None), runs=5)
            added = (http["median_ms"] - base["median_ms"]) / tokens * 1000
            rows.append({"benchmark": BENCHMARK, "case": "added_cost", "stream": label,
                         "tokens": tokens, "in_process_ms": base["median_ms"],
                         "endpoint_ms": http["median_ms"], "added_us_per_token": added})
        for _ in range(2 if quick else 3):
            latencies: list[float] = []
            received, seconds = _clients(server.port, CLIENTS, "stamp", latencies)
            rows.append(_load_row("unpaced", tokens, received, seconds, latencies))
    finally:
        server.close()
    paced_tokens = 100 if quick else 250
    server = _Server(paced_tokens, 0.02)
    try:
        latencies = []
        received, seconds = _clients(server.port, CLIENTS, "stamp", latencies)
        rows.append(_load_row("paced 50 tok/s each", paced_tokens, received, seconds,
                              latencies))
    finally:
        server.close()
    rows.extend(_stop_matcher_rows())
    rows.extend(_grammar_build_rows())
    rows.extend(_decode_rows(quick))
    rows.extend(_builder_logprobs_rows(quick))
    rows.extend(_decode_logprobs_rows(quick))
    return rows


def _load_row(pace: str, tokens: int, received: int, seconds: float,
              latencies: list[float]) -> dict[str, Any]:
    return {"benchmark": BENCHMARK, "case": "concurrent", "clients": CLIENTS, "pace": pace,
            "tokens_per_client": tokens, "chunks": received, "seconds": seconds,
            "tokens_per_s": len(latencies) / seconds,
            "p50_latency_ms": statistics.median(latencies) * 1000,
            "p99_latency_ms": _percentile(latencies, 0.99) * 1000,
            "max_latency_ms": max(latencies) * 1000}


def report(rows: list[dict[str, Any]]) -> None:
    """Print the two tables."""
    print_table([r for r in rows if r["case"] == "added_cost"],
                ["stream", "tokens", "in_process_ms", "endpoint_ms", "added_us_per_token"],
                "POST /v1/chat/completions (stream) over Chat.send in process, one client")
    print_table([r for r in rows if r["case"] == "concurrent"],
                ["clients", "pace", "tokens_per_client", "seconds", "tokens_per_s",
                 "p50_latency_ms", "p99_latency_ms", "max_latency_ms"],
                f"{CLIENTS} concurrent streaming clients (added latency per chunk)")
    print_table([r for r in rows if r["case"] == "stop_matcher"],
                ["reply_chars", "stop_chars", "cpu_s", "before_cpu_s"],
                "stop matcher, a model repeating one character")
    print_table([r for r in rows if r["case"] == "response_format_build"],
                ["format", "tools", "build_ms"], "response_format grammar, first build")
    print_table([r for r in rows if r["case"] == "response_format_decode"],
                ["grammar", "tokens", "us_per_token", "overhead_us_per_token"],
                "tiny llama.cpp model, decode time per token")
    print_table([r for r in rows if r["case"] == "logprobs_builder"],
                ["logprobs", "tokens", "cpu_us_per_token", "min_cpu_us_per_token"],
                "completion builder, CPU time per token")
    print_table([r for r in rows if r["case"] == "logprobs_decode"],
                ["logprobs", "tokens", "cpu_us_per_token", "overhead_us_per_token"],
                "tiny llama.cpp model, CPU time per token with logprobs")


if __name__ == "__main__":
    if sys.argv[1:2] == ["--serve"]:
        serve(int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4]))
    else:
        result = run(quick="--quick" in sys.argv)
        report(result)
        print(write_results(BENCHMARK, result))
