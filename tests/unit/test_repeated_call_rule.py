"""The repeated-call rule on every backend: a reply that writes a call it already wrote
ends there, with the call run once, finish reason ``tool_calls`` and one
``repeated_call`` diagnostic (issue 31, item 4; docs/grammar.md, "Repeated calls").

Scripted replies go through the parser and the rule as a templated backend's do; a
remote provider's calls (all complete only when its stream ends) meet the same rule
through :func:`toolwire.plugin_api.end_at_repeated_call`, over real HTTP.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest

from toolwire import (
    CancelToken,
    Chat,
    DiagnosticEvent,
    DoneEvent,
    Event,
    Message,
    ModelRequest,
    TextEvent,
    ToolCallEndEvent,
    ToolCallEvent,
    ToolCallStartEvent,
    TurnEnd,
    tool,
)
from toolwire.backends.repeated_calls import REPEATED_CALL
from toolwire.plugin_api import end_at_repeated_call
from toolwire.testing import ScriptedBackend

RAN: list[str] = []


@tool(read_only=True)
def search(query: str, limit: int = 10) -> str:
    """Search the notes."""
    RAN.append(query)
    return f"found {query}"


@pytest.fixture(autouse=True)
def _reset_ran() -> None:
    RAN.clear()


def call(query: str, limit: int | None = None, *, limit_first: bool = False) -> str:
    """A qwen_xml call of ``search``."""
    parameters = [f"<parameter=query>\n{query}\n</parameter>\n"]
    if limit is not None:
        parameters.insert(0 if limit_first else 1, f"<parameter=limit>\n{limit}\n</parameter>\n")
    return f"<tool_call>\n<function=search>\n{''.join(parameters)}</function>\n</tool_call>"


def turn(reply: str, **request: Any) -> tuple[list[Any], ScriptedBackend]:
    backend = ScriptedBackend([reply], chunk_size=3)
    items = list(backend.stream_turn(ModelRequest((Message.user("find alex"),), (search,),
                                                  **request), CancelToken()))
    return items, backend


def repeats(items: list[Any]) -> list[DiagnosticEvent]:
    return [e for e in items if isinstance(e, DiagnosticEvent) and e.code == REPEATED_CALL]


@pytest.mark.parametrize("choice", ["auto", "required"])
@pytest.mark.parametrize("parallel", [True, False])
def test_a_call_written_three_times_is_one_call_and_the_reply_ends_at_the_repeat(
        choice: str, parallel: bool) -> None:
    items, backend = turn("\n".join([call("alex")] * 3) + "\nand some text after",
                          tool_choice=choice, parallel_tool_calls=parallel)
    assert [dict(e.arguments) for e in items if isinstance(e, ToolCallEndEvent)] == [
        {"query": "alex"}]
    assert len([e for e in items if isinstance(e, ToolCallStartEvent)]) == 1
    (notice,) = repeats(items)
    assert "search" in notice.message and "alex" in notice.raw
    assert items[-1] == TurnEnd("tool_calls")
    assert backend.closed_early == 1  # the rest of the reply was never read
    assert not any(isinstance(e, TextEvent) and "after" in e.text for e in items)


def test_a_repeat_of_an_earlier_call_ends_the_reply_and_the_calls_before_it_stand() -> None:
    items, _ = turn("\n".join([call("alex"), call("sam"), call("alex"), call("kim")]))
    assert [dict(e.arguments)["query"] for e in items if isinstance(e, ToolCallEndEvent)] == [
        "alex", "sam"]
    assert len(repeats(items)) == 1 and items[-1].reason == "tool_calls"


def test_the_same_arguments_in_another_order_are_a_repeat() -> None:
    items, _ = turn(call("alex", 3) + call("alex", 3, limit_first=True))
    assert len([e for e in items if isinstance(e, ToolCallEndEvent)]) == 1
    assert len(repeats(items)) == 1


def test_different_calls_all_stand_without_a_diagnostic() -> None:
    items, backend = turn("\n".join([call("alex"), call("alexa"), call("sam")]))
    assert [dict(e.arguments)["query"] for e in items if isinstance(e, ToolCallEndEvent)] == [
        "alex", "alexa", "sam"]
    assert repeats(items) == [] and backend.closed_early == 0


def test_in_a_chat_the_call_runs_once_and_the_model_answers_on_the_next_turn() -> None:
    chat = Chat(ScriptedBackend(["\n".join([call("alex")] * 4), "alex is in notes.md"]),
                [search], tool_choice="required")
    events = list(chat.send("find alex"))
    assert RAN == ["alex"]
    assert [e.name for e in events if isinstance(e, ToolCallEvent)] == ["search"]
    assert len(repeats(events)) == 1
    done = events[-1]
    assert isinstance(done, DoneEvent) and done.reason == "stop" and done.turns == 2
    (assistant,) = [m for m in chat.history if m.role == "assistant" and m.tool_calls]
    assert len(assistant.tool_calls) == 1  # the history holds the call once


def test_the_same_call_on_a_later_turn_is_not_a_repeat() -> None:
    chat = Chat(ScriptedBackend([call("alex"), call("alex"), "done"]), [search])
    events = list(chat.send("find alex twice"))
    assert RAN == ["alex", "alex"]
    assert repeats(events) == []


def test_a_cancelled_reply_stays_cancelled_after_a_repeat() -> None:
    cancel = CancelToken()

    def replay(token: CancelToken) -> Iterator[Event | TurnEnd]:
        yield ToolCallEndEvent("search", {"query": "a"}, index=0)
        yield ToolCallEndEvent("search", {"query": "a"}, index=1)
        cancel.cancel("user")
        assert token.cancelled
        yield TurnEnd("cancelled")

    items = list(end_at_repeated_call(replay, cancel))
    assert items == [ToolCallEndEvent("search", {"query": "a"}, index=0), TurnEnd("cancelled")]


def test_closing_the_rule_early_closes_the_backends_stream() -> None:
    closed: list[bool] = []

    def replay(token: CancelToken) -> Iterator[Event | TurnEnd]:
        try:
            yield TextEvent("a")
            yield TextEvent("b")
            yield TurnEnd("stop")
        finally:
            closed.append(True)

    stream = end_at_repeated_call(replay, CancelToken())
    assert next(stream) == TextEvent("a")
    stream.close()
    assert closed == [True]


# -- a remote provider over real HTTP --------------------------------------------------------

def _provider_reply_with_the_same_call_twice() -> Any:
    from tests.support.openai_wire_server import Stream, call_delta, finish_chunk, tool_chunk

    return Stream([
        tool_chunk(call_delta(0, id="call_1", name="search", arguments='{"query": "alex"}')),
        tool_chunk(call_delta(1, id="call_2", name="search", arguments='{"query":"alex"}')),
        tool_chunk(call_delta(2, id="call_3", name="search", arguments='{"query": "sam"}')),
        finish_chunk("tool_calls"),
    ])


def _remote(url: str) -> Any:
    pytest.importorskip("openai")
    from toolwire.plugins.openai_compat import OpenAICompatBackend

    return OpenAICompatBackend("custom", model="test-model", base_url=url, timeout=3.0,
                               retry_backoff=0.0, environ={})


def _check_remote(items: list[Any]) -> None:
    calls = [e for e in items if isinstance(e, ToolCallEndEvent)]
    assert [(c.id, dict(c.arguments)) for c in calls] == [("call_1", {"query": "alex"})]
    assert len(repeats(items)) == 1
    assert isinstance(items[-1], TurnEnd) and items[-1].reason == "tool_calls"


def test_a_remote_providers_reply_holding_the_same_call_twice_runs_it_once() -> None:
    from tests.support.openai_wire_server import WireServer

    with WireServer() as server:
        server.enqueue(_provider_reply_with_the_same_call_twice())
        backend = _remote(server.url)
        request = ModelRequest((Message.user("find alex"),), (search,),
                               tool_choice="required")
        _check_remote(list(backend.stream_turn(request, CancelToken())))


def test_the_async_remote_stream_meets_the_same_rule() -> None:
    from tests.support.openai_wire_server import WireServer

    async def collect(backend: Any, request: ModelRequest) -> list[Any]:
        try:
            return [item async for item in backend.astream_turn(request)]
        finally:
            await backend.aclose()

    with WireServer() as server:
        server.enqueue(_provider_reply_with_the_same_call_twice())
        request = ModelRequest((Message.user("find alex"),), (search,))
        _check_remote(asyncio.run(collect(_remote(server.url), request)))


# -- a serving engine's completion endpoint (the templated base) ----------------------------

def test_a_serving_engines_reply_repeating_a_call_ends_at_the_repeat() -> None:
    from tests.support.completions_wire_server import EngineStandIn, completion_chunks
    from tests.support.openai_wire_server import Stream
    from toolwire.plugins.completions.backend import CompletionsBackend
    from toolwire.templates.default_template import DEFAULT_CHAT_TEMPLATE
    from toolwire.testing import isolated_plugin_manager

    reply = "\n".join([call("alex")] * 3)
    engine = EngineStandIn()
    with engine:
        engine.enqueue(Stream(completion_chunks([reply[i:i + 5] for i in range(0, len(reply), 5)]),
                              delay=0.01))
        backend = CompletionsBackend(engine.root, chat_template=DEFAULT_CHAT_TEMPLATE,
                                     n_ctx=4096, plugins=isolated_plugin_manager(),
                                     retry_backoff=0.0, environ={})
        try:
            items = list(backend.stream_turn(ModelRequest(
                (Message.user("find alex"),), (search,), tool_choice="required"),
                CancelToken()))
        finally:
            backend.close()
    assert [dict(e.arguments) for e in items if isinstance(e, ToolCallEndEvent)] == [
        {"query": "alex"}]
    assert len(repeats(items)) == 1
    assert isinstance(items[-1], TurnEnd) and items[-1].reason == "tool_calls"
