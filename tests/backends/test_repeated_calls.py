"""A reply that writes a call it already wrote ends there (issue 31, item 4).

The rule is the templated base's, so it holds for every backend that enforces
``tool_choice`` (llama.cpp in-process, a remote engine's completion endpoint): the
llama.cpp tests force the reply with a grammar on the tiny real model; the rule's own
tests feed it events cut in every way.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from toolwire import (
    CancelToken,
    DiagnosticEvent,
    Message,
    ModelRequest,
    TextEvent,
    Tool,
    ToolCallDeltaEvent,
    ToolCallEndEvent,
    ToolCallStartEvent,
    TurnEnd,
)
from toolwire.backends.repeated_calls import REPEATED_CALL, RepeatedCallStop
from toolwire.templates.default_template import DEFAULT_CHAT_TEMPLATE
from toolwire.testing.tiny_gguf import TINY_BACKEND_OPTIONS, forcing_grammar, write_tiny_gguf

SEARCH = Tool({"name": "search", "description": "Search the notes.",
               "parameters": {"type": "object", "properties": {"query": {"type": "string"}},
                              "required": ["query"]}}, lambda query: query)


def _call(query: str) -> str:
    return (f"<tool_call>\n<function=search>\n<parameter=query>\n{query}\n</parameter>\n"
            "</function>\n</tool_call>")


def _events(index: int, query: str, cuts: list[int]) -> list[Any]:
    """A call's events as a parser streams them, its argument text cut at ``cuts``."""
    pieces, last = [], 0
    for cut in sorted({c % (len(query) + 1) for c in cuts} | {len(query)}):
        if cut > last:
            pieces.append(query[last:cut])
            last = cut
    return [ToolCallStartEvent(index, "search"),
            *(ToolCallDeltaEvent(index, "search", p, parameter="query") for p in pieces),
            ToolCallEndEvent("search", {"query": query}, index=index)]


@given(st.text(min_size=1, max_size=20), st.lists(st.integers(0, 40), max_size=6),
       st.lists(st.integers(0, 40), max_size=6))
def test_a_repeated_call_never_reaches_the_caller_however_its_text_is_cut(
        query: str, first_cuts: list[int], second_cuts: list[int]) -> None:
    rule = RepeatedCallStop(CancelToken())
    passed = list(rule.feed([*_events(0, query, first_cuts), TextEvent("\n"),
                             *_events(1, query, second_cuts), TextEvent("after")]))
    assert passed == [*_events(0, query, first_cuts), TextEvent("\n")]
    assert rule.stopped and rule.token.cancelled
    assert rule.repeat == _events(1, query, second_cuts)[-1]
    assert rule.notice().code == REPEATED_CALL and "search(" in rule.notice().message


@given(st.text(min_size=1, max_size=20), st.text(min_size=1, max_size=20),
       st.lists(st.integers(0, 40), max_size=6))
def test_a_different_call_streams_on_with_every_event_in_order(
        first: str, second: str, cuts: list[int]) -> None:
    if first == second:
        second += "!"
    rule = RepeatedCallStop(CancelToken())
    events = [*_events(0, first, []), *_events(1, second, cuts), *_events(2, first + "?", [])]
    assert list(rule.feed(events)) == events
    assert not rule.stopped and not rule.token.cancelled


def test_a_call_is_held_only_while_it_can_still_be_a_repeat() -> None:
    rule = RepeatedCallStop(CancelToken())
    assert list(rule.feed(_events(0, "alex", []))) == _events(0, "alex", [])
    start, *_ = _events(1, "alba", [])
    assert list(rule.feed([start, ToolCallDeltaEvent(1, "search", "al", parameter="query")])) == []
    released = list(rule.feed([ToolCallDeltaEvent(1, "search", "b", parameter="query")]))
    assert released == [start, ToolCallDeltaEvent(1, "search", "al", parameter="query"),
                        ToolCallDeltaEvent(1, "search", "b", parameter="query")]


def test_the_turn_token_still_stops_the_generation() -> None:
    turn = CancelToken()
    rule = RepeatedCallStop(turn)
    assert not rule.token.cancelled and not rule.token.wait(0.01)
    turn.cancel("user")
    assert rule.token.cancelled and rule.token.wait(0.01)


# -- through a real llama.cpp ---------------------------------------------------------------

llama = pytest.mark.llama


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    pytest.importorskip("llama_cpp")
    return write_tiny_gguf(tmp_path_factory.mktemp("repeats") / "m.gguf", DEFAULT_CHAT_TEMPLATE,
                           sample_bytes=False)


def _turn(model: Path, reply: str, **request: Any) -> list[Any]:
    from toolwire.plugins.llama_cpp import LlamaCppBackend

    backend = LlamaCppBackend(model, grammar=forcing_grammar(reply), temperature=0.0,
                              max_tokens=400, n_ctx=2048, progress=False, **TINY_BACKEND_OPTIONS)
    try:
        return list(backend.stream_turn(ModelRequest(
            (Message.user("find alex"),), (SEARCH,), **request), CancelToken()))
    finally:
        backend.close()


@llama
@pytest.mark.parametrize("choice", ["auto", "required"])
def test_a_reply_repeating_a_call_ends_at_the_repeat_with_one_call_and_a_diagnostic(
        model: Path, choice: str) -> None:
    reply = "\n".join([_call("alex")] * 4)
    items = _turn(model, reply, tool_choice=choice)
    calls = [e for e in items if isinstance(e, ToolCallEndEvent)]
    starts = [e for e in items if isinstance(e, ToolCallStartEvent)]
    assert [dict(c.arguments) for c in calls] == [{"query": "alex"}] and len(starts) == 1
    (notice,) = [e for e in items if isinstance(e, DiagnosticEvent) and e.code == REPEATED_CALL]
    assert "search" in notice.message
    end = items[-1]
    assert isinstance(end, TurnEnd) and end.reason == "tool_calls"
    assert end.usage is not None and end.usage["completion_tokens"] < len(reply) // 2


@llama
def test_different_calls_in_one_reply_all_stand_and_a_later_repeat_of_one_ends_it(
        model: Path) -> None:
    reply = "\n".join([_call("alex"), _call("sam"), _call("alex"), _call("kim")])
    items = _turn(model, reply, tool_choice="required")
    calls = [dict(e.arguments)["query"] for e in items if isinstance(e, ToolCallEndEvent)]
    assert calls == ["alex", "sam"]
    assert sum(isinstance(e, DiagnosticEvent) and e.code == REPEATED_CALL for e in items) == 1
    assert isinstance(items[-1], TurnEnd) and items[-1].reason == "tool_calls"


@llama
def test_a_reply_without_repeats_is_untouched(model: Path) -> None:
    items = _turn(model, "\n".join([_call("alex"), _call("sam")]), tool_choice="required")
    assert [dict(e.arguments)["query"] for e in items if isinstance(e, ToolCallEndEvent)] == [
        "alex", "sam"]
    assert not any(isinstance(e, DiagnosticEvent) and e.code == REPEATED_CALL for e in items)
    assert isinstance(items[-1], TurnEnd) and items[-1].reason == "tool_calls"
