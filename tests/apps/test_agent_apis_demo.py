"""The Responses and Messages APIs on a real model: the demo's tiny llama.cpp model, whose
output a grammar forces (issue 38, items 1, 2 and 5).

What a stand-in cannot show: ``tool_choice`` ``any``/``tool`` enforced by the
family's grammar (on every turn, after a tool result too), ``text.format`` through
the same grammar as chat completions, ``count_tokens`` counting exactly the prompt a
turn renders (tool block included), a reasoning budget stopping a real generation,
and the demo model's log probabilities. The model runs in this process (a tiny
f32 model: no weight repacking); the server is the real app on 127.0.0.1.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anthropic
import jsonschema
import openai
import pytest

from tests.apps.test_server import running_server
from toolwire import CancelToken, DiagnosticEvent, Message, ModelRequest, TurnEnd
from toolwire.apps.cli.demo import EXAMPLE_TEXT, make_demo_backend
from toolwire.apps.server.app import create_app
from toolwire.testing import isolated_plugin_manager
from toolwire.vocabulary.backend import ReasoningRequest

pytestmark = pytest.mark.model  # the tiny demo model, in-process

pytest.importorskip("llama_cpp")

WEATHER: Any = {"name": "get_weather", "description": "The weather in a city.",
                "input_schema": {"type": "object", "properties": {"city": {"type": "string"}},
                                 "required": ["city"]}}
NOTES: Any = {"name": "search_text", "description": "Search the notes.",
              "input_schema": {"type": "object", "properties": {"pattern": {"type": "string"}},
                               "required": ["pattern"]}}
ASK: Any = [{"role": "user", "content": "Weather in Tokyo?"}]


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The demo model behind the real app; yields the base URL."""
    backend, _, _ = make_demo_backend(tmp_path_factory.mktemp("demo"), isolated_plugin_manager())
    try:
        with running_server(create_app(lambda h, s: None, backend=backend,
                                       model="toolwire-demo")) as base:
            yield base
    finally:
        backend.close()  # type: ignore[attr-defined]


def claude(base: str) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=base, api_key="none", max_retries=0, timeout=60)


def test_tool_choice_any_and_tool_are_enforced_on_every_turn(demo: str) -> None:
    client = claude(demo)
    for choice, name in (({"type": "any"}, "get_weather"),
                         ({"type": "tool", "name": "search_text"}, "search_text")):
        message = client.messages.create(model="toolwire-demo", max_tokens=200, messages=ASK,
                                         tools=[WEATHER, NOTES], tool_choice=choice)
        assert message.stop_reason == "tool_use"
        (call,) = [b for b in message.content if b.type == "tool_use"]
        assert call.name == name and set(call.input) == {  # type: ignore[union-attr]
            "city" if name == "get_weather" else "pattern"}
        # the turn after the tool's result: the choice still holds
        follow = [*ASK, {"role": "assistant", "content": [b.model_dump(exclude_none=True)
                                                           for b in message.content]},
                  {"role": "user", "content": [{"type": "tool_result", "tool_use_id": call.id,  # type: ignore[union-attr]
                                                "content": "sunny"}]}]
        again = client.messages.create(model="toolwire-demo", max_tokens=200, messages=follow,
                                       tools=[WEATHER, NOTES], tool_choice=choice)
        assert again.stop_reason == "tool_use"
        assert [b.name for b in again.content if b.type == "tool_use"] == [name]  # type: ignore[union-attr]
    answer = client.messages.create(model="toolwire-demo", max_tokens=200, messages=ASK,
                                    tools=[WEATHER], tool_choice={"type": "none"})
    assert answer.stop_reason == "end_turn" and "No tool is offered" in answer.content[0].text  # type: ignore[union-attr]


def test_tool_choice_any_is_enforced_streamed_too(demo: str) -> None:
    with claude(demo).messages.stream(model="toolwire-demo", max_tokens=200, messages=ASK,
                                      tools=[NOTES, WEATHER],
                                      tool_choice={"type": "any"}) as stream:
        kinds = [event.type for event in stream]
        message = stream.get_final_message()
    assert kinds[0] == "message_start" and message.stop_reason == "tool_use"
    # the stand-in calls a client's tool before one named like its own (search_text)
    assert [b.name for b in message.content if b.type == "tool_use"] == ["get_weather"]  # type: ignore[union-attr]


def test_count_tokens_counts_exactly_the_prompt_a_turn_renders_tool_block_included(
        demo: str) -> None:
    client = claude(demo)
    body: Any = {"model": "toolwire-demo", "system": "Be brief.", "messages": ASK}
    bare = client.messages.count_tokens(**body).input_tokens
    with_tools = client.messages.count_tokens(**body, tools=[WEATHER]).input_tokens
    assert with_tools > bare > 0
    turn = client.messages.create(**body, tools=[WEATHER], max_tokens=200)
    assert turn.usage.input_tokens == with_tools


def test_a_json_schema_text_format_is_forced_by_the_same_grammar(demo: str) -> None:
    schema = {"type": "object", "properties": {"city": {"type": "string"},
                                               "days": {"type": "integer", "minimum": 1}},
              "required": ["city", "days"], "additionalProperties": False}
    client = openai.OpenAI(base_url=demo + "/v1", api_key="none", max_retries=0, timeout=60)
    response = client.responses.create(model="toolwire-demo", input="Forecast?", text={
        "format": {"type": "json_schema", "name": "forecast", "schema": schema, "strict": True}})
    jsonschema.validate(json.loads(response.output_text), schema)
    message = claude(demo).messages.create(
        model="toolwire-demo", max_tokens=200, messages=ASK,
        extra_body={"output_config": {"format": {"type": "json_schema", "schema": schema}}})
    jsonschema.validate(json.loads(message.content[0].text), schema)  # type: ignore[union-attr]


def test_the_demo_model_returns_log_probabilities(demo: str) -> None:
    client = openai.OpenAI(base_url=demo + "/v1", api_key="none", max_retries=0, timeout=60)
    reply = client.chat.completions.create(
        model="toolwire-demo", messages=[{"role": "user", "content": "hi"}], logprobs=True,
        top_logprobs=2)
    content = reply.choices[0].logprobs.content  # type: ignore[union-attr]
    assert content and "".join(t.token for t in content) == reply.choices[0].message.content
    assert all(len(t.top_logprobs) == 2 for t in content)


THINKING_TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message.role }}\n"
    "{% if message.reasoning_content %}<think>\n{{ message.reasoning_content }}\n</think>\n\n"
    "{% endif %}{{ message.content }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n"
    "{% if enable_thinking is defined and not enable_thinking %}<think>\n\n</think>\n\n"
    "{% endif %}{% endif %}")
"""A Qwen3-style template with a reasoning switch (``enable_thinking``)."""


def thinking_backend(folder: Path, reply: str) -> Any:
    from toolwire.plugins.llama_cpp import LlamaCppBackend
    from toolwire.testing import write_tiny_gguf
    from toolwire.testing.tiny_gguf import TINY_BACKEND_OPTIONS, forcing_grammar

    path = write_tiny_gguf(folder / "thinking.gguf", THINKING_TEMPLATE)
    return LlamaCppBackend(path, n_ctx=2048, max_tokens=1024, temperature=0.0,
                           grammar=lambda request: forcing_grammar(reply),
                           plugins=isolated_plugin_manager(),
                           **TINY_BACKEND_OPTIONS)  # type: ignore[arg-type]


def test_a_reasoning_budget_stops_a_reply_that_reasons_past_it(tmp_path: Path) -> None:
    backend = thinking_backend(tmp_path, "<think>\n" + "step " * 60 + "\n</think>\n"
                               + EXAMPLE_TEXT)
    ask = (Message.user("think"),)
    try:
        full = list(backend.stream_turn(ModelRequest(
            ask, reasoning=ReasoningRequest(enabled=True)), CancelToken()))
        capped = list(backend.stream_turn(ModelRequest(
            ask, reasoning=ReasoningRequest(enabled=True, budget=12)), CancelToken()))
    finally:
        backend.close()
    full_end, capped_end = full[-1], capped[-1]
    assert isinstance(full_end, TurnEnd) and isinstance(capped_end, TurnEnd)
    assert full_end.reason == "stop" and full_end.usage is not None
    assert full_end.usage["reasoning_tokens"] > 12
    assert capped_end.reason == "length" and capped_end.usage is not None
    assert capped_end.usage["reasoning_tokens"] == 12
    assert any(isinstance(e, DiagnosticEvent) and e.code == "reasoning_budget" for e in capped)
    assert capped_end.usage["completion_tokens"] < full_end.usage["completion_tokens"]
    assert not any(getattr(e, "text", "") == EXAMPLE_TEXT for e in capped)


def test_the_reasoning_switch_reaches_the_template(tmp_path: Path) -> None:
    backend = thinking_backend(tmp_path, EXAMPLE_TEXT)
    ask = (Message.user("hi"),)
    try:
        on, off, default = (backend.fit_prompt(ModelRequest(ask, reasoning=reasoning))[1].text
                            for reasoning in (ReasoningRequest(enabled=True),
                                              ReasoningRequest(enabled=False),
                                              ReasoningRequest()))
    finally:
        backend.close()
    assert off.endswith("<think>\n\n</think>\n\n") and not on.endswith("</think>\n\n")
    assert default == off  # the backend's own setting: enable_thinking off
