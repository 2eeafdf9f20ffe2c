"""Dispatch and validation: every failure is a tool result the model can act on."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import threading
import time
from typing import Any, Literal

import pytest
from hypothesis import given
from hypothesis import strategies as st

import toolwire.conversation.dispatch
from toolwire import Dispatcher, DispatchResult, ToolCall, ToolRegistry, tool
from toolwire.errors import ToolArgumentsError

ran: list[tuple[str, dict[str, Any]]] = []


@pytest.fixture(autouse=True)
def _clear_ran() -> None:
    ran.clear()


@tool(read_only=True)
def search(query: str, limit: int = 10, order: Literal["new", "old"] = "new") -> str:
    """Search the notes."""
    ran.append(("search", {"query": query, "limit": limit, "order": order}))
    return f"{limit} hits for {query}"


@tool
def write_note(path: str, text: str, workspace: Any = None) -> str:
    """Write a note."""
    ran.append(("write_note", {"path": path, "text": text, "workspace": workspace}))
    return f"wrote {path} in {workspace}"


def dispatch(name: str, dispatcher: Dispatcher | None = None, **arguments: Any) -> DispatchResult:
    dispatcher = dispatcher or Dispatcher(ToolRegistry([search, write_note]), workspace="/ws")
    return dispatcher.dispatch(ToolCall("call_1", name, arguments))


def test_valid_call_runs_the_tool_and_returns_its_text() -> None:
    result = dispatch("search", query="alex", limit=3)
    assert result == DispatchResult(ToolCall("call_1", "search", {"query": "alex", "limit": 3}),
                                    "3 hits for alex")
    assert ran == [("search", {"query": "alex", "limit": 3, "order": "new"})]


def test_model_supplied_workspace_is_replaced_by_the_sessions() -> None:
    result = dispatch("write_note", path="a.md", text="hi", workspace="/etc")
    assert not result.is_error
    assert ran[0][1]["workspace"] == "/ws"
    assert result.content == "wrote a.md in /ws"


def test_model_supplied_workspace_is_dropped_even_for_tools_without_one() -> None:
    result = dispatch("search", query="x", workspace="/etc")
    assert not result.is_error, result.content
    assert ran == [("search", {"query": "x", "limit": 10, "order": "new"})]


def test_missing_required_argument_is_returned_to_the_model() -> None:
    result = dispatch("write_note", path="a.md")
    assert result.is_error and result.error_kind == "invalid_arguments"
    assert "missing required parameter 'text'" in result.content
    assert "write_note" in result.content
    assert "path: string, text: string" in result.content  # how to call it correctly
    assert ran == []


def test_unknown_parameter_is_named_with_the_expected_ones() -> None:
    result = dispatch("search", query="x", sort="date")
    assert result.is_error and result.error_kind == "invalid_arguments"
    assert "unknown parameter 'sort'" in result.content
    assert "expected: query, limit, order" in result.content
    assert ran == []


def test_wrong_type_names_the_parameter_the_type_and_the_value() -> None:
    result = dispatch("search", query="x", limit="ten")
    assert result.is_error and result.error_kind == "invalid_arguments"
    assert "parameter 'limit' must be of type integer, got str \"ten\"" in result.content
    assert ran == []


def test_value_outside_an_enum_lists_the_allowed_values() -> None:
    result = dispatch("search", query="x", order="random")
    assert "parameter 'order' must be one of ['new', 'old']" in result.content
    assert '"random"' in result.content


def test_every_problem_of_a_call_is_reported_at_once() -> None:
    result = dispatch("write_note", path=3, colour="red")
    for words in ("missing required parameter 'text'", "unknown parameter 'colour'",
                  "parameter 'path' must be of type string"):
        assert words in result.content


def test_arguments_error_keeps_each_problem_for_callers() -> None:
    dispatcher = Dispatcher(ToolRegistry([search]))
    with pytest.raises(ToolArgumentsError) as info:
        dispatcher.check(ToolCall("c", "search", {"limit": True}))
    assert info.value.tool == "search"
    assert len(info.value.problems) == 2


def test_nested_type_error_names_the_path() -> None:
    @tool
    def tag(names: list[str]) -> str:
        return ",".join(names)

    result = dispatch("tag", Dispatcher(ToolRegistry([tag])), names=["a", 2])
    assert "parameter 'names.1' must be of type string, got int 2" in result.content


def test_validator_is_compiled_once_per_tool(monkeypatch: pytest.MonkeyPatch) -> None:
    compiled: list[Any] = []
    real = toolwire.conversation.dispatch.validator_for

    def counting(schema: Any, *args: Any, **kwargs: Any) -> Any:
        compiled.append(schema)
        return real(schema, *args, **kwargs)

    monkeypatch.setattr(toolwire.conversation.dispatch, "validator_for", counting)
    dispatcher = Dispatcher(ToolRegistry([search, write_note]))
    for _ in range(3):
        dispatch("search", dispatcher, query="x")
        dispatch("search", dispatcher, limit="bad")
        dispatch("write_note", dispatcher, path="p", text="t")
    # at most once per tool; write_note's arguments were always valid, so its
    # jsonschema validator (needed only to explain a failure) may never be built
    names = [json.dumps(s, sort_keys=True) for s in compiled]
    assert len(names) == len(set(names)) and 1 <= len(names) <= 2


def test_unknown_tool_is_named_and_the_available_tools_listed() -> None:
    result = dispatch("delete_everything", query="x")
    assert result.is_error and result.error_kind == "unknown_tool"
    assert "no tool named 'delete_everything'" in result.content
    assert "Available tools: search, write_note" in result.content


def test_tool_exception_becomes_an_error_result_with_its_message() -> None:
    @tool
    def fragile(path: str) -> str:
        raise FileNotFoundError(f"no such file: {path}")

    result = dispatch("fragile", Dispatcher(ToolRegistry([fragile])), path="x.md")
    assert result.is_error and result.error_kind == "tool_error"
    assert "FileNotFoundError: no such file: x.md" in result.content


def test_tool_exception_is_caught_when_tools_run_inline_too() -> None:
    @tool
    def fragile() -> str:
        raise RuntimeError("boom")

    result = dispatch("fragile", Dispatcher(ToolRegistry([fragile]), timeout=None))
    assert result.error_kind == "tool_error" and "RuntimeError: boom" in result.content


def test_tool_may_raise_an_arguments_error_that_reaches_the_model_verbatim() -> None:
    @tool
    def open_file(path: str) -> str:
        raise ToolArgumentsError("path must be relative to the workspace", tool="open_file")

    result = dispatch("open_file", Dispatcher(ToolRegistry([open_file])), path="/abs")
    assert result.error_kind == "invalid_arguments"
    assert result.content == "Error: path must be relative to the workspace"


class Point:
    def __init__(self, x: int, y: int) -> None:
        self.x, self.y = x, y

    def __str__(self) -> str:
        return f"Point({self.x}, {self.y})"


@pytest.mark.parametrize("value, text", [
    ({"hits": [1, 2], "more": False}, '{"hits": [1, 2], "more": false}'),
    ([("a", 1)], '[["a", 1]]'),
    (42, "42"),
    (None, "(the tool returned nothing)"),
    (b"bytes \xc3\xa9", "bytes é"),
    ({"naïve"}, '["naïve"]'),
    (Point(1, 2), "Point(1, 2)"),  # not JSON: its str()
])
def test_non_string_return_values_become_text(value: Any, text: str) -> None:
    @tool
    def give() -> Any:
        return value

    result = dispatch("give", Dispatcher(ToolRegistry([give])))
    assert not result.is_error
    assert result.content == text


def test_return_value_that_cannot_become_text_is_a_tool_error() -> None:
    class Unprintable:
        def __str__(self) -> str:
            raise ValueError("no text form")

    @tool
    def give() -> Any:
        return Unprintable()

    result = dispatch("give", Dispatcher(ToolRegistry([give])))
    assert result.error_kind == "tool_error" and "no text form" in result.content


def test_tool_hanging_past_its_timeout_returns_a_timeout_result() -> None:
    release = threading.Event()

    @tool(timeout=0.05)
    def hang() -> str:
        release.wait(120)
        return "late"

    started = time.perf_counter()
    result = dispatch("hang", Dispatcher(ToolRegistry([hang]), timeout=60))
    release.set()
    assert time.perf_counter() - started < 30  # neither the 120 s hang nor the 60 s default
    assert result.is_error and result.error_kind == "timeout"
    assert "did not finish within 0.05 seconds" in result.content


def test_session_timeout_applies_to_tools_without_their_own() -> None:
    release = threading.Event()

    @tool
    def hang() -> str:
        release.wait(10)
        return "late"

    result = dispatch("hang", Dispatcher(ToolRegistry([hang]), timeout=0.05))
    release.set()
    assert result.error_kind == "timeout"


def test_hung_tools_do_not_delay_later_calls() -> None:
    release = threading.Event()

    @tool(timeout=0.02)
    def hang() -> str:
        release.wait(10)
        return "late"

    @tool
    def quick() -> str:
        return "ok"

    # a quick tool queued behind the hung ones would wait out its own timeout and fail
    dispatcher = Dispatcher(ToolRegistry([hang, quick]), timeout=30.0)
    try:
        for _ in range(6):
            assert dispatch("hang", dispatcher).error_kind == "timeout"
        assert dispatch("quick", dispatcher).content == "ok"
    finally:
        release.set()


@pytest.mark.process
def test_a_hung_tool_does_not_keep_the_process_from_exiting() -> None:
    script = textwrap.dedent("""
        import threading
        from toolwire import Dispatcher, ToolCall, ToolRegistry, tool

        @tool(timeout=0.05)
        def hang() -> str:
            threading.Event().wait()
            return "never"

        result = Dispatcher(ToolRegistry([hang])).dispatch(ToolCall("c", "hang", {}))
        print(result.error_kind)
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=20)
    assert done.stdout.strip() == "timeout", done.stderr


def test_tool_runs_with_the_callers_context_variables() -> None:
    import contextvars

    request_id: contextvars.ContextVar[str] = contextvars.ContextVar("request_id")

    @tool
    def whoami() -> str:
        return request_id.get("unset")

    request_id.set("r-17")
    assert dispatch("whoami", Dispatcher(ToolRegistry([whoami]))).content == "r-17"


def test_write_tool_in_read_only_mode_is_refused_by_name_and_not_run() -> None:
    dispatcher = Dispatcher(ToolRegistry([search, write_note]), read_only=True)
    result = dispatch("write_note", dispatcher, path="a.md", text="hi")
    assert result.is_error and result.error_kind == "read_only"
    assert "'write_note'" in result.content and "read-only" in result.content
    assert ran == []


def test_read_only_mode_offers_only_read_only_schemas() -> None:
    dispatcher = Dispatcher(ToolRegistry([search, write_note]), read_only=True)
    assert [t.name for t in dispatcher.offered_tools()] == ["search"]
    result = dispatch("nope", dispatcher)
    assert "Available tools: search." in result.content


def test_read_only_mode_still_runs_read_only_tools() -> None:
    dispatcher = Dispatcher(ToolRegistry([search, write_note]), read_only=True)
    assert not dispatch("search", dispatcher, query="q").is_error
    assert ran[0][0] == "search"


_SIMPLE = st.sampled_from([{"type": t} for t in ("string", "integer", "number", "boolean",
                                                  "null", "object")]
                          + [{"type": "array", "items": {"type": "integer"}},
                             {"type": ["string", "null"]}, {"type": "array"}])
_VALUES = st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False)
                       | st.text(max_size=5),
                       lambda inner: st.lists(inner, max_size=3)
                       | st.dictionaries(st.text(max_size=3), inner, max_size=2), max_leaves=5)


@given(props=st.dictionaries(st.sampled_from("abcd"), _SIMPLE, max_size=4),
       args=st.dictionaries(st.sampled_from("abcde"), _VALUES, max_size=4))
def test_fast_validity_check_never_accepts_what_jsonschema_rejects(
        props: dict[str, Any], args: dict[str, Any]) -> None:
    from jsonschema import Draft202012Validator

    from toolwire.conversation.dispatch import _compile_fast_check

    schema = {"type": "object", "properties": props}
    fast = _compile_fast_check(schema)
    assert fast is not None
    if fast(args):
        assert set(args) <= set(props)
        assert Draft202012Validator(schema).is_valid(args)
