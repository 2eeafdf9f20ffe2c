"""``--allow-origin``: browser pages of the named origins may call the server (issue 29, item 8).

A real server on 127.0.0.1: a CORS preflight from an allowed origin is answered
(before the API key, which browsers never send in one), and every answer to it
carries ``Access-Control-Allow-Origin``; any other origin meets the checks as
before (no CORS headers, a cross-site POST refused), and the ``Host`` check and
the API key hold for everyone.
"""

from __future__ import annotations

import http.client
import json
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest

from tests.apps.test_server import running_server
from toolwire.apps.server.app import create_app
from toolwire.apps.server.request_guard import parse_origin
from toolwire.testing import ScriptedBackend

ALLOWED = "http://app.example:5173"
KEY = "k-1234"


@pytest.fixture(scope="module")
def base() -> Iterator[str]:
    backend = ScriptedBackend(["hello"] * 50)
    app = create_app(lambda history, system: None,  # type: ignore[arg-type,return-value]
                     backend=backend, model="scripted", api_key=KEY,
                     allowed_origins=[ALLOWED, "https://other.example"])
    with running_server(app) as url:
        yield url


def call(base: str, method: str, path: str, headers: dict[str, str],
         body: Any = None) -> tuple[int, dict[str, str], bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", int(base.rsplit(":", 1)[1]), timeout=10)
    data = None if body is None else json.dumps(body).encode()
    sent = {"Host": "127.0.0.1", **({"Content-Type": "application/json"} if data else {}),
            **headers}
    conn.request(method, path, body=data, headers=sent)
    response = conn.getresponse()
    raw = response.read()
    got = {k.lower(): v for k, v in response.getheaders()}
    conn.close()
    return response.status, got, raw


PREFLIGHT = {"Access-Control-Request-Method": "POST",
             "Access-Control-Request-Headers": "authorization, content-type, x-stainless-os"}
BODY = {"model": "scripted", "messages": [{"role": "user", "content": "hi"}]}


def test_a_preflight_from_an_allowed_origin_is_answered_without_the_key(base: str) -> None:
    status, headers, body = call(base, "OPTIONS", "/v1/chat/completions",
                                 {"Origin": ALLOWED, **PREFLIGHT})
    assert status == 204 and body == b""
    assert headers["access-control-allow-origin"] == ALLOWED
    assert "POST" in headers["access-control-allow-methods"]
    assert headers["access-control-allow-headers"] == PREFLIGHT["Access-Control-Request-Headers"]
    assert headers["vary"] == "Origin"


def test_the_allowed_origins_request_is_served_with_cors_headers(base: str) -> None:
    status, headers, raw = call(base, "POST", "/v1/chat/completions",
                                {"Origin": ALLOWED, "Authorization": f"Bearer {KEY}"}, BODY)
    assert status == 200 and json.loads(raw)["choices"][0]["message"]["content"] == "hello"
    assert headers["access-control-allow-origin"] == ALLOWED
    status, headers, raw = call(base, "POST", "/v1/chat/completions", {"Origin": ALLOWED}, BODY)
    assert status == 401 and headers["access-control-allow-origin"] == ALLOWED  # readable
    status, headers, _ = call(base, "GET", "/v1/models",
                              {"Origin": "HTTPS://OTHER.example", "Authorization": f"Bearer {KEY}"})
    assert status == 200 and headers["access-control-allow-origin"] == "HTTPS://OTHER.example"


@pytest.mark.parametrize("origin", ["http://evil.example", "http://app.example",
                                    "http://app.example:5174", "https://app.example:5173",
                                    "null"])
def test_any_other_origin_meets_the_checks_as_before(base: str, origin: str) -> None:
    status, headers, _ = call(base, "OPTIONS", "/v1/chat/completions",
                              {"Origin": origin, **PREFLIGHT})
    assert status != 204 and "access-control-allow-origin" not in headers
    status, headers, raw = call(base, "POST", "/v1/chat/completions",
                                {"Origin": origin, "Authorization": f"Bearer {KEY}"}, BODY)
    assert status == 403 and json.loads(raw)["error"]["code"] == "cross_origin"
    assert "access-control-allow-origin" not in headers


def test_the_host_check_holds_for_an_allowed_origin(base: str) -> None:
    status, _, raw = call(base, "OPTIONS", "/v1/chat/completions",
                          {"Origin": ALLOWED, "Host": "rebound.example", **PREFLIGHT})
    assert status == 403 and json.loads(raw)["error"]["code"] == "host_not_allowed"


@pytest.mark.parametrize(("text", "origin"), [
    ("http://localhost:5173", "http://localhost:5173"), ("HTTPS://App.Example/", "https://app.example"),
    ("http://[::1]:8080", "http://[::1]:8080")])
def test_origins_are_read_as_browsers_send_them(text: str, origin: str) -> None:
    assert parse_origin(text) == origin


@pytest.mark.parametrize("text", ["*", "null", "app.example", "ftp://app.example",
                                  "http://app.example/path", "http://user@app.example",
                                  "http://app.example?q", "http://"])
def test_what_is_not_an_origin_is_refused(text: str) -> None:
    with pytest.raises(ValueError, match="not an origin"):
        parse_origin(text)


@pytest.mark.process
def test_serve_refuses_a_malformed_allow_origin_as_an_input_error() -> None:
    proc = subprocess.run([sys.executable, "-m", "toolwire", "serve", "--demo", "--port", "0",
                           "--allow-origin", "*"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "--allow-origin" in proc.stderr and "Traceback" not in \
        proc.stderr
