"""``toolwire serve``: the real ASGI app under uvicorn, spoken to over real HTTP.

Each test starts uvicorn on a free 127.0.0.1 port in a background thread and
talks to it with ``http.client``; the stand-in backends are the grammar-forced
tiny llama.cpp model of ``toolwire demo`` and :class:`ScriptedBackend`.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import http.client
import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

import pytest
import uvicorn
from starlette.applications import Starlette

from toolwire import (
    CancelToken,
    Chat,
    Message,
    ModelRequest,
    ToolCall,
    TurnEnd,
    event_from_dict,
    from_stored,
    merge_events,
    tool,
)
from toolwire.apps.cli.serve import allowed_hosts_for, make_chat_factory
from toolwire.apps.cli.serve import register as add_serve_command
from toolwire.apps.server.app import (
    CHAT_ID_HEADER,
    NO_RESULT_TEXT,
    cancel_replies,
    create_app,
    messages_from_openai,
    parse_chat_request,
)
from toolwire.errors import ToolwireError
from toolwire.events import Event
from toolwire.limits import ServerLimits
from toolwire.testing import ScriptedBackend, isolated_plugin_manager

CALL = ("Let me look.\n<tool_call>\n<function=lookup>\n<parameter=name>\nalex\n</parameter>\n"
        "</function>\n</tool_call>")
ANSWER = "Alex is a colleague."


@tool(read_only=True)
def lookup(name: str) -> str:
    """Look a person up in the team list.

    :param name: who to look up
    """
    return f"{name}: a colleague who maintains the parsers"


# -- helpers (the browser test uses these too) -------------------------------------------


@contextmanager
def running_server(app: Starlette) -> Iterator[str]:
    """Serve ``app`` with uvicorn on a free loopback port; yield its base URL."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="off",
                                           timeout_graceful_shutdown=2))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True,
                              name="test-uvicorn")
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError("uvicorn did not start")
        time.sleep(0.01)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(10)
        sock.close()


@contextmanager
def serving_backend(backend: Any, *, model: str) -> Iterator[str]:
    """Serve the real app whose chats all share ``backend`` (closed at the end); yield
    its base URL."""

    def make_chat(history: Any, system: str | None) -> Chat:
        return Chat(backend, history=history, system_prompt=system,
                    plugins=isolated_plugin_manager())

    try:
        with running_server(create_app(make_chat, backend=backend, model=model)) as base:
            yield base
    finally:
        backend.close()


def scripted_app(backend: Any, tools: Sequence[Any] = (lookup,), **options: Any) -> Starlette:
    """An app whose chats use ``backend`` (shared) and ``tools``."""
    def make_chat(history: Sequence[Message], system: str | None) -> Chat:
        return Chat(backend, tools=list(tools), history=history, system_prompt=system,
                    plugins=isolated_plugin_manager())
    return create_app(make_chat, model="scripted", **options)


def _port(base: str) -> int:
    return int(base.rsplit(":", 1)[1])


def request(base: str, method: str, path: str, body: Any = None,
            headers: Mapping[str, str] | None = None,
            raw: bytes | None = None) -> tuple[http.client.HTTPConnection,
                                               http.client.HTTPResponse]:
    """Send one request; return the open connection and its response (not yet read)."""
    conn = http.client.HTTPConnection("127.0.0.1", _port(base), timeout=30)
    data = raw if raw is not None else (None if body is None else json.dumps(body).encode())
    sent = {"Content-Type": "application/json"} if data is not None else {}
    sent.update(headers or {})
    conn.request(method, path, body=data, headers=sent)
    return conn, conn.getresponse()


def json_request(base: str, method: str, path: str, body: Any = None,
                 **kwargs: Any) -> tuple[int, Any]:
    conn, response = request(base, method, path, body, **kwargs)
    try:
        return response.status, json.loads(response.read() or b"null")
    finally:
        conn.close()


def sse_items(response: http.client.HTTPResponse) -> Iterator[dict[str, Any]]:
    """The JSON ``data`` of each server-sent event, as they arrive."""
    data: list[str] = []
    while True:
        line = response.readline()
        if not line:
            return
        text = line.decode("utf-8").rstrip("\r\n")
        if text.startswith("data:"):
            value = text[5:]
            data.append(value[1:] if value.startswith(" ") else value)
        elif not text and data:
            yield json.loads("\n".join(data))
            data = []


def chat_stream(base: str, messages: list[dict[str, Any]]) -> tuple[str, list[dict[str, Any]]]:
    """POST a chat, read the whole stream; return (X-Toolwire-Chat header, items)."""
    conn, response = request(base, "POST", "/v1/chat", {"messages": messages})
    try:
        assert response.status == 200, response.read()
        assert response.getheader("Content-Type", "").startswith("text/event-stream")
        return response.getheader(CHAT_ID_HEADER, ""), list(sse_items(response))
    finally:
        conn.close()


def user(text: str) -> dict[str, str]:
    return {"role": "user", "content": text}


def events_of(items: list[dict[str, Any]]) -> list[Event]:
    return [event_from_dict(item) for item in items if item["type"] != "session"]


def wait_for(condition: Callable[[], bool], timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError("condition not met in time")
        time.sleep(0.01)


class GatedBackend(ScriptedBackend):
    """A scripted backend whose turns wait until released or cancelled.

    Records each turn's cancel token; ``started`` is set when a turn begins.
    """

    def __init__(self, replies: Sequence[str], **options: Any) -> None:
        super().__init__(replies, **options)
        self.started = threading.Event()
        self.release = threading.Event()
        self.tokens: list[CancelToken] = []

    def stream_turn(self, request: ModelRequest,
                    cancel: CancelToken) -> Iterator[Event | TurnEnd]:
        self.tokens.append(cancel)
        self.started.set()
        deadline = time.monotonic() + 20
        while not (self.release.is_set() or cancel.cancelled) and time.monotonic() < deadline:
            self.release.wait(0.01)
        yield from super().stream_turn(request, cancel)


@pytest.fixture(scope="module")
def idle_base() -> Iterator[str]:
    """One server for the tests that never reach the model (a backend with no replies)."""
    with running_server(scripted_app(ScriptedBackend([]))) as base:
        yield base


# -- the stream -------------------------------------------------------------------------


@pytest.mark.model
def test_demo_model_streams_the_documented_events_in_order() -> None:
    pytest.importorskip("llama_cpp")
    parser = argparse.ArgumentParser()
    add_serve_command(parser.add_subparsers())
    args = parser.parse_args(["serve", "--demo"])
    make_chat, label = make_chat_factory(args, isolated_plugin_manager())
    assert label.startswith("demo:")
    with running_server(create_app(make_chat, model=label)) as base:
        header, items = chat_stream(base, [user("What do my notes say about Alex?")])
    assert items[0] == {"type": "session", "id": header, "queued": False} and header
    types = [item["type"] for item in items]
    assert types.count("done") == 1 and types[-1] == "done"
    assert types.index("tool_call_start") < types.index("tool_call") \
        < types.index("tool_result") < len(types) - 1
    call = next(i for i in items if i["type"] == "tool_call")
    assert call["name"] == "search_text" and call["arguments"] == {"pattern": "Alex"}
    result = next(i for i in items if i["type"] == "tool_result")
    assert result["id"] == call["id"] and not result["is_error"]
    assert "notes/people.md:3: Alex" in result["content"]
    after = types[types.index("tool_result") + 1:-1]
    assert after and set(after) == {"text"}
    answer = "".join(i["text"] for i in items[types.index("tool_result"):] if i["type"] == "text")
    assert "Alex: maintains the parser plugins" in answer
    assert items[-1]["reason"] == "stop" and items[-1]["turns"] == 2
    events_of(items)  # every item past the session line reads back as an event


def test_scripted_stream_has_each_event_once_in_order() -> None:
    backend = ScriptedBackend([CALL, ANSWER])
    with running_server(scripted_app(backend)) as base:
        header, items = chat_stream(base, [user("who is alex?")])
    assert items[0]["type"] == "session" and items[0]["id"] == header
    merged = merge_events(events_of(items))
    assert [e.type for e in merged] == ["text", "tool_call_start", "tool_call_delta",
                                        "tool_call", "tool_result", "text", "done"]
    assert [e.to_dict() for e in merged[3:5]] == [
        {"type": "tool_call", "name": "lookup", "arguments": {"name": "alex"},
         "id": merged[1].to_dict()["id"], "index": 0},
        {"type": "tool_result", "id": merged[1].to_dict()["id"], "name": "lookup",
         "content": "alex: a colleague who maintains the parsers", "is_error": False,
         "error_kind": None}]
    assert merged[5].to_dict()["text"] == ANSWER
    assert merged[6].to_dict()["reason"] == "stop"


def test_the_sse_framing_names_each_event_and_ends_after_done() -> None:
    backend = ScriptedBackend([ANSWER])
    with running_server(scripted_app(backend)) as base:
        conn, response = request(base, "POST", "/v1/chat", {"messages": [user("hi")]})
        raw = response.read().decode("utf-8")
        conn.close()
    frames = [f for f in raw.split("\n\n") if f]
    assert frames[0].startswith("event: session\ndata: {")
    assert frames[-1].startswith('event: done\ndata: {"type": "done"')
    for frame in frames:
        name, data = frame.split("\n")
        assert json.loads(data.removeprefix("data: "))["type"] == name.removeprefix("event: ")


def test_history_in_the_request_is_what_the_model_sees() -> None:
    backend = ScriptedBackend(["Sam runs the dashboard."])
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "Be brief."},
        user("who is alex?"),
        {"role": "assistant", "content": "Let me look.", "tool_calls": [
            {"id": "call_1", "type": "function",
             "function": {"name": "lookup", "arguments": '{"name": "alex"}'}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "alex: a colleague"},
        {"role": "assistant", "content": "Alex is a colleague."},
        user("and sam?"),
    ]
    with running_server(scripted_app(backend)) as base:
        _, items = chat_stream(base, messages)
    assert items[-1]["reason"] == "stop"
    call = ToolCall("call_1", "lookup", {"name": "alex"})
    assert backend.requests[0].messages == (
        Message.system("Be brief."),
        Message.user("who is alex?"),
        Message.assistant("Let me look.", (call,)),
        Message.tool_result(call, "alex: a colleague"),
        Message.assistant("Alex is a colleague."),
        Message.user("and sam?"),
    )


def test_stored_toolwire_records_are_accepted_as_history() -> None:
    stored: list[dict[str, Any]] = [
        user("who is alex?"), {"role": "assistant", "content": "Looking."},
        {"role": "tool", "tool_name": "lookup", "tool_args": {"name": "alex"},
         "tool_call_id": "c1", "content": "alex: a colleague", "is_error": False},
        {"role": "assistant", "content": "A colleague."}]
    backend = ScriptedBackend(["Sam runs the dashboard."])
    with running_server(scripted_app(backend)) as base:
        _, items = chat_stream(base, [*stored, user("and sam?")])
    assert items[-1]["reason"] == "stop"
    assert list(backend.requests[0].messages) == [*from_stored(stored), Message.user("and sam?")]


def test_the_conversation_continues_from_what_the_stream_said() -> None:
    """Turn the first reply's events into OpenAI messages (as the page does) and go on."""
    backend = ScriptedBackend([CALL, ANSWER, "Sam runs the dashboard."])
    with running_server(scripted_app(backend)) as base:
        _, items = chat_stream(base, [user("who is alex?")])
        call = next(i for i in items if i["type"] == "tool_call")
        result = next(i for i in items if i["type"] == "tool_result")
        history: list[dict[str, Any]] = [
            user("who is alex?"),
            {"role": "assistant", "content": "Let me look.", "tool_calls": [
                {"id": call["id"], "type": "function", "function": {
                    "name": call["name"], "arguments": json.dumps(call["arguments"])}}]},
            {"role": "tool", "tool_call_id": result["id"], "content": result["content"]},
            {"role": "assistant", "content": ANSWER}]
        _, again = chat_stream(base, [*history, user("and sam?")])
    assert again[-1]["reason"] == "stop"
    first_chat = backend.requests[1].messages  # the first exchange's second model turn
    assert backend.requests[2].messages[:len(first_chat)] == first_chat


# -- cancellation ------------------------------------------------------------------------


def test_cancel_mid_reply_ends_with_done_cancelled() -> None:
    backend = GatedBackend([ANSWER])
    with running_server(scripted_app(backend)) as base:
        conn, response = request(base, "POST", "/v1/chat", {"messages": [user("hi")]})
        items = sse_items(response)
        session = next(items)
        assert session["type"] == "session"
        assert response.getheader(CHAT_ID_HEADER) == session["id"]
        assert backend.started.wait(10)
        status, body = json_request(base, "POST", f"/v1/chat/{session['id']}/cancel")
        assert (status, body) == (200, {"cancelled": True})
        rest = list(items)
        conn.close()
        assert [i["type"] for i in rest] == ["done"]
        assert rest[0]["reason"] == "cancelled"
        assert backend.tokens[0].cancelled and backend.closed_early == 1
        # the reply is over: its id is gone
        status, body = json_request(base, "POST", f"/v1/chat/{session['id']}/cancel")
        assert status == 404 and "error" in body


def test_cancel_replies_ends_every_stream_for_a_shutdown() -> None:
    backend = GatedBackend([ANSWER])
    app = scripted_app(backend)
    with running_server(app) as base:
        conn, response = request(base, "POST", "/v1/chat", {"messages": [user("hi")]})
        items = sse_items(response)
        assert next(items)["type"] == "session"
        assert backend.started.wait(10)
        assert cancel_replies(app) == 1
        assert [i["reason"] for i in items if i["type"] == "done"] == ["cancelled"]
        conn.close()
    assert backend.tokens[0].reason == "shutdown"


def test_cancel_of_an_unknown_id_is_404(idle_base: str) -> None:
    status, body = json_request(idle_base, "POST", "/v1/chat/no-such-id/cancel")
    assert status == 404 and body == {"error": "no reply in progress has this id"}


def test_a_client_that_disconnects_cancels_its_reply() -> None:
    backend = GatedBackend([ANSWER])
    with running_server(scripted_app(backend)) as base:
        conn, response = request(base, "POST", "/v1/chat", {"messages": [user("hi")]})
        assert next(sse_items(response))["type"] == "session"
        assert backend.started.wait(10)
        response.close()
        conn.close()
        wait_for(lambda: backend.tokens[0].cancelled)
        assert backend.tokens[0].reason == "disconnected"
        wait_for(lambda: json_request(base, "GET", "/healthz")[1]["replies"] == 0)
        assert json_request(base, "GET", "/healthz")[1]["busy"] is False


def test_replies_run_one_at_a_time_and_a_waiting_one_can_be_cancelled() -> None:
    backend = GatedBackend([ANSWER, "Second."])
    with running_server(scripted_app(backend)) as base:
        first_conn, first = request(base, "POST", "/v1/chat", {"messages": [user("one")]})
        first_items = sse_items(first)
        assert next(first_items)["queued"] is False
        assert backend.started.wait(10)
        second_conn, second = request(base, "POST", "/v1/chat", {"messages": [user("two")]})
        second_items = sse_items(second)
        waiting = next(second_items)
        assert waiting["queued"] is True
        third_conn, third = request(base, "POST", "/v1/chat", {"messages": [user("three")]})
        third_items = sse_items(third)
        queued = next(third_items)
        assert json_request(base, "GET", "/healthz")[1] == {
            "status": "ok", "model": "scripted", "busy": True, "replies": 3}
        # cancel the third while it waits: it never reaches the model
        assert json_request(base, "POST", f"/v1/chat/{queued['id']}/cancel")[0] == 200
        backend.release.set()
        assert [i["type"] for i in first_items][-1] == "done"
        second_rest = list(second_items)
        third_rest = list(third_items)
        for conn in (first_conn, second_conn, third_conn):
            conn.close()
    assert second_rest[-1]["reason"] == "stop"
    assert "".join(i.get("text", "") for i in second_rest) == "Second."
    assert third_rest == [{"type": "done", "reason": "cancelled", "turns": 0, "usage": None,
                           "timings": None}]
    assert [r.messages[-1].content for r in backend.requests] == ["one", "two"]


# -- bad requests -----------------------------------------------------------------------


@pytest.mark.parametrize(("raw", "fragment"), [
    (b"{not json", "not valid JSON"),
    (b"[1, 2]", "must be a JSON object"),
    (b"{}", "non-empty list"),
    (b'{"messages": "hi"}', "non-empty list"),
    (b'{"messages": []}', "non-empty list"),
    (b'{"messages": [{"role": "assistant", "content": "hi"}]}', "no user message"),
    (b'{"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "x"}]}',
     "last message must be the user"),
    (b'{"messages": [{"role": "user", "content": "   "}]}', "empty"),
    (b'{"messages": [{"role": "user", "content": 7}]}', "content must be"),
    (b'{"messages": [{"role": "robot", "content": "x"}, {"role": "user", "content": "hi"}]}',
     "unknown role"),
    (b'{"messages": [{"role": "tool", "tool_call_id": "x", "content": "r"},'
     b' {"role": "user", "content": "hi"}]}', "answers no earlier call"),
    (b'{"messages": [{"role": "assistant", "tool_calls": [{"id": "a", "function":'
     b' {"name": "lookup", "arguments": "{oops"}}]}, {"role": "user", "content": "hi"}]}',
     "not valid JSON"),
])
def test_bad_bodies_are_400_with_a_json_error(idle_base: str, raw: bytes,
                                              fragment: str) -> None:
    status, body = json_request(idle_base, "POST", "/v1/chat", raw=raw)
    assert status == 400
    assert fragment in body["error"]
    assert json_request(idle_base, "GET", "/healthz")[1]["replies"] == 0


def test_other_refusals() -> None:
    app = scripted_app(ScriptedBackend([]), limits=ServerLimits(max_body_bytes=200))
    with running_server(app) as base:
        status, body = json_request(base, "POST", "/v1/chat", raw=b'{"messages": []}',
                                    headers={"Content-Type": "text/plain"})
        assert status == 415 and "application/json" in body["error"]
        status, body = json_request(base, "POST", "/v1/chat",
                                    {"messages": [user("x" * 300)]})
        assert status == 413
        # DNS rebinding: a name other than the loopback ones
        status, body = json_request(base, "GET", "/healthz", headers={"Host": "evil.example"})
        assert status == 403 and "not allowed" in body["error"]
        # another web page posting to the local server
        status, body = json_request(base, "POST", "/v1/chat", {"messages": [user("hi")]},
                                    headers={"Origin": "http://evil.example"})
        assert status == 403 and "cross-origin" in body["error"]
        status, _ = json_request(base, "POST", "/v1/chat/x/cancel",
                                 headers={"Origin": "http://evil.example"})
        assert status == 403


def test_a_chat_factory_that_fails_is_a_500_json_error() -> None:
    def broken(history: Sequence[Message], system: str | None) -> Chat:
        raise RuntimeError("no model")
    with running_server(create_app(broken)) as base:
        status, body = json_request(base, "POST", "/v1/chat", {"messages": [user("hi")]})
    assert status == 500 and "no model" in body["error"]


# -- the page and the probe ---------------------------------------------------------------


def test_the_dashboard_page_and_healthz(idle_base: str) -> None:
    conn, response = request(idle_base, "GET", "/")
    page = response.read().decode("utf-8")
    policy = response.getheader("Content-Security-Policy", "")
    assert response.status == 200
    assert response.getheader("Content-Type", "").startswith("text/html")
    conn.close()
    status, health = json_request(idle_base, "GET", "/healthz")
    for marker in ('id="input"', 'id="send"', 'id="cancel"', 'data-testid="transcript"',
                   "/v1/chat", "getReader"):
        assert marker in page
    (script,) = re.findall(r"<script>(.*?)</script>", page, flags=re.DOTALL)
    digest = base64.b64encode(hashlib.sha256(script.encode()).digest()).decode()
    assert f"'sha256-{digest}'" in policy and "connect-src 'self'" in policy
    assert (status, health) == (200, {"status": "ok", "model": "scripted", "busy": False,
                                      "replies": 0})


# -- the converter ------------------------------------------------------------------------


def test_openai_messages_convert_with_calls_results_and_reasoning() -> None:
    messages = messages_from_openai([
        {"role": "user", "content": [{"type": "text", "text": "who "},
                                     {"type": "text", "text": "is alex?"}]},
        {"role": "assistant", "content": None, "reasoning_content": "search first",
         "tool_calls": [{"id": "a", "type": "function",
                         "function": {"name": "lookup", "arguments": {"name": "alex"}}},
                        {"type": "function",
                         "function": {"name": "lookup", "arguments": '{"name": "sam"}'}}]},
        {"role": "tool", "tool_call_id": "a", "content": "found", "is_error": True},
        user("thanks"),
    ])
    a = ToolCall("a", "lookup", {"name": "alex"})
    b = ToolCall("call_1", "lookup", {"name": "sam"})
    assert messages == [
        Message.user("who is alex?"),
        Message.assistant("", (a, b), "search first"),
        Message.tool_result(a, "found", True),
        Message.tool_result(b, NO_RESULT_TEXT, True),  # unanswered: filled in
        Message.user("thanks"),
    ]


def test_parse_chat_request_splits_system_history_and_message() -> None:
    parsed = parse_chat_request({"model": "ignored", "messages": [
        {"role": "system", "content": "one"}, {"role": "system", "content": "two"},
        user("hi"), {"role": "assistant", "content": "hello"}, user("again")]})
    assert parsed.system == "one\n\ntwo" and parsed.message == "again"
    assert parsed.history == (Message.user("hi"), Message.assistant("hello"))
    assert parse_chat_request({"messages": [user("hi")]}).system is None


# -- the command ----------------------------------------------------------------------------


def test_serve_command_options_and_guards() -> None:
    parser = argparse.ArgumentParser()
    add_serve_command(parser.add_subparsers())
    args = parser.parse_args(["serve", "--model", "m.gguf"])
    assert (args.host, args.port, args.demo, args.workspace) == ("127.0.0.1", 8765, False, ".")
    assert args.run.__name__ == "run_serve"
    both = parser.parse_args(["serve", "--demo", "--model", "m.gguf"])
    with pytest.raises(ToolwireError, match="--demo"):
        make_chat_factory(both, isolated_plugin_manager())
    assert allowed_hosts_for("127.0.0.1").names == {"127.0.0.1", "localhost", "::1"}
    assert not allowed_hosts_for("127.0.0.1").any_ip_literal
    assert "192.168.1.5" in allowed_hosts_for("192.168.1.5").names


def test_serve_factory_shares_the_backend_and_keeps_chat_options(tmp_path: Any) -> None:
    parser = argparse.ArgumentParser()
    add_serve_command(parser.add_subparsers())
    args = parser.parse_args(["serve", "--model", "m.gguf", "--read-only", "--system", "S",
                              "--max-tool-iters", "3", "--workspace", str(tmp_path)])
    backend = ScriptedBackend([])
    make_chat, label = make_chat_factory(args, isolated_plugin_manager(), backend)
    history = [Message.user("hi"), Message.assistant("hello")]
    first, second = make_chat(history, None), make_chat((), "other")
    assert label == "m.gguf"
    assert first.backend is second.backend is backend
    assert first.history == tuple(history) and second.history == ()
    assert (first.system_prompt, second.system_prompt) == ("S", "other")
    assert first.read_only and first.max_tool_iters == 3


SERVE = """
import argparse, sys
from toolwire import PluginManager
from toolwire.apps.cli.serve import register as add_serve_command
parser = argparse.ArgumentParser(prog="toolwire")
add_serve_command(parser.add_subparsers())
args = parser.parse_args(sys.argv[1:])
sys.exit(args.run(args, PluginManager()))
"""


@pytest.mark.process
def test_serve_command_runs_the_demo_until_ctrl_c() -> None:
    pytest.importorskip("llama_cpp")
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    env = {**os.environ, "TOOLWIRE_LOAD_PLUGINS": ""}
    proc = subprocess.Popen([sys.executable, "-c", SERVE, "serve", "--demo", "--port", str(port)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env)
    base = f"http://127.0.0.1:{port}"
    try:
        def up() -> bool:
            if proc.poll() is not None:
                raise AssertionError(f"serve exited early: {proc.stderr.read()}")  # type: ignore[union-attr]
            try:
                return json_request(base, "GET", "/healthz")[0] == 200
            except OSError:
                return False

        wait_for(up, timeout=60)
        _, items = chat_stream(base, [user("What do my notes say about Alex?")])
        assert items[-1]["reason"] == "stop"
        assert any(i["type"] == "tool_result" for i in items)
    finally:
        proc.send_signal(signal.SIGINT)
        _, stderr = proc.communicate(timeout=30)
    assert proc.returncode == 0, stderr
    assert f"dashboard: http://127.0.0.1:{port}/" in stderr
    assert "WARNING" not in stderr
