"""Input a user can get wrong, each through the real entry point (``python -m toolwire`` in
a subprocess): one line on standard error and exit status 2, never a traceback, and nothing
of the user's lost or overwritten; and the messages that tell a person what to do next."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.cli import CliRun, run_cli
from tests.support.openai_wire_server import Stream, WireServer, reply_chunks
from tests.support.terminal import Terminal
from toolwire.apps.cli.main import TRACEBACK_VARIABLE
from toolwire.testing.tiny_gguf import CHATML_TEMPLATE, write_tiny_gguf


def toolwire(*args: str, stdin: str | None = "", cwd: Path | None = None,
             env: dict[str, str] | None = None) -> CliRun:
    full = {**os.environ, **(env or {})}
    full.pop(TRACEBACK_VARIABLE, None)
    return run_cli(*args, stdin=stdin or "", env=full, cwd=cwd)


def one_line_input_error(run: CliRun) -> str:
    """The one line an input error prints (asserting there is just that)."""
    assert run.returncode == 2, run.stderr
    lines = [line for line in run.stderr.splitlines() if not line.startswith("loading ")]
    assert len(lines) == 1 and lines[0].startswith("toolwire: "), run.stderr
    assert "Traceback" not in run.stderr
    return lines[0]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny real model (trained context 4096) with ChatML and no tool markup."""
    return write_tiny_gguf(tmp_path_factory.mktemp("model") / "tiny.gguf")


# -- item 3: each of these was a traceback --------------------------------------------------


@pytest.mark.parametrize("where", ["missing-folder", "a-folder", "under-a-file"])
def test_save_to_a_path_that_cannot_be_written_is_refused_before_the_chat(
        tiny: Path, tmp_path: Path, workspace: Path, where: str) -> None:
    (tmp_path / "a-file").write_text("mine")
    target = {"missing-folder": tmp_path / "no" / "such" / "chat.json",
              "a-folder": tmp_path,
              "under-a-file": tmp_path / "a-file" / "chat.json"}[where]
    run = toolwire("chat", "--model", str(tiny), "--workspace", str(workspace),
                   "--message", "hi", "--save", str(target))
    line = one_line_input_error(run)
    assert line.startswith(f"toolwire: --save {target}: ")
    assert "loading" not in run.stderr  # refused before the model loads, not after the chat
    assert (tmp_path / "a-file").read_text() == "mine"


def test_a_save_that_fails_after_the_chat_keeps_the_conversation_elsewhere(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    from toolwire import Chat
    from toolwire.apps.cli.chat import _save_if_asked
    from toolwire.testing import ScriptedBackend

    monkeypatch.setenv("TOOLWIRE_HISTORY_FILE", str(tmp_path / "state" / "history"))
    chat = Chat(ScriptedBackend(["Hello there."]))
    list(chat.send("hi"))
    gone = tmp_path / "gone"
    gone.mkdir()
    target = gone / "chat.json"
    gone.rmdir()  # the folder went away while the chat ran
    assert _save_if_asked(chat, str(target)) is False
    err = capsys.readouterr().err
    (kept,) = (tmp_path / "state" / "unsaved").glob("chat-*.json")
    assert f"cannot save to {target}" in err and str(kept) in err and "--resume" in err
    assert [m["role"] for m in json.loads(kept.read_text())] == ["user", "assistant"]


@pytest.mark.parametrize(("options", "named"), [
    (["--ctx-size", "10"], "--ctx-size (10)"),
    (["--max-tokens", "4096"], "--ctx-size (4096)"),
    (["--max-tokens", "5000", "--ctx-size", "2048"], "--max-tokens (5000)"),
])
def test_a_context_without_room_for_the_prompt_is_an_input_error(
        tiny: Path, workspace: Path, options: list[str], named: str) -> None:
    run = toolwire("chat", "--model", str(tiny), "--workspace", str(workspace),
                   "--message", "hi", *options)
    line = one_line_input_error(run)
    assert named in line and "--max-tokens" in line and "the prompt needs room" in line


@pytest.mark.process
@pytest.mark.parametrize(("options", "named"), [
    (["--ctx-size", "10"], "--ctx-size (10)"),
    (["--max-tokens", "5000", "--ctx-size", "2048"], "--max-tokens (5000)"),
])
def test_serve_says_a_context_without_room_as_chat_does(
        tiny: Path, workspace: Path, options: list[str], named: str) -> None:
    """The model loads in serve's worker process: its backend's refusal of the value
    comes back as the same input error, exit status 2, as chat's."""
    run = toolwire("serve", "--model", str(tiny), "--workspace", str(workspace),
                   "--port", "0", *options)
    assert run.returncode == 2, run.stderr
    assert "Traceback" not in run.stderr and "worker" not in run.stderr
    last = run.stderr.splitlines()[-1]
    assert last.startswith("toolwire: ") and named in last and "the prompt needs room" in last


def test_demo_dir_naming_a_file_is_an_input_error(tmp_path: Path) -> None:
    mine = tmp_path / "notes.txt"
    mine.write_text("mine")
    line = one_line_input_error(toolwire("demo", "--dir", str(mine)))
    assert line == f"toolwire: --dir {mine}: is a file; give a folder for the demo's model " \
                   "and notes"
    assert mine.read_text() == "mine"
    below = one_line_input_error(toolwire("demo", "--dir", str(mine / "sub")))
    assert "cannot make that folder" in below


@pytest.mark.model
def test_demo_dir_never_overwrites_a_users_file_but_reuses_its_own(tmp_path: Path) -> None:
    pytest.importorskip("llama_cpp")
    folder = tmp_path / "demo"
    (folder / "workspace" / "notes").mkdir(parents=True)
    todo = folder / "workspace" / "notes" / "todo.md"
    todo.write_text("my own list\n")
    line = one_line_input_error(toolwire("demo", "--dir", str(folder)))
    assert "would overwrite workspace/notes/todo.md" in line
    assert todo.read_text() == "my own list\n" and not (folder / "tiny-demo.gguf").exists()
    todo.unlink()
    first = toolwire("demo", "--dir", str(folder))
    assert first.returncode == 0, first.stderr
    again = toolwire("demo", "--dir", str(folder))  # what the demo wrote, it may write again
    assert again.returncode == 0, again.stderr


def test_a_folder_named_like_a_gguf_file_is_an_input_error(tmp_path: Path) -> None:
    folder = tmp_path / "model.gguf"
    folder.mkdir()
    for args in (["detect", str(folder)], ["grammar", "--template", str(folder), "--tools",
                                           str(folder)]):
        line = one_line_input_error(toolwire(*args))
        assert str(folder) in line


def test_more_threads_than_ggml_runs_is_refused(tiny: Path) -> None:
    run = toolwire("chat", "--model", str(tiny), "--message", "hi", "--threads", "99999")
    assert run.returncode == 2 and "must be at most 512" in run.stderr
    assert "Traceback" not in run.stderr


@pytest.mark.process
def test_an_unexpected_error_is_one_line_unless_the_traceback_is_asked_for() -> None:
    script = ("import sys\n"
              "import toolwire.apps.cli.plugins as command\n"
              "from toolwire.apps.cli.main import main\n"
              "def broken(args, plugins):\n"
              "    raise RuntimeError('boom')\n"
              "command.run = broken\n"
              "sys.exit(main(['plugins']))\n")
    env = {**os.environ, "TOOLWIRE_LOAD_PLUGINS": ""}
    env.pop(TRACEBACK_VARIABLE, None)
    quiet = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                           env=env, timeout=60)
    assert quiet.returncode == 1
    assert quiet.stderr == ("toolwire: unexpected error: RuntimeError: boom (a bug in "
                            "toolwire or a plugin; TOOLWIRE_TRACEBACK=1 shows where)\n")
    loud = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          env={**env, TRACEBACK_VARIABLE: "1"}, timeout=60)
    assert "Traceback" in loud.stderr and "RuntimeError: boom" in loud.stderr


# -- item 6: messages a person can act on ---------------------------------------------------


@pytest.mark.model
def test_the_no_parser_notice_is_one_line_naming_detect_and_the_family_flag(
        tiny: Path, workspace: Path, tmp_path: Path) -> None:
    # a template the user gives is used as it is (the file's own would give way to the
    # default template for tool turns, docs/local.md)
    plain = tmp_path / "plain.jinja"
    plain.write_text(CHATML_TEMPLATE)
    run = toolwire("chat", "--model", str(tiny), "--workspace", str(workspace),
                   "--chat-template-file", str(plain),
                   "--message", "hi", "--max-tokens", "4", "--temperature", "0")
    notes = [line for line in run.stdout.splitlines() if line.startswith("note: ")]
    assert len(notes) == 1, run.stdout
    (note,) = notes
    assert note.startswith("note: no parser plugin claims this chat template")
    assert "tool calls will stay text" in note and "'toolwire detect'" in note
    assert "--family NAME" in note and "family=" not in note and "docs/" not in note


def test_detect_gives_the_detail_the_one_line_notice_leaves_out(tmp_path: Path) -> None:
    template = tmp_path / "odd.jinja"
    template.write_text("{% for m in messages %}{{ m.content }}{% if m.tool_calls %}"
                        "<tool_call>{{ m.tool_calls[0].function.name }}</tool_call>"
                        "{% endif %}{% endfor %}")
    run = toolwire("detect", str(template))
    assert run.returncode == 2
    assert "--family NAME" in run.stdout
    assert any(line.startswith("derived:  none: ") for line in run.stdout.splitlines())
    data = json.loads(toolwire("detect", str(template), "--json").stdout)
    assert data["family"] is None and data["derive_error"]


def test_a_mistyped_option_shows_the_commands_own_options(tiny: Path) -> None:
    run = toolwire("chat", "--modle", str(tiny))
    assert run.returncode == 2
    assert run.stderr.startswith("usage: toolwire chat ") and "--max-tokens" in run.stderr
    assert "unrecognized arguments: --modle" in run.stderr
    assert "did you mean '--model'" in run.stderr
    models = toolwire("models", "--jsn")
    assert models.stderr.startswith("usage: toolwire models ")
    assert "did you mean '--json'?" in models.stderr


def test_a_models_dir_that_does_not_exist_is_an_input_error(tmp_path: Path,
                                                            tiny: Path) -> None:
    missing = tmp_path / "absent"
    for args in (["models"], ["chat", "--model", str(tiny), "--message", "hi"]):
        run = toolwire(*args, "--models-dir", str(missing))
        assert run.returncode == 2, run.stderr
        assert f"argument --models-dir: {missing} does not exist" in run.stderr


def test_untyped_function_parameters_are_warned_about(tmp_path: Path) -> None:
    functions = tmp_path / "mine.py"
    functions.write_text("from typing import Any\n\n"
                         "def greet(name, times: int = 1, extra: Any = None) -> str:\n"
                         "    \"\"\"Greet someone.\"\"\"\n    return name\n\n"
                         "def typed(text: str) -> str:\n    \"\"\"Echo.\"\"\"\n    return text\n")
    run = toolwire("tools", "--no-tools", "--functions", str(functions))
    assert run.returncode == 0, run.stderr
    warnings = [line for line in run.stderr.splitlines() if "warning" in line]
    assert warnings == [f"toolwire: warning: --functions {functions}: 'greet' has parameters "
                        "without a type (name, extra): whatever the model passes for them is "
                        "not checked"]


@pytest.mark.process
def test_parse_on_a_terminal_says_it_reads_standard_input(tmp_path: Path) -> None:
    env = {**os.environ, "TOOLWIRE_LOAD_PLUGINS": "", "TERM": "dumb"}
    term = Terminal([sys.executable, "-m", "toolwire", "parse", "--family", "qwen_xml"],
                    env=env, cwd=tmp_path)
    try:
        term.expect("reading the model's reply from standard input; end it with Ctrl-D")
        term.type("Hello.\n\x04")
        term.expect('"content": "Hello.')
        assert term.wait() == 0
    finally:
        term.close()


@pytest.mark.process
def test_an_interactive_chat_whose_last_reply_failed_exits_1(
        server: WireServer, workspace: Path, tmp_path: Path) -> None:
    env = {**os.environ, "TOOLWIRE_LOAD_PLUGINS": "", "HOME": str(tmp_path),
           "TOOLWIRE_HISTORY_FILE": str(tmp_path / "history"), "TERM": "dumb"}
    argv = [sys.executable, "-m", "toolwire", "chat", "--base-url", server.url, "--model",
            "m", "--workspace", str(workspace)]
    server.enqueue(Stream(reply_chunks("Fine.")))
    server.enqueue(Stream(reply_chunks("cut short"), drop_after=1, done=False))
    term = Terminal(argv, env=env, cwd=tmp_path)
    try:
        term.expect("> ")
        term.line("first")
        term.expect("Fine.")
        term.expect("> ")
        term.line("second")
        term.expect("error (stream_cut)")
        term.expect("> ")
        term.type("\x04")
        assert term.wait() == 1
    finally:
        term.close()
    server.enqueue(Stream(reply_chunks("Fine again.")))
    ok = Terminal(argv, env=env, cwd=tmp_path)
    try:
        ok.expect("> ")
        ok.line("hello")
        ok.expect("Fine again.")
        ok.expect("> ")
        ok.type("\x04")
        assert ok.wait() == 0
    finally:
        ok.close()


@pytest.mark.process
def test_the_conformance_hint_installs_only_what_it_needs(tmp_path: Path) -> None:
    template = tmp_path / "t.jinja"
    template.write_text("{{ messages }}")
    script = ("import sys; sys.modules['hypothesis'] = None; "
              "from toolwire.apps.cli.main import main; "
              f"sys.exit(main(['conformance', {str(template)!r}]))")
    run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         env={**os.environ, "TOOLWIRE_LOAD_PLUGINS": ""}, timeout=60)
    assert run.returncode == 2
    assert "pip install 'hypothesis>=6.100'" in run.stderr and "toolwire[" not in run.stderr


def test_conformance_needs_at_least_one_example(tmp_path: Path) -> None:
    template = tmp_path / "t.jinja"
    template.write_text("{{ messages }}")
    for examples in ("0", "-1"):
        run = toolwire("conformance", str(template), "--examples", examples)
        assert run.returncode == 2
        assert f"argument --examples: must be at least 1, not {examples}" in run.stderr
