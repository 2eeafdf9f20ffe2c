"""The interactive ``toolwire chat`` on a real terminal (a pty): /commands, multi-line
input, history, and the approval question before a write. The model is a real
OpenAI-wire server on 127.0.0.1 answering from a script."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.openai_wire_server import Stream, WireServer, reply_chunks
from tests.support.terminal import Terminal
from tests.support.tiers import needs

PROMPT = "> "


@pytest.fixture
@needs("process")
def terminal(server: WireServer, workspace: Path, tmp_path: Path) -> Iterator[Terminal]:
    env = {**os.environ, "TOOLWIRE_LOAD_PLUGINS": "", "HOME": str(tmp_path),
           "TOOLWIRE_HISTORY_FILE": str(tmp_path / "history"), "TERM": "dumb"}
    term = Terminal([sys.executable, "-m", "toolwire", "chat", "--base-url", server.url,
                     "--model", "m", "--workspace", str(workspace)], env=env, cwd=tmp_path)
    term.expect("/help lists the commands")
    term.expect(PROMPT)
    yield term
    term.close()


def answer(text: str) -> Stream:
    return Stream(reply_chunks(text))


def calls(*calls: tuple[str, str, dict[str, object]]) -> Stream:
    return Stream(reply_chunks("", list(calls)))


def test_help_lists_every_command(terminal: Terminal, server: WireServer) -> None:
    terminal.line("/help")
    shown = terminal.expect("Ctrl-D leaves.")
    for command in ("/help", "/clear", "/system", "/tools", "/read-only", "/save", "/load",
                    "/quit"):
        assert command in shown
    assert '"""' in shown and "\\" in shown
    assert server.requests == []


def test_an_unknown_command_is_answered_locally_and_never_sent(
        terminal: Terminal, server: WireServer, tmp_path: Path) -> None:
    server.enqueue(answer("Hello."))
    terminal.line("/frobnicate now")
    terminal.expect("unknown command /frobnicate")
    terminal.line("hi")
    terminal.expect("Hello.")
    terminal.line(f"/save {tmp_path / 'c.json'}")
    terminal.expect("saved 2 messages")
    assert len(server.requests) == 1
    assert [m["content"] for m in server.requests[0].body["messages"]] == ["hi"]
    stored = json.loads((tmp_path / "c.json").read_text())
    assert [r["content"] for r in stored] == ["hi", "Hello."]


def test_double_slash_sends_a_message_starting_with_a_slash(terminal: Terminal,
                                                          server: WireServer) -> None:
    server.enqueue(answer("That is a path."))
    terminal.line("//usr/bin is what?")
    terminal.expect("That is a path.")
    assert server.requests[0].body["messages"][-1]["content"] == "/usr/bin is what?"


def test_system_clear_and_multi_line_input(terminal: Terminal, server: WireServer) -> None:
    server.enqueue(answer("One."), answer("Two."), answer("Three."))
    terminal.line("/system Answer in one word.")
    terminal.expect("(system prompt set)")
    terminal.line("first line \\")
    terminal.line("second line")
    terminal.expect("One.")
    terminal.line('"""')
    terminal.line("a block")
    terminal.line("")
    terminal.line('of lines"""')
    terminal.expect("Two.")
    terminal.line("/clear")
    terminal.expect("(conversation cleared)")
    terminal.line("fresh")
    terminal.expect("Three.")
    first, second, third = (r.body["messages"] for r in server.requests)
    assert first == [{"role": "system", "content": "Answer in one word."},
                     {"role": "user", "content": "first line \nsecond line"}]
    assert second[-1] == {"role": "user", "content": "a block\n\nof lines"}
    assert third == [{"role": "system", "content": "Answer in one word."},
                     {"role": "user", "content": "fresh"}]


def test_tools_and_read_only_switch_what_is_offered(terminal: Terminal,
                                                    server: WireServer) -> None:
    server.enqueue(answer("A."), answer("B."))
    terminal.line("/tools")
    listing = terminal.expect("write_file")
    assert "read_file  (read-only)" in listing
    terminal.expect("changes things, asks first")
    terminal.line("/read-only on")
    terminal.expect("read-only is on")
    terminal.line("look")
    terminal.expect("A.")
    terminal.line("/read-only off")
    terminal.expect("read-only is off")
    terminal.line("look again")
    terminal.expect("B.")
    offered = [[t["function"]["name"] for t in r.body["tools"]] for r in server.requests]
    assert "write_file" not in offered[0] and "write_file" in offered[1]


def test_load_replaces_the_conversation_and_a_bad_file_changes_nothing(
        terminal: Terminal, server: WireServer, tmp_path: Path) -> None:
    saved = tmp_path / "saved.json"
    saved.write_text(json.dumps([{"role": "user", "content": "earlier"},
                                 {"role": "assistant", "content": "noted"}]))
    (tmp_path / "bad.json").write_text('{"not": "a list"}')
    server.enqueue(answer("Continuing."))
    terminal.line(f"/load {saved}")
    terminal.expect("loaded 2 messages")
    terminal.line(f"/load {tmp_path / 'bad.json'}")
    terminal.expect("the conversation is unchanged")
    terminal.line("go on")
    terminal.expect("Continuing.")
    assert [m["content"] for m in server.requests[0].body["messages"]] == [
        "earlier", "noted", "go on"]


def test_quit_ends_with_status_0_and_keeps_the_line_history(
        terminal: Terminal, server: WireServer, tmp_path: Path) -> None:
    server.enqueue(answer("Hi."))
    terminal.line("remember this line")
    terminal.expect("Hi.")
    terminal.line("/quit")
    assert terminal.wait() == 0
    assert "remember this line" in (tmp_path / "history").read_text()


def test_ctrl_d_leaves(terminal: Terminal) -> None:
    terminal.type("\x04")
    assert terminal.wait() == 0


# -- approval before a write ---------------------------------------------------------------


WRITE = ("c1", "write_file", {"path": "out.txt", "content": "hello"})


def test_yes_runs_the_write_after_showing_its_arguments(
        terminal: Terminal, server: WireServer, workspace: Path, tmp_path: Path) -> None:
    server.enqueue(calls(WRITE), answer("Written."))
    terminal.line("write it")
    shown = terminal.expect("[a]lways for write_file: ")
    assert '"path": "out.txt"' in shown and '"content": "hello"' in shown
    terminal.line("y")
    terminal.expect("Written.")
    assert (workspace / "out.txt").read_text() == "hello"
    assert server.requests[1].body["messages"][-1]["content"] == "wrote 5 bytes to out.txt"
    terminal.expect(PROMPT)
    terminal.line("/quit")
    assert terminal.wait() == 0
    history = (tmp_path / "history").read_text().splitlines()
    assert "write it" in history and "y" not in history  # answers are not history


def test_no_leaves_the_workspace_alone_and_tells_the_model(
        terminal: Terminal, server: WireServer, workspace: Path) -> None:
    server.enqueue(calls(WRITE), answer("I did not write it."))
    terminal.line("write it")
    terminal.expect("[a]lways for write_file: ")
    terminal.line("n")
    terminal.expect("I did not write it.")
    assert not (workspace / "out.txt").exists()
    refusal = server.requests[1].body["messages"][-1]
    assert refusal["role"] == "tool" and "did not allow" in refusal["content"]


def test_always_stops_asking_for_that_tool(terminal: Terminal, server: WireServer,
                                           workspace: Path) -> None:
    second = ("c2", "write_file", {"path": "two.txt", "content": "2"})
    server.enqueue(calls(WRITE), answer("One."), calls(second), answer("Two."))
    terminal.line("write one")
    terminal.expect("[a]lways for write_file: ")
    terminal.line("a")
    terminal.expect("One.")
    terminal.line("write two")
    after = terminal.expect("Two.")
    assert "allow write_file?" not in after
    assert (workspace / "two.txt").read_text() == "2"


def test_an_unclear_answer_asks_again(terminal: Terminal, server: WireServer,
                                      workspace: Path) -> None:
    server.enqueue(calls(WRITE), answer("Fine."))
    terminal.line("write it")
    terminal.expect("[a]lways for write_file: ")
    terminal.line("maybe")
    terminal.expect("answer y (run it)")
    terminal.expect("[a]lways for write_file: ")
    terminal.line("yes")
    terminal.expect("Fine.")
    assert (workspace / "out.txt").exists()


def test_ctrl_c_at_the_question_refuses_and_cancels_the_reply(
        terminal: Terminal, server: WireServer, workspace: Path) -> None:
    server.enqueue(calls(WRITE), answer("After."))
    terminal.line("write it")
    terminal.expect("[a]lways for write_file: ")
    terminal.wait_for_input()  # the question is shown and read: now Ctrl-C is seen at once
    terminal.type("\x03")
    terminal.expect("(cancelled)")
    terminal.expect(PROMPT)
    assert not (workspace / "out.txt").exists()
    terminal.line("and now?")
    terminal.expect("After.")
    replayed = server.requests[1].body["messages"]
    assert replayed[-2]["role"] == "tool" and "did not allow" in replayed[-2]["content"]


@pytest.mark.process
def test_read_only_on_releases_a_tool_choice_it_no_longer_offers(
        server: WireServer, workspace: Path, tmp_path: Path) -> None:
    env = {**os.environ, "TOOLWIRE_LOAD_PLUGINS": "", "HOME": str(tmp_path),
           "TOOLWIRE_HISTORY_FILE": str(tmp_path / "history"), "TERM": "dumb"}
    term = Terminal([sys.executable, "-m", "toolwire", "chat", "--base-url", server.url,
                     "--model", "m", "--workspace", str(workspace),
                     "--tool-choice", "write_file"], env=env, cwd=tmp_path)
    try:
        term.expect(PROMPT)
        server.enqueue(answer("A."))
        term.line("/read-only on")
        said = term.expect("read-only is on")
        assert "'write_file'" in said and "auto" in said
        term.line("look")
        term.expect("A.")
    finally:
        term.close()
    (request,) = server.requests
    assert "tool_choice" not in request.body  # auto, the default, is not sent
    assert "write_file" not in [t["function"]["name"] for t in request.body["tools"]]
