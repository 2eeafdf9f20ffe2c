"""Tests of the openai_compat backend against a real HTTP server on 127.0.0.1.

The server (``tests/support/openai_wire_server.py``) speaks the chat-completions
streaming wire format and records every request, so these tests check both
what the backend makes of a stream and what it sent: tools, tool messages,
JSON-string arguments, and which ``Authorization`` header (if any) went out.
"""

from __future__ import annotations

import asyncio
import json
import re
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from typing import Any

import openai
import pytest
from hypothesis import given
from hypothesis import strategies as st

import toolwire
from tests.support.openai_wire_server import (
    Fail,
    Hang,
    Stream,
    WireServer,
    call_delta,
    finish_chunk,
    free_port,
    reply_chunks,
    text_chunk,
    tool_chunk,
    usage_chunk,
)
from toolwire import (
    BackendError,
    CancelToken,
    DiagnosticEvent,
    DoneEvent,
    ErrorEvent,
    Message,
    ModelRequest,
    ReasoningEvent,
    TextEvent,
    Tool,
    ToolCall,
    ToolCallDeltaEvent,
    ToolCallEndEvent,
    ToolCallStartEvent,
    ToolResultEvent,
    TurnEnd,
)
from toolwire.plugins.openai_compat import (
    PRESETS,
    OpenAICompatBackend,
    ToolCallAssembler,
    resolve_connection,
)

# -- tools ------------------------------------------------------------------------

RAN: list[str] = []


@toolwire.tool(read_only=True)
def read_note(name: str) -> str:
    """Read a note.

    :param name: the note's name
    """
    RAN.append(f"read_note:{name}")
    return f"contents of {name}"


@toolwire.tool
def write_note(name: str, text: str) -> str:
    """Write a note."""
    RAN.append(f"write_note:{name}")
    return "written"


@toolwire.tool(read_only=True)
def ping() -> str:
    """Check the service."""
    RAN.append("ping")
    return "pong"


@toolwire.tool(read_only=True)
def search(query: str = "", limit: int = 5) -> str:
    """Search with optional parameters only."""
    return f"{query}:{limit}"


TOOLS: tuple[Tool, ...] = (read_note, write_note, ping, search)


@pytest.fixture(autouse=True)
def _reset_ran() -> None:
    RAN.clear()


@pytest.fixture
def server() -> Iterator[WireServer]:
    with WireServer() as wire:
        yield wire


def backend_for(server: WireServer, **options: Any) -> OpenAICompatBackend:
    options.setdefault("timeout", 60.0)  # the tests of a timeout set their own
    options.setdefault("retry_backoff", 0.0)
    options.setdefault("environ", {})
    provider = options.pop("provider", "custom")
    return OpenAICompatBackend(provider, model=options.pop("model", "test-model"),
                               base_url=options.pop("base_url", server.url), **options)


def run_turn(backend: OpenAICompatBackend, *, tools: Sequence[Tool] = TOOLS,
             messages: Sequence[Message] = (Message.user("hi"),),
             cancel: CancelToken | None = None) -> list[Any]:
    request = ModelRequest(tuple(messages), tuple(tools))
    return list(backend.stream_turn(request, cancel or CancelToken()))


def of(items: Sequence[Any], cls: type) -> list[Any]:
    return [i for i in items if isinstance(i, cls)]


def end_of(items: Sequence[Any]) -> TurnEnd:
    assert isinstance(items[-1], TurnEnd), items
    return items[-1]


def done_of(events: Sequence[Any]) -> DoneEvent:
    assert isinstance(events[-1], DoneEvent), events
    return events[-1]


def error_of(items: Sequence[Any]) -> ErrorEvent:
    errors = of(items, ErrorEvent)
    assert len(errors) == 1, items
    assert end_of(items).reason == "error"
    error: ErrorEvent = errors[0]
    return error


# -- streams and calls ----------------------------------------------------------------


def test_text_and_split_arguments(server: WireServer) -> None:
    server.enqueue(Stream(reply_chunks("Looking it up.", [("call_a", "read_note",
                                                          {"name": "groceries"})], piece=3)))
    items = run_turn(backend_for(server))
    assert "".join(e.text for e in of(items, TextEvent)) == "Looking it up."
    starts = of(items, ToolCallStartEvent)
    assert starts == [ToolCallStartEvent(0, "read_note", "call_a")]
    deltas = of(items, ToolCallDeltaEvent)
    assert len(deltas) > 3
    assert all(d.index == 0 and d.id == "call_a" and d.parameter is None for d in deltas)
    assert json.loads("".join(d.text for d in deltas)) == {"name": "groceries"}
    assert of(items, ToolCallEndEvent) == [ToolCallEndEvent("read_note", {"name": "groceries"},
                                                      "call_a", 0)]
    assert end_of(items) == TurnEnd("tool_calls", {"prompt_tokens": 10, "completion_tokens": 5,
                                                   "total_tokens": 15})
    # every start precedes its deltas, which precede the final call
    kinds = [type(i).__name__ for i in items if not isinstance(i, TextEvent)]
    assert kinds[0] == "ToolCallStartEvent" and kinds[-2:] == ["ToolCallEndEvent", "TurnEnd"]


def test_parallel_calls_interleaved(server: WireServer) -> None:
    server.enqueue(Stream([
        tool_chunk(call_delta(0, id="call_1", name="read_note", arguments="")),
        tool_chunk(call_delta(1, id="call_2", name="write_note", arguments='{"na')),
        tool_chunk(call_delta(0, arguments='{"name": ')),
        tool_chunk(call_delta(1, arguments='me": "b", "text": "hi"}')),
        tool_chunk(call_delta(0, arguments='"a"}')),
        finish_chunk("tool_calls"),
    ]))
    items = run_turn(backend_for(server))
    assert of(items, ToolCallStartEvent) == [ToolCallStartEvent(0, "read_note", "call_1"),
                                             ToolCallStartEvent(1, "write_note", "call_2")]
    by_index: dict[int, str] = {0: "", 1: ""}
    for delta in of(items, ToolCallDeltaEvent):
        by_index[delta.index] += delta.text
    assert json.loads(by_index[0]) == {"name": "a"}
    assert json.loads(by_index[1]) == {"name": "b", "text": "hi"}
    assert of(items, ToolCallEndEvent) == [
        ToolCallEndEvent("read_note", {"name": "a"}, "call_1", 0),
        ToolCallEndEvent("write_note", {"name": "b", "text": "hi"}, "call_2", 1),
    ]
    assert end_of(items).reason == "tool_calls"
    assert end_of(items).usage is None  # no usage chunk was sent


def test_ids_only_on_first_delta_reach_every_event(server: WireServer) -> None:
    server.enqueue(Stream([
        tool_chunk(call_delta(0, id="call_x", type="function", name="ping", arguments="")),
        tool_chunk(call_delta(0, arguments="{")),
        tool_chunk(call_delta(0, arguments="}")),
        finish_chunk("tool_calls"),
    ]))
    items = run_turn(backend_for(server))
    ids = {e.id for e in items if isinstance(e, ToolCallDeltaEvent | ToolCallEndEvent)}
    assert ids == {"call_x"}


def test_gemini_calls_without_index_each_whole_in_its_own_chunk(server: WireServer) -> None:
    server.enqueue(Stream([
        tool_chunk({"id": "function-call-1", "type": "function",
                    "function": {"name": "read_note", "arguments": '{"name":"a"}'}}),
        tool_chunk({"id": "function-call-2", "type": "function",
                    "function": {"name": "read_note", "arguments": '{"name":"b"}'}}),
        finish_chunk("stop"),  # Gemini says "stop" after calls
    ]))
    items = run_turn(backend_for(server))
    assert of(items, ToolCallEndEvent) == [
        ToolCallEndEvent("read_note", {"name": "a"}, "function-call-1", 0),
        ToolCallEndEvent("read_note", {"name": "b"}, "function-call-2", 1),
    ]
    assert end_of(items).reason == "tool_calls"


def test_gemini_index_zero_reused_for_each_call(server: WireServer) -> None:
    server.enqueue(Stream([
        tool_chunk(call_delta(0, id="c1", name="read_note", arguments='{"name": "a"}')),
        tool_chunk(call_delta(0, id="c2", name="ping", arguments="{}")),
        tool_chunk(call_delta(0, id="c3", name="read_note", arguments='{"name": "c"}')),
        finish_chunk("stop"),
    ]))
    calls = of(run_turn(backend_for(server)), ToolCallEndEvent)
    assert [(c.name, dict(c.arguments), c.id, c.index) for c in calls] == [
        ("read_note", {"name": "a"}, "c1", 0), ("ping", {}, "c2", 1),
        ("read_note", {"name": "c"}, "c3", 2)]


def test_assembler_indexless_continuation_and_repeated_ids() -> None:
    asm = ToolCallAssembler({"read_note": read_note.parameters})
    events = asm.feed([{"id": "g1", "function": {"name": "read_note", "arguments": '{"na'}}])
    events += asm.feed([{"function": {"arguments": 'me": "a"}'}}])  # no id, no index
    events += asm.feed([{"id": "g1", "function": {"arguments": ""}}])  # the id repeated
    # the same id again for a second, complete call: kept apart, without an id
    events += asm.feed([{"id": "g1", "function": {"name": "read_note",
                                                 "arguments": '{"name": "b"}'}}])
    assert [e.index for e in events if isinstance(e, ToolCallStartEvent)] == [0, 1]
    assert asm.finish() == [ToolCallEndEvent("read_note", {"name": "a"}, "g1", 0),
                            ToolCallEndEvent("read_note", {"name": "b"}, "", 1)]


def test_assembler_same_tool_twice_without_ids_or_index() -> None:
    asm = ToolCallAssembler({"read_note": read_note.parameters})
    asm.feed([{"function": {"name": "read_note", "arguments": '{"name": "a"}'}}])
    asm.feed([{"function": {"name": "read_note", "arguments": '{"name": "b"}'}}])
    assert [dict(e.arguments) for e in of(asm.finish(), ToolCallEndEvent)] == [{"name": "a"},
                                                                           {"name": "b"}]


def test_assembler_repeated_and_cumulative_names_late_id_and_early_arguments() -> None:
    asm = ToolCallAssembler({"read_note": read_note.parameters})
    events = asm.feed([{"index": 0, "function": {"arguments": '{"name"'}}])  # before the name
    assert events == []
    events = asm.feed([{"index": 0, "function": {"name": "read", "arguments": ""}}])
    events += asm.feed([{"index": 0, "function": {"name": "read_note", "arguments": ': "x"'}}])
    events += asm.feed([{"index": 0, "id": "late_id", "function": {"name": "read_note",
                                                                   "arguments": "}"}}])
    assert events[0] == ToolCallStartEvent(0, "read", "")
    assert events[1] == ToolCallDeltaEvent(0, "read", '{"name"', None, "")
    assert asm.finish() == [ToolCallEndEvent("read_note", {"name": "x"}, "late_id", 0)]


def test_assembler_object_and_double_encoded_arguments() -> None:
    asm = ToolCallAssembler({"read_note": read_note.parameters})
    asm.feed([{"index": 0, "id": "a", "function": {"name": "read_note",
                                                   "arguments": {"name": "obj"}}}])
    asm.feed([{"index": 1, "id": "b", "function": {"name": "read_note",
                                                   "arguments": json.dumps('{"name": "s"}')}}])
    assert [dict(e.arguments) for e in of(asm.finish(), ToolCallEndEvent)] == [{"name": "obj"},
                                                                           {"name": "s"}]


_JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner,
                                                                 max_size=3),
    max_leaves=6)


@given(calls=st.lists(st.dictionaries(st.text(min_size=1, max_size=6), _JSON_VALUES,
                                      max_size=4), min_size=1, max_size=3),
       data=st.data())
def test_assembler_is_indifferent_to_how_deltas_are_split_and_interleaved(
        calls: list[dict[str, Any]], data: st.DataObject) -> None:
    pending: list[list[dict[str, Any]]] = []
    for index, arguments in enumerate(calls):
        raw = json.dumps(arguments)
        cuts = sorted(data.draw(st.sets(st.integers(1, max(len(raw) - 1, 1)), max_size=5)))
        pieces = [raw[a:b] for a, b in zip([0, *cuts], [*cuts, len(raw)], strict=True)]
        deltas = [call_delta(index, id=f"id{index}", name="t", arguments="")]
        deltas += [call_delta(index, arguments=p) for p in pieces if p]
        pending.append(deltas)
    asm = ToolCallAssembler({"t": {"type": "object", "properties": {}}})
    first_seen: list[int] = []  # calls are numbered in the order they begin
    while any(pending):
        chosen = data.draw(st.sampled_from([i for i, rest in enumerate(pending) if rest]))
        if chosen not in first_seen:
            first_seen.append(chosen)
        asm.feed([pending[chosen].pop(0)])
    assert asm.finish() == [ToolCallEndEvent("t", calls[wire], f"id{wire}", position)
                            for position, wire in enumerate(first_seen)]


def test_parameterless_tool_with_empty_arguments_runs(server: WireServer) -> None:
    server.enqueue(Stream([tool_chunk(call_delta(0, id="call_p", name="ping", arguments="")),
                           finish_chunk("tool_calls")]),
                   Stream(reply_chunks("pong it is")))
    chat = toolwire.Chat(backend_for(server), tools=TOOLS)
    events = list(chat.send("ping it"))
    assert of(events, ToolResultEvent) == [ToolResultEvent("call_p", "ping", "pong")]
    assert done_of(events).reason == "stop"
    assert RAN == ["ping"]


def test_optional_only_tool_with_empty_arguments_gets_defaults(server: WireServer) -> None:
    server.enqueue(Stream([tool_chunk(call_delta(0, id="c", name="search")),
                           finish_chunk("tool_calls")]))
    assert of(run_turn(backend_for(server)), ToolCallEndEvent) == [ToolCallEndEvent("search", {},
                                                                              "c", 0)]


def test_empty_arguments_for_a_tool_with_required_parameters_is_an_error(
        server: WireServer) -> None:
    server.enqueue(Stream([tool_chunk(call_delta(0, id="c", name="read_note", arguments="")),
                           finish_chunk("tool_calls")]))
    chat = toolwire.Chat(backend_for(server), tools=TOOLS)
    events = list(chat.send("read"))
    (error,) = of(events, ErrorEvent)
    assert error.kind == "invalid_arguments"
    assert "'read_note'" in error.message and "empty arguments" in error.message
    assert done_of(events).reason == "error"
    assert RAN == [] and not of(events, ToolResultEvent)


def test_malformed_arguments_name_the_tool_and_the_raw_text(server: WireServer) -> None:
    server.enqueue(Stream([tool_chunk(call_delta(0, id="c", name="read_note",
                                                 arguments='{"name": "a",')),
                           finish_chunk("tool_calls")]))
    error = error_of(run_turn(backend_for(server)))
    assert error.kind == "invalid_arguments"
    assert "'read_note'" in error.message and '{"name": "a",' in error.message


def test_arguments_that_are_not_an_object(server: WireServer) -> None:
    server.enqueue(Stream([tool_chunk(call_delta(0, id="c", name="read_note",
                                                 arguments='["a"]')),
                           finish_chunk("tool_calls")]))
    error = error_of(run_turn(backend_for(server)))
    assert "not a JSON object" in error.message and "['a']" not in error.message
    assert '["a"]' in error.message


def test_truncated_call_at_the_token_limit(server: WireServer) -> None:
    server.enqueue(Stream([tool_chunk(call_delta(0, id="c", name="read_note",
                                                 arguments='{"name": "ab')),
                           finish_chunk("length")]))
    error = error_of(run_turn(backend_for(server)))
    assert "token limit" in error.message


def test_reasoning_fields_become_reasoning_events(server: WireServer) -> None:
    server.enqueue(Stream([text_chunk("", reasoning="think "),
                           text_chunk("", reasoning="more", reasoning_field="reasoning"),
                           text_chunk("Answer."), finish_chunk("stop")]))
    items = run_turn(backend_for(server))
    assert [e.text for e in of(items, ReasoningEvent)] == ["think ", "more"]
    assert [e.text for e in of(items, TextEvent)] == ["Answer."]


@pytest.mark.parametrize(("wire", "expected"), [
    ("stop", "stop"), ("tool_calls", "tool_calls"), ("length", "length"),
    ("content_filter", "content_filter"), ("eos", "stop"), ("function_call", "tool_calls"),
])
def test_finish_reasons(server: WireServer, wire: str, expected: str) -> None:
    server.enqueue(Stream([text_chunk("Hi."), finish_chunk(wire), usage_chunk(3, 2)]))
    items = run_turn(backend_for(server))
    assert end_of(items) == TurnEnd(expected, {"prompt_tokens": 3, "completion_tokens": 2,
                                               "total_tokens": 5})
    assert bool(of(items, DiagnosticEvent)) == (wire == "content_filter")


def test_length_reaches_the_chat_as_length(server: WireServer) -> None:
    server.enqueue(Stream([text_chunk("Partial"), finish_chunk("length"), usage_chunk(4, 9)]))
    events = list(toolwire.Chat(backend_for(server)).send("go"))
    assert [e.kind for e in of(events, ErrorEvent)] == ["length"]
    assert done_of(events).reason == "length"
    assert done_of(events).usage == {"prompt_tokens": 4, "completion_tokens": 9, "total_tokens": 13}


# -- what is sent -------------------------------------------------------------------------


def test_request_shape(server: WireServer) -> None:
    server.enqueue(Stream(reply_chunks("ok")), Stream(reply_chunks("ok")))
    backend = backend_for(server, extra_body={"temperature": 0.2, "max_tokens": 50})
    run_turn(backend)
    body = server.bodies[0]
    assert server.requests[0].path == "/v1/chat/completions"
    assert body["model"] == "test-model" and body["stream"] is True
    assert body["stream_options"] == {"include_usage": True}
    assert body["temperature"] == 0.2 and body["max_tokens"] == 50
    assert [t["function"]["name"] for t in body["tools"]] == [t.name for t in TOOLS]
    assert body["tools"][0] == {"type": "function", "function": dict(read_note.schema)}
    assert "stop" not in body and "tool_choice" not in body
    run_turn(backend, tools=())
    assert "tools" not in server.bodies[1]


def test_tool_results_and_json_string_arguments_go_back(server: WireServer) -> None:
    server.enqueue(
        Stream(reply_chunks("", [("call_1", "read_note", {"name": "a"}),
                                 ("call_2", "read_note", {"name": "b"})])),
        Stream(reply_chunks("Both read.")))
    chat = toolwire.Chat(backend_for(server), tools=TOOLS, system_prompt="Be brief.")
    events = list(chat.send("read a and b"))
    assert done_of(events).reason == "stop"
    messages = server.bodies[1]["messages"]
    assert messages[0] == {"role": "system", "content": "Be brief."}
    assistant = messages[2]
    assert assistant["role"] == "assistant"
    for call, expected in zip(assistant["tool_calls"], ("a", "b"), strict=True):
        assert isinstance(call["function"]["arguments"], str)
        assert json.loads(call["function"]["arguments"]) == {"name": expected}
    assert messages[3:] == [
        {"role": "tool", "tool_call_id": "call_1", "content": "contents of a"},
        {"role": "tool", "tool_call_id": "call_2", "content": "contents of b"},
    ]


def test_reasoning_is_not_sent_back(server: WireServer) -> None:
    server.enqueue(Stream(reply_chunks("ok")))
    history = (Message.user("q"), Message.assistant("a", reasoning="secret thoughts"),
               Message.user("again"))
    run_turn(backend_for(server), messages=history)
    assert "secret thoughts" not in json.dumps(server.bodies[0])


def test_stored_history_from_a_local_backend_replays(server: WireServer) -> None:
    records: list[dict[str, Any]] = [
        {"role": "user", "content": "what is in todo?"},
        {"role": "assistant", "content": "Let me look."},
        {"role": "tool", "tool_name": "read_note", "tool_args": {"name": "todo"},
         "tool_call_id": "local123", "content": "buy milk"},
        {"role": "tool", "tool_name": "ping", "tool_args": {}, "content": "pong"},
        {"role": "assistant", "content": "It says: buy milk."},
    ]
    server.enqueue(Stream(reply_chunks("Sure.")))
    backend = backend_for(server)
    chat = toolwire.Chat(backend, tools=TOOLS,
                         history=toolwire.from_stored(records, backend.make_call_id))
    list(chat.send("thanks"))
    messages = server.bodies[0]["messages"]
    assert [m["role"] for m in messages] == ["user", "assistant", "tool", "tool", "assistant",
                                             "user"]
    calls = messages[1]["tool_calls"]
    assert messages[1]["content"] == "Let me look."
    assert calls[0]["id"] == "local123" and calls[0]["function"]["arguments"] == \
        '{"name": "todo"}'
    assert calls[1]["function"] == {"name": "ping", "arguments": "{}"}
    assert re.fullmatch(r"call_[A-Za-z0-9]{24}", calls[1]["id"])
    assert [m["tool_call_id"] for m in messages[2:4]] == [calls[0]["id"], calls[1]["id"]]


def test_gemini_extra_content_is_replayed_with_its_call(server: WireServer) -> None:
    extra = {"google": {"thought_signature": "sig=="}}
    server.enqueue(Stream([tool_chunk({"id": "fc1", "extra_content": extra,
                                       "function": {"name": "ping", "arguments": "{}"}}),
                           finish_chunk("stop")]),
                   Stream(reply_chunks("done")))
    list(toolwire.Chat(backend_for(server), tools=TOOLS).send("ping"))
    call = server.bodies[1]["messages"][1]["tool_calls"][0]
    assert call["id"] == "fc1" and call["extra_content"] == extra


def test_stream_options_rejected_is_retried_without(server: WireServer) -> None:
    server.enqueue(Fail.error(400, "Unrecognized request argument supplied: stream_options"),
                   Stream(reply_chunks("fine")), Stream(reply_chunks("again")))
    backend = backend_for(server, max_retries=0)
    items = run_turn(backend)
    assert end_of(items).reason == "stop" and not of(items, ErrorEvent)
    assert "stream_options" in server.bodies[0] and "stream_options" not in server.bodies[1]
    run_turn(backend)
    assert "stream_options" not in server.bodies[2]


# -- server errors ----------------------------------------------------------------------


def test_401_names_the_key_variable(server: WireServer) -> None:
    server.enqueue(Fail.error(401, "Invalid API key"))
    backend = backend_for(server, provider="vllm", environ={"VLLM_API_KEY": "vk-1"})
    error = error_of(run_turn(backend))
    assert error.kind == "auth" and "VLLM_API_KEY" in error.message
    assert "Invalid API key" in error.message and "vk-1" not in error.message
    assert server.requests[0].headers["authorization"] == "Bearer vk-1"


def test_403_and_withheld_key_advice(server: WireServer) -> None:
    server.enqueue(Fail.error(403, "forbidden"))
    backend = backend_for(server, provider="gemini", environ={"GEMINI_API_KEY": "g-1"})
    error = error_of(run_turn(backend))
    assert error.kind == "auth"
    assert "GEMINI_API_KEY" in error.message and "api_key=" in error.message


def test_404_names_model_and_base_url(server: WireServer) -> None:
    server.enqueue(Fail.error(404, "model 'nope' not found"))
    error = error_of(run_turn(backend_for(server, model="nope")))
    assert error.kind == "not_found"
    assert "'nope'" in error.message and server.url in error.message


def test_429_retry_after_zero_then_success(server: WireServer) -> None:
    server.enqueue(Fail.error(429, "slow down", {"retry-after": "0"}),
                   Stream(reply_chunks("made it")))
    items = run_turn(backend_for(server))
    assert [e.code for e in of(items, DiagnosticEvent)] == ["retrying"]
    assert end_of(items).reason == "stop" and len(server.requests) == 2


def test_429_retry_after_one_second_is_honoured(server: WireServer) -> None:
    server.enqueue(Fail.error(429, "slow down", {"retry-after": "1"}),
                   Stream(reply_chunks("made it")))
    started = time.monotonic()
    items = run_turn(backend_for(server))
    assert 0.9 <= time.monotonic() - started < 10  # the second asked, then a hang guard
    assert end_of(items).reason == "stop"


def test_429_retries_are_bounded(server: WireServer) -> None:
    server.enqueue(*[Fail.error(429, "slow down", {"retry-after": "0"})] * 4)
    error = error_of(run_turn(backend_for(server, max_retries=2)))
    assert error.kind == "rate_limit" and "after 2 retries" in error.message
    assert len(server.requests) == 3


def test_429_asking_more_than_the_wait_budget_fails_at_once(server: WireServer) -> None:
    server.enqueue(Fail.error(429, "quota", {"retry-after": "120"}))
    started = time.monotonic()
    error = error_of(run_turn(backend_for(server, max_retry_wait=30)))
    assert time.monotonic() - started < 20  # not the 120 s asked, nor the 30 s budget
    assert error.kind == "rate_limit" and "120 s" in error.message
    assert len(server.requests) == 1


def test_500_is_retried_then_reported(server: WireServer) -> None:
    server.enqueue(*[Fail.error(500, "boom")] * 2)
    error = error_of(run_turn(backend_for(server, max_retries=1)))
    assert error.kind == "server" and "HTTP 500" in error.message and "boom" in error.message
    assert len(server.requests) == 2


def test_503_then_success(server: WireServer) -> None:
    server.enqueue(Fail(503, "overloaded", {"retry-after": "0"}), Stream(reply_chunks("ok")))
    assert end_of(run_turn(backend_for(server))).reason == "stop"


def test_vllm_rejecting_tools_says_how_to_fix_it(server: WireServer) -> None:
    server.enqueue(Fail.error(400, '"auto" tool choice requires --enable-auto-tool-choice and '
                                   "--tool-call-parser to be set"))
    error = error_of(run_turn(backend_for(server, provider="vllm")))
    assert error.kind == "tools_rejected"
    assert "--enable-auto-tool-choice" in error.message
    assert "--tool-call-parser" in error.message and "automatic tool choice" in error.message


def test_ollama_model_without_tool_support(server: WireServer) -> None:
    server.enqueue(Fail.error(400, "registry.ollama.ai/library/gemma:2b does not support tools"))
    error = error_of(run_turn(backend_for(server, provider="ollama")))
    assert error.kind == "tools_rejected" and "tools" in error.message


@pytest.mark.parametrize(("message", "kind"), [
    ("This model's maximum context length is 4096 tokens", "context"),
    ("temperature must be <= 2", "bad_request"),
])
def test_other_400s(server: WireServer, message: str, kind: str) -> None:
    server.enqueue(Fail.error(400, message))
    assert error_of(run_turn(backend_for(server))).kind == kind


def test_connection_refused() -> None:
    url = f"http://127.0.0.1:{free_port()}/v1"
    backend = OpenAICompatBackend("ollama", model="m", base_url=url, timeout=2, environ={})
    error = error_of(run_turn(backend))
    assert error.kind == "connection"
    assert url in error.message and "ollama serve" in error.message


def test_stream_cut_mid_reply_keeps_what_arrived(server: WireServer) -> None:
    server.enqueue(Stream([text_chunk("Hello, "), text_chunk("wor"), text_chunk("ld"),
                           finish_chunk("stop")], drop_after=2))
    chat = toolwire.Chat(backend_for(server))
    events = list(chat.send("hi"))
    assert [e.text for e in of(events, TextEvent)] == ["Hello, ", "wor"]
    assert [e.kind for e in of(events, ErrorEvent)] == ["stream_cut"]
    assert done_of(events).reason == "error"
    assert chat.history[-1] == Message.assistant("Hello, wor")


def test_stream_cut_drops_a_half_written_call(server: WireServer) -> None:
    server.enqueue(Stream([tool_chunk(call_delta(0, id="c", name="read_note",
                                                 arguments='{"name"')),
                           finish_chunk("tool_calls")], drop_after=1))
    items = run_turn(backend_for(server))
    assert error_of(items).kind == "stream_cut" and not of(items, ToolCallEndEvent)


def test_stream_ending_without_finish_reason_is_a_cut(server: WireServer) -> None:
    server.enqueue(Stream([text_chunk("Half")], done=False))
    items = run_turn(backend_for(server))
    assert error_of(items).kind == "stream_cut"
    assert [e.text for e in of(items, TextEvent)] == ["Half"]


def test_cut_after_finish_reason_counts_as_complete(server: WireServer) -> None:
    server.enqueue(Stream([text_chunk("Done."), finish_chunk("stop"), usage_chunk(1, 1)],
                          drop_after=2))
    items = run_turn(backend_for(server))
    assert end_of(items) == TurnEnd("stop") and not of(items, ErrorEvent)


def test_error_object_inside_the_stream(server: WireServer) -> None:
    server.enqueue(Stream([text_chunk("Hi"), {"error": {"message": "engine overloaded"}}]))
    error = error_of(run_turn(backend_for(server)))
    assert error.kind == "server" and "engine overloaded" in error.message


def test_garbage_in_the_stream(server: WireServer) -> None:
    server.enqueue(Stream([text_chunk("Hi"), "this is not json"]))
    assert error_of(run_turn(backend_for(server))).kind == "bad_response"


def test_server_that_never_answers_times_out(server: WireServer) -> None:
    server.enqueue(Hang(60))
    started = time.monotonic()
    error = error_of(run_turn(backend_for(server, timeout=0.5)))
    assert time.monotonic() - started < 30  # the 0.5 s timeout, not the 60 s hang
    assert error.kind == "timeout" and "0.5 s" in error.message


def test_stream_that_stalls_times_out_and_keeps_text(server: WireServer) -> None:
    server.enqueue(Stream([text_chunk("Start"), finish_chunk("stop")], stall_at=1, stall=1.0))
    items = run_turn(backend_for(server, timeout=0.4))
    assert [e.text for e in of(items, TextEvent)] == ["Start"]
    error = error_of(items)
    assert error.kind == "timeout" and "stalled" in error.message and "kept" in error.message


# -- cancellation -----------------------------------------------------------------------------


def test_cancel_mid_stream_closes_it_and_runs_no_tool(server: WireServer) -> None:
    chunks: list[Any] = [text_chunk(f"w{i} ") for i in range(1000)]  # 20 s of stream
    chunks += [tool_chunk(call_delta(0, id="c", name="ping", arguments="{}")),
               finish_chunk("tool_calls")]
    server.enqueue(Stream(chunks, delay=0.02))
    cancel = CancelToken()
    chat = toolwire.Chat(backend_for(server), tools=TOOLS)
    events: list[Any] = []
    started = time.monotonic()
    for event in chat.send("go", cancel=cancel):
        events.append(event)
        if isinstance(event, TextEvent):
            cancel.cancel()
    assert time.monotonic() - started < 10  # cancelled, not the 20 s stream read out
    assert done_of(events).reason == "cancelled"
    assert RAN == [] and not of(events, ToolResultEvent)
    assert server.client_gone.wait(3), "the server never saw the connection close"


def test_cancel_before_the_turn_sends_nothing(server: WireServer) -> None:
    cancel = CancelToken()
    cancel.cancel()
    assert run_turn(backend_for(server), cancel=cancel) == [TurnEnd("cancelled")]
    assert server.requests == []


def test_cancel_while_waiting_to_retry(server: WireServer) -> None:
    server.enqueue(Fail.error(429, "slow down", {"retry-after": "20"}))
    cancel = CancelToken()
    threading.Timer(0.2, cancel.cancel).start()
    started = time.monotonic()
    items = run_turn(backend_for(server), cancel=cancel)
    assert time.monotonic() - started < 2
    assert end_of(items).reason == "cancelled"


# -- presets and key isolation --------------------------------------------------------------


def test_gemini_never_sends_the_openai_key(server: WireServer,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-openai-secret")
    monkeypatch.setenv("OPENAI_ORG_ID", "org-secret")
    monkeypatch.setenv("OPENAI_PROJECT_ID", "proj-secret")
    monkeypatch.setenv("OPENAI_CUSTOM_HEADERS", "X-Custom-Secret: custom-secret")
    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:9/never")
    monkeypatch.setenv("GEMINI_API_KEY", "gemini-key")
    server.enqueue(Stream(reply_chunks("hi")), Stream(reply_chunks("hi")))
    backend = OpenAICompatBackend("gemini", model="gemini-flash", base_url=server.url,
                                  timeout=60)
    assert end_of(run_turn(backend)).reason == "stop"
    headers = server.requests[0].headers
    assert "authorization" not in headers  # base_url is not Google's: no key at all
    assert not {"openai-organization", "openai-project", "x-custom-secret"} & set(headers)
    assert "secret" not in json.dumps(headers)
    explicit = OpenAICompatBackend("gemini", model="gemini-flash", base_url=server.url,
                                   api_key="explicit-key", timeout=60)
    run_turn(explicit)
    assert server.requests[1].headers["authorization"] == "Bearer explicit-key"


def test_gemini_defaults(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-openai")
    monkeypatch.setenv("OPENAI_BASE_URL", "http://example.invalid/v1")
    monkeypatch.delenv("GEMINI_API_KEY", raising=False)
    with pytest.raises(BackendError, match="GEMINI_API_KEY") as info:
        OpenAICompatBackend("gemini", model="gemini-flash")
    assert info.value.kind == "auth"
    monkeypatch.setenv("GEMINI_API_KEY", "g-key")
    conn = OpenAICompatBackend("gemini", model="gemini-flash").connection
    assert conn.base_url == "https://generativelanguage.googleapis.com/v1beta/openai/"
    assert conn.api_key == "g-key" and conn.key_source == "GEMINI_API_KEY"


def test_ollama_uses_a_placeholder_and_its_own_url() -> None:
    env = {"OPENAI_API_KEY": "sk-openai", "OPENAI_BASE_URL": "http://example.invalid/v1"}
    conn = resolve_connection("ollama", environ=env)
    assert conn.base_url == "http://localhost:11434/v1" and conn.api_key == "ollama"


def test_ollama_placeholder_goes_out(server: WireServer) -> None:
    server.enqueue(Stream(reply_chunks("hi")))
    backend = backend_for(server, provider="ollama", environ={"OPENAI_API_KEY": "sk-x"})
    run_turn(backend)
    assert server.requests[0].headers["authorization"] == "Bearer ollama"


def test_self_hosted_key_follows_base_url(server: WireServer) -> None:
    server.enqueue(Stream(reply_chunks("a")), Stream(reply_chunks("b")))
    run_turn(backend_for(server, provider="vllm", environ={"VLLM_API_KEY": "vllm-key"}))
    run_turn(backend_for(server, provider="vllm", environ={"OPENAI_API_KEY": "sk-x"}))
    assert server.requests[0].headers["authorization"] == "Bearer vllm-key"
    assert "authorization" not in server.requests[1].headers


def test_openai_preset(server: WireServer) -> None:
    env = {"OPENAI_API_KEY": "sk-real", "OPENAI_BASE_URL": "http://example.invalid/v1"}
    conn = resolve_connection("openai", environ=env)
    assert conn.base_url == "https://api.openai.com/v1" and conn.api_key == "sk-real"
    assert conn.is_openai
    with pytest.raises(BackendError, match="OPENAI_API_KEY"):
        resolve_connection("openai", environ={})
    server.enqueue(Stream(reply_chunks("a")))
    run_turn(backend_for(server, provider="openai", environ=env))
    assert "authorization" not in server.requests[0].headers  # another origin: withheld


def test_custom_preset() -> None:
    with pytest.raises(BackendError, match="base_url") as info:
        resolve_connection("custom", environ={"OPENAI_API_KEY": "sk"})
    assert info.value.kind == "config"
    conn = resolve_connection("custom", base_url="http://h:1/v1",
                              environ={"TOOLWIRE_API_KEY": "tw", "OPENAI_API_KEY": "sk"})
    assert conn.api_key == "tw"
    assert resolve_connection("custom", base_url="http://h:1/v1",
                              environ={"OPENAI_API_KEY": "sk"}).api_key is None
    with pytest.raises(BackendError, match="unknown provider"):
        resolve_connection("openrouter", environ={})


def test_presets_table() -> None:
    assert set(PRESETS) == {"openai", "ollama", "vllm", "gemini", "anthropic", "llama_server",
                            "custom"}
    assert PRESETS["anthropic"].base_url == "https://api.anthropic.com/v1/"
    assert PRESETS["anthropic"].api_key_env == "ANTHROPIC_API_KEY"
    assert PRESETS["llama_server"].base_url == "http://localhost:8080/v1"
    assert all(p.api_key_env != "OPENAI_API_KEY" for p in PRESETS.values() if p.name != "openai")


def test_keys_never_appear_in_repr() -> None:
    backend = OpenAICompatBackend("anthropic", model="claude", environ={
        "ANTHROPIC_API_KEY": "sk-ant-secret"})
    assert "sk-ant-secret" not in repr(backend) + repr(backend.connection)


def test_a_given_client_is_used_as_is(server: WireServer) -> None:
    server.enqueue(Fail.error(500, "boom"), Stream(reply_chunks("x")))
    client = openai.OpenAI(api_key="user-key", base_url=server.url, max_retries=5)
    backend = OpenAICompatBackend(model="m", client=client, max_retries=0)
    assert error_of(run_turn(backend)).kind == "server"
    assert len(server.requests) == 1  # the SDK's own retries are off
    assert server.requests[0].headers["authorization"] == "Bearer user-key"


# -- plugin, ids, async ------------------------------------------------------------------------


def test_registered_as_a_backend_plugin(server: WireServer) -> None:
    spec = toolwire.default_plugin_manager().backend("openai_compat")
    assert {"provider", "model", "base_url", "api_key", "timeout"} <= set(spec.options)
    backend = spec.create(provider="custom", model="m", base_url=server.url)
    assert isinstance(backend, toolwire.Backend) and backend.name == "openai_compat"
    with pytest.raises(TypeError, match="stop"):
        spec.create(provider="custom", model="m", base_url=server.url, stop="</s>")


@pytest.mark.process
def test_importing_toolwire_does_not_import_openai() -> None:
    code = ("import sys, toolwire, toolwire.plugins.openai_compat; "
            "toolwire.default_plugin_manager().backend('openai_compat'); "
            "print('openai' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True)
    assert out.stdout.strip() == "False"


def test_call_ids_are_openai_style() -> None:
    backend = OpenAICompatBackend("ollama", model="m", environ={})
    ids = {backend.make_call_id(i) for i in range(50)}
    assert len(ids) == 50
    assert all(re.fullmatch(r"call_[A-Za-z0-9]{24}", i) for i in ids)


def test_async_path(server: WireServer) -> None:
    server.enqueue(Stream(reply_chunks("Async.", [("call_9", "ping", {})])),
                   Fail.error(404, "no such model"))
    backend = backend_for(server)
    request = ModelRequest((Message.user("hi"),), TOOLS)

    async def collect() -> tuple[list[Any], list[Any]]:
        first = [i async for i in backend.astream_turn(request, CancelToken())]
        second = [i async for i in backend.astream_turn(request)]
        await backend.aclose()
        return first, second

    first, second = asyncio.run(collect())
    assert of(first, ToolCallEndEvent) == [ToolCallEndEvent("ping", {}, "call_9", 0)]
    assert end_of(first).reason == "tool_calls"
    assert error_of(second).kind == "not_found"


def test_assistant_history_with_calls_round_trips_through_a_chat(server: WireServer) -> None:
    history = [Message.user("q"),
               Message.assistant("", [ToolCall("call_old", "read_note", {"name": "x"})]),
               Message.tool_result(ToolCall("call_old", "read_note", {"name": "x"}), "xx")]
    server.enqueue(Stream(reply_chunks("ok")))
    list(toolwire.Chat(backend_for(server), tools=TOOLS, history=history).send("next"))
    assistant = server.bodies[0]["messages"][1]
    assert assistant["content"] is None
    assert assistant["tool_calls"][0]["function"]["arguments"] == '{"name": "x"}'
