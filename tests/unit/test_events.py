"""Events: frozen records with a stable JSON shape that reads back."""

from __future__ import annotations

import json
from typing import Any

import attrs
import pytest

from toolwire import (
    Chat,
    DiagnosticEvent,
    DoneEvent,
    ErrorEvent,
    NoParserEvent,
    ReasoningEvent,
    TextEvent,
    ToolCallDeltaEvent,
    ToolCallEndEvent,
    ToolCallEvent,
    ToolCallStartEvent,
    ToolResultEvent,
    event_from_dict,
    tool,
)
from toolwire.testing import ScriptedBackend, isolated_plugin_manager

SAMPLES = [
    TextEvent("Hello"),
    ReasoningEvent("thinking about it"),
    ToolCallStartEvent(0, "search", "call_1"),
    ToolCallDeltaEvent(0, "search", "al", "query", "call_1"),
    ToolCallDeltaEvent(1, "lookup", '{"q": ', None, "call_2"),
    ToolCallEndEvent("search", {"query": "alex", "tags": ["a", "b"]}, "call_1", 0),
    ToolCallEvent("search", {"query": "alex", "tags": ["a", "b"]}, "call_1", 0),
    ToolResultEvent("call_1", "search", "3 hits"),
    ToolResultEvent("call_2", "lookup", "Error: boom", True, "tool_error"),
    DiagnosticEvent("malformed_call", "no closing tag", "<tool_call>"),
    NoParserEvent("no parser claims this template", ("[TOOL_CALLS]",)),
    ErrorEvent("backend", "connection reset"),
    DoneEvent("stop", 2, {"prompt_tokens": 10}, {"total": 0.5}),
    DoneEvent("cancelled"),
]


@pytest.mark.parametrize("event", SAMPLES, ids=lambda e: type(e).__name__)
def test_event_round_trips_through_json(event: Any) -> None:
    data = json.loads(json.dumps(event.to_dict()))
    assert event_from_dict(data) == event


@pytest.mark.parametrize("event", SAMPLES, ids=lambda e: type(e).__name__)
def test_event_dict_names_its_type_first(event: Any) -> None:
    data = event.to_dict()
    assert next(iter(data)) == "type"
    assert data["type"] == type(event).type


@pytest.mark.parametrize("event", SAMPLES, ids=lambda e: type(e).__name__)
def test_events_are_frozen(event: Any) -> None:
    field = attrs.fields(type(event))[0].name
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        setattr(event, field, "changed")


def test_every_event_type_has_a_distinct_name() -> None:
    names = {type(e).type for e in SAMPLES}
    assert names == {"text", "reasoning", "tool_call_start", "tool_call_delta",
                     "tool_call_end", "tool_call",
                     "tool_result", "diagnostic", "no_parser", "error", "done"}


def test_text_and_reasoning_deltas_carry_text() -> None:
    assert TextEvent("Hi").to_dict() == {"type": "text", "text": "Hi"}
    assert ReasoningEvent("hm").to_dict() == {"type": "reasoning", "text": "hm"}
    assert ToolCallDeltaEvent(0, "search", "al", "query", "c").to_dict() == {
        "type": "tool_call_delta", "index": 0, "name": "search", "text": "al",
        "parameter": "query", "id": "c"}


def test_tool_call_and_result_shapes() -> None:
    assert ToolCallEvent("search", {"query": "a"}, "c", 1).to_dict() == {
        "type": "tool_call", "name": "search", "arguments": {"query": "a"}, "id": "c",
        "index": 1}
    assert ToolResultEvent("c", "search", "hits").to_dict() == {
        "type": "tool_result", "id": "c", "name": "search", "content": "hits",
        "is_error": False, "error_kind": None}


def test_tuples_become_lists_in_the_dict() -> None:
    assert NoParserEvent("none", ("a", "b")).to_dict()["seen_markers"] == ["a", "b"]


def test_tool_call_arguments_are_copied_not_shared() -> None:
    arguments = {"query": "a"}
    event = ToolCallEvent("search", arguments)
    arguments["query"] = "b"
    assert event.arguments == {"query": "a"}
    event.to_dict()["arguments"]["query"] = "c"
    assert event.arguments == {"query": "a"}


@pytest.mark.parametrize("data, words", [
    ({"type": "telepathy"}, "unknown event type 'telepathy'"),
    ({"text": "no type"}, "unknown event type None"),
    ({"type": "text"}, "bad text event"),
    ({"type": "text", "text": "a", "colour": "red"}, "bad text event"),
])
def test_malformed_event_dicts_are_a_value_error(data: dict[str, Any], words: str) -> None:
    with pytest.raises(ValueError, match=words):
        event_from_dict(data)


def test_a_whole_exchange_serialises_and_reads_back() -> None:
    @tool(read_only=True)
    def search(query: str) -> str:
        return f"hits for {query}"

    plugins = isolated_plugin_manager()
    reply = ("<think>\nlook it up\n</think>\n\n<tool_call>\n<function=search>\n"
             "<parameter=query>\nalex\n</parameter>\n</function>\n</tool_call>")
    chat = Chat(ScriptedBackend([reply, "Found."], plugins=plugins), [search], plugins=plugins)
    events = list(chat.send("find alex"))
    kinds = {e.type for e in events}
    assert {"reasoning", "tool_call_start", "tool_call_delta", "tool_call", "tool_result",
            "text", "done"} <= kinds
    lines = [json.dumps(e.to_dict()) for e in events]
    assert [event_from_dict(json.loads(line)) for line in lines] == events


def test_the_call_a_parser_read_and_the_call_the_loop_runs_are_different_events() -> None:
    read = ToolCallEndEvent("search", {"query": "a"}, "c", 1)
    runs = ToolCallEvent("search", {"query": "a"}, "c", 1)
    assert (read.to_dict()["type"], runs.to_dict()["type"]) == ("tool_call_end", "tool_call")
    assert not isinstance(read, ToolCallEvent) and not isinstance(runs, ToolCallEndEvent)
