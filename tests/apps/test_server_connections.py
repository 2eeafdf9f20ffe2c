"""No connection outlives its answer, and no flood of idle connections locks a client out
(issue 28, item 2).

A real uvicorn server configured as ``toolwire serve`` runs on 127.0.0.1; raw
sockets play the hostile clients: one byte of a declared body on a route that
answers without reading it, a body that trickles in, heads never finished,
connections opened and left idle. Other loopback addresses (127.0.0.2...) play
other clients for the per-client bound.
"""

from __future__ import annotations

import http.client
import json
import logging
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from tests.apps.test_server import GatedBackend, scripted_app, user, wait_for
from tests.apps.test_server_bounds import _serve_args, bounded_server
from toolwire.apps.cli.serve import limits_from_args
from toolwire.limits import ServerLimits
from toolwire.testing import ScriptedBackend

KEY = "sesame"
QUICK = ServerLimits(body_timeout=0.5, linger_timeout=1.0, keep_alive_timeout=30)


def connect(port: int, source: str = "127.0.0.1") -> socket.socket:
    """A raw connection to the server from the loopback address ``source``."""
    return socket.create_connection(("127.0.0.1", port), timeout=5,
                                    source_address=(source, 0))


def head(method: str, path: str, *extra: str, host: str = "127.0.0.1") -> bytes:
    lines = [f"{method} {path} HTTP/1.1", f"Host: {host}", *extra, "", ""]
    return "\r\n".join(lines).encode()


def read_answer(conn: socket.socket, timeout: float = 5) -> tuple[str, dict[str, str], bytes]:
    """One whole response: its status line, headers (lower-case names) and body.

    Reads exactly that response's bytes, so pipelined answers can be read one by one.
    """
    conn.settimeout(timeout)
    data = b""
    while not data.endswith(b"\r\n\r\n"):
        byte = conn.recv(1)
        if not byte:
            raise AssertionError(f"the connection closed before an answer: {data!r}")
        data += byte
    status, *lines = data.decode("latin-1").rstrip("\r\n").split("\r\n")
    headers = {k.strip().lower(): v.strip() for k, _, v in (ln.partition(":") for ln in lines)}
    body = b""
    while len(body) < int(headers.get("content-length", "0")):
        chunk = conn.recv(int(headers["content-length"]) - len(body))
        if not chunk:
            raise AssertionError("the connection closed in the middle of the answer")
        body += chunk
    return status, headers, body


def closed_within(conn: socket.socket, seconds: float) -> bool:
    """Whether the server closes ``conn`` (FIN or reset) within ``seconds``."""
    conn.settimeout(seconds)
    try:
        while conn.recv(4096):
            pass
    except TimeoutError:
        return False
    except OSError:
        pass
    return True


def is_open(conn: socket.socket) -> bool:
    """Whether the server still holds ``conn`` open (reads what has come, without waiting:
    no FIN and no reset yet)."""
    conn.setblocking(False)
    try:
        while conn.recv(65536):
            pass
    except BlockingIOError:
        return True
    except OSError:
        return False
    finally:
        conn.setblocking(True)
    return False


@contextmanager
def serving(limits: ServerLimits, backend: ScriptedBackend | None = None,
            api_key: str | None = None) -> Iterator[int]:
    app = scripted_app(backend or ScriptedBackend([]), limits=limits, api_key=api_key)
    with bounded_server(app, limits) as port:
        yield port


@pytest.fixture(scope="module")
def keyed() -> Iterator[int]:
    """A server with an API key and short body and linger timeouts."""
    with serving(QUICK, api_key=KEY) as port:
        yield port


AUTH = f"Authorization: Bearer {KEY}"

# routes that answer without reading the body, with the answer each gives
UNREAD_BODY_ROUTES = [
    pytest.param("GET", "/healthz", (), "127.0.0.1", "200", id="healthz"),
    pytest.param("GET", "/v1/models", (AUTH,), "127.0.0.1", "200", id="models"),
    pytest.param("POST", "/v1/chat/nobody/cancel", (AUTH,), "127.0.0.1", "404", id="cancel"),
    pytest.param("POST", "/v1/chat/completions", (), "127.0.0.1", "401", id="no-api-key"),
    pytest.param("GET", "/healthz", (), "evil.example", "403", id="host-guard"),
    pytest.param("GET", "/nowhere", (), "127.0.0.1", "404", id="unknown-route"),
]


# -- no connection outlives its answer ---------------------------------------------------


@pytest.mark.parametrize(("method", "path", "extra", "host", "status"), UNREAD_BODY_ROUTES)
def test_one_byte_of_a_declared_body_gets_the_answer_then_the_connection_closes(
        keyed: int, method: str, path: str, extra: tuple[str, ...], host: str,
        status: str) -> None:
    conn = connect(keyed)
    conn.sendall(head(method, path, *extra, "Content-Type: application/json",
                      "Content-Length: 1000", host=host) + b"{")
    line, headers, _ = read_answer(conn)
    assert line.split()[1] == status
    assert headers["connection"] == "close"
    assert closed_within(conn, 1)
    conn.close()


@pytest.mark.parametrize(("method", "path", "extra", "host", "status"), UNREAD_BODY_ROUTES)
def test_a_chunked_body_left_unfinished_closes_the_connection_after_the_answer(
        keyed: int, method: str, path: str, extra: tuple[str, ...], host: str,
        status: str) -> None:
    conn = connect(keyed)
    conn.sendall(head(method, path, *extra, "Transfer-Encoding: chunked", host=host)
                 + b"10\r\n{")
    line, headers, _ = read_answer(conn)
    assert line.split()[1] == status and headers["connection"] == "close"
    assert closed_within(conn, 1)
    conn.close()


def test_the_body_timeouts_408_closes_the_connection(keyed: int) -> None:
    conn = connect(keyed)
    conn.sendall(head("POST", "/v1/chat/completions", AUTH, "Content-Type: application/json",
                      "Content-Length: 100") + b"{")
    line, headers, body = read_answer(conn, timeout=5)
    assert line.split()[1] == "408" and headers["connection"] == "close"
    assert b"did not arrive within 0.5 seconds" in body
    assert closed_within(conn, 1)
    conn.close()


def test_a_body_trickled_a_byte_at_a_time_is_cut_at_the_body_timeout(keyed: int) -> None:
    conn = connect(keyed)
    conn.sendall(head("POST", "/v1/chat", AUTH, "Content-Type: application/json",
                      "Content-Length: 100000"))
    started = time.monotonic()
    conn.settimeout(0.05)
    answer = b""
    while b"\r\n\r\n" not in answer and time.monotonic() - started < 5:
        conn.sendall(b" ")
        try:
            answer += conn.recv(4096)
        except TimeoutError:
            pass
    assert answer.startswith(b"HTTP/1.1 408")
    assert time.monotonic() - started < QUICK.body_timeout + 1


def test_a_client_that_keeps_sending_after_the_answer_is_cut_after_the_linger(
        keyed: int) -> None:
    conn = connect(keyed)
    conn.sendall(head("GET", "/healthz", "Content-Length: 100000000") + b"x")
    assert read_answer(conn)[0].split()[1] == "200"
    started = time.monotonic()
    with pytest.raises(OSError):  # a reset, once the server stops draining
        while time.monotonic() - started < QUICK.linger_timeout + 3:
            conn.sendall(b"x" * 1024)
            time.sleep(0.01)
    assert time.monotonic() - started < QUICK.linger_timeout + 2
    conn.close()


def test_the_answer_is_not_lost_while_the_client_is_still_uploading(keyed: int) -> None:
    """The server drains what comes after its answer, so the client reads the answer
    instead of a reset, even though it reads only after sending more."""
    for _ in range(5):
        conn = connect(keyed)
        conn.sendall(head("GET", "/v1/models", "Content-Length: 10000000"))
        for _ in range(64):
            conn.sendall(b"y" * 4096)
        line, _, body = read_answer(conn)
        assert line.split()[1] == "401" and b"API key" in body
        assert closed_within(conn, 1)
        conn.close()


def test_a_request_whose_body_arrived_keeps_its_connection_alive(keyed: int) -> None:
    conn = connect(keyed)
    for _ in range(3):  # the cancel route does not read its body, but all of it came
        conn.sendall(head("POST", "/v1/chat/nobody/cancel", AUTH, "Content-Length: 2")
                     + b"{}")
        line, headers, _ = read_answer(conn)
        assert line.split()[1] == "404" and "connection" not in headers
    conn.sendall(head("GET", "/healthz", "Content-Length: 5") + b"a")
    line, headers, _ = read_answer(conn)
    assert line.split()[1] == "200" and headers["connection"] == "close"
    assert closed_within(conn, 1)
    conn.close()


def test_pipelined_requests_are_each_answered_and_an_unfinished_one_closes(
        keyed: int) -> None:
    conn = connect(keyed)
    conn.sendall(head("GET", "/healthz") * 3 + head("GET", "/v1/models", AUTH)
                 + head("GET", "/healthz", "Content-Length: 9") + b"abc")
    statuses = [read_answer(conn) for _ in range(5)]
    assert [s[0].split()[1] for s in statuses] == ["200"] * 5
    assert all("connection" not in s[1] for s in statuses[:4])
    assert statuses[4][1]["connection"] == "close"
    assert closed_within(conn, 1)
    conn.close()


async def _large_answer(scope: dict[str, object], receive: object, send: Any) -> None:
    """64 MiB in 64 KiB pieces: more than any socket buffers hold."""
    await send({"type": "http.response.start", "status": 200,
                "headers": [(b"content-length", str(64 << 20).encode())]})
    for _ in range(1024):
        await send({"type": "http.response.body", "body": b"z" * (64 << 10), "more_body": True})
    await send({"type": "http.response.body", "body": b""})


def test_a_client_that_stops_reading_its_answer_is_cut_after_the_send_timeout() -> None:
    limits = ServerLimits(send_timeout=0.5)
    with bounded_server(_large_answer, limits) as port:
        conn = socket.socket()
        conn.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        conn.connect(("127.0.0.1", port))
        conn.sendall(head("GET", "/"))
        time.sleep(2.5)  # reads nothing
        received, started = 0, time.monotonic()
        conn.settimeout(5)
        try:
            while chunk := conn.recv(1 << 20):
                received += len(chunk)
        except ConnectionResetError:
            pass
        conn.close()
        assert received < 64 << 20
        assert time.monotonic() - started < 2


# -- floods of idle and half-sent connections ----------------------------------------------


def _hostile(port: int, kind: int, source: str = "127.0.0.1") -> socket.socket:
    """One of four hostile connections: idle, a head never finished, a body never
    finished on a route that reads it, one byte of a body on a route that does not."""
    conn = connect(port, source)
    if kind == 1:
        conn.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ")
    elif kind == 2:
        conn.sendall(head("POST", "/v1/chat/completions", AUTH,
                          "Content-Type: application/json", "Content-Length: 5000") + b"{")
    elif kind == 3:
        conn.sendall(head("GET", "/healthz", "Content-Length: 5000") + b"{")
    return conn


def _timed_request(port: int, path: str, headers: dict[str, str]) -> tuple[int, float]:
    started = time.monotonic()
    client = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    try:
        client.request("GET", path, headers=headers)
        status = client.getresponse().status
    finally:
        client.close()
    return status, time.monotonic() - started


@pytest.mark.parametrize("api_key", [None, KEY], ids=["open", "api-key"])
def test_a_normal_request_answers_within_a_second_while_200_hostile_connections_are_open(
        api_key: str | None) -> None:
    records: list[logging.LogRecord] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            records.append(record)

    handler = Keep(level=logging.ERROR)
    logging.getLogger("uvicorn.error").addHandler(handler)
    limits = ServerLimits()  # the defaults of toolwire serve
    hostile: list[socket.socket] = []
    try:
        with serving(limits, api_key=api_key) as port:
            for i in range(200):
                hostile.append(_hostile(port, i % 4))
            time.sleep(0.2)
            auth = {"Authorization": f"Bearer {KEY}"} if api_key else {}
            for path in ("/healthz", "/v1/models"):
                status, seconds = _timed_request(port, path, auth)
                assert status == 200 and seconds < 1
            wait_for(lambda: sum(is_open(c) for c in hostile) <= limits.max_idle_per_client)
    finally:
        logging.getLogger("uvicorn.error").removeHandler(handler)
        for conn in hostile:
            conn.close()
    assert not records


def test_a_flood_that_reopens_what_the_server_closes_still_lets_a_request_through() -> None:
    """The same address as the attacker's: a new connection whose head has come is never
    the one closed to make room, however fast the attacker opens more."""
    limits = ServerLimits(max_idle_per_client=16)
    stop = threading.Event()
    reopened = [0]

    def flood(port: int) -> None:
        conns = [_hostile(port, i % 3) for i in range(100)]
        while not stop.is_set():
            for i, conn in enumerate(conns):
                if not is_open(conn):
                    conn.close()
                    conns[i] = _hostile(port, i % 3)
                    reopened[0] += 1
        for conn in conns:
            conn.close()

    with serving(limits) as port:
        attacker = threading.Thread(target=flood, args=(port,), daemon=True)
        attacker.start()
        try:
            wait_for(lambda: reopened[0] > 200)
            results = [_timed_request(port, "/healthz", {}) for _ in range(20)]
        finally:
            stop.set()
            attacker.join(10)
    assert [status for status, _ in results] == [200] * 20
    assert max(seconds for _, seconds in results) < 1


def test_one_clients_flood_closes_its_own_connections_not_anothers() -> None:
    limits = ServerLimits(max_idle_per_client=8, max_idle_connections=64,
                          keep_alive_timeout=30)
    with serving(limits) as port:
        others = [connect(port, "127.0.0.2") for _ in range(3)]
        for conn in others:  # real kept-alive connections: each has had an answer
            conn.sendall(head("GET", "/healthz"))
            assert read_answer(conn)[0].split()[1] == "200"
        flood = []
        for i in range(50):
            flood.append(_hostile(port, i % 3))
            time.sleep(0.002)
        try:
            wait_for(lambda: sum(is_open(c) for c in flood) == limits.max_idle_per_client)
            assert all(is_open(c) for c in flood[-limits.max_idle_per_client:])
            for conn in others:
                assert is_open(conn)
                conn.sendall(head("GET", "/healthz"))
                assert read_answer(conn)[0].split()[1] == "200"
        finally:
            for conn in others + flood:
                conn.close()


def test_past_the_global_bound_the_connections_waiting_longest_are_closed() -> None:
    limits = ServerLimits(max_idle_per_client=8, max_idle_connections=12)
    with serving(limits) as port:
        opened = []
        for source in ("127.0.0.2", "127.0.0.3", "127.0.0.4"):
            for _ in range(6):
                opened.append(connect(port, source))
                time.sleep(0.01)
        try:
            wait_for(lambda: sum(is_open(c) for c in opened) == limits.max_idle_connections)
            assert [is_open(c) for c in opened] == [False] * 6 + [True] * 12
        finally:
            for conn in opened:
                conn.close()


def test_a_request_being_answered_is_never_closed_to_make_room() -> None:
    limits = ServerLimits(max_idle_per_client=4, max_idle_connections=8)
    backend = GatedBackend(["the answer"])
    body = json.dumps({"model": "scripted", "messages": [user("hi")]}).encode()
    with serving(limits, backend) as port:
        running = connect(port)
        running.sendall(head("POST", "/v1/chat/completions", "Content-Type: application/json",
                             f"Content-Length: {len(body)}") + body)
        assert backend.started.wait(5)
        flood = [_hostile(port, i % 3) for i in range(40)]
        try:
            wait_for(lambda: sum(is_open(c) for c in flood) <= limits.max_idle_per_client)
            assert is_open(running)
            backend.release.set()
            line, _, answer = read_answer(running)
            assert line.split()[1] == "200" and b"the answer" in answer
        finally:
            backend.release.set()
            for conn in [running, *flood]:
                conn.close()


def test_a_body_flood_from_many_clients_cannot_fill_the_request_bound() -> None:
    """Half-sent bodies wait on their clients: they never count as requests being
    answered, so they cannot make the server answer 503."""
    limits = ServerLimits(max_connections=4, max_idle_per_client=8)
    with serving(limits) as port:
        flood = [_hostile(port, 2, f"127.0.0.{2 + i % 5}") for i in range(20)]
        try:
            time.sleep(0.2)
            results = []
            threads = [threading.Thread(
                target=lambda: results.append(_timed_request(port, "/healthz", {})))
                for _ in range(3)]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join(10)
            assert [status for status, _ in results] == [200, 200, 200]
        finally:
            for conn in flood:
                conn.close()


# -- the options and the docs ---------------------------------------------------------------


def test_the_connection_options_of_serve_set_the_new_bounds() -> None:
    limits = limits_from_args(_serve_args("--max-idle-connections", "100",
                                          "--max-idle-per-client", "7",
                                          "--linger-timeout", "0.5", "--send-timeout", "9"))
    assert (limits.max_idle_connections, limits.max_idle_per_client,
            limits.linger_timeout, limits.send_timeout) == (100, 7, 0.5, 9.0)
    assert limits.max_connections == ServerLimits().max_connections
