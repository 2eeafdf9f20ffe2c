"""Benchmark: issue 40's attacks, items 1 and 4, on the commit before it and on this tree.

Each case runs in a child process of its own (so one that never ends is killed at its
bound, and its peak memory is its own ``ru_maxrss``), once with this tree's toolwire and
once with :data:`BASE_COMMIT`'s (unpacked from git into a temporary folder and put first
on ``PYTHONPATH``). Every row: the case, the tree, what ended it, the seconds it took
(wall time; for the cancel case, from the cancel to the end of the turn), and the peak
resident memory of the child.

* **Item 1, MCP output schemas**: a real stdio MCP server (``tests/support/
  mcp_output_server.py``) whose tool ``redos`` has an output ``pattern`` of ``^(a+)+$``
  and answers 29 characters; and whose tool ``chain`` has a 40-level ``anyOf`` output
  schema (the call is bounded at 30 s, then the server's plain ``add`` is called to see
  whether anything of that server still answers).
* **Item 4**: thousands of unanswered calls in one message, through the tiny llama.cpp
  model's prompt fitting (the curve: 2,000 to 30,000 calls) and as a request to the real
  server (30,000 calls, 2.4 MB); a 120,000-call body posted while another client polls
  ``/healthz`` (the longest wait it saw); call arguments nested 900 deep; a tool of
  exactly 20,000 untyped schema values; a 3,400-token prompt cancelled while SmolLM2
  (the ``real-model`` extra, without weight repacking) evaluates it.

Run ``python -m benchmarks hostile_round_three [--quick]`` (``--quick``: fewer sizes in
the curve). The machine is shared: the figures are what it gave under that load.
"""

from __future__ import annotations

import io
import json
import os
import resource
import subprocess
import sys
import tarfile
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from .harness import fit_exponent, print_table, scratch_folder, write_results

__all__ = ["BASE_COMMIT", "CASES", "report", "run"]

BENCHMARK = "hostile_round_three"
BASE_COMMIT = "f0bfb37"
"""main before issue 40."""
REPO = Path(__file__).resolve().parent.parent
CURVE = (2_000, 4_000, 8_000, 16_000, 30_000)
CASE_BOUND = 600.0
"""Seconds a case may take before its child is killed (the row then says so)."""


# -- the cases, each run in a child ------------------------------------------------------------


def _peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _mcp_owner() -> Any:
    from tests.support.mcp_output_server import SCRIPT
    from toolwire.plugins.mcp_tools import MCPServers
    from toolwire.plugins.mcp_tools.config import server_from_command

    return MCPServers([server_from_command(f"{sys.executable} {SCRIPT}", name="outputs")],
                      connect_timeout=90)


def _dispatch(tools: Any, name: str, timeout: float) -> Any:
    from toolwire import Dispatcher, ToolCall, ToolRegistry

    return Dispatcher(ToolRegistry(list(tools)), timeout=timeout).dispatch(
        ToolCall("c1", name, {}))


def case_mcp_output_redos() -> dict[str, Any]:
    owner = _mcp_owner()
    tools = owner.tools()
    started = time.perf_counter()
    result = _dispatch(tools, "redos", 120.0)
    seconds = time.perf_counter() - started
    return {"outcome": f"{result.error_kind}: {result.content[:70]}", "seconds": seconds}


def case_mcp_output_chain() -> dict[str, Any]:
    owner = _mcp_owner()
    started = time.perf_counter()
    tools = owner.tools()
    if not any(t.name == "chain" for t in tools):
        return {"outcome": "refused at listing: the tool is left out with a note",
                "seconds": time.perf_counter() - started}
    started = time.perf_counter()
    result = _dispatch(tools, "chain", 30.0)
    seconds = time.perf_counter() - started
    after = _dispatch(tools, "add", 10.0)
    return {"outcome": f"chain: {result.error_kind}; add afterwards: {after.error_kind or 'ok'}",
            "seconds": seconds, "exit": True}


def _tiny_backend(n_ctx: int = 4096) -> Any:
    from toolwire.plugins.llama_cpp.backend import LlamaCppBackend
    from toolwire.templates.default_template import DEFAULT_CHAT_TEMPLATE
    from toolwire.testing.tiny_gguf import write_tiny_gguf

    folder = scratch_folder("toolwire-bench-")
    path = write_tiny_gguf(folder / "tiny.gguf", DEFAULT_CHAT_TEMPLATE, context_length=n_ctx)
    return LlamaCppBackend(path, n_ctx=n_ctx, max_tokens=8, temperature=0.0, n_threads=1,
                           progress=False)


def _unanswered_calls_request(calls: int) -> Any:
    from toolwire import Message, ModelRequest, Tool, ToolCall

    tool = Tool({"name": "lookup", "parameters": {"type": "object", "properties": {
        "q": {"type": "string"}}}}, lambda q: q)
    made = [ToolCall(f"call_{i}", "lookup", {"q": "x"}) for i in range(calls)]
    return ModelRequest((Message.user("hi"), Message.assistant("", made), Message.user("go")),
                        (tool,))


def case_fit(calls: int) -> dict[str, Any]:
    from toolwire import CancelToken

    backend = _tiny_backend()
    request = _unanswered_calls_request(calls)
    started = time.perf_counter()
    fitted, prompt = backend.fit_prompt(request, CancelToken())
    return {"outcome": f"{prompt.n_tokens} prompt tokens, {fitted.removed} dropped",
            "seconds": time.perf_counter() - started}


@contextmanager
def _server(backend: Any, **limits: Any) -> Iterator[str]:
    import socket

    import uvicorn

    from toolwire import Chat
    from toolwire.apps.server.app import create_app
    from toolwire.limits import ServerLimits
    from toolwire.testing import isolated_plugin_manager

    def make_chat(history: Any, system: str | None) -> Any:
        return Chat(backend, history=history, system_prompt=system,
                    plugins=isolated_plugin_manager())

    app = create_app(make_chat, backend=backend, model="tiny", model_id="tiny",
                     limits=ServerLimits(**limits))
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    server = uvicorn.Server(uvicorn.Config(app, log_level="critical", lifespan="off"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.01)
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    finally:
        server.should_exit = True
        thread.join(10)


def _post(base: str, body: bytes, timeout: float = CASE_BOUND) -> tuple[int, bytes]:
    import http.client

    host, port = base.removeprefix("http://").split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=timeout)
    try:
        conn.request("POST", "/v1/chat/completions", body=body,
                     headers={"Content-Type": "application/json"})
        response = conn.getresponse()
        return response.status, response.read()
    finally:
        conn.close()


def _calls_body(calls: int, arguments: str = '{"q": "x"}', tools: Any = None) -> bytes:
    tool_calls = [{"id": f"c{i}", "type": "function",
                   "function": {"name": "lookup", "arguments": arguments}}
                  for i in range(calls)]
    messages: list[Any] = [{"role": "user", "content": "hi"},
                           {"role": "assistant", "content": None, "tool_calls": tool_calls},
                           {"role": "user", "content": "go on"}]
    if calls == 1:  # an answered call
        messages.insert(2, {"role": "tool", "tool_call_id": "c0", "content": "ok"})
    return json.dumps({"model": "tiny", "messages": messages, "max_tokens": 4,
                       "tools": tools or [{"type": "function", "function": {
                           "name": "lookup", "parameters": {"type": "object", "properties": {
                               "q": {"type": "string"}}}}}]}).encode()


def _answered(status: int, body: bytes) -> str:
    try:
        error = json.loads(body).get("error")
    except ValueError:
        error = None
    detail = error.get("message", "")[:60] if isinstance(error, dict) else ""
    return f"HTTP {status}" + (f": {detail}" if detail else "")


def case_many_calls_request() -> dict[str, Any]:
    body = _calls_body(30_000)
    with _server(_tiny_backend()) as base:
        started = time.perf_counter()
        status, answer = _post(base, body)
        seconds = time.perf_counter() - started
    return {"outcome": f"{_answered(status, answer)} ({len(body) / 1e6:.1f} MB body)",
            "seconds": seconds}


_POLLER = """
import http.client, select, sys, time
host, port = sys.argv[1], int(sys.argv[2])
waits = []
while not select.select([sys.stdin], [], [], 0.01)[0]:
    conn = http.client.HTTPConnection(host, port, timeout=600)
    started = time.perf_counter()
    conn.request("GET", "/healthz")
    conn.getresponse().read()
    waits.append(time.perf_counter() - started)
    conn.close()
print(max(waits), len(waits))
"""


def case_body_decode_stall(**limits: Any) -> dict[str, Any]:
    """A body of 120,000 calls (12 MB, so the body bound is raised to 32 MiB) posted
    while another client polls ``/healthz``; ``limits`` raise the other caps too."""
    body = _calls_body(120_000)
    with _server(_tiny_backend(), max_body_bytes=32 << 20, **limits) as base:
        host, port = base.removeprefix("http://").split(":")
        # another client, in a process of its own as clients are
        poller = subprocess.Popen([sys.executable, "-c", _POLLER, host, port],
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        started = time.perf_counter()
        status, answer = _post(base, body)
        seconds = time.perf_counter() - started
        out, _ = poller.communicate("stop\n", timeout=CASE_BOUND)
    longest, polls = out.split()
    return {"outcome": f"{_answered(status, answer)}; /healthz waited at most "
                       f"{float(longest):.2f} s over {polls} polls",
            "seconds": seconds, "healthz_max_seconds": float(longest)}


def case_deep_arguments() -> dict[str, Any]:
    deep = json.dumps({"q": json.loads("[" * 900 + "]" * 900)})
    with _server(_tiny_backend()) as base:
        started = time.perf_counter()
        status, answer = _post(base, _calls_body(1, deep))
        seconds = time.perf_counter() - started
    return {"outcome": _answered(status, answer), "seconds": seconds}


def case_schema_20000_untyped() -> dict[str, Any]:
    parameters = {"properties": {f"p{i}": {} for i in range(19_998)}}  # 20,000 values, no type
    tools = [{"type": "function", "function": {"name": "lookup", "parameters": parameters}}]
    body = _calls_body(1, tools=tools)
    with _server(_tiny_backend()) as base:
        started = time.perf_counter()
        status, answer = _post(base, body)
        seconds = time.perf_counter() - started
    return {"outcome": _answered(status, answer), "seconds": seconds}


def case_cancel_prefill() -> dict[str, Any]:
    from toolwire import CancelToken, Message, ModelRequest
    from toolwire.plugins.llama_cpp.backend import LlamaCppBackend
    from toolwire.testing.real_model import real_model_path

    path = real_model_path()
    if path is None:
        return {"outcome": "skipped: the real-model extra (SmolLM2) is not installed",
                "seconds": 0.0}
    backend = LlamaCppBackend(path, n_ctx=8192, max_tokens=8, n_threads=2, progress=False,
                              repack=False)
    model = backend._runtime.model
    cancel = CancelToken()
    cancelled_at: list[float] = []
    decode = model._ctx.decode

    def counted(batch: Any) -> Any:
        if not cancelled_at:
            cancelled_at.append(time.perf_counter())
            cancel.cancel("the client left")  # while the prompt is evaluated
        return decode(batch)

    model._ctx.decode = counted
    text = " ".join(f"line {i}: the quick brown fox jumps over the lazy dog." for i in range(260))
    items = list(backend.stream_turn(ModelRequest((Message.user(text),)), cancel))
    ended = time.perf_counter()
    end = items[-1]
    return {"outcome": f"{end.reason} ({(end.usage or {}).get('prompt_tokens')} prompt tokens)",
            "seconds": ended - cancelled_at[0] if cancelled_at else 0.0}


CASES: dict[str, Callable[[], dict[str, Any]]] = {
    "mcp_output_redos": case_mcp_output_redos,
    "mcp_output_chain": case_mcp_output_chain,
    **{f"fit_{n}_calls": (lambda n=n: case_fit(n)) for n in CURVE},
    "many_calls_request": case_many_calls_request,
    "body_decode_stall": case_body_decode_stall,
    "body_decode_stall_accepted": lambda: case_body_decode_stall(
        max_messages=200_000, max_chars=10_000_000),
    "deep_arguments": case_deep_arguments,
    "schema_20000_untyped": case_schema_20000_untyped,
    "cancel_prefill": case_cancel_prefill,
}
"""Every case by name (what ``--case`` runs in the child)."""

_AREA = {"mcp_output_redos": "item 1", "mcp_output_chain": "item 1"}


# -- the parent: trees, children, the table ----------------------------------------------------


def _base_tree(into: Path) -> Path:
    """``BASE_COMMIT``'s ``core`` and ``plugins`` as an importable ``toolwire`` under ``into``."""
    archive = subprocess.run(["git", "-C", str(REPO), "archive", BASE_COMMIT, "core", "plugins"],
                             capture_output=True, check=True).stdout
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(into / "tree", filter="data")
    (into / "tree" / "core" / "plugins").symlink_to(into / "tree" / "plugins")
    (into / "path").mkdir()
    (into / "path" / "toolwire").symlink_to(into / "tree" / "core")
    return into / "path"


def _run_case(name: str, path: Path | None) -> dict[str, Any]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [*([str(path)] if path else []), str(REPO)]), "TOOLWIRE_LOAD_PLUGINS": ""}
    started = time.perf_counter()
    try:
        child = subprocess.run(
            ["nice", "-n", "10", sys.executable, "-m", "benchmarks.hostile_round_three",
             "--case", name], capture_output=True, text=True, env=env, cwd=REPO,
            timeout=CASE_BOUND)
    except subprocess.TimeoutExpired:
        return {"outcome": f"did not end within {CASE_BOUND:g} s (killed)",
                "seconds": time.perf_counter() - started, "peak_mb": None}
    lines = [line for line in child.stdout.splitlines() if line.startswith("{")]
    if child.returncode != 0 and not lines:
        tail = (child.stderr.strip().splitlines() or ["?"])[-1]
        return {"outcome": f"failed: {tail[:90]}", "seconds": time.perf_counter() - started,
                "peak_mb": None}
    row: dict[str, Any] = json.loads(lines[-1])
    return row


def run(quick: bool = False) -> list[dict[str, Any]]:
    """Every case on both trees (``quick``: three sizes of the curve)."""
    names = [n for n in CASES if not (quick and n in ("fit_8000_calls", "fit_16000_calls"))]
    rows = []
    with tempfile.TemporaryDirectory(prefix="toolwire-base-") as folder:
        base = _base_tree(Path(folder))
        for name in names:
            for tree, path in (("base", base), ("branch", None)):
                row = {"benchmark": BENCHMARK, "case": name, "tree": tree,
                       "area": _AREA.get(name, "item 4"), **_run_case(name, path)}
                print(f"  {name} [{tree}]: {row['outcome']} ({row['seconds']:.2f} s)",
                      file=sys.stderr, flush=True)
                rows.append(row)
    return rows


def report(rows: list[dict[str, Any]]) -> None:
    """The table, and the growth of the curve on each tree."""
    print_table(rows, ["area", "case", "tree", "outcome", "seconds", "peak_mb"],
                "issue 40: time to refusal (or to the answer) and peak memory, base f0bfb37 "
                "vs this tree (shared 2-core machine)")
    for tree in ("base", "branch"):
        curve = [(int(r["case"].split("_")[1]), r["seconds"]) for r in rows
                 if r["case"].startswith("fit_") and r["tree"] == tree
                 and "did not end" not in r["outcome"]]
        if len(curve) >= 2:
            exponent = fit_exponent([c for c, _ in curve], [s for _, s in curve])
            print(f"{tree}: many-calls fitting grows as calls^{exponent:.2f}")


def _child(name: str) -> int:
    result = CASES[name]()
    result["peak_mb"] = round(_peak_mb(), 1)
    print(json.dumps(result), flush=True)
    if result.pop("exit", False):
        os._exit(0)  # a server's event loop may still be stuck: do not wait for it
    return 0


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--case":
        sys.exit(_child(sys.argv[2]))
    found = run(quick="--quick" in sys.argv)
    report(found)
    print(write_results(BENCHMARK, found))
