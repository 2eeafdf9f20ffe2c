"""``response_format`` on ``/v1/chat/completions``: a local model's reply is the JSON asked for.

A tiny real llama.cpp model (random weights, Qwen2.5's real chat template)
behind a real server on 127.0.0.1: random weights write anything, so only the
grammar written from the request's schema can make every reply parse and
validate. The real ``openai`` SDK sends ``json_object``, ``json_schema`` and
``.parse(response_format=PydanticModel)``, streamed and not.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Literal

import jsonschema
import openai
import pytest
from pydantic import BaseModel, Field

from tests.apps.test_server import running_server, scripted_app, serving_backend
from tests.support.openai_clients import every_reading
from tests.support.templates import shared_template
from tests.support.tiers import needs
from toolwire.testing import ScriptedBackend, write_tiny_gguf
from toolwire.testing.tiny_gguf import TINY_BACKEND_OPTIONS
from toolwire.vocabulary.backend import ResponseFormat

pytest.importorskip("llama_cpp")
from toolwire.plugins.llama_cpp import LlamaCppBackend

MODEL_ID = "tiny-qwen2.5"
ASK: Any = [{"role": "user", "content": "Describe a person as JSON."}]
REPLIES = 3


class Person(BaseModel):
    """Every bound here is one the grammar enforces (see docs/openai-server.md)."""

    name: str = Field(max_length=12)
    age: int = Field(ge=0, le=60)
    mood: Literal["happy", "sad"]
    tags: list[str] = Field(max_length=3)


@pytest.fixture(scope="module")
@needs("model")
def tiny_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    source = shared_template("Qwen-Qwen2.5-7B-Instruct.jinja")
    extra = sorted({c for c in source if ord(c) > 127})
    path: Path = write_tiny_gguf(tmp_path_factory.mktemp("response-format") / "tiny.gguf",
                                 source, sample_bytes=False, extra_tokens=extra)
    backend = LlamaCppBackend(path, n_ctx=8192, max_tokens=3000, temperature=1.0,
                              **TINY_BACKEND_OPTIONS)  # type: ignore[arg-type]

    with serving_backend(backend, model=MODEL_ID) as base:
        yield base


def sdk(base: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=base + "/v1", api_key="none", max_retries=0, timeout=300)


def test_json_object_makes_every_reply_one_json_object(tiny_server: str) -> None:
    client = sdk(tiny_server)
    for seed in range(REPLIES):
        reply = client.chat.completions.create(model=MODEL_ID, messages=ASK, seed=seed,
                                               response_format={"type": "json_object"})
        assert reply.choices[0].finish_reason == "stop"
        assert isinstance(json.loads(reply.choices[0].message.content or ""), dict)
    chunks = list(client.chat.completions.create(model=MODEL_ID, messages=ASK, stream=True,
                                                 response_format={"type": "json_object"}))
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert isinstance(json.loads(text), dict)


def test_a_strict_json_schema_reply_validates(tiny_server: str) -> None:
    schema = Person.model_json_schema()
    client = sdk(tiny_server)
    for seed in range(REPLIES):
        reply = client.chat.completions.create(
            model=MODEL_ID, messages=ASK, seed=seed,
            response_format={"type": "json_schema", "json_schema": {
                "name": "person", "schema": schema, "strict": True}})
        jsonschema.validate(json.loads(reply.choices[0].message.content or ""), schema)


def test_the_sdks_parse_with_a_pydantic_model_works(tiny_server: str) -> None:
    client = sdk(tiny_server)
    for seed in range(REPLIES):
        completion = client.chat.completions.parse(model=MODEL_ID, messages=ASK, seed=seed,
                                                   response_format=Person)
        parsed = completion.choices[0].message.parsed
        assert isinstance(parsed, Person)
        assert Person.model_validate_json(completion.choices[0].message.content or "") == parsed


def test_the_async_sdks_parse_works_too(tiny_server: str) -> None:
    import asyncio

    async def parse() -> Any:
        client = openai.AsyncOpenAI(base_url=tiny_server + "/v1", api_key="none",
                                    max_retries=0, timeout=300)
        completion = await client.chat.completions.parse(model=MODEL_ID, messages=ASK,
                                                         response_format=Person)
        await client.close()
        return completion.choices[0].message.parsed

    assert isinstance(asyncio.run(parse()), Person)


@pytest.mark.parametrize("response_format", [
    {"type": "xml"}, {"type": "json_schema"},
    {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "wrong"}}},
    "json",
])
def test_an_unknown_or_malformed_response_format_is_400(response_format: Any) -> None:
    with running_server(scripted_app(ScriptedBackend([]), model_id=MODEL_ID)) as base:
        readings = every_reading(base, {"model": MODEL_ID, "messages": ASK,
                                        "response_format": response_format})
    for reading in readings.values():
        assert reading.status == 400 and reading.error is not None
        assert reading.error[0] == "response_format"


def test_a_strict_schema_the_grammar_cannot_express_is_400_before_the_stream(
        tiny_server: str) -> None:
    body = {"model": MODEL_ID, "messages": ASK, "response_format": {
        "type": "json_schema", "json_schema": {
            "name": "odd", "strict": True,
            "schema": {"type": "object", "properties": {"a": {"not": {"type": "string"}}}}}}}
    readings = every_reading(tiny_server, body)
    for reading in readings.values():
        assert reading.status == 400 and reading.error == ("response_format",
                                                           "grammar_unsupported")


def test_the_format_reaches_the_backend_as_sent() -> None:
    backend = ScriptedBackend(['{"a": 1}'] * 2)
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}}
    with running_server(scripted_app(backend, model_id=MODEL_ID)) as base:
        client = sdk(base)
        client.chat.completions.create(model=MODEL_ID, messages=ASK,
                                       response_format={"type": "json_object"})
        client.chat.completions.create(model=MODEL_ID, messages=ASK, response_format={
            "type": "json_schema", "json_schema": {"name": "n", "schema": schema,
                                                   "strict": True}})
    assert [r.response_format for r in backend.requests] == [
        ResponseFormat("json_object"), ResponseFormat("json_schema", schema, "n", True)]


def test_with_tools_under_auto_a_reply_is_calls_or_the_json(tiny_server: str) -> None:
    """The OpenAI Agents SDK's shape: tools and an output type in one request."""
    tool: Any = {"type": "function", "function": {
        "name": "lookup", "parameters": {"type": "object", "properties": {
            "name": {"type": "string", "maxLength": 10}}, "required": ["name"]}}}
    schema = Person.model_json_schema()
    seen = set()
    client = sdk(tiny_server)
    for seed in range(8):
        reply = client.chat.completions.create(
            model=MODEL_ID, messages=ASK, seed=seed, tools=[tool],
            response_format={"type": "json_schema", "json_schema": {
                "name": "person", "schema": schema, "strict": True}})
        message = reply.choices[0].message
        if message.tool_calls:
            for call in message.tool_calls:
                assert call.function.name == "lookup"  # type: ignore[union-attr]
                jsonschema.validate(json.loads(call.function.arguments),  # type: ignore
                                    tool["function"]["parameters"])
            seen.add("calls")
        else:
            jsonschema.validate(json.loads(message.content or ""), schema)
            seen.add("json")
    assert seen  # random weights: which of the two a seed gives is the model's
