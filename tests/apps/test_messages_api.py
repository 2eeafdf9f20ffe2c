"""``POST /v1/messages`` and ``/v1/messages/count_tokens``: Anthropic's Messages API on the
served model (issue 38, item 2).

The real app under uvicorn on 127.0.0.1, spoken to by the real ``anthropic`` SDK
(``messages.create``, ``messages.stream``, ``messages.count_tokens``) and raw HTTP;
the model is a :class:`~toolwire.testing.ScriptedBackend` whose raw replies go
through the real ``qwen_xml`` parser, and whose requests show what the model was
sent. Counting and the grammar-enforced ``tool_choice`` run on the real demo model
in ``test_agent_apis_demo.py``.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from typing import Any

import anthropic
import pytest

from tests.apps.test_server import json_request, request, running_server, sse_items
from toolwire import CancelToken, ErrorEvent, ReasoningEvent, TextEvent, TurnEnd
from toolwire.apps.server.app import create_app
from toolwire.testing import ScriptedBackend
from toolwire.vocabulary.backend import ModelRequest

THINK_AND_CALL = ("<think>\nThe notes will say.\n</think>\nLet me look.\n<tool_call>\n"
                  "<function=lookup>\n<parameter=name>\nalex\n</parameter>\n</function>\n"
                  "</tool_call>")
ANSWER = "Alex is a colleague."
LOOKUP: Any = {"name": "lookup", "description": "Look a person up.",
               "input_schema": {"type": "object", "properties": {"name": {"type": "string"}},
                                "required": ["name"]}}
ASK: Any = [{"role": "user", "content": "Who is Alex?"}]
KEY = "sk-local"


def sdk(base: str, **options: Any) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=base, api_key=options.pop("api_key", "none"),
                               max_retries=0, timeout=30, **options)


def test_a_tool_use_block_comes_back_with_its_input_after_the_thinking_and_text(
        replying_server: tuple[str, ScriptedBackend, list[Any]]) -> None:
    base, backend, replies = replying_server
    replies.append(THINK_AND_CALL)
    message = sdk(base).messages.create(model="m", max_tokens=200, messages=ASK, tools=[LOOKUP])
    assert message.stop_reason == "tool_use"
    assert [b.type for b in message.content] == ["thinking", "text", "tool_use"]
    thinking, text, call = message.content
    assert thinking.thinking == "The notes will say." and thinking.signature  # type: ignore[union-attr]
    assert text.text == "Let me look."  # type: ignore[union-attr]
    assert (call.name, call.input) == ("lookup", {"name": "alex"})  # type: ignore[union-attr]
    assert message.usage.output_tokens > 0
    assert backend.requests[0].sampling.max_tokens == 200


def test_the_stream_sends_the_documented_events_and_joins_to_the_whole_message(
        replying_server: tuple[str, ScriptedBackend, list[Any]]) -> None:
    base, _, replies = replying_server
    replies += [THINK_AND_CALL] * 3
    client = sdk(base)
    whole = client.messages.create(model="m", max_tokens=200, messages=ASK, tools=[LOOKUP])
    conn, response = request(base, "POST", "/v1/messages", {
        "model": "m", "max_tokens": 200, "messages": ASK, "tools": [LOOKUP], "stream": True})
    events = list(sse_items(response))
    conn.close()
    kinds = [e["type"] for e in events]
    assert kinds[0] == "message_start" and kinds[-2:] == ["message_delta", "message_stop"]
    deltas = [e["delta"]["type"] for e in events if e["type"] == "content_block_delta"]
    assert {"thinking_delta", "signature_delta", "text_delta", "input_json_delta"} <= set(deltas)
    starts = [e["content_block"]["type"] for e in events if e["type"] == "content_block_start"]
    assert starts == ["thinking", "text", "tool_use"]
    assert kinds.count("content_block_stop") == 3
    assert events[-2]["delta"]["stop_reason"] == "tool_use"
    partial = "".join(e["delta"]["partial_json"] for e in events
                      if e["type"] == "content_block_delta"
                      and e["delta"]["type"] == "input_json_delta")
    assert json.loads(partial) == whole.content[-1].input  # type: ignore[union-attr]
    with client.messages.stream(model="m", max_tokens=200, messages=ASK,
                                tools=[LOOKUP]) as stream:
        assert next(e.type for e in stream) == "message_start"
        final = stream.get_final_message()
    assert [b.model_dump(exclude={"id"}) for b in final.content] == \
        [b.model_dump(exclude={"id"}) for b in whole.content]


def ask_claude(client: anthropic.Anthropic, stream: bool, **body: Any) -> Any:
    """``messages.create``, or the final message of ``messages.stream``."""
    if not stream:
        return client.messages.create(**body)
    with client.messages.stream(**body) as events:
        return events.get_final_message()


@pytest.mark.parametrize("stream", [False, True])
def test_a_tool_result_round_trip_reaches_the_model_as_the_calls_result(
        replying_server: tuple[str, ScriptedBackend, list[Any]], stream: bool) -> None:
    base, backend, replies = replying_server
    replies += [THINK_AND_CALL, ANSWER]
    client = sdk(base)
    first = ask_claude(client, stream, model="m", max_tokens=200, messages=ASK, tools=[LOOKUP])
    call = first.content[-1]
    follow = [*ASK, {"role": "assistant", "content": [b.model_dump(exclude_none=True)
                                                       for b in first.content]},
              {"role": "user", "content": [
                  {"type": "tool_result", "tool_use_id": call.id,  # type: ignore[union-attr]
                   "content": [{"type": "text", "text": "no such person"}], "is_error": True},
                  {"type": "text", "text": "Try again?"}]}]
    second = ask_claude(client, stream, model="m", max_tokens=200, messages=follow,
                        tools=[LOOKUP])
    assert second.stop_reason == "end_turn" and second.content[0].text == ANSWER  # type: ignore[union-attr]
    messages = backend.requests[1].messages
    assert [m.role for m in messages] == ["user", "assistant", "tool", "user"]
    assert messages[1].reasoning == "The notes will say."
    assert messages[2].content == "no such person" and messages[2].is_error
    assert messages[2].tool_call_id == messages[1].tool_calls[0].id
    assert messages[3].content == "Try again?"


def test_the_system_prompt_folds_in_system_role_messages_in_their_order(
        replying_server: tuple[str, ScriptedBackend, list[Any]]) -> None:
    base, backend, replies = replying_server
    replies.append(ANSWER)
    status, _ = json_request(base, "POST", "/v1/messages?beta=true", {
        "model": "m", "max_tokens": 64,
        "system": [{"type": "text", "text": "You help."},
                   {"type": "text", "text": " Be brief.", "cache_control": {"type": "ephemeral"}}],
        "messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}]},
                     {"role": "system", "content": [{"type": "text", "text": "Env: linux."}]}],
        "thinking": {"type": "adaptive", "display": "omitted"}, "output_config": {"effort": "high"},
        "context_management": {"edits": [{"type": "clear_thinking_20251015", "keep": "all"}]},
        "metadata": {"user_id": "u"}, "tools": [{**LOOKUP, "defer_loading": True}]},
        headers={"anthropic-version": "2023-06-01",
                 "anthropic-beta": "claude-code-20250219,context-management-2025-06-27"})
    assert status == 200
    sent = backend.requests[0]
    assert [(m.role, m.content) for m in sent.messages] == [
        ("system", "You help. Be brief.\n\nEnv: linux."), ("user", "hi")]
    assert sent.tools == ()  # a deferred tool is not loaded into the prompt
    assert (sent.reasoning.enabled, sent.reasoning.effort) == (None, "high")


@pytest.mark.parametrize(("thinking", "enabled", "budget"), [
    ({"type": "enabled", "budget_tokens": 1024}, True, 1024),
    ({"type": "disabled"}, False, None), ({"type": "adaptive"}, None, None)])
def test_thinking_maps_onto_the_templates_switch_and_its_budget(
        replying_server: tuple[str, ScriptedBackend, list[Any]], thinking: Any,
        enabled: bool | None,
        budget: int | None) -> None:
    base, backend, replies = replying_server
    replies.append(ANSWER)
    sdk(base).messages.create(model="m", max_tokens=2048, messages=ASK, thinking=thinking)
    reasoning = backend.requests[0].reasoning
    assert (reasoning.enabled, reasoning.budget) == (enabled, budget)


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize(("choice", "expected", "parallel"), [
    ({"type": "any"}, "required", True), ({"type": "auto"}, "auto", True),
    ({"type": "tool", "name": "lookup", "disable_parallel_tool_use": True},
     {"type": "function", "function": {"name": "lookup"}}, False)])
def test_tool_choice_maps_onto_the_choice_every_route_enforces(
        replying_server: tuple[str, ScriptedBackend, list[Any]], choice: Any, expected: Any,
        parallel: bool, stream: bool) -> None:
    base, backend, replies = replying_server
    replies.append(THINK_AND_CALL)
    message = ask_claude(sdk(base), stream, model="m", max_tokens=64, messages=ASK,
                         tools=[LOOKUP], tool_choice=choice)
    assert message.stop_reason == "tool_use"
    sent = backend.requests[0]
    assert sent.tool_choice == expected and sent.parallel_tool_calls is parallel


def test_tool_choice_none_offers_no_tools(
        replying_server: tuple[str, ScriptedBackend, list[Any]]) -> None:
    base, backend, replies = replying_server
    replies.append(ANSWER)
    sdk(base).messages.create(model="m", max_tokens=64, messages=ASK, tools=[LOOKUP],
                              tool_choice={"type": "none"})
    assert backend.requests[0].offered_tools == ()


def test_a_stop_sequence_ends_the_text_and_is_named(
        replying_server: tuple[str, ScriptedBackend, list[Any]]) -> None:
    base, _, replies = replying_server
    replies.append("Alex is a colleague. END and more")
    message = sdk(base).messages.create(model="m", max_tokens=64, messages=ASK,
                                        stop_sequences=["END"])
    assert message.stop_reason == "stop_sequence" and message.stop_sequence == "END"
    assert message.content[0].text == "Alex is a colleague. "  # type: ignore[union-attr]


def test_sampling_fields_reach_the_model(
        replying_server: tuple[str, ScriptedBackend, list[Any]]) -> None:
    base, backend, replies = replying_server
    replies.append(ANSWER)
    json_request(base, "POST", "/v1/messages", {"model": "m", "max_tokens": 64, "messages": ASK,
                                                "temperature": 0.5, "top_p": 0.8, "top_k": 5})
    sampling = backend.requests[0].sampling
    assert (sampling.temperature, sampling.top_p, sampling.top_k, sampling.max_tokens) == \
        (0.5, 0.8, 5, 64)


def test_a_call_the_token_limit_cut_is_never_a_tool_use() -> None:
    backend = ScriptedBackend(["Looking.\n<tool_call>\n<function=lookup>\n<parameter=name>\nal"],
                              finish_reason="length")
    with running_server(create_app(lambda h, s: None, backend=backend, model="m")) as base:
        message = sdk(base).messages.create(model="m", max_tokens=16, messages=ASK,
                                            tools=[LOOKUP])
    assert message.stop_reason == "max_tokens"
    assert [b.type for b in message.content] == ["text"]
    assert "<tool_call>" not in message.content[0].text  # type: ignore[union-attr]
    assert (message.model_extra or {})["dropped_tool_calls"] == [
        {"name": "lookup", "reason": "length"}]


def test_errors_are_anthropics_shape_with_its_status_codes(
        replying_server: tuple[str, ScriptedBackend, list[Any]]) -> None:
    base, backend, _ = replying_server
    image = {"role": "user", "content": [{"type": "image", "source": {
        "type": "base64", "media_type": "image/png", "data": "AAAA"}}]}
    for body, status, kind in (
            ({"model": "m", "max_tokens": 8, "messages": [image]}, 400, "invalid_request_error"),
            ({"model": "m", "messages": ASK}, 400, "invalid_request_error"),
            ({"model": "claude-x", "max_tokens": 8, "messages": ASK}, 404, "not_found_error")):
        got, answer = json_request(base, "POST", "/v1/messages", body)
        assert (got, answer["type"], answer["error"]["type"]) == (status, "error", kind)
    got, answer = json_request(base, "POST", "/v1/messages", raw=b"{not json")
    assert got == 400 and answer["error"]["type"] == "invalid_request_error"
    got, answer = json_request(base, "GET", "/v1/messages/batches")
    assert got == 404 and answer["error"]["type"] == "not_found_error"
    with pytest.raises(anthropic.BadRequestError, match="reads text only"):
        sdk(base).messages.create(model="m", max_tokens=8, messages=[image])
    assert backend.requests == []


def test_an_anthropic_built_in_tool_is_left_out_and_naming_it_is_a_400(
        replying_server: tuple[str, ScriptedBackend, list[Any]]) -> None:
    base, backend, replies = replying_server
    replies.append(ANSWER)
    search = {"type": "web_search_20250305", "name": "web_search", "max_uses": 2}
    status, body = json_request(base, "POST", "/v1/messages", {
        "model": "m", "max_tokens": 8, "messages": ASK, "tools": [LOOKUP, search]})
    assert status == 200 and body["ignored_tools"][0]["name"] == "web_search"
    assert [t.name for t in backend.requests[0].tools] == ["lookup"]
    status, body = json_request(base, "POST", "/v1/messages", {
        "model": "m", "max_tokens": 8, "messages": ASK, "tools": [LOOKUP, search],
        "tool_choice": {"type": "tool", "name": "web_search"}})
    assert status == 400 and "cannot run" in body["error"]["message"]


def test_the_api_key_is_taken_as_x_api_key_or_bearer() -> None:
    backend = ScriptedBackend([ANSWER, ANSWER])
    app = create_app(lambda h, s: None, backend=backend, model="m", api_key=KEY)
    with running_server(app) as base:
        assert sdk(base, api_key=KEY).messages.create(model="m", max_tokens=8, messages=ASK)
        assert sdk(base, api_key=None, auth_token=KEY).messages.create(
            model="m", max_tokens=8, messages=ASK)
        with pytest.raises(anthropic.AuthenticationError):
            sdk(base, api_key="wrong").messages.create(model="m", max_tokens=8, messages=ASK)
        status, body = json_request(base, "POST", "/v1/messages/count_tokens",
                                    {"model": "m", "messages": ASK})
        assert status == 401 and body["error"]["type"] == "authentication_error"


def test_an_error_before_the_first_event_has_its_real_status_streamed_or_not() -> None:
    class Overflow(ScriptedBackend):
        def stream_turn(self, request: ModelRequest, cancel: Any) -> Iterator[Any]:
            yield ErrorEvent("context", "the prompt needs 9000 tokens but only 100 fit")
            yield TurnEnd("error")

    with running_server(create_app(lambda h, s: None, backend=Overflow([]), model="m")) as base:
        for stream in (False, True):
            with pytest.raises(anthropic.BadRequestError, match="9000 tokens"):
                if stream:
                    with sdk(base).messages.stream(model="m", max_tokens=8, messages=ASK) as s:
                        list(s)
                else:
                    sdk(base).messages.create(model="m", max_tokens=8, messages=ASK)


class SlowCall(ScriptedBackend):
    """Reasons a little (which starts the stream: text would be held one item, as it may
    turn out to be markup), then waits (writing a long call, which goes out whole) until
    told."""

    def __init__(self) -> None:
        super().__init__([])
        self.resume = threading.Event()

    def stream_turn(self, request: ModelRequest, cancel: CancelToken) -> Iterator[Any]:
        yield ReasoningEvent("Working it out.")
        self.resume.wait(30)
        yield TextEvent("Done.")
        yield TurnEnd("stop", usage={"prompt_tokens": 3, "completion_tokens": 2})


def test_a_quiet_stream_sends_pings_until_the_model_writes_again() -> None:
    backend = SlowCall()
    app = create_app(lambda h, s: None, backend=backend, model="m", ping_interval=0.05)
    with running_server(app) as base:
        conn, response = request(base, "POST", "/v1/messages", {
            "model": "m", "max_tokens": 8, "messages": ASK, "stream": True})
        seen: list[str] = []
        for event in sse_items(response):
            seen.append(event["type"])
            if event["type"] == "ping":
                backend.resume.set()
        conn.close()
    assert "ping" in seen and backend.resume.is_set()
    assert seen[0] == "message_start" and seen[-1] == "message_stop"
    assert seen.index("content_block_delta") < seen.index("ping")  # once the stream started


def test_the_anthropic_sdk_lists_the_served_model_in_its_shape(
        replying_server: tuple[str, ScriptedBackend, list[Any]]) -> None:
    base, _, _ = replying_server
    client = sdk(base)
    assert [m.id for m in client.models.list()] == ["m"]
    assert client.models.retrieve("m").type == "model"
    with pytest.raises(anthropic.NotFoundError):
        client.models.retrieve("claude-x")
    status, body = json_request(base, "GET", "/v1/models")  # no anthropic-version: OpenAI's
    assert status == 200 and body["object"] == "list"
