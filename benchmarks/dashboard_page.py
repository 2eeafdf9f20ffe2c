"""Benchmark: what the chat page's server side and the page itself cost.

* **approvals on, per token**: a reply of N text tokens streamed from ``POST /v1/chat``
  (uvicorn in this process, a scripted fast backend, no tools called) with approvals
  on, against the same with approvals off. The difference is what merging the approval
  requests into the stream costs each event.
* **approval round trip**: a write call's ``approval_request`` read by the client, the
  answer posted to ``POST /v1/chat/{id}/approval``, until its ``tool_result`` is read.
* **reload of a kept conversation** (headless Chromium, skipped without it): a
  conversation of N exchanges (a tool call, its result and a Markdown answer each) put
  into the browser's storage, then the page reloaded until the last answer shows:
  the time a person waits after a reload, and the storage it takes.
"""

from __future__ import annotations

import asyncio
import http.client
import json
import socket
import statistics
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from toolwire import CancelToken, Chat, Message, ModelRequest, TurnEnd, tool
from toolwire.events import Event, TextEvent, ToolCallEndEvent

from .harness import print_table, time_runs

__all__ = ["run"]

BENCHMARK = "dashboard_page"
CHROMIUM = Path("/usr/bin/chromium")


@tool
def write_note(text: str) -> str:
    """Write a note.

    :param text: the note
    """
    return "saved"


class _FastBackend:
    """``tokens`` text events a turn; the message ``write`` makes the first turn a write call."""

    name = "fast"

    def __init__(self, tokens: int) -> None:
        self.tokens = tokens

    def make_call_id(self, index: int) -> str:
        """Fixed-form ids."""
        return f"call_{index}"

    def stream_turn(self, request: ModelRequest, cancel: CancelToken) -> Iterator[Event | TurnEnd]:
        """Yield the reply's events."""
        if request.messages[-1].content == "write" and request.messages[-1].role == "user":
            yield ToolCallEndEvent("write_note", {"text": "x"}, index=0)
            yield TurnEnd("tool_calls")
            return
        for i in range(self.tokens):
            yield TextEvent(f"w{i} ")
        yield TurnEnd("stop", usage={"completion_tokens": self.tokens})


class _Server:
    """uvicorn on a free loopback port in a thread, serving ``app``."""

    def __init__(self, app: Any) -> None:
        import uvicorn

        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.port = int(self.sock.getsockname()[1])
        self.server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="off"))
        self.thread = threading.Thread(target=self.server.run, kwargs={"sockets": [self.sock]},
                                       daemon=True)
        self.thread.start()
        while not self.server.started:
            time.sleep(0.01)

    def close(self) -> None:
        self.server.should_exit = True
        self.thread.join(10)
        self.sock.close()


def _app(tokens: int, approvals: bool) -> Any:
    from toolwire.apps.server.app import create_app

    backend = _FastBackend(tokens)

    def make_chat(history: Sequence[Message], system: str | None) -> Chat:
        return Chat(backend, tools=[write_note], history=history)

    return create_app(make_chat, model="fast", approvals=approvals)


def _items(response: http.client.HTTPResponse) -> Iterator[dict[str, Any]]:
    for line in response:
        if line.startswith(b"data: "):
            yield json.loads(line[6:])


def _chat(port: int, message: str, answer: bool = False) -> list[float]:
    """One reply; with ``answer``, approve each write and return the round trips (s)."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    conn.request("POST", "/v1/chat", json.dumps({"messages": [
        {"role": "user", "content": message}]}), {"Content-Type": "application/json"})
    response = conn.getresponse()
    trips: list[float] = []
    asked_at = 0.0
    chat_id = ""
    for item in _items(response):
        if item["type"] == "session":
            chat_id = item["id"]
        elif item["type"] == "approval_request" and answer:
            asked_at = time.perf_counter()
            other = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
            other.request("POST", f"/v1/chat/{chat_id}/approval",
                          json.dumps({"id": item["id"], "answer": "approve"}),
                          {"Content-Type": "application/json"})
            other.getresponse().read()
            other.close()
        elif item["type"] == "tool_result" and asked_at:
            trips.append(time.perf_counter() - asked_at)
    conn.close()
    return trips


def _stream_cost(tokens: int, runs: int) -> list[dict[str, Any]]:
    # both servers up at once and the runs interleaved, so load from elsewhere on the
    # machine falls on both alike; the minimum is the least disturbed run
    servers = {approvals: _Server(_app(tokens, approvals)) for approvals in (False, True)}
    samples: dict[bool, list[float]] = {False: [], True: []}
    try:
        for server in servers.values():
            _chat(server.port, "warm up")
        for _ in range(runs):
            for approvals, server in servers.items():
                started = time.perf_counter()
                _chat(server.port, "talk")
                samples[approvals].append(time.perf_counter() - started)
    finally:
        for server in servers.values():
            server.close()
    rows = []
    for approvals in (False, True):
        rows.append({"case": f"reply of {tokens} tokens, approvals {'on' if approvals else 'off'}",
                     "median_ms": statistics.median(samples[approvals]) * 1000,
                     "min_ms": min(samples[approvals]) * 1000,
                     "per_token_us": min(samples[approvals]) / tokens * 1e6})
    rows.append({"case": "approvals on: added per token (from the minimums)",
                 "per_token_us": (min(samples[True]) - min(samples[False])) / tokens * 1e6})
    return rows


def _merge_cost(events: int, runs: int) -> dict[str, Any]:
    """The merge alone, in one event loop: ``events`` events through it and without."""
    from toolwire.apps.server.approvals import with_approval_requests
    from toolwire.events import ApprovalRequestEvent

    async def source() -> Any:
        for i in range(events):
            yield TextEvent(f"w{i} ")
            if i % 64 == 0:
                await asyncio.sleep(0)  # a worker thread's events arrive in bursts

    async def plain() -> None:
        async for _ in source():
            pass

    async def merged() -> None:
        requests: asyncio.Queue[ApprovalRequestEvent] = asyncio.Queue()
        async for _ in with_approval_requests(source(), requests):
            pass

    direct = time_runs(lambda: asyncio.run(plain()), runs)["min_ms"]
    through = time_runs(lambda: asyncio.run(merged()), runs)["min_ms"]
    return {"case": f"the approval merge alone, {events} events (no HTTP)",
            "min_ms": through, "per_token_us": (through - direct) / events * 1000}


def _round_trip(runs: int) -> dict[str, Any]:
    server = _Server(_app(10, True))
    try:
        trips: list[float] = []
        for _ in range(runs):
            trips.extend(_chat(server.port, "write", answer=True))
    finally:
        server.close()
    return {"case": "approval round trip (asked -> answer posted -> tool_result read)",
            "median_ms": statistics.median(trips) * 1000, "min_ms": min(trips) * 1000}


def _conversation(exchanges: int) -> list[dict[str, Any]]:
    answer = ("Here is **what I found**:\n\n- alex: maintains the parsers\n- sam: writes the "
              "docs\n\n```python\nprint('alex')\n```\n")
    messages: list[dict[str, Any]] = []
    for i in range(exchanges):
        call = {"id": f"call_{i}", "type": "function",
                "function": {"name": "lookup", "arguments": json.dumps({"name": f"alex {i}"})}}
        messages += [{"role": "user", "content": f"question {i}"},
                     {"role": "assistant", "content": "Let me look.", "tool_calls": [call]},
                     {"role": "tool", "tool_call_id": f"call_{i}",
                      "content": f"alex {i}: a colleague who maintains the parsers"},
                     {"role": "assistant", "content": answer}]
    return messages


def _reloads(sizes: Sequence[int], runs: int) -> list[dict[str, Any]]:
    if not CHROMIUM.exists():
        print(f"(no Chromium at {CHROMIUM}: the page reload is not measured)")
        return []
    from playwright.sync_api import sync_playwright

    rows = []
    server = _Server(_app(10, False))
    try:
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(
                executable_path=str(CHROMIUM), args=["--headless=new", "--no-sandbox",
                                                     "--disable-gpu"])
            page = browser.new_page(viewport={"width": 1280, "height": 800})
            base = f"http://127.0.0.1:{server.port}/"
            page.goto(base)
            for size in sizes:
                store = {"version": 1, "current": "bench", "conversations": [
                    {"id": "bench", "title": "bench", "created": 1, "updated": 1,
                     "settings": {"system": "", "readOnly": False, "disabledTools": []},
                     "messages": _conversation(size), "extras": {"replies": {}, "calls": {}}}]}
                stored = json.dumps(store)
                page.evaluate("(s) => localStorage.setItem('toolwire.dashboard.v1', s)", stored)
                samples = []
                for _ in range(runs):
                    started = time.perf_counter()
                    page.reload()
                    page.wait_for_function(
                        "(n) => document.querySelectorAll('[data-testid=user-message]').length"
                        " === n && document.querySelectorAll('.markdown strong').length === n",
                        arg=size)
                    samples.append(time.perf_counter() - started)
                rows.append({"case": f"reload: a kept conversation of {size} exchanges "
                                     f"({len(stored) / 1024:.0f} KiB stored)",
                             "median_ms": statistics.median(samples) * 1000,
                             "min_ms": min(samples) * 1000})
            browser.close()
    finally:
        server.close()
    return rows


def run(quick: bool = False) -> list[dict[str, Any]]:
    """Measure; return the rows (``quick``: fewer runs and sizes)."""
    runs = 3 if quick else 9
    rows = _stream_cost(200 if quick else 2000, runs)
    rows.append(_merge_cost(2000 if quick else 20000, runs))
    rows.append(_round_trip(runs * 3))
    rows += _reloads((10, 100) if quick else (10, 100, 400), 3 if quick else 5)
    return rows


def report(rows: Sequence[dict[str, Any]]) -> None:
    """Print the table."""
    print_table(rows, ["case", "median_ms", "min_ms", "per_token_us"],
                title="Chat page: approvals' cost a token, the approval round trip, a page "
                      "reload of a kept conversation (headless Chromium)")


if __name__ == "__main__":
    from .harness import write_results

    result = run()
    report(result)
    print(write_results(BENCHMARK, result))
