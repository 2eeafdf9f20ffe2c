"""Benchmark: the Responses and Anthropic Messages APIs against chat completions (issue 38).

* **added cost per streamed token, 32 concurrent streams**: the server runs in its
  own process (uvicorn, as ``toolwire serve`` does) with a scripted backend that
  yields one ``text`` event per token instantly (``benchmarks.openai_server.FastBackend``:
  so only the server is timed) and serves 32 replies at once. 32 clients stream a
  reply each from one API; the server process's CPU time (``/proc/PID/stat``) over
  the tokens streamed is the cost per token. The three APIs run in turns, round after
  round, so each meets the same load; the figure is the median of the rounds, and
  the added cost is each API's over chat completions' in the same rounds.
* **time to first event on a warm model**: ``toolwire serve --demo`` (the tiny real
  llama.cpp model behind the real server), one streaming request at a time after a
  warm-up: from sending the request to reading the stream's first event (the
  chat-completion chunk with the role, ``response.created``, ``message_start``; each
  goes out with the reply's first piece).
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from .harness import print_table, write_results

__all__ = ["run"]

BENCHMARK = "agent_apis"
CLIENTS = 32
ROOT = Path(__file__).resolve().parents[1]
APIS = ("chat_completions", "responses", "messages")
_TICKS = os.sysconf("SC_CLK_TCK")


def _body(api: str, stream: bool = True, model: str = "fast") -> tuple[str, bytes]:
    """The path and body of one request to ``api`` (its last message is the fast
    backend's mode: plain text tokens)."""
    ask = [{"role": "user", "content": "text"}]
    if api == "chat_completions":
        return "/v1/chat/completions", json.dumps(
            {"model": model, "stream": stream, "messages": ask}).encode()
    if api == "responses":
        return "/v1/responses", json.dumps(
            {"model": model, "stream": stream, "input": "text"}).encode()
    return "/v1/messages", json.dumps(
        {"model": model, "stream": stream, "max_tokens": 4096, "messages": ask}).encode()


def serve(port: int, tokens: int) -> None:
    """Serve the fast backend to all three APIs, 32 replies at once (a child process)."""
    import uvicorn

    from toolwire import Chat
    from toolwire.apps.server.app import create_app
    from toolwire.apps.server.uvicorn_server import uvicorn_config
    from toolwire.limits import ServerLimits

    from .openai_server import FastBackend

    backend = FastBackend(tokens)
    limits = ServerLimits(max_waiting=CLIENTS * 2, max_connections=CLIENTS * 4)
    app = create_app(lambda history, system: Chat(backend, history=history), model="fast",
                     backend=backend, limits=limits, concurrent_replies=CLIENTS)
    uvicorn.Server(uvicorn_config(app, host="127.0.0.1", port=port, limits=limits,
                                  log_level="warning")).run()


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _wait_listening(port: int, proc: subprocess.Popen[Any], seconds: float = 60) -> None:
    deadline = time.monotonic() + seconds
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            if time.monotonic() > deadline or proc.poll() is not None:
                raise RuntimeError("the benchmark server did not start") from None
            time.sleep(0.05)


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / _TICKS  # utime + stime


async def _stream(port: int, api: str, model: str = "fast") -> tuple[int, float]:
    """One streaming request; return the body's bytes and when its first event came."""
    path, body = _body(api, model=model)
    started = time.perf_counter()
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json"
                 f"\r\nContent-Length: {len(body)}\r\n\r\n".encode() + body)
    status = await reader.readline()
    if b" 200 " not in status:
        raise RuntimeError(f"{api}: {status!r}")
    while (await reader.readline()) not in (b"\r\n", b""):
        pass
    received, first = 0, 0.0
    while True:  # chunked transfer encoding
        size = int((await reader.readline()).strip() or b"0", 16)
        if size == 0:
            break
        received += len(await reader.readexactly(size + 2)) - 2
        if not first:
            first = time.perf_counter() - started
    writer.close()
    return received, first


def _round(port: int, pid: int, api: str) -> tuple[float, float]:
    """32 clients stream one reply each; return (server CPU seconds, wall seconds)."""
    async def all_of() -> list[tuple[int, float]]:
        return list(await asyncio.gather(*(_stream(port, api) for _ in range(CLIENTS))))

    cpu, wall = _cpu_seconds(pid), time.perf_counter()
    asyncio.run(all_of())
    return _cpu_seconds(pid) - cpu, time.perf_counter() - wall


def _added_cost_rows(quick: bool) -> list[dict[str, Any]]:
    tokens = 2_000 if quick else 8_000
    port = _free_port()
    proc = subprocess.Popen([sys.executable, "-m", "benchmarks.agent_apis", "--serve", str(port),
                             str(tokens)], cwd=ROOT, env={**os.environ,
                                                          "TOOLWIRE_LOAD_PLUGINS": ""})
    cpu: dict[str, list[float]] = {api: [] for api in APIS}
    wall: dict[str, list[float]] = {api: [] for api in APIS}
    try:
        _wait_listening(port, proc)
        for api in APIS:  # warm up every route
            _round(port, proc.pid, api)
        rounds = 3 if quick else 7
        for n in range(rounds):
            for api in APIS[n % 3:] + APIS[:n % 3]:  # each API first in turn
                seconds, elapsed = _round(port, proc.pid, api)
                cpu[api].append(seconds)
                wall[api].append(elapsed)
    finally:
        proc.terminate()
        proc.wait(30)
    streamed = tokens * CLIENTS
    base = statistics.median(cpu["chat_completions"]) / streamed * 1e6
    rows = []
    for api in APIS:
        per_token = statistics.median(cpu[api]) / streamed * 1e6
        paired = [c / b - 1 for c, b in zip(cpu[api], cpu["chat_completions"], strict=True)]
        rows.append({"benchmark": BENCHMARK, "case": "added_cost", "api": api,
                     "clients": CLIENTS, "tokens_per_client": tokens, "rounds": len(cpu[api]),
                     "server_cpu_us_per_token": per_token,
                     "min_cpu_us_per_token": min(cpu[api]) / streamed * 1e6,
                     "added_us_per_token": per_token - base,
                     "added_percent": statistics.median(paired) * 100,
                     "tokens_per_s": streamed / statistics.median(wall[api])})
    return rows


def _first_event_rows(quick: bool) -> list[dict[str, Any]]:
    port = _free_port()
    env = {**os.environ, "TOOLWIRE_LOAD_PLUGINS": ""}
    proc = subprocess.Popen([sys.executable, "-m", "toolwire", "serve", "--demo", "--port",
                             str(port)], cwd=ROOT, env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    times: dict[str, list[float]] = {api: [] for api in APIS}
    try:
        _wait_listening(port, proc)
        ready = time.monotonic() + 120
        while True:  # listening comes before the model is loaded
            try:
                asyncio.run(_stream(port, "chat_completions", "toolwire-demo"))
                break
            except RuntimeError:
                if time.monotonic() > ready:
                    raise
                time.sleep(0.1)
        for api in APIS:  # warm: each route once
            asyncio.run(_stream(port, api, "toolwire-demo"))
        for _ in range(5 if quick else 30):
            for api in APIS:
                times[api].append(asyncio.run(_stream(port, api, "toolwire-demo"))[1])
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(30)
    return [{"benchmark": BENCHMARK, "case": "first_event", "api": api,
             "requests": len(times[api]), "model": "toolwire serve --demo (tiny llama.cpp)",
             "median_ms": statistics.median(times[api]) * 1000,
             "p90_ms": sorted(times[api])[int(0.9 * (len(times[api]) - 1))] * 1000,
             "min_ms": min(times[api]) * 1000} for api in APIS]


def run(quick: bool = False) -> list[dict[str, Any]]:
    """Measure each API's added cost per streamed token and its time to first event."""
    return [*_added_cost_rows(quick), *_first_event_rows(quick)]


def report(rows: list[dict[str, Any]]) -> None:
    """Print the two tables."""
    print_table([r for r in rows if r["case"] == "added_cost"],
                ["api", "clients", "tokens_per_client", "rounds", "server_cpu_us_per_token",
                 "min_cpu_us_per_token", "added_us_per_token", "added_percent",
                 "tokens_per_s"],
                f"server CPU per streamed token, {CLIENTS} concurrent streams, over chat "
                "completions (median of rounds run in turns)")
    print_table([r for r in rows if r["case"] == "first_event"],
                ["api", "requests", "median_ms", "p90_ms", "min_ms"],
                "time to first event, warm tiny model (toolwire serve --demo)")


if __name__ == "__main__":
    if sys.argv[1:2] == ["--serve"]:
        serve(int(sys.argv[2]), int(sys.argv[3]))
    else:
        result = run(quick="--quick" in sys.argv)
        report(result)
        print(write_results(BENCHMARK, result))
