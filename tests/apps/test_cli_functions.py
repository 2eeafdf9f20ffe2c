"""``--functions FILE.py``: the user's own functions as tools, through the real entry point,
with a real OpenAI-wire server on 127.0.0.1 as the model; and the refusal of writes in
runs without a prompt (``--message``, piped input) unless ``--allow-write`` or ``--yes``."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.cli import CliRun, run_cli
from tests.support.openai_wire_server import Stream, WireServer, reply_chunks

FUNCTIONS = '''\
"""Tools of my own."""
from __future__ import annotations

import json
from pathlib import Path

import toolwire

LOG = Path(__file__).with_name("log.txt")


def add(a: int, b: int = 2) -> int:
    """Add two numbers.

    :param a: the first number
    :param b: the second number
    """
    return a + b


def remember(note: str) -> str:
    """Write a note to the log."""
    with LOG.open("a") as file:
        file.write(note + "\\n")
    return "remembered"


@toolwire.tool(read_only=True)
def shout(text: str) -> str:
    """Say it louder."""
    return text.upper()


def _helper() -> None:
    """Not a tool: private."""
'''


def run(*args: str, cwd: Path, stdin: str | None = None) -> CliRun:
    return run_cli(*args, stdin=stdin or "", cwd=cwd)


@pytest.fixture
def functions(tmp_path: Path) -> Path:
    path = tmp_path / "my_tools.py"
    path.write_text(FUNCTIONS)
    return path


@pytest.fixture
def server() -> Iterator[WireServer]:
    with WireServer() as wire:
        yield wire


def test_tools_lists_the_public_functions_with_schemas_from_annotations_and_docstrings(
        functions: Path, tmp_path: Path) -> None:
    listed = run("tools", "--no-tools", "--functions", str(functions), "--json", cwd=tmp_path)
    assert listed.returncode == 0, listed.stderr
    rows = {row["name"]: row for row in json.loads(listed.stdout)}
    assert list(rows) == ["add", "remember", "shout"]
    assert rows["add"]["description"] == "Add two numbers."
    assert rows["add"]["parameters"] == {
        "type": "object", "required": ["a"],
        "properties": {"a": {"type": "integer", "description": "the first number"},
                       "b": {"type": "integer", "description": "the second number",
                             "default": 2}}}
    assert (rows["add"]["read_only"], rows["shout"]["read_only"]) == (False, True)


def test_read_only_functions_marks_them_all_read_only(functions: Path, tmp_path: Path) -> None:
    listed = run("tools", "--no-tools", "--functions", str(functions), "--read-only-functions",
                 "--read-only", "--json", cwd=tmp_path)
    assert [row["name"] for row in json.loads(listed.stdout)] == ["add", "remember", "shout"]


def test_a_function_runs_through_the_dispatcher(functions: Path, tmp_path: Path) -> None:
    called = run("tools", "--functions", str(functions), "--call", "add", "--args",
                 '{"a": 40}', cwd=tmp_path)
    assert (called.returncode, called.stdout) == (0, "42\n")
    wrong = run("tools", "--functions", str(functions), "--call", "add", "--args",
                '{"a": "x"}', cwd=tmp_path)
    assert wrong.returncode == 1 and "must be of type integer" in wrong.stdout


def test_the_model_calls_a_read_only_function_in_a_chat(functions: Path, tmp_path: Path,
                                                       server: WireServer) -> None:
    server.enqueue(Stream(reply_chunks("", [("c1", "shout", {"text": "hi"})])),
                   Stream(reply_chunks("It says HI.")))
    chat = run("chat", "--base-url", server.url, "--model", "m", "--functions", str(functions),
               "--json", "--message", "shout hi", cwd=tmp_path)
    assert chat.returncode == 0, chat.stderr
    offered = [t["function"]["name"] for t in server.requests[0].body["tools"]]
    assert {"add", "remember", "shout", "read_file"} <= set(offered)
    assert server.requests[1].body["messages"][-1]["content"] == "HI"


# -- writes in runs without a prompt ---------------------------------------------------------


def remember_call(server: WireServer) -> None:
    server.enqueue(Stream(reply_chunks("", [("c1", "remember", {"note": "milk"})])),
                   Stream(reply_chunks("Done.")))


def test_a_message_run_refuses_a_write_and_says_how_to_allow_it(
        functions: Path, tmp_path: Path, server: WireServer) -> None:
    remember_call(server)
    chat = run("chat", "--base-url", server.url, "--model", "m", "--functions", str(functions),
               "--json", "--message", "remember milk", cwd=tmp_path)
    assert chat.returncode == 0, chat.stderr
    assert not (tmp_path / "log.txt").exists()
    result = next(json.loads(line) for line in chat.stdout.splitlines()
                  if json.loads(line)["type"] == "tool_result")
    assert (result["is_error"], result["error_kind"]) == (True, "denied")
    assert "--allow-write" in chat.stderr and "remember was not run" in chat.stderr


@pytest.mark.parametrize("flag", ["--allow-write", "--yes"])
def test_allow_write_or_yes_lets_a_message_run_write(functions: Path, tmp_path: Path,
                                                    server: WireServer, flag: str) -> None:
    remember_call(server)
    chat = run("chat", "--base-url", server.url, "--model", "m", "--functions", str(functions),
               flag, "--message", "remember milk", cwd=tmp_path)
    assert chat.returncode == 0, chat.stderr
    assert (tmp_path / "log.txt").read_text() == "milk\n"


def test_piped_input_refuses_writes_too(tmp_path: Path, server: WireServer) -> None:
    server.enqueue(Stream(reply_chunks("", [("c1", "write_file",
                                              {"path": "x.txt", "content": "x"})])),
                   Stream(reply_chunks("Refused.")))
    chat = run("chat", "--base-url", server.url, "--model", "m", "--workspace", str(tmp_path),
               stdin="write x.txt\n", cwd=tmp_path)
    assert chat.returncode == 0, chat.stderr
    assert not (tmp_path / "x.txt").exists() and "write_file was not run" in chat.stderr


def test_read_only_functions_need_no_approval(functions: Path, tmp_path: Path,
                                              server: WireServer) -> None:
    remember_call(server)
    chat = run("chat", "--base-url", server.url, "--model", "m", "--functions", str(functions),
               "--read-only-functions", "--message", "remember milk", cwd=tmp_path)
    assert chat.returncode == 0, chat.stderr
    assert (tmp_path / "log.txt").read_text() == "milk\n"


# -- files that cannot be tools ----------------------------------------------------------------


@pytest.mark.parametrize(("source", "said"), [
    ("def broken(:\n    pass\n", "line 1: SyntaxError"),
    ("import math\n\nx = 1\nraise RuntimeError('no config')\n",
     "line 4: RuntimeError: no config"),
    ("import math\nfrom os.path import join\n_private = 1\n", "defines no public function"),
    ("def odd(x: complex) -> str:\n    '''Odd.'''\n    return ''\n",
     "function 'odd' cannot be a tool"),
])
def test_a_file_that_cannot_give_tools_is_an_input_error(tmp_path: Path, source: str,
                                                        said: str) -> None:
    path = tmp_path / "bad.py"
    path.write_text(source)
    listed = run("tools", "--functions", str(path), cwd=tmp_path)
    assert listed.returncode == 2, listed.stderr
    assert "bad.py" in listed.stderr and said in listed.stderr
    assert "Traceback" not in listed.stderr


def test_a_function_named_like_a_plugin_tool_is_an_input_error(tmp_path: Path) -> None:
    path = tmp_path / "clash.py"
    path.write_text("def read_file(path: str) -> str:\n    '''Mine.'''\n    return path\n")
    clash = run("tools", "--functions", str(path), cwd=tmp_path)
    assert clash.returncode == 2 and "'read_file'" in clash.stderr and "--no-tools" in clash.stderr
    alone = run("tools", "--no-tools", "--functions", str(path), "--json", cwd=tmp_path)
    assert alone.returncode == 0 and json.loads(alone.stdout)[0]["name"] == "read_file"


def test_a_missing_functions_file_is_an_input_error(tmp_path: Path) -> None:
    missing = run("chat", "--provider", "ollama", "--model", "m", "--functions", "nope.py",
                  "--message", "x", cwd=tmp_path)
    assert missing.returncode == 2 and "Traceback" not in missing.stderr
    assert missing.stderr == "toolwire: --functions nope.py: file not found\n"
