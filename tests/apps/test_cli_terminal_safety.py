"""Model output on the terminal: control characters and escape sequences in the model's
text, its reasoning, its tool arguments and a tool's result are shown escaped, never sent
to the terminal (window titles, OSC 52 clipboard writes, OSC 8 links, CSI repaints); the
JSON lines keep the exact text. The model is a scripted backend with the real parser."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from toolwire import Tool, ToolCall
from toolwire.apps.cli.approval_prompt import TerminalApprover
from toolwire.apps.cli.chat import run_chat
from toolwire.apps.cli.main import _parser
from toolwire.apps.cli.repl import Repl
from toolwire.apps.cli.terminal_text import json_safe, terminal_safe
from toolwire.conversation.approval import Approval, ApprovalRequest
from toolwire.testing import ScriptedBackend, isolated_plugin_manager

TITLE = "\x1b]0;pwned\x07"
CLIPBOARD = "\x1b]52;c;cm0gLXJmIH4=\x07"
LINK = "\x1b]8;;http://evil.example/\x1b\\click here\x1b]8;;\x1b\\"
REPAINT = "\x1b[2J\x1b[H"
C1_CSI = "\x9b31m"
HIDING = "visible\rhidden\x08\x7f"
BIDI = "\u202eevil\u202c"
HOSTILE = TITLE + CLIPBOARD + LINK + REPAINT + C1_CSI + HIDING + BIDI
NEVER_SENT = ("\x1b", "\x07", "\x9b", "\r", "\x08", "\x7f", "\u202e", "\u202c")

REPLY = (f"<think>\nthinking {TITLE}{C1_CSI}\n</think>\n\nHello {CLIPBOARD}{REPAINT} world "
         f"{BIDI}\n<tool_call>\n<function=echo>\n<parameter=text>\n{LINK}{HIDING}\n"
         "</parameter>\n</function>\n</tool_call>")
ANSWER = f"Done {REPAINT}{TITLE}."


def assert_nothing_reaches_the_terminal(shown: str) -> None:
    for character in NEVER_SENT:
        assert character not in shown, (character, shown)


@pytest.fixture
def functions(tmp_path: Path) -> Path:
    file = tmp_path / "mine.py"
    file.write_text("def echo(text: str) -> str:\n"
                    "    \"\"\"Say it back.\n\n    :param text: what to say\n    \"\"\"\n"
                    f"    return 'echo {HOSTILE.encode('unicode_escape').decode()} ' + text\n")
    return file


def run(tmp_path: Path, functions: Path, *extra: str) -> None:
    args = _parser()[0].parse_args([
        "chat", "--message", "say it", "--workspace", str(tmp_path), "--no-tools",
        "--functions", str(functions), "--read-only-functions", "--show-reasoning", *extra])
    backend = ScriptedBackend([REPLY, ANSWER], chunk_size=3)
    assert run_chat(args, isolated_plugin_manager(), backend=backend) == 0


def test_model_text_reasoning_arguments_and_results_are_escaped(
        tmp_path: Path, functions: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run(tmp_path, functions)
    shown = capsys.readouterr().out
    assert_nothing_reaches_the_terminal(shown)
    assert "thinking \\x1b]0;pwned\\x07\\x9b31m" in shown  # reasoning, escaped but shown
    assert "Hello \\x1b]52;c;cm0gLXJmIH4=\\x07\\x1b[2J\\x1b[H world \\u202eevil\\u202c" in shown
    call = next(line for line in shown.splitlines() if line.startswith("-> echo("))
    assert "\\u001b]8;;http://evil.example/" in call  # JSON's own escape, then shown as text
    result = next(line for line in shown.splitlines() if line.startswith("<- echo: "))
    assert result.startswith("<- echo: echo \\x1b]0;pwned\\x07\\x1b]52;c;")
    assert "visible\\x0dhidden\\x08\\x7f" in result
    assert "Done \\x1b[2J\\x1b[H\\x1b]0;pwned\\x07." in shown


def test_json_lines_keep_the_exact_text_with_nothing_raw(
        tmp_path: Path, functions: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run(tmp_path, functions, "--json")
    shown = capsys.readouterr().out
    assert_nothing_reaches_the_terminal(shown)
    events = [json.loads(line) for line in shown.splitlines()]
    text = "".join(e["text"] for e in events if e["type"] == "text")
    assert f"Hello {CLIPBOARD}{REPAINT} world {BIDI}" in text
    reasoning = "".join(e["text"] for e in events if e["type"] == "reasoning")
    assert f"thinking {TITLE}{C1_CSI}" in reasoning
    (call,) = [e for e in events if e["type"] == "tool_call"]
    assert call["arguments"] == {"text": LINK + HIDING}
    (result,) = [e for e in events if e["type"] == "tool_result"]
    assert result["content"] == f"echo {HOSTILE} {LINK}{HIDING}"


def test_the_approval_question_shows_hostile_arguments_escaped() -> None:
    def write(path: str, content: str) -> str:
        """Write a file."""
        return "ok"

    tool = Tool.from_function(write)
    out = io.StringIO()
    asked: list[str] = []
    approve = TerminalApprover(read_line=lambda prompt: asked.append(prompt) or "n", out=out)
    call = ToolCall(id="c1", name="write", arguments={"path": f"a{TITLE}.txt",
                                                      "content": HOSTILE})
    assert approve(ApprovalRequest(call=call, tool=tool)) is Approval.DENY
    assert_nothing_reaches_the_terminal(out.getvalue() + "".join(asked))
    assert "a\\u001b]0;pwned\\u0007.txt" in out.getvalue()
    assert "\\x9b31m" in out.getvalue()  # JSON leaves C1 as it is: escaped for the terminal


def test_repl_notices_escape_what_tools_and_files_bring() -> None:
    from toolwire import Chat

    def lookup(name: str) -> str:
        """Look someone up."""
        return name

    tool = Tool.from_function(lookup, description=f"Looks up {TITLE}{CLIPBOARD}people.")
    err = io.StringIO()
    repl = Repl(Chat(ScriptedBackend([]), tools=[tool]), send=lambda text: None, err=err)
    repl.command("/tools")
    assert_nothing_reaches_the_terminal(err.getvalue())
    assert "Looks up \\x1b]0;pwned\\x07" in err.getvalue()


def test_only_characters_a_terminal_acts_on_are_escaped() -> None:
    ordinary = "tabs\tand\nnewlines, café, 中文, emoji 🎉, \u00a0nbsp, \\x1b as text"
    assert terminal_safe(ordinary) == ordinary
    assert json_safe(json.dumps(ordinary, ensure_ascii=False)) == json.dumps(
        ordinary, ensure_ascii=False)
    every = "".join(chr(c) for c in range(0x20)) + "\x7f" + "".join(
        chr(c) for c in range(0x80, 0xA0))
    shown = terminal_safe(every)
    assert shown.count("\\x") == len(every) - 2  # all but tab and newline
    assert "\t" in shown and "\n" in shown
    lone = "half \ud83c of an emoji"
    assert terminal_safe(lone) == "half \\ud83c of an emoji"
    assert json.loads(json_safe(json.dumps(lone, ensure_ascii=False))) == lone
