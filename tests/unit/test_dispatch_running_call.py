"""What a running tool learns about its call, and a cancellation while it runs."""

from __future__ import annotations

import threading
import time

import toolwire
from toolwire import CancelToken, Chat, Dispatcher, ToolCall, ToolRegistry, ToolResultEvent
from toolwire.conversation.dispatch import RunningCall, current_call
from toolwire.testing.scripted import ScriptedBackend

seen: list[RunningCall | None] = []
release = threading.Event()


@toolwire.tool
def observe(word: str) -> str:
    """Record what the dispatcher tells the tool."""
    seen.append(current_call())
    return word


@toolwire.tool
def blocks(word: str) -> str:
    """Wait until released (or 5 s)."""
    release.wait(5)
    return word


def setup_function() -> None:
    seen.clear()
    release.clear()


def test_current_call_is_none_outside_a_dispatch() -> None:
    assert current_call() is None
    assert observe.function(word="x") == "x"
    assert seen == [None]


def test_a_tool_run_with_a_timeout_sees_its_call_deadline_and_cancel_token() -> None:
    token = CancelToken()
    call = ToolCall("c1", "observe", {"word": "hi"})
    before = time.monotonic()
    result = Dispatcher(ToolRegistry([observe]), timeout=30).dispatch(call, cancel=token)
    assert result.content == "hi" and not result.is_error
    running = seen[0]
    assert running is not None
    assert running.call == call and running.cancel is token
    assert running.deadline is not None and before + 29 < running.deadline <= before + 31
    remaining = running.remaining()
    assert remaining is not None and 0 < remaining <= 30
    assert current_call() is None  # the dispatching thread's context is left as it was


def test_a_tool_run_inline_sees_no_deadline_but_the_token() -> None:
    token = CancelToken()
    Dispatcher(ToolRegistry([observe]), timeout=None).dispatch(
        ToolCall("c1", "observe", {"word": "hi"}), cancel=token)
    running = seen[0]
    assert running is not None and running.deadline is None and running.remaining() is None
    assert running.cancel is token


def test_cancelling_while_a_tool_runs_stops_the_wait_with_a_cancelled_result() -> None:
    token = CancelToken()
    threading.Timer(0.2, token.cancel).start()
    started = time.monotonic()
    result = Dispatcher(ToolRegistry([blocks]), timeout=30).dispatch(
        ToolCall("c1", "blocks", {"word": "x"}), cancel=token)
    elapsed = time.monotonic() - started
    release.set()
    assert result.is_error and result.error_kind == "cancelled"
    assert "cancelled" in result.content and "'blocks'" in result.content
    assert elapsed < 5


def test_a_call_finishing_before_a_cancel_keeps_its_result() -> None:
    token = CancelToken()
    result = Dispatcher(ToolRegistry([observe]), timeout=30).dispatch(
        ToolCall("c1", "observe", {"word": "kept"}), cancel=token)
    token.cancel()
    assert result.content == "kept" and not result.is_error


def test_the_chat_loop_hands_its_cancel_token_to_the_running_tool() -> None:
    call = "<tool_call>\n<function=blocks>\n<parameter=word>\nx\n</parameter>\n</function>\n" \
           "</tool_call>"
    chat = Chat(ScriptedBackend([call, "never"]), tools=[blocks], tool_timeout=30)
    token = CancelToken()
    events = []
    for event in chat.send("go", cancel=token):
        events.append(event)
        if event.type == "tool_call":
            threading.Timer(0.2, token.cancel).start()
    release.set()
    result = next(e for e in events if isinstance(e, ToolResultEvent))
    assert result.is_error and result.error_kind == "cancelled"
    assert events[-1].type == "done" and events[-1].reason == "cancelled"
    assert [m.role for m in chat.history] == ["user", "assistant", "tool"]
