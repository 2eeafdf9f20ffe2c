"""``toolwire chat --demo``: the terminal chat on the tiny stand-in model of ``toolwire
demo``, run by the real llama.cpp, each message answered with one forced call (of the
user's own ``--functions`` when given, else ``search_text`` in sample notes) and an answer
quoting the real result; through the real entry point, piped and on a pty."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from tests.support.cli import CliRun, run_cli
from tests.support.terminal import Terminal
from toolwire.apps.cli.demo import EXAMPLE_TEXT, scripted_arguments

pytest.importorskip("llama_cpp")

FUNCTIONS = '''def greet(name: str, times: int = 2) -> str:
    """Greet someone.

    :param name: who to greet
    """
    return f"hello {name}! " * times
'''


def chat(*args: str, cwd: Path) -> CliRun:
    return run_cli("chat", "--demo", *args, cwd=cwd)


@pytest.mark.model
def test_the_demo_chat_searches_the_sample_notes_and_quotes_the_result(tmp_path: Path) -> None:
    run = chat("--message", "what about Alex?", cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    assert "a tiny stand-in model (random weights)" in run.stderr
    assert "loading the stand-in model ..." in run.stderr
    lines = run.stdout.splitlines()
    assert '-> search_text({"pattern": "Alex"})' in lines
    assert lines[lines.index('-> search_text({"pattern": "Alex"})') + 1].startswith(
        "<- search_text: notes/people.md:3: Alex: maintains the parser plugins")
    assert "Your notes mention Alex here:" in lines
    assert not list(tmp_path.iterdir())  # its notes and model lived in a temporary folder


@pytest.mark.model
def test_the_demo_chat_calls_one_of_the_users_functions(tmp_path: Path) -> None:
    functions = tmp_path / "mine.py"
    functions.write_text(FUNCTIONS)
    run = chat("--functions", str(functions), "--allow-write", "--message", "hi",
               cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    assert '-> greet({"name": "Alex"})' in run.stdout
    assert "<- greet: hello Alex! hello Alex!" in run.stdout
    assert "(a stand-in model) greet returned:\nhello Alex! hello Alex!" in run.stdout
    refused = chat("--functions", str(functions), "--message", "hi", cwd=tmp_path)
    assert "greet was not run: it changes things" in refused.stderr  # the usual policy holds


@pytest.mark.process
def test_the_demo_chat_on_a_terminal_asks_before_the_users_function_runs(
        tmp_path: Path) -> None:
    functions = tmp_path / "mine.py"
    functions.write_text(FUNCTIONS)
    env = {**os.environ, "TOOLWIRE_LOAD_PLUGINS": "", "HOME": str(tmp_path),
           "TOOLWIRE_HISTORY_FILE": str(tmp_path / "history"), "TERM": "dumb"}
    term = Terminal([sys.executable, "-m", "toolwire", "chat", "--demo", "--functions",
                     str(functions)], env=env, cwd=tmp_path)
    try:
        term.expect("> ")
        term.line("say hello")
        term.expect("allow greet? [y]es / [n]o / [a]lways for greet: ")
        term.line("y")
        term.expect("(a stand-in model) greet returned:")
        term.expect("> ")
        term.line("/quit")
        assert term.wait() == 0
    finally:
        term.close()


def test_demo_with_a_model_is_an_input_error(tmp_path: Path) -> None:
    run = chat("--model", "m.gguf", "--message", "hi", cwd=tmp_path)
    assert run.returncode == 2
    assert run.stderr == ("toolwire: --demo chats with the stand-in model: leave out --model, "
                          "--provider and --base-url\n")


@pytest.mark.parametrize(("options", "named"), [
    (["--ctx-size", "100"], "--ctx-size"), (["--temperature", "0.5"], "--temperature"),
    (["--max-tokens", "4"], "--max-tokens"), (["--workspace", "/no/such/folder"], "--workspace"),
    (["--seed", "1", "--no-repack"], "--seed, --no-repack")])
def test_demo_refuses_the_options_its_stand_in_cannot_use(tmp_path: Path, options: list[str],
                                                          named: str) -> None:
    run = chat(*options, "--message", "hi", cwd=tmp_path)
    assert (run.returncode, run.stdout) == (2, "")
    assert run.stderr == (f"toolwire: --demo chats with the stand-in model in its own sample "
                          f"notes, which cannot use {named}: leave "
                          f"{'them' if ',' in named else 'it'} out\n")


def test_made_up_arguments_fit_the_schema() -> None:
    import jsonschema

    schema = {"type": "object", "required": ["mode", "count", "ratio", "tags", "where", "on",
                                              "maybe"],
              "properties": {
                  "mode": {"type": "string", "enum": ["fast", "slow"]},
                  "count": {"type": "integer", "minimum": 3},
                  "ratio": {"type": "number", "exclusiveMinimum": 0},
                  "tags": {"type": "array", "items": {"type": "string"}, "minItems": 2},
                  "where": {"type": "object", "required": ["city"],
                            "properties": {"city": {"type": "string"}}},
                  "on": {"type": "boolean"},
                  "maybe": {"anyOf": [{"type": "null"}, {"type": "integer"}]},
                  "optional": {"type": "string"}}}
    made = scripted_arguments(schema)
    jsonschema.validate(made, schema)
    assert made["mode"] == "fast" and made["count"] == 3 and "optional" not in made
    assert made["tags"] == [EXAMPLE_TEXT, EXAMPLE_TEXT] and made["where"] == {"city": "Alex"}
    assert scripted_arguments({"type": "object", "properties": {"q": {"type": "string"},
                                                                "n": {"type": "integer"}}}) \
        == {"q": EXAMPLE_TEXT}
    assert scripted_arguments({"type": "object"}) == {}
