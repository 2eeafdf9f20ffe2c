"""``toolwire tools`` prints what an MCP server wrote escaped: a server is untrusted, and
its tool descriptions, schemas and results could otherwise set the window title, write
the clipboard (OSC 52), repaint the screen, hide text behind a carriage return or show
it reordered (bidi overrides). Through the real entry point and a real server."""

from __future__ import annotations

import json
import shlex
import sys
from pathlib import Path

import pytest

pytest.importorskip("mcp")

from tests.support.cli import CliRun, run_cli
from tests.support.mcp_terminal_server import (
    DESCRIPTION,
    NEVER_SENT,
    PARAMETER,
    RESULT,
    SCRIPT,
)
from toolwire.apps.cli.terminal_text import terminal_safe

pytestmark = pytest.mark.process

SERVER = shlex.join([sys.executable, SCRIPT])


def toolwire(*args: str, cwd: Path) -> CliRun:
    return run_cli("tools", "--mcp", SERVER, "--no-tools", *args, cwd=cwd)


def assert_nothing_reaches_the_terminal(shown: str) -> None:
    for character in NEVER_SENT:
        assert character not in shown, (character, shown)


def test_the_tool_list_shows_a_servers_description_and_schema_escaped(
        tmp_path: Path) -> None:
    run = toolwire(cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    assert_nothing_reaches_the_terminal(run.stdout + run.stderr)
    assert f"  {terminal_safe(DESCRIPTION)}\n" in run.stdout  # the hidden part shows too
    assert "\\x0dhidden" in run.stdout and "\\u202eevil\\u202c" in run.stdout
    assert "\\u001b]52;c;" in run.stdout  # the parameter's description, as a JSON escape


def test_the_json_list_escapes_them_and_reads_back_the_same(tmp_path: Path) -> None:
    run = toolwire("--json", cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    assert_nothing_reaches_the_terminal(run.stdout)
    (row,) = json.loads(run.stdout)
    assert row["description"] == DESCRIPTION
    assert row["parameters"]["properties"]["text"]["description"] == PARAMETER


@pytest.mark.parametrize("as_json", [False, True])
def test_a_calls_result_from_the_server_is_shown_escaped(tmp_path: Path, as_json: bool) -> None:
    run = toolwire("--call", "shout", "--args", '{"text": "hi"}',
                   *(["--json"] if as_json else []), cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    assert_nothing_reaches_the_terminal(run.stdout)
    if as_json:
        assert json.loads(run.stdout)["content"] == RESULT
    else:
        assert run.stdout == terminal_safe(RESULT) + "\n"
