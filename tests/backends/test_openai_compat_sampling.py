"""The ``openai_compat`` backend sends a turn's own sampling settings to the provider.

A turn's :class:`toolwire.SamplingOverrides` go out as request fields of
``/v1/chat/completions`` (the real ``openai`` SDK against the SSE test server on
127.0.0.1), replacing the same fields of the backend's ``extra_body``; the token
cap is ``max_completion_tokens`` for OpenAI itself and ``max_tokens`` elsewhere.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest

from tests.support.openai_wire_server import Stream, WireServer, reply_chunks
from toolwire import CancelToken, Message, ModelRequest, SamplingOverrides
from toolwire.plugins.openai_compat import OpenAICompatBackend

SAMPLING_FIELDS = ("temperature", "top_p", "seed", "max_tokens", "max_completion_tokens")


@pytest.fixture
def server() -> Iterator[WireServer]:
    with WireServer() as wire:
        yield wire


def backend_for(server: WireServer, **options: Any) -> OpenAICompatBackend:
    return OpenAICompatBackend("custom", model="test-model", base_url=server.url, timeout=3.0,
                               retry_backoff=0.0, environ={}, **options)


def request(**sampling: Any) -> ModelRequest:
    return ModelRequest((Message.user("hi"),), sampling=SamplingOverrides(**sampling))


def sent_sampling(body: dict[str, Any]) -> dict[str, Any]:
    return {k: body[k] for k in SAMPLING_FIELDS if k in body}


def test_a_turns_sampling_goes_out_as_request_fields(server: WireServer) -> None:
    server.enqueue(Stream(reply_chunks("ok")))
    backend = backend_for(server)
    list(backend.stream_turn(request(temperature=0.0, top_p=0.5, max_tokens=3, seed=-9),
                             CancelToken()))
    assert sent_sampling(server.bodies[0]) == {"temperature": 0.0, "top_p": 0.5, "seed": -9,
                                               "max_tokens": 3}


def test_a_turn_without_overrides_sends_only_extra_body(server: WireServer) -> None:
    server.enqueue(Stream(reply_chunks("ok")))
    backend = backend_for(server, extra_body={"temperature": 0.2, "max_tokens": 50})
    list(backend.stream_turn(request(), CancelToken()))
    assert sent_sampling(server.bodies[0]) == {"temperature": 0.2, "max_tokens": 50}


def test_the_turns_fields_replace_those_of_extra_body(server: WireServer) -> None:
    server.enqueue(Stream(reply_chunks("ok")))
    backend = backend_for(server, extra_body={"temperature": 0.2, "max_completion_tokens": 50,
                                              "top_k": 7})
    list(backend.stream_turn(request(temperature=1.5, max_tokens=4), CancelToken()))
    body = server.bodies[0]
    assert sent_sampling(body) == {"temperature": 1.5, "max_tokens": 4}
    assert body["top_k"] == 7  # a field the turn does not set stays


def test_the_async_turn_sends_them_too(server: WireServer) -> None:
    server.enqueue(Stream(reply_chunks("ok")))
    backend = backend_for(server)

    async def run() -> None:
        async for _ in backend.astream_turn(request(seed=5, top_p=0.1), CancelToken()):
            pass

    asyncio.run(run())
    assert sent_sampling(server.bodies[0]) == {"seed": 5, "top_p": 0.1}


def test_openai_itself_gets_the_cap_as_max_completion_tokens() -> None:
    # nothing is sent: this reads the request the backend would make to api.openai.com
    backend = OpenAICompatBackend("openai", model="gpt-test", api_key="sk-test", environ={},
                                  extra_body={"max_tokens": 10})
    assert backend.connection.is_openai
    kwargs = backend._request_kwargs(request(max_tokens=8, seed=1))
    assert (kwargs["max_completion_tokens"], kwargs["seed"]) == (8, 1)
    assert "max_tokens" not in kwargs and "extra_body" not in kwargs


def test_a_turns_top_k_goes_to_a_provider_that_takes_it_never_to_openai(
        server: WireServer) -> None:
    server.enqueue(Stream(reply_chunks("ok")))
    backend = backend_for(server, extra_body={"top_k": 7})
    list(backend.stream_turn(request(top_k=3), CancelToken()))
    assert server.bodies[0]["top_k"] == 3  # the turn's, over extra_body's
    openai_backend = OpenAICompatBackend("openai", model="gpt-test", api_key="sk-test",
                                         environ={})
    kwargs = openai_backend._request_kwargs(request(top_k=3, seed=1))
    assert "top_k" not in kwargs and "top_k" not in kwargs.get("extra_body", {})
