"""No request body makes ``/v1/chat/completions`` answer ``500`` (issue 28, item 6).

Hypothesis draws JSON bodies (a valid request with fields replaced by any JSON,
strings that are hostile as argument text, patterns or escapes) and posts them
to the real app on 127.0.0.1, whose scripted backend replays a reply through the
real parser; every answer is a success or an error of the client's (``4xx``) in
OpenAI's error shape. The bodies found to give ``500`` before are examples.
"""

from __future__ import annotations

import http.client
import json
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from tests.apps.test_server import running_server, scripted_app
from toolwire.apps.server.completion_request import REQUEST_FIELDS
from toolwire.testing import ScriptedBackend

REPLY = ("Sure.\n<tool_call>\n<function=lookup>\n<parameter=name>\nalex\n</parameter>\n"
         "</function>\n</tool_call>")
NASTY = ["\ud800", "a\udc00b", "[" * 5000, '{"a":' * 3000, "(" * 3000 + ")" * 3000,
         "(a+)+$", "\\", "null", "1" * 5000, "", "function", "json_schema", "tool"]
FIELD_NAMES = [*sorted(REQUEST_FIELDS), "type", "function", "name", "parameters", "arguments",
               "id", "role", "content", "tool_calls", "tool_call_id", "properties", "pattern",
               "items", "$ref", "anyOf", "json_schema", "schema", "strict", "text"]
scalars = st.one_of(st.none(), st.booleans(), st.integers(-(2 ** 70), 2 ** 70),
                    st.floats(allow_nan=False, allow_infinity=False), st.text(max_size=12),
                    st.sampled_from(NASTY))
values = st.recursive(scalars, lambda inner: st.one_of(
    st.lists(inner, max_size=4),
    st.dictionaries(st.sampled_from(FIELD_NAMES) | st.text(max_size=4), inner, max_size=5)),
    max_leaves=24)


def _call(arguments: str) -> list[dict[str, Any]]:
    return [{"role": "user", "content": "hi"},
            {"role": "assistant", "content": None, "tool_calls": [
                {"id": "c1", "type": "function",
                 "function": {"name": "lookup", "arguments": arguments}}]},
            {"role": "tool", "tool_call_id": "c1", "content": "x"}]


NESTED_PATTERN = "(" * 3000 + ")" * 3000
PATTERN_TOOL = [{"type": "function", "function": {"name": "t", "parameters": {
    "type": "object", "properties": {"a": {"type": "string", "pattern": NESTED_PATTERN}}}}}]


@pytest.fixture(scope="module")
def base() -> Iterator[str]:
    with running_server(scripted_app(ScriptedBackend([REPLY] * 100_000))) as url:
        yield url


def post(base: str, raw: bytes) -> tuple[int, Any]:
    conn = http.client.HTTPConnection("127.0.0.1", int(base.rsplit(":", 1)[1]), timeout=30)
    try:
        conn.request("POST", "/v1/chat/completions", body=raw,
                     headers={"Content-Type": "application/json"})
        response = conn.getresponse()
        data = response.read()
    finally:
        conn.close()
    if response.headers.get("content-type", "").startswith("text/event-stream"):
        return response.status, None
    return response.status, json.loads(data)


@settings(max_examples=200, deadline=None, suppress_health_check=list(HealthCheck))
@given(extra=st.dictionaries(st.sampled_from(FIELD_NAMES), values, max_size=4),
       keep_base=st.booleans())
@example(extra={"messages": _call("[" * 100_000)}, keep_base=True)
@example(extra={"messages": _call('{"a":' * 100_000)}, keep_base=True)
@example(extra={"tools": PATTERN_TOOL}, keep_base=True)
@example(extra={"messages": [{"role": "user", "content": "\ud800"}]}, keep_base=True)
@example(extra={"model": "\udfff"}, keep_base=True)
def test_no_body_is_answered_with_a_server_error(base: str, extra: dict[str, Any],
                                                 keep_base: bool) -> None:
    body = {"model": "scripted", "messages": [{"role": "user", "content": "hi"}],
            **extra} if keep_base else extra
    status, answer = post(base, json.dumps(body).encode())
    assert status < 500, (status, answer)
    if status >= 400:
        assert set(answer["error"]) == {"message", "type", "param", "code"}


@pytest.mark.parametrize("raw", [
    b'{"model": "scripted", "messages": [{"role": "user", "content": "\\ud800 alone"}]}',
    b'{"model": "scripted", "messages": [{"role": "user", "content": "x"}], "\\udc00": 1}',
])
def test_a_lone_surrogate_is_a_400_naming_it(base: str, raw: bytes) -> None:
    status, answer = post(base, raw)
    assert status == 400 and answer["error"]["code"] == "invalid_json"
    assert "surrogate" in answer["error"]["message"]


def test_a_pair_of_surrogate_escapes_is_one_character_and_fine(base: str) -> None:
    status, answer = post(base, b'{"model": "scripted", "messages": [{"role": "user", '
                                b'"content": "\\ud83d\\ude00"}]}')
    assert status == 200 and answer["object"] == "chat.completion"


def test_argument_text_nested_past_the_parser_is_a_400(base: str) -> None:
    for arguments in ("[" * 100_000, '{"a":' * 100_000):
        status, answer = post(base, json.dumps({"model": "scripted",
                                                "messages": _call(arguments)}).encode())
        assert status == 400 and answer["error"]["param"] == "messages"
