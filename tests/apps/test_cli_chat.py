"""``toolwire chat`` through its entry point (in-process; as a process where only one
shows it), against a real OpenAI-wire server on 127.0.0.1 and the tiny local model."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.cli import CliRun, command_environment, run_cli
from tests.support.openai_wire_server import Stream, WireServer, reply_chunks


def chat(*args: str, stdin: str | None = None, cwd: Path | None = None,
         env: dict[str, str] | None = None) -> CliRun:
    return run_cli("chat", *args, stdin=stdin or "", env={**os.environ, **(env or {})}, cwd=cwd)


def events_of(run: CliRun) -> list[dict[str, object]]:
    return [json.loads(line) for line in run.stdout.splitlines() if line.strip()]


def remote(server: WireServer, workspace: Path, *extra: str) -> list[str]:
    return ["--provider", "custom", "--base-url", server.url, "--model", "m",
            "--workspace", str(workspace), *extra]


def test_one_message_runs_a_tool_and_exits_0(server: WireServer, workspace: Path) -> None:
    server.enqueue(Stream(reply_chunks("", [("c1", "search_text", {"pattern": "alex"})])),
                   Stream(reply_chunks("Alex maintains the parsers.")))
    run = chat(*remote(server, workspace, "--json", "--message", "who is alex?"))
    assert run.returncode == 0, run.stderr
    events = events_of(run)
    result = next(e for e in events if e["type"] == "tool_result")
    assert result["content"] == "notes.md:1: alex: maintains the parsers"
    assert events[-1]["type"] == "done" and events[-1]["reason"] == "stop"
    second = server.requests[1].body["messages"]
    assert second[-1] == {"role": "tool", "tool_call_id": "c1",
                          "content": "notes.md:1: alex: maintains the parsers"}


def test_message_on_standard_input_and_plain_output(server: WireServer,
                                                    workspace: Path) -> None:
    server.enqueue(Stream(reply_chunks("Hello there.")))
    run = chat(*remote(server, workspace), stdin="hi\n")
    assert run.returncode == 0, run.stderr
    assert "Hello there." in run.stdout
    assert server.requests[0].body["messages"][-1] == {"role": "user", "content": "hi\n"}


def test_read_only_offers_only_read_tools(server: WireServer, workspace: Path) -> None:
    server.enqueue(Stream(reply_chunks("", [("c1", "write_file",
                                              {"path": "x.txt", "content": "x"})])),
                   Stream(reply_chunks("I cannot write.")))
    run = chat(*remote(server, workspace, "--read-only", "--json", "--message", "write"))
    assert run.returncode == 0, run.stderr
    offered = [t["function"]["name"] for t in server.requests[0].body["tools"]]
    assert "write_file" not in offered and "read_file" in offered
    result = next(e for e in events_of(run) if e["type"] == "tool_result")
    assert result["is_error"] and "read-only" in str(result["content"])
    assert not (workspace / "x.txt").exists()


def test_max_tool_iters_reserves_the_last_turn(server: WireServer, workspace: Path) -> None:
    server.enqueue(Stream(reply_chunks("", [("c1", "list_dir", {})])),
                   Stream(reply_chunks("Done.")))
    run = chat(*remote(server, workspace, "--max-tool-iters", "2", "--json", "--message", "x"))
    assert run.returncode == 0, run.stderr
    assert "tools" not in server.requests[1].body


def test_a_failed_reply_exits_non_zero(server: WireServer, workspace: Path) -> None:
    from tests.support.openai_wire_server import Fail

    server.enqueue(Fail.error(500, "boom"), Fail.error(500, "boom"), Fail.error(500, "boom"),
                   Fail.error(500, "boom"))
    run = chat(*remote(server, workspace, "--json", "--message", "x"))
    assert run.returncode == 1
    assert events_of(run)[-1]["reason"] == "error"


def test_save_and_resume_move_the_conversation(server: WireServer, workspace: Path,
                                               tmp_path: Path) -> None:
    saved = tmp_path / "conversation.json"
    server.enqueue(Stream(reply_chunks("", [("c1", "read_file", {"path": "notes.md"})])),
                   Stream(reply_chunks("Read it.")), Stream(reply_chunks("Still here.")))
    first = chat(*remote(server, workspace, "--message", "read notes", "--save", str(saved)))
    assert first.returncode == 0, first.stderr
    records = json.loads(saved.read_text())
    assert [r["role"] for r in records] == ["user", "assistant", "tool", "assistant"]
    assert records[2]["tool_name"] == "read_file"
    again = chat(*remote(server, workspace, "--resume", str(saved), "--message", "and now?"))
    assert again.returncode == 0, again.stderr
    replayed = server.requests[2].body["messages"]
    assert replayed[1]["tool_calls"][0]["function"] == {"name": "read_file",
                                                        "arguments": '{"path": "notes.md"}'}
    assert replayed[2]["role"] == "tool" and replayed[-1]["content"] == "and now?"


def test_resume_from_a_bad_file_is_a_clear_error(tmp_path: Path, server: WireServer,
                                                 workspace: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    run = chat(*remote(server, workspace, "--resume", str(bad), "--message", "x"))
    assert run.returncode == 2
    assert "cannot resume" in run.stderr and "Traceback" not in run.stderr
    assert server.requests == []


def test_missing_model_is_a_usage_error() -> None:
    run = chat("--message", "x")
    assert run.returncode == 2 and "--model" in run.stderr
    assert "loading" not in run.stderr


def test_a_reply_cut_at_the_token_limit_exits_1(server: WireServer, workspace: Path) -> None:
    # (the local backend's token-limit path is covered with a grammar-forced real model in
    # tests/test_llama_cpp_real.py; a random-weight model without a grammar may end its
    # turn at any token, so it cannot make this check deterministic)
    server.enqueue(Stream(reply_chunks("The answer is", finish="length")))
    run = chat(*remote(server, workspace, "--json", "--message", "hi"))
    assert run.returncode == 1, run.stderr
    events = events_of(run)
    assert events[-1]["type"] == "done" and events[-1]["reason"] == "length"
    assert any(e["type"] == "error" and e["kind"] == "length" for e in events)
    assert "".join(str(e["text"]) for e in events if e["type"] == "text") == "The answer is"


@pytest.mark.process
def test_ctrl_c_cancels_the_reply_in_progress(server: WireServer, workspace: Path) -> None:
    # ten words, then the reply holds until the server stops: the cancel never races it
    server.enqueue(Stream(reply_chunks("word " * 200, piece=5), hold_at=10))
    proc = subprocess.Popen(
        [sys.executable, "-m", "toolwire", "chat", *remote(server, workspace),
         "--message", "tell me a long story"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=command_environment())
    assert proc.stdout is not None
    shown = b""
    while b"word" not in shown:  # the reply has started on the screen
        chunk = os.read(proc.stdout.fileno(), 4096)
        assert chunk, "the chat ended before its reply started"
        shown += chunk
    proc.send_signal(signal.SIGINT)
    rest, err = proc.communicate(timeout=60)
    out = (shown + rest).decode()
    assert proc.returncode == 1, err  # the reply did not end normally
    assert "(cancelled)" in out
    assert 0 < out.count("word") <= 10
