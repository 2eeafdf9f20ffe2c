"""Conversation messages and the stored tool-exchange format."""

from __future__ import annotations

import json
from typing import Any

import pytest

from toolwire import (
    Message,
    ToolCall,
    from_stored,
    to_openai_messages,
    to_stored,
    to_template_messages,
)


def test_stored_tool_record_replays_as_assistant_call_and_tool_result() -> None:
    messages = from_stored([
        {"role": "user", "content": "find alex"},
        {"role": "tool", "tool_name": "search", "tool_args": {"query": "alex"},
         "content": "3 hits"},
    ], make_id=lambda i: f"id{i}")
    call = ToolCall("id0", "search", {"query": "alex"})
    assert messages == [
        Message.user("find alex"),
        Message.assistant("", (call,)),
        Message.tool_result(call, "3 hits"),
    ]


def test_consecutive_tool_records_join_the_assistant_message_before_them() -> None:
    messages = from_stored([
        {"role": "user", "content": "q"},
        {"role": "assistant", "content": "Let me look.", "reasoning": "two searches"},
        {"role": "tool", "tool_name": "search", "tool_args": {"query": "a"},
         "tool_call_id": "c1", "content": "A"},
        {"role": "tool", "tool_name": "search", "tool_args": {"query": "b"},
         "tool_call_id": "c2", "content": "B", "is_error": True},
        {"role": "assistant", "content": "Done."},
    ])
    assert [m.role for m in messages] == ["user", "assistant", "tool", "tool", "assistant"]
    opener = messages[1]
    assert (opener.content, opener.reasoning) == ("Let me look.", "two searches")
    assert [(c.id, c.arguments) for c in opener.tool_calls] == [("c1", {"query": "a"}),
                                                                ("c2", {"query": "b"})]
    assert (messages[3].tool_call_id, messages[3].is_error) == ("c2", True)


def test_tool_records_after_a_user_message_get_an_assistant_message_of_their_own() -> None:
    messages = from_stored([
        {"role": "user", "content": "q"},
        {"role": "tool", "tool_name": "a", "tool_args": {}, "content": "1"},
        {"role": "user", "content": "more"},
        {"role": "tool", "tool_name": "b", "tool_args": {}, "content": "2"},
    ])
    assert [m.role for m in messages] == ["user", "assistant", "tool", "user", "assistant",
                                          "tool"]
    assert [c.name for c in messages[4].tool_calls] == ["b"]


def test_missing_ids_are_made_by_the_backend_and_are_distinct() -> None:
    messages = from_stored([
        {"role": "tool", "tool_name": "a", "tool_args": {}, "content": "1"},
        {"role": "tool", "tool_name": "b", "tool_args": {}, "content": "2"},
    ], make_id=lambda i: f"backend_{i}")
    ids = [c.id for c in messages[0].tool_calls]
    assert ids == ["backend_0", "backend_1"]
    assert [m.tool_call_id for m in messages[1:]] == ids


def test_stored_arguments_may_be_a_json_string() -> None:
    messages = from_stored([{"role": "tool", "tool_name": "a", "tool_args": '{"x": 1}',
                             "content": ""}])
    assert messages[0].tool_calls[0].arguments == {"x": 1}


@pytest.mark.parametrize("record, words", [
    ({"role": "robot", "content": ""}, "unknown role 'robot'"),
    ({"role": "user", "content": 3}, "content must be a string"),
    ({"role": "tool", "tool_args": {}, "content": ""}, "needs tool_name"),
    ({"role": "tool", "tool_name": "a", "tool_args": "{not json", "content": ""},
     "tool_args is not JSON"),
    ("just text", "not an object"),
])
def test_malformed_stored_records_are_rejected_with_their_position(record: Any,
                                                                   words: str) -> None:
    with pytest.raises(ValueError, match=f"stored message 1.*{words}|{words}"):
        from_stored([{"role": "user", "content": "ok"}, record])


def test_conversation_survives_a_round_trip_through_json() -> None:
    first = ToolCall("call_1", "search", {"query": "alex", "limit": 3})
    second = ToolCall("call_2", "open", {"path": "a.md"})
    conversation = [
        Message.user("find alex"),
        Message.assistant("Looking.", (first, second), reasoning="need two calls"),
        Message.tool_result(first, "3 hits"),
        Message.tool_result(second, "no such file", is_error=True),
        Message.assistant("Found 3."),
    ]
    stored = json.loads(json.dumps(to_stored(conversation)))
    assert from_stored(stored) == conversation


def test_stored_format_writes_one_record_per_tool_exchange() -> None:
    call = ToolCall("c", "search", {"query": "a"})
    stored = to_stored([Message.user("q"), Message.assistant("", (call,)),
                        Message.tool_result(call, "hits")])
    assert stored == [
        {"role": "user", "content": "q"},
        {"role": "assistant", "content": ""},
        {"role": "tool", "tool_name": "search", "tool_args": {"query": "a"},
         "tool_call_id": "c", "content": "hits", "is_error": False},
    ]


def test_template_messages_carry_arguments_as_mappings_or_json() -> None:
    call = ToolCall("c", "search", {"query": "é"})
    conversation = [Message.assistant("", (call,), reasoning="hmm"),
                    Message.tool_result(call, "hits")]
    as_mapping = to_template_messages(conversation)
    assert as_mapping[0]["tool_calls"] == [
        {"id": "c", "type": "function", "function": {"name": "search",
                                                     "arguments": {"query": "é"}}}]
    assert as_mapping[0]["reasoning_content"] == "hmm"
    assert as_mapping[1] == {"role": "tool", "tool_call_id": "c", "name": "search",
                             "content": "hits"}
    as_json = to_template_messages(conversation, arguments_as_json=True)
    assert as_json[0]["tool_calls"][0]["function"]["arguments"] == '{"query": "é"}'


def test_openai_messages_use_json_arguments_and_null_content_beside_calls() -> None:
    call = ToolCall("c", "search", {"query": "a"})
    out = to_openai_messages([Message.system("s"), Message.assistant("", (call,)),
                              Message.tool_result(call, "hits"), Message.assistant("")])
    assert out[1] == {"role": "assistant", "content": None, "tool_calls": [
        {"id": "c", "type": "function",
         "function": {"name": "search", "arguments": '{"query": "a"}'}}]}
    assert out[2] == {"role": "tool", "tool_call_id": "c", "content": "hits"}
    assert out[3] == {"role": "assistant", "content": ""}


def test_messages_are_immutable_and_copy_their_inputs() -> None:
    arguments = {"query": "a"}
    call = ToolCall("c", "search", arguments)
    arguments["query"] = "changed"
    assert call.arguments == {"query": "a"}
    message = Message.assistant("", [call])
    assert message.tool_calls == (call,)
    with pytest.raises(AttributeError):
        message.content = "x"  # type: ignore[misc]
