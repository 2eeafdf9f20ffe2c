"""The server under hostile clients: every attack of issue 23 item 11, and the rule behind it.

Deep JSON is a 400, not a 500; the ``Host`` header is parsed strictly; a client
that is slow to send its head or body loses its connection; connections are
capped; an aborted upload logs no traceback; a server on every interface keeps
its ``Host`` allowlist; conversations are capped in messages and characters.
Raw sockets on 127.0.0.1 play the slow and vanishing clients.
"""

from __future__ import annotations

import argparse
import gc
import json
import logging
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
import uvicorn
from hypothesis import given
from hypothesis import strategies as st
from starlette.applications import Starlette

from tests.apps.test_server import GatedBackend, json_request, scripted_app, user, wait_for
from toolwire.apps.cli.common import UsageError
from toolwire.apps.cli.serve import allowed_hosts_for, limits_from_args, model_id_for
from toolwire.apps.cli.serve import register as add_serve_command
from toolwire.apps.server.request_guard import HostPolicy, parse_host_header
from toolwire.apps.server.uvicorn_server import uvicorn_config
from toolwire.limits import ServerLimits
from toolwire.testing import ScriptedBackend

FAST = ServerLimits(header_timeout=0.5, body_timeout=0.5, keep_alive_timeout=1,
                    max_connections=4, max_messages=5, max_chars=100)


@contextmanager
def bounded_server(app: Starlette, limits: ServerLimits) -> Iterator[int]:
    """``app`` under uvicorn configured as ``toolwire serve`` does; yield its port."""
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    config = uvicorn_config(app, host="127.0.0.1", port=0, limits=limits, log_level="warning")
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    wait_for(lambda: server.started)
    try:
        yield int(sock.getsockname()[1])
    finally:
        server.should_exit = True
        thread.join(10)
        sock.close()


def raw_connection(port: int) -> socket.socket:
    conn = socket.create_connection(("127.0.0.1", port), timeout=10)
    return conn


def closed_by_server(conn: socket.socket, within: float) -> tuple[bool, bytes]:
    """Read until the server closes the connection; (closed in time, what it sent)."""
    conn.settimeout(within)
    received = b""
    try:
        while chunk := conn.recv(4096):
            received += chunk
    except TimeoutError:
        return False, received
    except ConnectionResetError:
        pass
    return True, received


@pytest.fixture(scope="module")
def fast_server() -> Iterator[int]:
    with bounded_server(scripted_app(ScriptedBackend([]), limits=FAST), FAST) as port:
        yield port


# -- bodies ------------------------------------------------------------------------------


@pytest.mark.parametrize("path", ["/v1/chat", "/v1/chat/completions"])
def test_json_nested_a_thousand_deep_is_400(fast_server: int, path: str) -> None:
    base = f"http://127.0.0.1:{fast_server}"
    deep = b'{"messages": ' + b"[" * 1000 + b"]" * 1000 + b"}"
    status, body = json_request(base, "POST", path, raw=deep)
    assert status == 400
    assert "levels deep" in str(body["error"])
    # and nesting deeper than the recursion limit too
    status, _ = json_request(base, "POST", path, raw=b"[" * 100_000 + b"]" * 100_000)
    assert status == 400


@pytest.mark.parametrize("path", ["/v1/chat", "/v1/chat/completions"])
def test_conversations_over_the_caps_are_413_naming_the_cap(fast_server: int,
                                                             path: str) -> None:
    base = f"http://127.0.0.1:{fast_server}"
    many = {"model": "scripted", "messages": [user("hi")] * 6}
    status, body = json_request(base, "POST", path, many)
    assert status == 413 and "--max-messages" in str(body["error"])
    long = {"model": "scripted", "messages": [user("x" * 60), user("y" * 60)]}
    status, body = json_request(base, "POST", path, long)
    assert status == 413 and "--max-chars" in str(body["error"])


def test_a_body_that_trickles_in_is_408(fast_server: int) -> None:
    conn = raw_connection(fast_server)
    conn.sendall(b"POST /v1/chat HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                 b"Content-Type: application/json\r\nContent-Length: 100\r\n\r\n{")
    _, answer = closed_by_server(conn, within=5)
    conn.close()
    assert answer.startswith(b"HTTP/1.1 408")
    assert b"did not arrive within 0.5 seconds" in answer


def test_an_aborted_upload_logs_no_traceback(fast_server: int) -> None:
    records: list[logging.LogRecord] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            records.append(record)

    handler = Keep(level=logging.DEBUG)
    loggers = [logging.getLogger(n) for n in ("uvicorn.error", "toolwire.apps.server", "")]
    for logger in loggers:
        logger.addHandler(handler)
    try:
        for path in (b"/v1/chat", b"/v1/chat/completions"):
            conn = raw_connection(fast_server)
            conn.sendall(b"POST " + path + b" HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                         b"Content-Type: application/json\r\nContent-Length: 5000\r\n\r\n"
                         + b"x" * 100)
            time.sleep(0.1)
            conn.close()
        time.sleep(0.3)
        base = f"http://127.0.0.1:{fast_server}"
        assert json_request(base, "GET", "/healthz")[0] == 200
    finally:
        for logger in loggers:
            logger.removeHandler(handler)
    assert not [r for r in records if r.exc_info or r.levelno >= logging.ERROR]


# -- connections ---------------------------------------------------------------------------


def test_a_client_that_never_finishes_its_headers_is_closed(fast_server: int) -> None:
    silent = raw_connection(fast_server)
    slow = raw_connection(fast_server)
    slow.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n")
    started = time.monotonic()
    for conn in (silent, slow):
        closed, _ = closed_by_server(conn, within=5)
        conn.close()
        assert closed
    assert time.monotonic() - started < 3


def test_a_slow_header_on_a_kept_alive_connection_is_closed_too(fast_server: int) -> None:
    conn = raw_connection(fast_server)
    conn.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
    conn.settimeout(5)
    first = b""
    while not first.endswith(b"}"):
        first += conn.recv(4096)
    assert first.startswith(b"HTTP/1.1 200")
    conn.sendall(b"GET /healthz HTTP/1.1\r\nHo")
    closed, answer = closed_by_server(conn, within=5)
    conn.close()
    assert closed and answer == b""


def test_requests_beyond_the_limit_get_503_and_idle_connections_do_not_count() -> None:
    backend = GatedBackend(["done"] * FAST.max_connections)
    body = json.dumps({"model": "scripted", "messages": [user("hi")]}).encode()
    with bounded_server(scripted_app(backend, limits=FAST), FAST) as port:
        idle = [raw_connection(port) for _ in range(FAST.max_connections + 2)]
        running = []
        try:
            for _ in range(FAST.max_connections):  # one on the model, the rest queued
                conn = raw_connection(port)
                conn.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                             b"Content-Type: application/json\r\nContent-Length: "
                             + str(len(body)).encode() + b"\r\n\r\n" + body)
                running.append(conn)
            assert backend.started.wait(5)
            time.sleep(0.2)
            extra = raw_connection(port)
            extra.sendall(b"GET /v1/models HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
            extra.settimeout(5)
            answer = b""
            while b"server_busy" not in answer and (chunk := extra.recv(4096)):
                answer += chunk
            extra.close()
            assert answer.startswith(b"HTTP/1.1 503")
            assert b"retry-after: 1" in answer and b'"code": "server_busy"' in answer
        finally:
            backend.release.set()
            for conn in idle + running:
                conn.close()


def test_an_oversized_request_head_is_refused_whole_or_in_pieces(fast_server: int) -> None:
    head = b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Big: " + b"a" * 40_000
    whole = raw_connection(fast_server)
    whole.sendall(head + b"\r\n\r\n")
    _, answer = closed_by_server(whole, within=5)
    whole.close()
    assert answer.startswith(b"HTTP/1.1 431")
    pieces = raw_connection(fast_server)
    pieces.sendall(head)
    _, answer = closed_by_server(pieces, within=5)
    pieces.close()
    assert answer.startswith(b"HTTP/1.1 400")


# -- the Host header -----------------------------------------------------------------------


@pytest.mark.parametrize(("header", "name"), [
    ("127.0.0.1", "127.0.0.1"), ("127.0.0.1:8765", "127.0.0.1"), ("LocalHost:80", "localhost"),
    ("[::1]", "::1"), ("[::1]:8765", "::1"), ("example.com", "example.com"),
    ("127.0.0.1:evil.com", None), ("127.0.0.1:", None), ("127.0.0.1:99999", None),
    ("::1", None), ("[::1]evil", None), ("[evil]:80", None), ("user@127.0.0.1", None),
    ("127.0.0.1 evil", None), ("", None), ("evil.com:80:80", None), ("a..b", "a..b"),
])
def test_host_headers_are_parsed_strictly(header: str, name: str | None) -> None:
    assert parse_host_header(header) == name


@given(st.text(max_size=30))
def test_the_host_parser_never_raises_and_only_allows_what_it_names(header: str) -> None:
    name = parse_host_header(header)
    policy = HostPolicy(["127.0.0.1"])
    assert policy.allows(header) == (name == "127.0.0.1")


def test_a_host_with_a_name_for_a_port_is_refused(fast_server: int) -> None:
    base = f"http://127.0.0.1:{fast_server}"
    status, body = json_request(base, "GET", "/healthz", headers={"Host": "127.0.0.1:evil.com"})
    assert status == 403 and "not allowed" in body["error"]


def test_every_interface_keeps_an_allowlist_with_allow_host() -> None:
    policy = allowed_hosts_for("0.0.0.0", ["tools.lan"])
    assert policy.allows("192.168.1.20:8765") and policy.allows("[fe80::1]:8765")
    assert policy.allows("localhost:8765") and policy.allows("tools.lan")
    assert policy.allows(socket.gethostname())
    assert not policy.allows("evil.example") and not policy.allows("127.0.0.1:evil.com")
    pinned = allowed_hosts_for("192.168.1.20")
    assert pinned.allows("192.168.1.20") and not pinned.allows("10.0.0.1")
    with bounded_server(scripted_app(ScriptedBackend([]), allowed_hosts=policy), FAST) as port:
        base = f"http://127.0.0.1:{port}"
        assert json_request(base, "GET", "/healthz", headers={"Host": "10.1.2.3"})[0] == 200
        assert json_request(base, "GET", "/healthz", headers={"Host": "tools.lan:1"})[0] == 200
        assert json_request(base, "GET", "/healthz", headers={"Host": "evil.example"})[0] == 403


# -- the serve command -------------------------------------------------------------------------


def _serve_args(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_serve_command(parser.add_subparsers())
    return parser.parse_args(["serve", *argv])


@pytest.mark.process
def test_a_non_loopback_host_without_a_key_is_refused_at_start(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TOOLWIRE_SERVE_API_KEY", raising=False)
    args = _serve_args("--demo", "--host", "0.0.0.0")
    with pytest.raises(UsageError, match="without an API key"):
        args.run(args, None)
    proc = subprocess.run([sys.executable, "-m", "toolwire.apps.cli.main", "serve", "--demo",
                           "--host", "0.0.0.0", "--port", "0"], capture_output=True, text=True,
                          timeout=60, env={"PATH": "/usr/bin:/bin", "TOOLWIRE_LOAD_PLUGINS": ""})
    assert proc.returncode == 2
    assert "refusing to listen on 0.0.0.0 without an API key" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_serve_options_set_the_bounds_and_the_model_id() -> None:
    args = _serve_args("--model", "dir/Qwen3.5-4B-Q4_K_M.gguf", "--max-messages", "10",
                       "--header-timeout", "2.5", "--allow-host", "a.lan", "--allow-host",
                       "b.lan")
    limits = limits_from_args(args)
    assert (limits.max_messages, limits.header_timeout, limits.max_chars) == \
        (10, 2.5, ServerLimits().max_chars)
    assert args.allow_host == ["a.lan", "b.lan"]
    assert model_id_for(args) == "Qwen3.5-4B-Q4_K_M"
    assert model_id_for(_serve_args("--demo")) == "toolwire-demo"
    assert model_id_for(_serve_args("--provider", "ollama", "--model", "qwen3:4b")) == "qwen3:4b"
    assert model_id_for(_serve_args("--model", "m.gguf", "--model-id", "mine")) == "mine"
    with pytest.raises(UsageError, match="max_messages must be positive"):
        limits_from_args(_serve_args("--max-messages", "0"))


# -- what the package imports --------------------------------------------------------------------

NOT_SERVING = ("limits", "http_input", "request_guard", "sse", "responses", "model_queue",
               "served_model", "backend_thread", "call_id_forms", "completion_stream",
               "chat_request", "completion_request", "dashboard", "uvicorn_server")


@pytest.mark.process
def test_modules_that_do_not_serve_do_not_import_starlette_or_uvicorn() -> None:
    script = ("import sys\n"
              + "".join(f"import toolwire.apps.server.{m}\n" for m in NOT_SERVING)
              + "import toolwire.apps.cli.serve\n"
              + "heavy = sorted(m for m in sys.modules if m.split('.')[0] in "
                "('starlette', 'uvicorn', 'h11'))\n"
              + "print(heavy)\n")
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         timeout=60, check=True).stdout
    assert out.strip() == "[]"


@pytest.mark.process
def test_create_app_names_the_serve_extra_when_starlette_is_missing() -> None:
    script = ("import sys\nsys.modules['starlette'] = None\n"
              "from toolwire.apps.server.app import create_app\n"
              "from toolwire.errors import ToolwireError\n"
              "try:\n    create_app(lambda h, s: None)\n"
              "except ToolwireError as exc:\n    print(exc)\n")
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         timeout=60, check=True).stdout
    assert "pip install -e '.[serve]' in toolwire's source folder" in out


# -- round three: bounds count what they bound (issue 40, items 4 and 7) --------------------

DEFAULTS = ServerLimits()


@pytest.fixture(scope="module")
def default_server() -> Iterator[int]:
    with bounded_server(scripted_app(ScriptedBackend([]), limits=DEFAULTS), DEFAULTS) as port:
        yield port


def _calls(count: int, arguments: str = "{}") -> list[dict[str, Any]]:
    return [{"id": f"c{i}", "type": "function",
             "function": {"name": "lookup", "arguments": arguments}} for i in range(count)]


@pytest.mark.parametrize("path", ["/v1/chat", "/v1/chat/completions"])
def test_calls_that_no_message_answers_count_against_the_message_cap(
        default_server: int, path: str) -> None:
    """30,000 unanswered calls in one message were 30,000 results the cap never counted."""
    base = f"http://127.0.0.1:{default_server}"
    body = {"model": "scripted", "messages": [
        user("hi"), {"role": "assistant", "content": None, "tool_calls": _calls(3000)},
        user("go on")]}
    status, answer = json_request(base, "POST", path, body)
    assert status == 413, answer
    assert "--max-messages" in str(answer["error"]) and "3,003" in str(answer["error"])


@pytest.mark.parametrize("path", ["/v1/chat", "/v1/chat/completions"])
def test_call_arguments_nested_900_deep_are_400_not_500(default_server: int,
                                                         path: str) -> None:
    base = f"http://127.0.0.1:{default_server}"
    deep = json.dumps({"name": json.loads("[" * 900 + "]" * 900)})
    body = {"model": "scripted", "messages": [
        user("hi"), {"role": "assistant", "content": None, "tool_calls": _calls(1, deep)},
        {"role": "tool", "tool_call_id": "c0", "content": "ok"}, user("go on")]}
    status, answer = json_request(base, "POST", path, body)
    assert status == 400, answer
    assert "levels deep" in str(answer["error"])


def test_a_tool_name_that_matches_its_rule_only_in_part_is_400(default_server: int) -> None:
    base = f"http://127.0.0.1:{default_server}"
    body = {"model": "scripted", "messages": [user("hi")],
            "tools": [{"type": "function", "function": {"name": "x\n"}}],
            "tool_choice": {"type": "function", "function": {"name": "x\n"}}}
    status, answer = json_request(base, "POST", "/v1/chat/completions", body)
    assert status == 400 and answer["error"]["param"] == "tools[0]"


def test_a_large_body_is_decoded_and_checked_off_the_event_loop(
        default_server: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """While one request's body is read into a request, the server answers others: the
    parse here waits until another client has had its answer (were it on the event loop,
    that answer could never come, and the failure bound below would end the test)."""
    from toolwire.apps.server import openai_routes

    base = f"http://127.0.0.1:{default_server}"
    parsing, answered = threading.Event(), threading.Event()
    parse = openai_routes.parse_completion_request

    def gated(data: Any, limits: ServerLimits) -> Any:
        parsing.set()
        assert answered.wait(20), "the event loop was held while a body was parsed"
        return parse(data, limits)

    monkeypatch.setattr(openai_routes, "parse_completion_request", gated)
    results: list[tuple[int, Any]] = []
    slow = threading.Thread(target=lambda: results.append(json_request(
        base, "POST", "/v1/chat/completions", {"model": "nope", "messages": [user("hi")]})))
    slow.start()
    assert parsing.wait(60)
    status, _ = json_request(base, "GET", "/healthz")
    answered.set()
    slow.join(60)
    assert status == 200 and results and results[0][0] == 404
    assert gc.isenabled()  # the collector, held off while the body was read, runs again


def test_the_agent_apis_count_unanswered_calls_and_bound_their_depth(default_server: int) -> None:
    """The Responses and Messages APIs read their conversation on the one path, with the
    same bounds: unanswered calls count against the message cap, deep arguments are 400."""
    base = f"http://127.0.0.1:{default_server}"
    items = [{"type": "function_call", "call_id": f"c{i}", "name": "lookup", "arguments": "{}"}
             for i in range(3000)]
    status, answer = json_request(base, "POST", "/v1/responses", {
        "model": "scripted", "input": [{"role": "user", "content": "hi"}, *items]})
    assert status == 413 and "--max-messages" in str(answer), answer
    uses = [{"type": "tool_use", "id": f"c{i}", "name": "lookup", "input": {}}
            for i in range(3000)]
    status, answer = json_request(base, "POST", "/v1/messages", {
        "model": "scripted", "max_tokens": 16, "messages": [
            {"role": "user", "content": "hi"}, {"role": "assistant", "content": uses},
            {"role": "user", "content": "go on"}]})
    assert status == 413 and "--max-messages" in str(answer), answer
    deep = json.dumps({"name": json.loads("[" * 900 + "]" * 900)})
    status, answer = json_request(base, "POST", "/v1/responses", {
        "model": "scripted", "input": [
            {"role": "user", "content": "hi"},
            {"type": "function_call", "call_id": "c0", "name": "lookup", "arguments": deep},
            {"type": "function_call_output", "call_id": "c0", "output": "ok"}]})
    assert status == 400 and "levels deep" in str(answer), answer
