"""Approval before a write: the approver of a Chat (and of a Dispatcher) decides whether a
call of a tool that is not read-only runs; a denial becomes the tool's result."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

import pytest

from toolwire import (
    Approval,
    ApprovalRequest,
    CancelToken,
    Chat,
    Dispatcher,
    ToolCall,
    ToolRegistry,
    ToolResultEvent,
    tool,
)
from toolwire.hooks.manager import PluginManager
from toolwire.testing import ScriptedBackend, isolated_plugin_manager


def call(name: str, **params: Any) -> str:
    body = "".join(f"<parameter={k}>\n{v}\n</parameter>\n" for k, v in params.items())
    return f"<tool_call>\n<function={name}>\n{body}</function>\n</tool_call>"


class Workspace:
    """A read tool and a write tool that record what ran."""

    def __init__(self) -> None:
        self.written: list[str] = []

        @tool(read_only=True)
        def look(path: str) -> str:
            """Read a note."""
            return f"contents of {path}"

        @tool
        def write_note(path: str, workspace: Any = None) -> str:
            """Write a note."""
            self.written.append(path)
            return "written"

        self.tools = [look, write_note]


class Answers:
    """An approver that replays answers and records what it was asked."""

    def __init__(self, *answers: Approval) -> None:
        self.answers = list(answers)
        self.asked: list[ApprovalRequest] = []

    def __call__(self, request: ApprovalRequest) -> Approval:
        self.asked.append(request)
        return self.answers.pop(0)


@pytest.fixture(scope="module")
def plugins() -> PluginManager:
    return isolated_plugin_manager()


def run(chat: Chat, message: str) -> list[ToolResultEvent]:
    return [e for e in chat.send(message) if isinstance(e, ToolResultEvent)]


def make_chat(replies: Sequence[str], ws: Workspace, plugins: PluginManager,
              approver: Any) -> Chat:
    return Chat(ScriptedBackend(replies, plugins=plugins), ws.tools, plugins=plugins,
                workspace="/ws", approve=approver)


def test_a_denied_write_is_not_run_and_its_refusal_is_the_result(
        plugins: PluginManager) -> None:
    ws = Workspace()
    approver = Answers(Approval.DENY)
    chat = make_chat([call("write_note", path="a.md"), "I did not write it."], ws, plugins,
                     approver)
    results = run(chat, "write a.md")
    assert ws.written == []
    assert [(r.is_error, r.error_kind) for r in results] == [(True, "denied")]
    assert "did not allow" in results[0].content and "write_note" in results[0].content
    tool_message = next(m for m in chat.history if m.role == "tool")
    assert tool_message.is_error and tool_message.content == results[0].content


def test_the_approver_sees_the_validated_call_without_the_session_workspace(
        plugins: PluginManager) -> None:
    ws = Workspace()
    approver = Answers(Approval.APPROVE)
    chat = make_chat([call("write_note", path="a.md"), "Done."], ws, plugins, approver)
    results = run(chat, "write a.md")
    assert ws.written == ["a.md"] and not results[0].is_error
    request = approver.asked[0]
    assert request.tool.name == "write_note" and request.call.name == "write_note"
    assert dict(request.call.arguments) == {"path": "a.md"}
    assert request.call.id == results[0].id


def test_read_only_tools_never_ask(plugins: PluginManager) -> None:
    ws = Workspace()
    approver = Answers()
    chat = make_chat([call("look", path="a.md"), "Read."], ws, plugins, approver)
    results = run(chat, "read a.md")
    assert approver.asked == [] and results[0].content == "contents of a.md"


def test_always_approves_later_calls_of_that_tool_without_asking(
        plugins: PluginManager) -> None:
    ws = Workspace()
    approver = Answers(Approval.ALWAYS)
    chat = make_chat([call("write_note", path="a.md") + "\n" + call("write_note", path="b.md"),
                      "Both.", call("write_note", path="c.md"), "Third."], ws, plugins,
                     approver)
    run(chat, "write two")
    run(chat, "and one more")
    assert ws.written == ["a.md", "b.md", "c.md"]
    assert len(approver.asked) == 1
    assert chat.dispatcher.approval is not None
    assert chat.dispatcher.approval.always_approved == frozenset({"write_note"})


def test_approve_asks_again_for_the_next_call(plugins: PluginManager) -> None:
    ws = Workspace()
    approver = Answers(Approval.APPROVE, Approval.DENY)
    chat = make_chat([call("write_note", path="a.md") + "\n" + call("write_note", path="b.md"),
                      "One of two."], ws, plugins, approver)
    results = run(chat, "write two")
    assert ws.written == ["a.md"]
    assert [r.error_kind for r in results] == [None, "denied"]


def test_an_approver_that_raises_denies_the_call(plugins: PluginManager) -> None:
    ws = Workspace()

    def broken(request: ApprovalRequest) -> Approval:
        raise RuntimeError("the terminal went away")

    chat = make_chat([call("write_note", path="a.md"), "Not written."], ws, plugins, broken)
    results = run(chat, "write a.md")
    assert ws.written == [] and results[0].error_kind == "denied"
    assert "the terminal went away" in results[0].content


@pytest.mark.parametrize("answer", [True, "yes", None])
def test_an_answer_that_is_not_an_approval_denies(plugins: PluginManager, answer: Any) -> None:
    ws = Workspace()
    chat = make_chat([call("write_note", path="a.md"), "No."], ws, plugins,
                     lambda request: answer)
    assert run(chat, "write a.md")[0].error_kind == "denied" and ws.written == []


def test_invalid_and_read_only_refusals_come_before_asking(plugins: PluginManager) -> None:
    ws = Workspace()
    approver = Answers()
    chat = make_chat([call("write_note", wrong="x"), "Bad call."], ws, plugins, approver)
    assert run(chat, "write")[0].error_kind == "invalid_arguments"
    chat = Chat(ScriptedBackend([call("write_note", path="a.md"), "Read-only."],
                                plugins=plugins), ws.tools, plugins=plugins, read_only=True,
                approve=approver)
    assert run(chat, "write")[0].error_kind == "read_only"
    assert approver.asked == [] and ws.written == []


def test_without_an_approver_every_call_runs(plugins: PluginManager) -> None:
    ws = Workspace()
    chat = make_chat([call("write_note", path="a.md"), "Done."], ws, plugins, None)
    run(chat, "write")
    assert ws.written == ["a.md"] and chat.dispatcher.approval is None


def test_dispatcher_asks_through_the_same_gate() -> None:
    ws = Workspace()
    approver = Answers(Approval.DENY)
    dispatcher = Dispatcher(ToolRegistry(ws.tools), approve=approver)
    result = dispatcher.dispatch(ToolCall("c1", "write_note", {"path": "x"}),
                                 cancel=CancelToken())
    assert (result.is_error, result.error_kind) == (True, "denied") and ws.written == []


def test_an_approver_waiting_on_another_thread_gets_its_answer(plugins: PluginManager) -> None:
    """A dashboard answers from its own thread while the chat waits."""
    ws = Workspace()
    asked = threading.Event()
    answered: list[Approval] = []
    ready = threading.Event()

    def remote(request: ApprovalRequest) -> Approval:
        asked.set()
        ready.wait(5)
        return answered[0]

    def browser() -> None:
        asked.wait(5)
        answered.append(Approval.APPROVE)
        ready.set()

    threading.Thread(target=browser, daemon=True).start()
    chat = make_chat([call("write_note", path="a.md"), "Done."], ws, plugins, remote)
    assert not run(chat, "write")[0].is_error and ws.written == ["a.md"]
