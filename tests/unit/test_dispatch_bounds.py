"""Dispatch stays bounded whatever a tool returns, how long it hangs, or how deep the
arguments nest (issue 23, item 9)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from toolwire import Chat, ToolBusyError, ToolResultEvent, tool
from toolwire.conversation.dispatch import (
    DEFAULT_MAX_OUTPUT_CHARS,
    MAX_ARGUMENT_DEPTH,
    Dispatcher,
    format_tool_output,
    limit_output,
)
from toolwire.conversation.tool_threads import ToolThreadPool
from toolwire.testing import ScriptedBackend, isolated_plugin_manager
from toolwire.vocabulary.history import ToolCall
from toolwire.vocabulary.tools import ToolRegistry


def nested(depth: int) -> Any:
    value: Any = "leaf"
    for level in range(depth):
        value = [value] if level % 2 else {"k": value}
    return value


@tool(read_only=True)
def take(data: Any = None) -> str:
    """Accept anything.

    :param data: anything
    """
    return "taken"


# ---------------------------------------------------------------------------
# Output.


def test_a_50_mb_result_is_cut_with_a_note_in_history_and_events() -> None:
    @tool(read_only=True)
    def dump() -> str:
        """Return a lot."""
        return "x" * 50_000_000

    plugins = isolated_plugin_manager()
    call = "<tool_call>\n<function=dump>\n</function>\n</tool_call>"
    chat = Chat(ScriptedBackend([call, "Done."], plugins=plugins), [dump], plugins=plugins)
    events = list(chat.send("dump it"))
    (result,) = [e for e in events if isinstance(e, ToolResultEvent)]
    limit = DEFAULT_MAX_OUTPUT_CHARS
    assert result.content.startswith("x" * limit + "\n[truncated: the tool returned "
                                     "50,000,000 characters; only the first 100,000 are shown]")
    assert len(result.content) < limit + 200
    assert chat.history[2].content == result.content


def test_an_error_message_is_cut_too() -> None:
    @tool(read_only=True)
    def loud() -> str:
        """Fail loudly."""
        raise ValueError("e" * 1_000_000)

    dispatcher = Dispatcher(ToolRegistry([loud]), max_output_chars=1000)
    result = dispatcher.dispatch(ToolCall("c1", "loud", {}))
    assert result.is_error and result.error_kind == "tool_error"
    assert "[truncated: the tool returned" in result.content
    assert len(result.content) < 1200


@given(text=st.text(max_size=300), limit=st.integers(0, 200))
def test_a_cut_result_keeps_its_beginning_and_says_how_long_it_was(text: str,
                                                                   limit: int) -> None:
    out = limit_output(text, limit)
    if len(text) <= limit:
        assert out == text
    else:
        assert out.startswith(text[:limit])
        assert out.endswith(f"the tool returned {len(text):,} characters; "
                            f"only the first {limit:,} are shown]")
    assert limit_output(text, None) == text


def test_a_result_nested_too_deeply_to_show_says_so() -> None:
    assert format_tool_output(nested(5000)) == \
        "(the tool returned a list nested too deeply to show)"


# ---------------------------------------------------------------------------
# Arguments.


def test_a_5000_deep_argument_is_refused_without_recursion_error() -> None:
    dispatcher = Dispatcher(ToolRegistry([take]))
    result = dispatcher.dispatch(ToolCall("c1", "take", {"data": nested(5000)}))
    assert result.is_error and result.error_kind == "invalid_arguments"
    assert f"nested more than {MAX_ARGUMENT_DEPTH} levels deep" in result.content


@settings(max_examples=80, deadline=None)
@given(depth=st.integers(0, 3000), name=st.sampled_from(["take", "missing"]),
       timeout=st.sampled_from([None, 5.0]))
def test_dispatch_never_raises_whatever_the_arguments_nest(depth: int, name: str,
                                                           timeout: float | None) -> None:
    dispatcher = Dispatcher(ToolRegistry([take]), timeout=timeout)
    result = dispatcher.dispatch(ToolCall("c1", name, {"data": nested(depth)}))
    if name == "missing":
        assert result.error_kind == "unknown_tool"
    elif depth < MAX_ARGUMENT_DEPTH:
        assert result.content == "taken"
    else:
        assert result.error_kind == "invalid_arguments"


# ---------------------------------------------------------------------------
# Threads of timed-out calls.


@pytest.fixture
def release() -> Iterator[threading.Event]:
    event = threading.Event()
    yield event
    event.set()  # let every hung tool of the test return


def hanging_tool(release: threading.Event) -> Any:
    @tool(read_only=True, timeout=0.05)
    def hang() -> str:
        """Wait until released."""
        release.wait(30)
        return "released"

    return hang


def test_hung_calls_fill_a_bounded_pool_which_then_says_it_is_exhausted(
        release: threading.Event) -> None:
    pool = ToolThreadPool(max_threads=2)
    dispatcher = Dispatcher(ToolRegistry([hanging_tool(release), take]), threads=pool)
    kinds = [dispatcher.dispatch(ToolCall(f"c{i}", "hang", {})).error_kind for i in range(2)]
    assert kinds == ["timeout", "timeout"]
    assert pool.threads == 2 and pool.stuck == 2
    busy = dispatcher.dispatch(ToolCall("c3", "take", {}))
    assert busy.is_error and busy.error_kind == "busy"
    assert "all 2 are still running calls that timed out" in busy.content
    assert pool.threads == 2  # no thread was started past the bound
    release.set()
    for _ in range(200):
        if pool.stuck == 0:
            break
        threading.Event().wait(0.01)
    assert dispatcher.dispatch(ToolCall("c4", "take", {})).content == "taken"


def test_a_call_waits_for_a_thread_that_is_merely_busy(release: threading.Event) -> None:
    pool = ToolThreadPool(max_threads=1)
    started = threading.Event()

    @tool(read_only=True, timeout=10)
    def slow() -> str:
        """Finish once released."""
        started.set()
        release.wait(10)
        return "slow done"

    dispatcher = Dispatcher(ToolRegistry([slow, take]), threads=pool)
    results: list[str] = []
    first = threading.Thread(target=lambda: results.append(
        dispatcher.dispatch(ToolCall("c1", "slow", {})).content))
    first.start()
    started.wait(5)
    threading.Timer(0.1, release.set).start()
    assert dispatcher.dispatch(ToolCall("c2", "take", {})).content == "taken"
    first.join(5)
    assert results == ["slow done"] and pool.threads == 1


def test_a_call_that_never_got_a_thread_says_so(release: threading.Event) -> None:
    pool = ToolThreadPool(max_threads=1)

    @tool(read_only=True, timeout=10)
    def slow() -> str:
        """Finish once released."""
        release.wait(10)
        return "slow done"

    @tool(read_only=True, timeout=0.05)
    def quick() -> str:
        """Return at once."""
        return "quick"

    dispatcher = Dispatcher(ToolRegistry([slow, quick]), threads=pool)
    first = threading.Thread(target=lambda: dispatcher.dispatch(ToolCall("c1", "slow", {})))
    first.start()
    threading.Event().wait(0.05)
    result = dispatcher.dispatch(ToolCall("c2", "quick", {}))
    assert result.error_kind == "timeout"
    assert "did not start within 0.05 seconds: all 1 tool threads were busy" in result.content
    release.set()
    first.join(5)


def test_the_pool_refuses_only_when_every_thread_runs_an_abandoned_call(
        release: threading.Event) -> None:
    pool = ToolThreadPool(max_threads=1)
    started = threading.Event()

    def hang() -> None:
        started.set()
        release.wait(30)

    job = pool.submit(hang)
    assert started.wait(5)
    queued = pool.submit(lambda: "later")  # busy, not abandoned: it waits its turn
    assert pool.abandon(job) is True and pool.stuck == 1
    with pytest.raises(ToolBusyError, match="all 1 are still running calls"):
        pool.submit(lambda: None)
    release.set()
    assert queued.done.wait(5) and queued.value == "later"
