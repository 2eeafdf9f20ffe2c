"""Benchmark: a tool call through the dispatcher, plain Python vs an MCP server.

The same ``add(a, b)`` runs as a plain toolwire tool and on a real MCP server
(the test suite's, the official SDK's server) over stdio and over streamable
HTTP on 127.0.0.1, each through ``Dispatcher.dispatch`` with a timeout (the
path of every chat call: validation, the worker pool, the result text). The raw
SDK rows call the same server with ``mcp.Client`` directly on one event loop,
with nothing of toolwire in between, so the difference is what toolwire's bridge
(the worker thread, the hand-off to the servers' loop thread, the deadline and
cancellation watch) costs. Also: a stdio server's start plus listing, as
``MCPServers.tools()`` pays it.

And huge results, cut while they are read (``max_message_bytes``, 4 MiB): the
seconds from the call to the cut result and the host's peak of traced Python
memory, for 100 MB and 400 MB from the 'raw' server (it writes its result in
pieces, so the server costs little and the figure is the host's: the pipe and
the cut), 100 MB from the SDK's own server over stdio and over streamable HTTP
(its serialization included), and, for comparison, 400 MB through a bare pipe (the
floor the stdio rows stand on) and 10 MB through the SDK's own stdio client with no
bound (its reading is quadratic in a line's length).
"""

from __future__ import annotations

import asyncio
import resource
import socket
import statistics
import subprocess
import sys
import time
import tracemalloc
from pathlib import Path
from typing import Any

from toolwire import Dispatcher, ToolCall, ToolRegistry, tool

from .harness import print_table, time_runs, write_results

__all__ = ["run"]

BENCHMARK = "mcp_tools"
SERVER = str(Path(__file__).resolve().parents[1] / "tests" / "support" / "mcp_servers.py")


@tool(read_only=True)
def add(a: int, b: int) -> int:
    """Add two whole numbers."""
    return a + b


def _per_call(dispatcher: Dispatcher, calls: int, runs: int) -> dict[str, Any]:
    call = ToolCall("c", "add", {"a": 2, "b": 40})

    def batch() -> None:
        for _ in range(calls):
            result = dispatcher.dispatch(call)
            assert result.content == "42", result.content

    timing = time_runs(batch, runs=runs)
    return {"median_us": timing["median_ms"] * 1000 / calls,
            "min_us": timing["min_ms"] * 1000 / calls, "runs": runs, "calls_per_run": calls}


def _raw_sdk(target: Any, calls: int, runs: int) -> dict[str, Any]:
    from mcp import Client

    async def measure() -> list[float]:
        samples = []
        async with Client(target, cache=None) as client:
            await client.call_tool("add", {"a": 2, "b": 40})
            for _ in range(runs):
                started = time.perf_counter()
                for _ in range(calls):
                    await client.call_tool("add", {"a": 2, "b": 40})
                samples.append((time.perf_counter() - started) * 1e6 / calls)
        return samples

    samples = asyncio.run(measure())
    return {"median_us": statistics.median(samples), "min_us": min(samples), "runs": runs,
            "calls_per_run": calls}


def _cut_result(tools: list[Any], megabytes: float, runs: int) -> dict[str, Any]:
    """Seconds to a cut ``huge`` result and the host's peak traced memory, per call."""
    dispatcher = Dispatcher(ToolRegistry(tools), timeout=600.0)
    call = ToolCall("c", "huge", {"megabytes": megabytes})
    seconds, peaks = [], []
    for _ in range(runs):
        tracemalloc.start()
        started = time.perf_counter()
        result = dispatcher.dispatch(call)
        seconds.append(time.perf_counter() - started)
        peaks.append(tracemalloc.get_traced_memory()[1] / 2**20)
        tracemalloc.stop()
        assert not result.is_error and "[result cut: " in result.content, result.content[-300:]
    return {"median_us": statistics.median(seconds) * 1e6, "min_us": min(seconds) * 1e6,
            "runs": runs, "calls_per_run": 1, "peak_python_mb": max(peaks)}


def _raw_sdk_huge(megabytes: float) -> dict[str, Any]:
    """The same call through the SDK's own stdio client: no bound, the whole line read."""
    from mcp import Client, StdioServerParameters

    async def measure() -> float:
        target = StdioServerParameters(command=sys.executable, args=[SERVER, "raw"])
        async with Client(target, cache=None) as client:
            started = time.perf_counter()
            await client.call_tool("huge", {"megabytes": megabytes}, read_timeout_seconds=600)
            return time.perf_counter() - started

    tracemalloc.start()
    seconds = asyncio.run(measure())
    peak = tracemalloc.get_traced_memory()[1] / 2**20
    tracemalloc.stop()
    return {"median_us": seconds * 1e6, "min_us": seconds * 1e6, "runs": 1,
            "calls_per_run": 1, "peak_python_mb": peak}


def _pipe_alone(megabytes: int) -> dict[str, Any]:
    """The floor under the stdio rows: a child writes the bytes, the host reads the pipe."""
    import os

    writer = subprocess.Popen([sys.executable, "-c",
                               "import sys\nb = b'x' * 2**20\n"
                               f"for _ in range({megabytes}): sys.stdout.buffer.write(b)\n"],
                              stdout=subprocess.PIPE)
    assert writer.stdout is not None
    started = time.perf_counter()
    while os.read(writer.stdout.fileno(), 2**20):
        pass
    seconds = time.perf_counter() - started
    writer.wait()
    writer.stdout.close()
    return {"median_us": seconds * 1e6, "min_us": seconds * 1e6, "runs": 1,
            "calls_per_run": 1, "peak_python_mb": 0.0}


def _huge_rows(row: Any, quick: bool) -> None:
    from toolwire.plugins.mcp_tools import MCPServers, ServerConfig

    runs = 1 if quick else 3
    raw = ServerConfig("raw", command=sys.executable, args=[SERVER, "raw"])
    with MCPServers([raw], connect_timeout=120) as servers:
        tools = servers.tools(strict=True)
        row("huge result cut while read: 100 MB, raw server, stdio", _cut_result(tools, 100, runs))
        row("huge result cut while read: 400 MB, raw server, stdio", _cut_result(tools, 400, runs))
    row("400 MB through a pipe alone (os.read, no MCP): the floor", _pipe_alone(400))
    sdk = ServerConfig("sdk", command=sys.executable, args=[SERVER, "tools"])
    with MCPServers([sdk], connect_timeout=120) as servers:
        row("huge result cut while read: 100 MB, SDK server, stdio",
            _cut_result(servers.tools(strict=True), 100, runs))
    url, process = _http_server()
    try:
        with MCPServers([url], connect_timeout=120) as servers:
            row("huge result cut while read: 100 MB, SDK server, HTTP (SSE)",
                _cut_result(servers.tools(strict=True), 100, runs))
    finally:
        process.kill()
        process.wait()
    row("host's peak resident memory (MB, whole process) after the cut results",
        {"median_us": 0.0, "min_us": 0.0, "runs": 1, "calls_per_run": 0,
         "peak_python_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024})
    if not quick:
        row("huge result, SDK's own stdio client (no bound): 10 MB", _raw_sdk_huge(10))


def _http_server() -> tuple[str, subprocess.Popen[bytes]]:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    process = subprocess.Popen([sys.executable, SERVER, "tools", "--http", str(port)],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 90
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            return f"http://127.0.0.1:{port}/mcp", process
        except OSError:
            if time.monotonic() > deadline or process.poll() is not None:
                process.kill()
                raise RuntimeError("the MCP test server did not start") from None
            time.sleep(0.1)


def run(quick: bool = False) -> list[dict[str, Any]]:
    """Microseconds per call for each path, and per start of a stdio server."""
    from mcp import StdioServerParameters

    from toolwire.plugins.mcp_tools import MCPServers, ServerConfig

    calls, runs = (100, 3) if quick else (300, 5)
    stdio = ServerConfig("bench", command=sys.executable, args=[SERVER, "tools"])
    rows: list[dict[str, Any]] = []

    def row(case: str, stats: dict[str, Any]) -> None:
        rows.append({"benchmark": BENCHMARK, "case": case, **stats})

    row("plain Python tool, dispatch", _per_call(
        Dispatcher(ToolRegistry([add]), timeout=60.0), calls, runs))
    with MCPServers([stdio], connect_timeout=120) as servers:
        row("MCP stdio, dispatch", _per_call(
            Dispatcher(ToolRegistry(servers.tools(strict=True)), timeout=60.0), calls, runs))
    row("MCP stdio, raw SDK (no toolwire)", _raw_sdk(
        StdioServerParameters(command=sys.executable, args=[SERVER, "tools"]), calls, runs))
    url, process = _http_server()
    try:
        with MCPServers([url], connect_timeout=120) as servers:
            row("MCP HTTP, dispatch", _per_call(
                Dispatcher(ToolRegistry(servers.tools(strict=True)), timeout=60.0),
                calls // 2, runs))
        row("MCP HTTP, raw SDK (no toolwire)", _raw_sdk(url, calls // 2, runs))
    finally:
        process.kill()
        process.wait()
    starts = []
    for _ in range(2 if quick else 4):
        started = time.perf_counter()
        with MCPServers([stdio], connect_timeout=120) as servers:
            servers.tools(strict=True)
            starts.append((time.perf_counter() - started) * 1000)
    row("MCP stdio server start + listing",
        {"median_us": statistics.median(starts) * 1000, "min_us": min(starts) * 1000,
         "runs": len(starts), "calls_per_run": 1})
    _huge_rows(row, quick)
    return rows


def report(rows: list[dict[str, Any]]) -> None:
    """Print the table."""
    print_table(rows, ["case", "median_us", "min_us", "runs", "calls_per_run", "peak_python_mb"],
                "A tool call through the dispatcher: plain Python vs MCP (microseconds), "
                "and huge results cut while read")


if __name__ == "__main__":
    result = run(quick="--quick" in sys.argv)
    report(result)
    print(f"written: {write_results(BENCHMARK, result)}")
