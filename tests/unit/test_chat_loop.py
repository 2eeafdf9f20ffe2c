"""The chat loop: model turn -> calls -> results -> next turn, whatever goes wrong."""

from __future__ import annotations

import _thread
import asyncio
import contextlib
import threading
import time
from collections.abc import Iterator, Sequence
from typing import Any

import pytest

import toolwire
from toolwire import (
    CancelToken,
    Chat,
    DiagnosticEvent,
    DoneEvent,
    ErrorEvent,
    Event,
    Message,
    ModelRequest,
    TextEvent,
    ToolCallDeltaEvent,
    ToolCallEndEvent,
    ToolCallEvent,
    ToolCallStartEvent,
    ToolResultEvent,
    TurnEnd,
    from_stored,
    tool,
)
from toolwire.conversation.chat import DEFAULT_FINAL_ANSWER_PROMPT
from toolwire.hooks.manager import PluginManager, PluginWarning
from toolwire.testing import ScriptedBackend, isolated_plugin_manager


def call(name: str, **params: Any) -> str:
    """A reply calling ``name`` in the qwen_xml markup."""
    body = "".join(f"<parameter={k}>\n{v}\n</parameter>\n" for k, v in params.items())
    return f"<tool_call>\n<function={name}>\n{body}</function>\n</tool_call>"


def assert_every_call_answered(history: Sequence[Message]) -> None:
    """Each assistant call is followed by exactly its tool results, in order."""
    for i, message in enumerate(history):
        if message.role == "tool":
            assert history[i - 1].role in ("assistant", "tool"), history
        if message.role != "assistant" or not message.tool_calls:
            continue
        answers = []
        for later in history[i + 1:]:
            if later.role != "tool":
                break
            answers.append(later.tool_call_id)
        assert answers == [c.id for c in message.tool_calls], history


class Tools:
    """Tools that record what ran."""

    def __init__(self) -> None:
        self.ran: list[tuple[str, dict[str, Any]]] = []

        @tool(read_only=True)
        def search(query: str, limit: int = 10) -> str:
            """Search the notes."""
            self.ran.append(("search", {"query": query, "limit": limit}))
            return f"hits for {query}"

        @tool
        def write_note(path: str, text: str, workspace: Any = None) -> str:
            """Write a note."""
            self.ran.append(("write_note", {"path": path, "workspace": workspace}))
            return "written"

        self.search = search
        self.write_note = write_note

    def all(self) -> list[toolwire.Tool]:
        return [self.search, self.write_note]


@pytest.fixture(scope="module")
def plugins() -> PluginManager:
    return isolated_plugin_manager()


@pytest.fixture
def tools() -> Tools:
    return Tools()


def make_chat(replies: Sequence[Any], tools: Tools, plugins: PluginManager,
              **options: Any) -> tuple[Chat, ScriptedBackend]:
    backend = ScriptedBackend(replies, plugins=plugins)
    return Chat(backend, tools.all(), plugins=plugins, **options), backend


def of_type(events: Sequence[Event], kind: type[Any]) -> list[Any]:
    return [e for e in events if isinstance(e, kind)]


# -- plain exchanges -----------------------------------------------------------------


def test_answer_without_calls_ends_the_exchange(tools: Tools, plugins: PluginManager) -> None:
    chat, backend = make_chat(["Hello there."], tools, plugins)
    events = list(chat.send("hi"))
    assert "".join(e.text for e in of_type(events, TextEvent)) == "Hello there."
    assert events[-1] == DoneEvent("stop", 1, events[-1].usage, events[-1].timings)
    assert [(m.role, m.content) for m in chat.history] == [("user", "hi"),
                                                           ("assistant", "Hello there.")]
    assert [t.name for t in backend.requests[0].tools] == ["search", "write_note"]


def test_several_calls_in_one_turn_are_each_answered_by_their_own_tool_message(
        tools: Tools, plugins: PluginManager) -> None:
    chat, backend = make_chat([call("search", query="alex") + "\n" + call("search", query="bob"),
                               "Both found."], tools, plugins)
    events = list(chat.send("find alex and bob"))
    assert tools.ran == [("search", {"query": "alex", "limit": 10}),
                         ("search", {"query": "bob", "limit": 10})]
    history = chat.history
    assert [m.role for m in history] == ["user", "assistant", "tool", "tool", "assistant"]
    calls = history[1].tool_calls
    assert [c.arguments for c in calls] == [{"query": "alex"}, {"query": "bob"}]
    assert calls[0].id != calls[1].id
    assert [(m.tool_call_id, m.content) for m in history[2:4]] == [
        (calls[0].id, "hits for alex"), (calls[1].id, "hits for bob")]
    assert list(backend.requests[1].messages) == list(history[:4])
    results = of_type(events, ToolResultEvent)
    expected = [(c.id, m.content) for c, m in zip(calls, history[2:4], strict=True)]
    assert [(r.id, r.content) for r in results] == expected
    assert events[-1].reason == "stop" and events[-1].turns == 2


def test_streamed_call_events_carry_the_id_of_the_call_that_runs(
        tools: Tools, plugins: PluginManager) -> None:
    chat, _ = make_chat([call("search", query="alex"), "ok"], tools, plugins)
    events = list(chat.send("hi"))
    (start,) = of_type(events, ToolCallStartEvent)
    deltas = of_type(events, ToolCallDeltaEvent)
    (announced,) = of_type(events, ToolCallEvent)
    (result,) = of_type(events, ToolResultEvent)
    assert start.id and deltas
    assert {d.id for d in deltas} == {start.id} == {announced.id} == {result.id}
    assert events.index(announced) < events.index(result)


def test_model_supplied_workspace_is_replaced_by_the_chats(tools: Tools,
                                                           plugins: PluginManager) -> None:
    chat, _ = make_chat([call("write_note", path="a.md", text="x", workspace="/etc"), "ok"],
                        tools, plugins, workspace="/home/me/notes")
    list(chat.send("write"))
    assert tools.ran == [("write_note", {"path": "a.md", "workspace": "/home/me/notes"})]


def test_read_only_chat_offers_only_read_schemas_and_refuses_a_write_by_name(
        tools: Tools, plugins: PluginManager) -> None:
    chat, backend = make_chat([call("write_note", path="a.md", text="x"), "sorry"], tools,
                              plugins, read_only=True)
    events = list(chat.send("write"))
    assert [t.name for t in backend.requests[0].tools] == ["search"]
    (result,) = of_type(events, ToolResultEvent)
    assert result.is_error and result.error_kind == "read_only"
    assert "'write_note'" in result.content
    assert tools.ran == []


def test_bad_arguments_reach_the_model_which_can_correct_itself(
        tools: Tools, plugins: PluginManager) -> None:
    def second(request: ModelRequest) -> str:
        assert "missing required parameter 'query'" in request.messages[-1].content
        return call("search", query="alex")

    chat, _ = make_chat([call("search", limit=3), second, "found"], tools, plugins)
    events = list(chat.send("find"))
    results = of_type(events, ToolResultEvent)
    assert [r.error_kind for r in results] == ["invalid_arguments", None]
    assert tools.ran == [("search", {"query": "alex", "limit": 10})]


def test_usage_is_summed_over_the_turns_of_an_exchange(tools: Tools,
                                                      plugins: PluginManager) -> None:
    first, second = call("search", query="a"), "done"
    chat, _ = make_chat([first, second], tools, plugins)
    done = list(chat.send("hi"))[-1]
    assert done.usage == {"completion_tokens": len(first) // 4 + 1 + len(second) // 4 + 1}


def test_reply_cut_at_the_token_limit_keeps_its_text_and_says_so(
        tools: Tools, plugins: PluginManager) -> None:
    backend = ScriptedBackend(["A long answ"], plugins=plugins, finish_reason="length")
    chat = Chat(backend, tools.all(), plugins=plugins)
    events = list(chat.send("hi"))
    assert of_type(events, ErrorEvent)[0].kind == "length"
    assert events[-1].reason == "length"
    assert chat.history[-1].content == "A long answ"


def test_a_chat_answers_one_message_at_a_time(tools: Tools, plugins: PluginManager) -> None:
    chat, _ = make_chat(["one", "two"], tools, plugins)
    running = chat.send("first")
    next(running)
    with pytest.raises(RuntimeError, match="already answering"):
        next(chat.send("second"))
    list(running)
    assert chat.ask("second") == "two"


# -- the iteration bound ---------------------------------------------------------------


def test_last_turn_offers_no_tools_and_asks_the_model_to_answer(
        tools: Tools, plugins: PluginManager) -> None:
    chat, backend = make_chat([call("search", query=str(i)) for i in range(3)], tools, plugins,
                              max_tool_iters=3)
    events = list(chat.send("keep searching"))
    assert [len(r.tools) for r in backend.requests] == [2, 2, 0]
    assert [r.final_turn for r in backend.requests] == [False, False, True]
    final_request = backend.requests[2].messages
    assert final_request[-1] == Message.user(DEFAULT_FINAL_ANSWER_PROMPT)
    assert final_request[-2].role == "tool"
    assert [q for _, q in tools.ran] == [{"query": "0", "limit": 10}, {"query": "1", "limit": 10}]
    (diagnostic,) = of_type(events, DiagnosticEvent)
    assert diagnostic.code == "call_in_final_turn"
    assert events[-1].reason == "stop" and events[-1].turns == 3
    assert all(m.content != DEFAULT_FINAL_ANSWER_PROMPT for m in chat.history)
    assert_every_call_answered(chat.history)


def test_final_answer_prompt_can_be_replaced(tools: Tools, plugins: PluginManager) -> None:
    chat, backend = make_chat([call("search", query="a"), "answer"], tools, plugins,
                              max_tool_iters=2, final_answer_prompt="Answer now.")
    assert chat.ask("q") == "answer"
    assert backend.requests[1].messages[-1] == Message.user("Answer now.")


def test_single_turn_bound_offers_no_tools_at_all(tools: Tools, plugins: PluginManager) -> None:
    chat, backend = make_chat(["just text"], tools, plugins, max_tool_iters=1)
    assert chat.ask("hi") == "just text"
    assert backend.requests[0].tools == ()
    assert backend.requests[0].messages[-1] == Message.user("hi")


def test_iteration_bound_below_one_is_refused(tools: Tools, plugins: PluginManager) -> None:
    with pytest.raises(ValueError, match="max_tool_iters"):
        make_chat([], tools, plugins, max_tool_iters=0)


# -- cancellation ------------------------------------------------------------------------


def test_cancel_from_a_tool_call_start_handler_stops_before_the_tool_runs(
        tools: Tools, plugins: PluginManager) -> None:
    chat, backend = make_chat([call("search", query="alex"), "never"], tools, plugins)
    token = CancelToken()
    events = []
    for event in chat.send("find", cancel=token):
        events.append(event)
        if isinstance(event, ToolCallStartEvent):
            token.cancel()
    assert tools.ran == []
    assert events[-1].reason == "cancelled"
    assert not of_type(events, ToolCallEvent)
    assert backend.closed_early == 1 and len(backend.requests) == 1
    assert [m.role for m in chat.history] == ["user", "assistant"]
    assert chat.history[-1].tool_calls == ()


def test_cancel_on_seeing_the_complete_call_still_stops_it_from_running(
        tools: Tools, plugins: PluginManager) -> None:
    chat, _ = make_chat([call("write_note", path="a", text="b"), "never"], tools, plugins)
    token = CancelToken()
    events = []
    for event in chat.send("write", cancel=token):
        events.append(event)
        if isinstance(event, ToolCallEvent):
            token.cancel()  # e.g. the user declined the call
    assert tools.ran == []
    (result,) = of_type(events, ToolResultEvent)
    assert result.is_error and result.error_kind == "cancelled"
    assert events[-1].reason == "cancelled"
    assert chat.history[-1].role == "tool" and chat.history[-1].is_error
    assert_every_call_answered(chat.history)


def test_cancel_from_another_thread_during_the_model_turn_runs_no_tool(
        tools: Tools, plugins: PluginManager) -> None:
    token = CancelToken()
    streaming = threading.Event()

    def reply(request: ModelRequest) -> str:
        streaming.set()
        assert token.wait(5)
        return call("search", query="alex")

    def canceller() -> None:
        streaming.wait(5)
        token.cancel("user pressed stop")

    thread = threading.Thread(target=canceller)
    thread.start()
    chat, _ = make_chat([reply, "never"], tools, plugins)
    events = list(chat.send("find", cancel=token))
    thread.join()
    assert tools.ran == []
    assert events[-1].reason == "cancelled"
    assert token.reason == "user pressed stop"
    assert_every_call_answered(chat.history)


def test_cancel_from_another_thread_while_a_tool_runs_skips_the_remaining_calls(
        tools: Tools, plugins: PluginManager) -> None:
    token = CancelToken()

    @tool
    def slow(step: int) -> str:
        other = threading.Thread(target=token.cancel)
        other.start()
        other.join()
        return f"step {step} done"

    chat = Chat(ScriptedBackend([call("slow", step=1) + call("search", query="x"), "never"],
                                plugins=plugins), [slow, tools.search], plugins=plugins)
    events = list(chat.send("go", cancel=token))
    assert tools.ran == []
    assert events[-1].reason == "cancelled"
    history = chat.history
    assert [m.role for m in history] == ["user", "assistant", "tool", "tool"]
    assert history[2].content == "step 1 done"
    assert history[3].is_error and "cancelled" in history[3].content
    assert_every_call_answered(history)


def test_breaking_out_of_send_keeps_every_call_answered(tools: Tools,
                                                        plugins: PluginManager) -> None:
    chat, backend = make_chat([call("search", query="a") + call("search", query="b"),
                               "unused", "next answer"], tools, plugins)
    for event in chat.send("find"):
        if isinstance(event, ToolCallEvent):
            break
    assert tools.ran == []
    assert_every_call_answered(chat.history)
    assert [m.role for m in chat.history] == ["user", "assistant", "tool", "tool"]
    # the chat is free again and the next request is a valid conversation
    assert chat.ask("again") == "unused"
    assert_every_call_answered(backend.requests[-1].messages)


def test_breaking_out_while_text_streams_keeps_what_was_written(
        tools: Tools, plugins: PluginManager) -> None:
    chat, _ = make_chat(["The answer is long and streams slowly."], tools, plugins)
    for event in chat.send("hi"):
        if isinstance(event, TextEvent):
            break
    assert [m.role for m in chat.history] == ["user", "assistant"]
    assert "The answer is long".startswith(chat.history[1].content)


def test_interrupt_inside_a_tool_propagates_and_keeps_the_history_whole(
        tools: Tools, plugins: PluginManager) -> None:
    @tool
    def interrupted() -> str:
        _thread.interrupt_main()  # the user's Ctrl-C, delivered as Python delivers SIGINT
        time.sleep(5)
        return "not reached"

    chat = Chat(ScriptedBackend([call("interrupted") + call("search", query="x")],
                                plugins=plugins),
                [interrupted, tools.search], plugins=plugins, tool_timeout=None)
    with pytest.raises(KeyboardInterrupt):
        list(chat.send("go"))
    assert_every_call_answered(chat.history)
    assert [m.role for m in chat.history] == ["user", "assistant", "tool", "tool"]


# -- backend failures ------------------------------------------------------------------


class FailingBackend:
    """Streams some text, then raises (a backend must not, but one may)."""

    name = "failing"

    def __init__(self) -> None:
        self.requests: list[ModelRequest] = []

    def stream_turn(self, request: ModelRequest, cancel: CancelToken) -> Iterator[Any]:
        self.requests.append(request)
        yield TextEvent("partial ")
        raise ConnectionResetError("peer went away")

    def make_call_id(self, index: int) -> str:
        return f"call_{index}"


def test_backend_that_raises_ends_the_reply_with_an_error_and_keeps_the_chat_usable(
        tools: Tools, plugins: PluginManager) -> None:
    backend = FailingBackend()
    chat = Chat(backend, tools.all(), plugins=plugins)
    events = list(chat.send("hi"))
    (error,) = of_type(events, ErrorEvent)
    assert error.kind == "backend" and "ConnectionResetError: peer went away" in error.message
    assert events[-1].reason == "error"
    assert [(m.role, m.content) for m in chat.history] == [("user", "hi"),
                                                           ("assistant", "partial ")]
    list(chat.send("again"))
    assert [m.role for m in backend.requests[1].messages] == ["user", "assistant", "user"]


def test_backend_error_after_a_tool_round_loses_no_result(tools: Tools,
                                                         plugins: PluginManager) -> None:
    def broken(request: ModelRequest) -> str:
        raise TimeoutError("read timed out")

    chat, _ = make_chat([call("search", query="a"), broken], tools, plugins)
    events = list(chat.send("find"))
    assert of_type(events, ErrorEvent)[0].kind == "backend"
    assert events[-1].reason == "error"
    assert [m.role for m in chat.history] == ["user", "assistant", "tool", "assistant"]
    assert chat.history[2].content == "hits for a"
    assert_every_call_answered(chat.history)
    assert_every_call_answered(from_stored(chat.save()))


def test_backend_error_event_drops_the_turns_calls(tools: Tools, plugins: PluginManager) -> None:
    class ErrorMidCall:
        name = "error-mid-call"

        def stream_turn(self, request: ModelRequest, cancel: CancelToken) -> Iterator[Any]:
            yield ToolCallEndEvent("search", {"query": "x"})
            yield ErrorEvent("stream_cut", "the connection closed mid-reply")
            yield TurnEnd("error")

        def make_call_id(self, index: int) -> str:
            return "call_x"

    chat = Chat(ErrorMidCall(), tools.all(), plugins=plugins)
    events = list(chat.send("hi"))
    assert tools.ran == []
    assert events[-1].reason == "error"
    assert chat.history[-1].tool_calls == ()


def test_a_backend_that_yields_the_loops_own_tool_call_event_ends_the_turn_with_an_error(
        tools: Tools, plugins: PluginManager) -> None:
    class WrongBackend:  # a call the model wrote is a tool_call_end; tool_call is the loop's
        name = "wrong"

        def stream_turn(self, request: ModelRequest, cancel: CancelToken) -> Iterator[Any]:
            yield ToolCallEvent("search", {"query": "x"})
            yield TurnEnd("stop")

        def make_call_id(self, index: int) -> str:
            return f"call_{index}"

    events = list(Chat(WrongBackend(), tools.all(), plugins=plugins).send("hi"))
    assert tools.ran == []
    errors = [e for e in events if isinstance(e, ErrorEvent)]
    assert [e.kind for e in errors] == ["backend"] and "tool_call_end" in errors[0].message
    assert not any(e.type == "tool_call" for e in events)
    assert events[-1].reason == "error"


# -- history replay ----------------------------------------------------------------------


STORED = [
    {"role": "user", "content": "find alex"},
    {"role": "tool", "tool_name": "search", "tool_args": {"query": "alex"},
     "content": "3 hits"},
    {"role": "assistant", "content": "Found 3."},
]


def test_stored_tool_exchange_replays_as_call_then_result(tools: Tools,
                                                         plugins: PluginManager) -> None:
    def reply(request: ModelRequest) -> str:
        messages = request.messages
        assert [m.role for m in messages] == ["system", "user", "assistant", "tool",
                                              "assistant", "user"]
        (replayed,) = messages[2].tool_calls
        assert (replayed.name, dict(replayed.arguments)) == ("search", {"query": "alex"})
        assert messages[3].tool_call_id == replayed.id and messages[3].content == "3 hits"
        return "again 3"

    backend = ScriptedBackend([reply], plugins=plugins)
    chat = Chat(backend, tools.all(), plugins=plugins, system_prompt="Be brief.")
    chat.load(STORED)
    assert chat.ask("and again?") == "again 3"
    assert len(backend.requests) == 1


def test_history_given_to_the_constructor_is_replayed(tools: Tools,
                                                      plugins: PluginManager) -> None:
    chat, backend = make_chat(["ok"], tools, plugins, history=from_stored(STORED))
    chat.ask("more")
    assert [m.role for m in backend.requests[0].messages] == ["user", "assistant", "tool",
                                                              "assistant", "user"]


def test_saved_conversation_loads_back_into_the_same_messages(
        tools: Tools, plugins: PluginManager) -> None:
    chat, _ = make_chat([call("search", query="a") + call("search", query="b"), "done"], tools,
                        plugins)
    list(chat.send("find"))
    other, _ = make_chat([], tools, plugins)
    other.load(chat.save())
    assert other.history == chat.history


# -- observation hooks -------------------------------------------------------------------


class Observer:
    def __init__(self) -> None:
        self.seen: list[tuple[Any, ...]] = []

    @toolwire.hookimpl
    def on_tool_call(self, name: str, arguments: Any, call_id: str) -> None:
        self.seen.append(("call", name, dict(arguments), call_id))

    @toolwire.hookimpl
    def on_tool_result(self, name: str, call_id: str, content: str, is_error: bool) -> None:
        self.seen.append(("result", name, content, is_error, call_id))


class BrokenObserver:
    @toolwire.hookimpl
    def on_tool_call(self, name: str) -> None:
        raise RuntimeError("dashboard is down")


def test_observation_hooks_see_each_call_and_its_result(tools: Tools) -> None:
    observer = Observer()
    plugins = isolated_plugin_manager(observer)
    chat, _ = make_chat([call("search", query="a") + call("nope"), "ok"], tools, plugins)
    list(chat.send("hi"))
    ids = [c.id for c in chat.history[1].tool_calls]
    assert observer.seen == [
        ("call", "search", {"query": "a"}, ids[0]),
        ("result", "search", "hits for a", False, ids[0]),
        ("call", "nope", {}, ids[1]),
        ("result", "nope", chat.history[3].content, True, ids[1]),
    ]


def test_raising_observer_is_only_a_warning(tools: Tools) -> None:
    plugins = isolated_plugin_manager(BrokenObserver())
    chat, _ = make_chat([call("search", query="a"), "ok"], tools, plugins)
    with pytest.warns(PluginWarning, match="BrokenObserver.*dashboard is down"):
        answer = chat.ask("hi")
    assert answer == "ok"
    assert tools.ran == [("search", {"query": "a", "limit": 10})]


# -- asyncio -----------------------------------------------------------------------------


def test_asend_yields_the_same_events_as_send(tools: Tools, plugins: PluginManager) -> None:
    replies = [call("search", query="a"), "done"]
    sync_chat, _ = make_chat(replies, tools, plugins)
    sync_types = [e.type for e in sync_chat.send("hi")]

    async def collect() -> list[Event]:
        chat, _ = make_chat(replies, tools, plugins)
        return [e async for e in chat.asend("hi")]

    events = asyncio.run(collect())
    assert [e.type for e in events] == sync_types
    assert events[-1].reason == "stop"


def test_leaving_asend_early_cancels_and_keeps_the_history_whole(
        tools: Tools, plugins: PluginManager) -> None:
    token = CancelToken()
    entered = threading.Event()

    @tool
    def wait_for_stop() -> str:
        entered.set()
        token.wait(5)
        return "stopped waiting"

    chat = Chat(ScriptedBackend([call("wait_for_stop") + call("search", query="x"), "never"],
                                plugins=plugins), [wait_for_stop, tools.search], plugins=plugins)

    async def main() -> None:
        async with contextlib.aclosing(chat.asend("go", cancel=token)) as events:
            async for event in events:
                if isinstance(event, ToolCallEvent):
                    assert await asyncio.to_thread(entered.wait, 5)
                    break
        # closed: the worker has finished and the history is settled
        assert token.cancelled
        assert_every_call_answered(chat.history)
        assert [m.role for m in chat.history] == ["user", "assistant", "tool", "tool"]

    asyncio.run(main())
    assert tools.ran == []
    assert chat.history[2].content == "stopped waiting"


def test_plain_break_out_of_asend_settles_by_the_end_of_the_event_loop(
        tools: Tools, plugins: PluginManager) -> None:
    token = CancelToken()
    chat, _ = make_chat([call("search", query="a"), "never"], tools, plugins)

    async def main() -> None:
        async for event in chat.asend("go", cancel=token):
            if isinstance(event, ToolCallStartEvent):
                break

    asyncio.run(main())
    assert token.cancelled
    assert_every_call_answered(chat.history)
    assert chat.history[0] == Message.user("go")


def test_asend_raises_what_the_loop_raises(tools: Tools, plugins: PluginManager) -> None:
    chat, _ = make_chat(["one", "two"], tools, plugins)
    running = chat.send("first")
    next(running)

    async def main() -> None:
        async for _ in chat.asend("second"):
            pass

    with pytest.raises(RuntimeError, match="already answering"):
        asyncio.run(main())
    running.close()
