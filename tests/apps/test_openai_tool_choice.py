"""``tool_choice`` on ``/v1/chat/completions`` reaches a local model's grammar.

A real llama.cpp tiny model (random weights, Qwen2.5's real chat template, so the
Hermes JSON family) behind a real uvicorn server on 127.0.0.1, spoken to by the
real ``openai`` SDK. Random weights write anything, so only the grammar that
``"required"`` or a named choice switches on can make every reply one valid call.
A stand-in backend checks that each choice reaches the backend's request as sent.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonschema
import openai
import pytest

from tests.apps.test_server import lookup, running_server, scripted_app, serving_backend
from tests.support.templates import shared_template
from tests.support.tiers import needs
from toolwire.testing import ScriptedBackend, write_tiny_gguf
from toolwire.testing.tiny_gguf import TINY_BACKEND_OPTIONS

pytest.importorskip("llama_cpp")
from toolwire.plugins.llama_cpp import LlamaCppBackend

MODEL_ID = "tiny-qwen2.5"
TOOLS: Any = [
    {"type": "function", "function": {
        "name": "search_text", "description": "Search the notes for a pattern.",
        "parameters": {"type": "object", "properties": {"pattern": {"type": "string"}},
                       "required": ["pattern"]}}},
    {"type": "function", "function": {
        "name": "count_lines", "description": "Count the lines of a file.",
        "parameters": {"type": "object", "properties": {"path": {"type": "string"},
                                                         "limit": {"type": "integer"}},
                       "required": ["path", "limit"]}}},
]
SCHEMAS = {t["function"]["name"]: t["function"]["parameters"] for t in TOOLS}
MESSAGES: list[Any] = [{"role": "user", "content": "Use a tool."}]
REPLIES = 3


@pytest.fixture(scope="module")
@needs("model")
def tiny_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The tiny model behind ``create_app`` on a free loopback port."""
    source = shared_template("Qwen-Qwen2.5-7B-Instruct.jinja")
    extra = sorted({c for c in source if ord(c) > 127})
    path: Path = write_tiny_gguf(tmp_path_factory.mktemp("tool-choice") / "tiny.gguf", source,
                                 sample_bytes=False, extra_tokens=extra)
    backend = LlamaCppBackend(path, n_ctx=8192, max_tokens=3000, temperature=1.0,
                              **TINY_BACKEND_OPTIONS)  # type: ignore[arg-type]

    with serving_backend(backend, model=MODEL_ID) as base:
        yield base


def sdk(base: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=base + "/v1", api_key="none", max_retries=0, timeout=120)


def assert_one_valid_call(calls: list[tuple[str, str]], names: set[str]) -> str:
    """The reply is exactly one call of an offered tool whose arguments validate."""
    assert len(calls) == 1, calls
    name, arguments = calls[0]
    assert name in names
    jsonschema.validate(json.loads(arguments), SCHEMAS[name])
    return name


def test_required_makes_every_reply_one_valid_call(tiny_server: str) -> None:
    client = sdk(tiny_server)
    for _ in range(REPLIES):
        reply = client.chat.completions.create(model=MODEL_ID, messages=MESSAGES, tools=TOOLS,
                                               tool_choice="required",
                                               parallel_tool_calls=False)
        choice = reply.choices[0]
        assert choice.finish_reason == "tool_calls"
        assert not (choice.message.content or "").strip()
        calls = [(c.function.name, c.function.arguments)  # type: ignore[union-attr]
                 for c in choice.message.tool_calls or []]
        assert_one_valid_call(calls, set(SCHEMAS))


def test_a_named_choice_calls_that_tool_streamed_too(tiny_server: str) -> None:
    client = sdk(tiny_server)
    named: Any = {"type": "function", "function": {"name": "count_lines"}}
    for _ in range(REPLIES):
        reply = client.chat.completions.create(model=MODEL_ID, messages=MESSAGES, tools=TOOLS,
                                               tool_choice=named,
                                               parallel_tool_calls=False)
        calls = [(c.function.name, c.function.arguments)  # type: ignore[union-attr]
                 for c in reply.choices[0].message.tool_calls or []]
        assert assert_one_valid_call(calls, set(SCHEMAS)) == "count_lines"
    stream = client.chat.completions.create(model=MODEL_ID, messages=MESSAGES, tools=TOOLS,
                                            tool_choice=named,
                                            parallel_tool_calls=False, stream=True)
    joined: dict[int, list[str]] = {}
    finish = None
    for chunk in stream:
        for choice in chunk.choices:
            finish = choice.finish_reason or finish
            for call in choice.delta.tool_calls or []:
                entry = joined.setdefault(call.index, ["", ""])
                entry[0] = (call.function.name if call.function else None) or entry[0]
                entry[1] += (call.function.arguments or "") if call.function else ""
    assert finish == "tool_calls"
    assert assert_one_valid_call([(n, a) for n, a in joined.values()], set(SCHEMAS)) \
        == "count_lines"


@pytest.mark.parametrize("sent, received", [
    ("required", "required"),
    ({"type": "function", "function": {"name": "lookup"}},
     {"type": "function", "function": {"name": "lookup"}}),
    ("auto", "auto"),
])
def test_the_choice_reaches_the_backend_as_sent(sent: Any, received: Any) -> None:
    backend = ScriptedBackend(["plain"])
    with running_server(scripted_app(backend, model_id=MODEL_ID)) as base:
        sdk(base).chat.completions.create(model=MODEL_ID, messages=MESSAGES,
                                          tools=[lookup.openai_schema()],  # type: ignore[list-item]
                                          tool_choice=sent)
    assert backend.requests[0].tool_choice == received


def test_a_choice_the_grammar_cannot_enforce_is_400_streamed_or_not(tiny_server: str) -> None:
    """A schema keyword no grammar expresses, under "required": the SDK gets a 400 it
    does not retry, naming tool_choice, the tool and the keyword (was a 500)."""
    from tests.support.openai_clients import every_reading

    odd: Any = {"type": "function", "function": {
        "name": "odd", "parameters": {"type": "object", "properties": {
            "a": {"not": {"type": "string"}}}}}}
    readings = every_reading(tiny_server, {"model": MODEL_ID, "messages": MESSAGES,
                                           "tools": [odd], "tool_choice": "required"})
    for reading in readings.values():
        assert reading.status == 400
        assert reading.error == ("tool_choice", "grammar_unsupported")
    client = openai.OpenAI(base_url=tiny_server + "/v1", api_key="none", max_retries=0)
    with pytest.raises(openai.BadRequestError) as refused:
        client.chat.completions.create(model=MODEL_ID, messages=MESSAGES, tools=[odd],
                                       tool_choice="required")
    assert "'odd'" in refused.value.message and "'not'" in refused.value.message
