"""Benchmark: what the ``completions`` backend adds per token over the engine's own streaming.

The engine is llama-cpp-python's OpenAI-compatible server (``python -m
llama_cpp.server``) on 127.0.0.1 running the tiny test model, its output forced
by a grammar to one tool call with a multi-line string argument. Both sides ask
for the same prompt text, grammar and token limit:

* raw: ``openai`` SDK ``completions.create(stream=True)`` and a loop over the
  chunks, what a user of the engine would write, once on the calling thread
  (``raw``) and once reading on another thread (``raw_thread``, as toolwire
  does; on this machine that is often the faster of the two); the wall-time
  baseline is the faster one;
* toolwire: ``CompletionsBackend.stream_turn``: render the template, count the
  prompt at the engine's tokenize endpoint, stream on the worker thread, trim
  the end marker, parse the call, emit events.

Two reply sizes separate the per-turn cost (render + tokenize round trip) from
the per-token cost: ``per_token_us`` is the slope of the added time over the
token count. The tiny model makes tokens nearly free (well under a millisecond
each), so this is the harshest case; with a real model each token costs
milliseconds and the added time is a smaller share.
"""

from __future__ import annotations

import queue
import statistics
import threading
import time
from pathlib import Path
from typing import Any

from toolwire import CancelToken, Message, ModelRequest, tool

from .harness import print_table, scratch_folder, write_results

__all__ = ["run"]

BENCHMARK = "completions_overhead"


@tool
def write_file(path: str, content: str) -> str:
    """Write a file.

    :param path: where
    :param content: what
    """
    return "ok"


def _reply(lines: int) -> str:
    body = "".join(f"def f{i}(x):\n    return x * {i}  # < not a tag\n" for i in range(lines))
    return ("Writing it now.\n\n<tool_call>\n<function=write_file>\n<parameter=path>\nm.py\n"
            f"</parameter>\n<parameter=content>\n{body}</parameter>\n</function>\n</tool_call>")


def _interleaved(paths: dict[str, Any], runs: int) -> dict[str, float]:
    """Run the paths in turn ``runs`` times (after a warm-up of each).

    Wall time: the fastest run of each (the engine shares two cores with
    everything else; the minimum is the least disturbed). Client CPU time
    (``time.process_time``, every thread of this process, the engine being
    another process): the median of each.
    """
    for func in paths.values():
        func()
    walls: dict[str, list[float]] = {name: [] for name in paths}
    cpus: dict[str, list[float]] = {name: [] for name in paths}
    for _ in range(runs):
        for name, func in paths.items():
            wall, cpu = time.perf_counter(), time.process_time()
            func()
            walls[name].append((time.perf_counter() - wall) * 1000)
            cpus[name].append((time.process_time() - cpu) * 1000)
    timed = {f"{name}_ms": min(walls[name]) for name in paths}
    timed.update({f"{name}_cpu_ms": statistics.median(cpus[name]) for name in paths})
    return timed


def _reader_thread(stream: Any) -> Any:
    """The stream's chunks, read on another thread (as toolwire reads them)."""
    chunks: queue.SimpleQueue[Any] = queue.SimpleQueue()

    def read() -> None:
        try:
            for chunk in stream:
                chunks.put(chunk)
        finally:
            chunks.put(None)

    threading.Thread(target=read, daemon=True).start()
    while (chunk := chunks.get()) is not None:
        yield chunk


def _measure(server: Any, model: Path, request: ModelRequest, reply: str, runs: int,
             lines: int) -> dict[str, Any]:
    import openai

    from toolwire.plugins.completions.backend import CompletionsBackend
    from toolwire.testing.tiny_gguf import forcing_grammar as grammar_for

    grammar = grammar_for(reply)
    client = openai.OpenAI(api_key="unused", base_url=f"{server.root}/v1", max_retries=0)
    backend = CompletionsBackend(server.root, model_file=model, n_ctx=8192, max_tokens=6000,
                                 temperature=0.0, grammar=grammar, environ={})
    prompt = backend.fit_prompt(request)[1].text

    def raw(threaded: bool = False) -> int:
        stream: Any = client.completions.create(
            model="m", prompt=prompt, stream=True, max_tokens=6000, temperature=0.0,
            extra_body={"grammar": grammar})
        pieces = 0
        for chunk in _reader_thread(stream) if threaded else stream:
            if chunk.choices and chunk.choices[0].text:
                pieces += 1
        return pieces

    def wired() -> int:
        calls = 0
        for item in backend.stream_turn(request, CancelToken()):
            calls += getattr(item, "type", "") == "tool_call_end"
        assert calls == 1, "the forced call was not parsed"
        return calls

    try:
        tokens = raw()
        timed = _interleaved({"raw": raw, "raw_thread": lambda: raw(threaded=True),
                              "toolwire": wired}, runs)
    finally:
        backend.close()
        client.close()
    base_ms = min(timed["raw_ms"], timed["raw_thread_ms"])
    return {"lines": lines, "tokens": tokens, **timed,
            "added_ms": timed["toolwire_ms"] - base_ms,
            "added_cpu_ms": timed["toolwire_cpu_ms"] - timed["raw_cpu_ms"],
            "raw_us_per_token": 1000 * base_ms / tokens}


def run(quick: bool = False) -> list[dict[str, Any]]:
    """Time both paths on two reply sizes; one row per size, then the per-token slope."""
    from tests.support.llama_cpp_server import LlamaCppServer
    from toolwire.templates.default_template import DEFAULT_CHAT_TEMPLATE
    from toolwire.testing.tiny_gguf import write_tiny_gguf

    runs = 3 if quick else 9
    sizes = (4, 12) if quick else (4, 24)
    workdir = scratch_folder("toolwire-bench-completions-")
    model = write_tiny_gguf(workdir / "tiny.gguf", DEFAULT_CHAT_TEMPLATE)
    request = ModelRequest((Message.user("write m.py"),), (write_file,))
    rows: list[dict[str, Any]] = []
    for lines in sizes:
        # a fresh engine per size: llama-cpp-python's server slows down over many requests
        with LlamaCppServer(model, n_ctx=8192, log=workdir / f"server-{lines}.log") as server:
            rows.append(_measure(server, model, request, _reply(lines), runs, lines))
    small, large = rows[0], rows[-1]
    extra = large["tokens"] - small["tokens"]
    wall = (large["added_ms"] - small["added_ms"]) / extra
    cpu = (large["added_cpu_ms"] - small["added_cpu_ms"]) / extra
    rows.append({"lines": "slope", "per_token_us": 1000 * wall, "per_token_cpu_us": 1000 * cpu,
                 "per_turn_ms": small["added_ms"] - wall * small["tokens"],
                 "per_turn_cpu_ms": small["added_cpu_ms"] - cpu * small["tokens"]})
    return rows


def report(rows: list[dict[str, Any]]) -> None:
    """Print the table."""
    print_table([r for r in rows if r["lines"] != "slope"],
                ["lines", "tokens", "raw_ms", "raw_thread_ms", "toolwire_ms", "added_ms",
                 "raw_cpu_ms", "toolwire_cpu_ms", "added_cpu_ms", "raw_us_per_token"],
                "completions backend over the engine's own streaming "
                "(llama-cpp-python server, tiny model, grammar-forced call)")
    slope = next(r for r in rows if r["lines"] == "slope")
    print(f"added per token: {slope['per_token_us']:.1f} us wall, "
          f"{slope['per_token_cpu_us']:.1f} us client CPU; per turn: "
          f"{slope['per_turn_ms']:.2f} ms wall, {slope['per_turn_cpu_ms']:.2f} ms client CPU "
          "(render, tokenize round trip, worker thread)")


if __name__ == "__main__":
    report(rows := run())
    print(write_results(BENCHMARK, rows))
