"""A save never destroys what it replaces, and a session is never lost to a signal (issue 40,
item 3).

The save itself in-process (a failure forced in the middle of the write, an exception from
anywhere), ``toolwire chat`` in-process against a real OpenAI-wire server on 127.0.0.1 for
``--resume F --save F`` and ``/save``, and in a real process for the signals: ``SIGTERM``
and ``SIGHUP`` save and exit with 128 + the signal; ``SIGKILL`` still finds every exchange
that ended saved, since ``--save`` is written after each one.
"""

from __future__ import annotations

import errno
import io
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from tests.support.openai_wire_server import Hang, Stream, WireServer, reply_chunks
from toolwire import Chat, Message
from toolwire.apps.cli import conversation_file
from toolwire.apps.cli.conversation_file import save_conversation
from toolwire.apps.cli.main import main
from toolwire.apps.cli.repl import Repl
from toolwire.testing import ScriptedBackend, isolated_plugin_manager

OLD = '[{"role": "user", "content": "the conversation saved before"}]\n'
RECORDS = [{"role": "user", "content": "hello"}, {"role": "assistant", "content": "hi"}]


def _disk_full_halfway(out: Any, data: bytes) -> None:
    out.write(data[: len(data) // 2])
    out.flush()
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


def leftovers(folder: Path, *kept: Path) -> list[Path]:
    return sorted(p for p in folder.iterdir() if p not in kept)


def test_a_save_that_fails_midway_leaves_the_file_whole_and_says_where_the_conversation_is(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    target = tmp_path / "chat.json"
    target.write_text(OLD)
    monkeypatch.setattr(conversation_file, "_write_all", _disk_full_halfway)
    outcome = save_conversation(lambda: RECORDS, target, fallback=(tmp_path / "fallback",))
    assert not outcome.saved
    assert target.read_text() == OLD  # not truncated, not half-written
    assert "No space left on device" in outcome.message
    assert f"{target} is unchanged" in outcome.message
    assert outcome.fallback is not None and str(outcome.fallback) in outcome.message
    assert json.loads(outcome.fallback.read_text()) == RECORDS
    assert leftovers(tmp_path, target) == [tmp_path / "fallback"]  # no temporary file left


def test_a_file_that_did_not_exist_is_said_not_created(tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(conversation_file, "_write_all", _disk_full_halfway)
    outcome = save_conversation(lambda: RECORDS, tmp_path / "new.json")
    assert not outcome.saved and f"{tmp_path / 'new.json'} was not created" in outcome.message
    assert outcome.fallback is None and list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("failure", [RuntimeError("a plugin's bug"), MemoryError(),
                                     UnicodeEncodeError("utf-8", "x", 0, 1, "bad")])
def test_any_exception_while_saving_is_a_message_and_the_file_is_intact(
        tmp_path: Path, failure: Exception) -> None:
    target = tmp_path / "chat.json"
    target.write_text(OLD)

    def records() -> Any:
        raise failure

    outcome = save_conversation(records, target, fallback=(tmp_path / "fallback",))
    assert not outcome.saved and type(failure).__name__ in outcome.message
    assert f"{target} is unchanged" in outcome.message
    assert target.read_text() == OLD


def test_a_save_replaces_the_file_whole_and_keeps_its_mode(tmp_path: Path) -> None:
    target = tmp_path / "chat.json"
    target.write_text(OLD)
    target.chmod(0o600)
    assert save_conversation(lambda: RECORDS, target).saved
    assert json.loads(target.read_text()) == RECORDS
    assert target.stat().st_mode & 0o777 == 0o600
    assert leftovers(tmp_path, target) == []


def test_slash_save_reports_every_failure_and_never_raises(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    target = tmp_path / "chat.json"
    target.write_text(OLD)
    chat = Chat(ScriptedBackend([]), history=[Message.user("caf\udce9"), Message.assistant("ok")],
                plugins=isolated_plugin_manager())
    said = io.StringIO()
    lines = iter([f"/save {target}", f"/save {tmp_path / 'gone' / 'x.json'}", "/quit"])
    monkeypatch.setattr(conversation_file, "_write_all", _disk_full_halfway)
    Repl(chat, lambda text: None, read_line=lambda prompt: next(lines), err=said).run()
    out = said.getvalue()
    assert f"{target} is unchanged" in out and "was not created" in out
    assert target.read_text() == OLD
    monkeypatch.undo()
    lines = iter([f"/save {target}", "/quit"])
    Repl(chat, lambda text: None, read_line=lambda prompt: next(lines), err=said).run()
    assert json.loads(target.read_text())[0]["content"] == "caf\ufffd"


def remote(server: WireServer, workspace: Path, *extra: str) -> list[str]:
    return ["chat", "--provider", "custom", "--base-url", server.url, "--model", "m",
            "--workspace", str(workspace), "--no-tools", *extra]


@pytest.fixture
def latin1_workspace(tmp_path: Path) -> Path:
    root = tmp_path / "ws"
    root.mkdir()
    with open(os.path.join(os.fsencode(root), b"caf\xe9.txt"), "wb") as out:
        out.write(b"x\n")
    return root


def test_resume_and_save_to_the_same_file_keep_a_result_with_a_latin1_file_name(
        server: WireServer, latin1_workspace: Path, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("TOOLWIRE_LOAD_PLUGINS", "")
    saved = tmp_path / "chat.json"
    server.enqueue(Stream(reply_chunks("", [("c1", "list_dir", {})])),
                   Stream(reply_chunks("One file.")), Stream(reply_chunks("Still one.")))
    base = ["chat", "--provider", "custom", "--base-url", server.url, "--model", "m",
            "--workspace", str(latin1_workspace)]
    assert main([*base, "--message", "list", "--save", str(saved)]) == 0
    first = json.loads(saved.read_text(encoding="utf-8"))
    assert "caf\ufffd.txt" in first[2]["content"]
    assert main([*base, "--resume", str(saved), "--save", str(saved), "--message", "again"]) == 0
    again = json.loads(saved.read_text(encoding="utf-8"))
    assert again[:len(first)] == first and again[-1]["content"] == "Still one."
    assert "Traceback" not in capsys.readouterr().err


# -- signals: a real process ------------------------------------------------------------------


def _chat_process(server: WireServer, workspace: Path, saved: Path) -> subprocess.Popen[str]:
    questions = saved.with_name("questions.txt")
    questions.write_text("first question\nsecond question\n")
    with questions.open() as stdin:
        process = subprocess.Popen(
            [sys.executable, "-m", "toolwire", *remote(server, workspace, "--lines", "--save",
                                                       str(saved))],
            stdin=stdin, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            env={**os.environ, "TOOLWIRE_LOAD_PLUGINS": ""})
    deadline = time.monotonic() + 60  # a failure bound only: the second request is the event
    while len(server.requests) < 2:
        assert time.monotonic() < deadline and process.poll() is None
        time.sleep(0.02)
    return process


@pytest.mark.process
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP])
def test_sigterm_or_sighup_mid_reply_saves_the_session_and_exits(
        server: WireServer, workspace: Path, tmp_path: Path, signum: int) -> None:
    saved = tmp_path / "chat.json"
    server.enqueue(Stream(reply_chunks("The first answer.")), Hang(60))
    process = _chat_process(server, workspace, saved)
    process.send_signal(signum)
    _, err = process.communicate(timeout=60)
    assert process.returncode == 128 + signum, err
    records = json.loads(saved.read_text())
    assert records[:2] == [{"role": "user", "content": "first question"},
                           {"role": "assistant", "content": "The first answer."}]
    assert {"role": "user", "content": "second question"} in records
    assert "Traceback" not in err


@pytest.mark.process
def test_a_killed_chat_still_has_every_exchange_that_ended_saved(
        server: WireServer, workspace: Path, tmp_path: Path) -> None:
    saved = tmp_path / "chat.json"
    server.enqueue(Stream(reply_chunks("The first answer.")), Hang(60))
    process = _chat_process(server, workspace, saved)
    process.kill()
    process.communicate(timeout=60)
    assert json.loads(saved.read_text()) == [
        {"role": "user", "content": "first question"},
        {"role": "assistant", "content": "The first answer."}]
