"""Benchmark: a normal request's latency while hostile connections are open (issue 28, item 2).

The server runs in its own process as ``toolwire serve`` runs it (uvicorn, the
default :class:`ServerLimits`), with a stand-in backend that answers at once, so
what is measured is the connection handling. An attacker process opens 200
hostile connections, a quarter of each kind: idle, a request head never
finished, a body never finished on a route that reads it
(``/v1/chat/completions``), and one byte of a declared body on a route that does
not (``/healthz``). The attacker either holds what it opened (the server closes
what its bounds say) or re-opens every connection the server closes (a flood
that never stops), from one address or spread over ten loopback addresses
(under the per-client bound, so all 200 are held). Meanwhile a client sends
normal requests, each on a new connection, one after the other, and times each
from connecting to the last byte of the answer; the same with no attacker is
the baseline.
"""

from __future__ import annotations

import json
import os
import select
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from .harness import print_table, write_results

__all__ = ["run"]

BENCHMARK = "connection_flood"
HOSTILE = 200
_KINDS = 4


def serve(port: int) -> None:
    """Serve a backend that answers at once, as ``toolwire serve`` would (in a child)."""
    import uvicorn

    from toolwire import Chat
    from toolwire.apps.server.app import create_app
    from toolwire.apps.server.uvicorn_server import uvicorn_config
    from toolwire.limits import ServerLimits

    from .openai_server import FastBackend

    backend = FastBackend(8)
    limits = ServerLimits()
    app = create_app(lambda history, system: Chat(backend, history=history), model="fast",
                     backend=backend, limits=limits)
    uvicorn.Server(uvicorn_config(app, host="127.0.0.1", port=port, limits=limits,
                                  log_level="critical")).run()


# -- the attacker (a child process) ------------------------------------------------------------


def _hostile(port: int, kind: int, source: str) -> socket.socket:
    conn = socket.create_connection(("127.0.0.1", port), timeout=5, source_address=(source, 0))
    conn.setblocking(False)
    pieces = [b"", b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ",
              b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n"
              b"Content-Type: application/json\r\nContent-Length: 5000\r\n\r\n{",
              b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 5000\r\n\r\n{"]
    if pieces[kind]:
        conn.send(pieces[kind])
    return conn


def _closed(conn: socket.socket) -> bool:
    try:
        while conn.recv(65536):
            pass
    except BlockingIOError:
        return False
    except OSError:
        return True
    return True


def attack(port: int, count: int, sources: int, reopen: bool) -> None:
    """Open ``count`` hostile connections; print how many stay open on each stdin line
    (re-opening closed ones first when ``reopen``)."""
    addresses = [f"127.0.0.{2 + i}" for i in range(sources)] if sources > 1 else ["127.0.0.1"]
    conns = [_hostile(port, i % _KINDS, addresses[i % len(addresses)]) for i in range(count)]
    reopened = 0
    print("ready", flush=True)
    while True:
        if reopen:
            for i, conn in enumerate(conns):
                if _closed(conn):
                    conn.close()
                    conns[i] = _hostile(port, i % _KINDS, addresses[i % len(addresses)])
                    reopened += 1
            time.sleep(0.01)
        if select.select([sys.stdin], [], [], 0 if reopen else None)[0]:
            if not sys.stdin.readline():
                return
            open_now = sum(not _closed(c) for c in conns)
            print(json.dumps({"open": open_now, "reopened": reopened}), flush=True)


# -- the benchmark -------------------------------------------------------------------------------


def _child(*args: str) -> subprocess.Popen[str]:
    root = Path(__file__).resolve().parents[1]
    return subprocess.Popen([sys.executable, "-m", "benchmarks.connection_flood", *args],
                            cwd=root, env={**os.environ, "TOOLWIRE_LOAD_PLUGINS": ""},
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)


def _start_server() -> tuple[subprocess.Popen[str], int]:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = int(probe.getsockname()[1])
    proc = _child("--serve", str(port))
    deadline = time.monotonic() + 30
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return proc, port
        except OSError:
            if time.monotonic() > deadline or proc.poll() is not None:
                raise RuntimeError("the benchmark server did not start") from None
            time.sleep(0.05)


_CHAT = json.dumps({"model": "fast", "messages": [{"role": "user", "content": "hi"}]}).encode()
_REQUESTS = {
    "GET /healthz": b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n",
    "POST /v1/chat/completions": b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                                 b"Content-Type: application/json\r\nContent-Length: "
                                 + str(len(_CHAT)).encode() + b"\r\n\r\n" + _CHAT,
}


def _one_request(port: int, request: bytes) -> tuple[float, bool]:
    """Seconds from connecting to the whole answer, and whether it was a 200 (a
    connection closed or reset before the answer is not)."""
    started = time.perf_counter()
    try:
        return _answer_time(port, request, started)
    except OSError:
        return time.perf_counter() - started, False


def _answer_time(port: int, request: bytes, started: float) -> tuple[float, bool]:
    with socket.create_connection(("127.0.0.1", port), timeout=10) as conn:
        conn.sendall(request)
        data = b""
        while b"\r\n\r\n" not in data:
            chunk = conn.recv(65536)
            if not chunk:
                return time.perf_counter() - started, False
            data += chunk
        head, _, body = data.partition(b"\r\n\r\n")
        length = next(int(line.split(b":", 1)[1]) for line in head.split(b"\r\n")
                      if line.lower().startswith(b"content-length:"))
        while len(body) < length:
            chunk = conn.recv(65536)
            if not chunk:
                break
            body += chunk
    return time.perf_counter() - started, head.startswith(b"HTTP/1.1 200")


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def _measure(port: int, label: str, requests: int, case: dict[str, Any],
             attacker: subprocess.Popen[str] | None) -> dict[str, Any]:
    for _ in range(10):  # warm-up
        _one_request(port, _REQUESTS[label])
    times, failures = [], 0
    for _ in range(requests):
        seconds, ok = _one_request(port, _REQUESTS[label])
        times.append(seconds)
        failures += not ok
    held: dict[str, Any] = {"open": 0, "reopened": 0}
    if attacker is not None:
        assert attacker.stdin is not None and attacker.stdout is not None
        attacker.stdin.write("count\n")
        attacker.stdin.flush()
        held = json.loads(attacker.stdout.readline())
    return {"benchmark": BENCHMARK, **case, "request": label, "requests": requests,
            "failed": failures, "p50_ms": statistics.median(times) * 1000,
            "p99_ms": _percentile(times, 0.99) * 1000, "max_ms": max(times) * 1000,
            "hostile_open": held["open"], "hostile_reopened": held["reopened"]}


def run(quick: bool = False) -> list[dict[str, Any]]:
    """Normal requests with no attacker, then with 200 hostile connections of each flood."""
    requests = 100 if quick else 500
    cases = [{"hostile": 0, "sources": 0, "attack": "none"},
             {"hostile": HOSTILE, "sources": 1, "attack": "held"},
             {"hostile": HOSTILE, "sources": 10, "attack": "held"},
             {"hostile": HOSTILE, "sources": 1, "attack": "reopened"},
             {"hostile": HOSTILE, "sources": 10, "attack": "reopened"}]
    rows: list[dict[str, Any]] = []
    for case in cases:
        server, port = _start_server()
        attacker = None
        try:
            if case["hostile"]:
                attacker = _child("--attack", str(port), str(case["hostile"]),
                                  str(case["sources"]), str(case["attack"] == "reopened"))
                assert attacker.stdout is not None
                if attacker.stdout.readline().strip() != "ready":
                    raise RuntimeError("the attacker did not start")
                time.sleep(0.3)
            for label in _REQUESTS:
                rows.append(_measure(port, label, requests, case, attacker))
        finally:
            if attacker is not None:
                attacker.terminate()
                attacker.wait(10)
            server.terminate()
            server.wait(10)
    return rows


def report(rows: list[dict[str, Any]]) -> None:
    """Print the table."""
    print_table(rows, ["hostile", "sources", "attack", "request", "requests", "failed",
                       "p50_ms", "p99_ms", "max_ms", "hostile_open", "hostile_reopened"],
                f"A normal request (new connection each) while {HOSTILE} hostile connections "
                "are open (default bounds)")


if __name__ == "__main__":
    if sys.argv[1:2] == ["--serve"]:
        serve(int(sys.argv[2]))
    elif sys.argv[1:2] == ["--attack"]:
        attack(int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), sys.argv[5] == "True")
    else:
        result = run(quick="--quick" in sys.argv)
        report(result)
        print(write_results(BENCHMARK, result))
