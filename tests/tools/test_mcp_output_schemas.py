"""An MCP server's output schemas pass the same bounds as every schema from outside (issue 40,
item 1).

A real MCP server over stdio (``tests/support/mcp_output_server.py``) declares an output
schema per tool. Before, the MCP SDK checked structured results on the servers' shared
event loop with an unbounded jsonschema and Python's ``re``: an output ``pattern`` of
``^(a+)+$`` held the interpreter lock 16 s at 29 characters (past the call's timeout), and
a 40-level ``anyOf`` chain never ended, so every tool of every server timed out. Now an
output schema is measured where its tool enters (over a limit, the tool is left out with a
note), and a result is checked in the calling thread by the bounded validator.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator

import pytest

pytest.importorskip("mcp")

from tests.support.mcp_output_server import SCRIPT
from toolwire import Dispatcher, DispatchResult, ToolCall, ToolRegistry
from toolwire.plugins.mcp_tools import MCPServers
from toolwire.plugins.mcp_tools.config import server_from_command
from toolwire.vocabulary.tools import Tool

pytestmark = pytest.mark.process  # a real stdio MCP server

START = 90.0  # seconds a server may take to start on a busy two-core machine
CALL_TIMEOUT = 10.0


@pytest.fixture(scope="module")
def served() -> Iterator[tuple[MCPServers, dict[str, Tool]]]:
    config = server_from_command(f"{sys.executable} {SCRIPT}", name="outputs")
    with MCPServers([config], connect_timeout=START) as owner:
        yield owner, {t.name: t for t in owner.tools()}


def call(tools: dict[str, Tool], name: str) -> DispatchResult:
    dispatcher = Dispatcher(ToolRegistry(list(tools.values())), timeout=CALL_TIMEOUT)
    return dispatcher.dispatch(ToolCall("c1", name, {}))


def test_an_output_schema_over_a_budget_leaves_its_tool_out_with_a_note(
        served: tuple[MCPServers, dict[str, Tool]]) -> None:
    owner, tools = served
    assert set(tools) == {"add", "good", "liar", "bare", "redos", "big"}
    (note,) = [n for n in owner.notes if "'chain'" in n]
    assert "skipped" in note and "output schema" in note and "1,000 subschemas" in note


def test_structured_content_is_held_to_its_output_schema(
        served: tuple[MCPServers, dict[str, Tool]]) -> None:
    _, tools = served
    assert not call(tools, "add").is_error
    good = call(tools, "good")
    assert not good.is_error and "Oslo" in good.content
    liar = call(tools, "liar")
    assert liar.is_error and liar.error_kind == "tool_error"
    assert "does not match its output schema" in liar.content and "at /count" in liar.content
    bare = call(tools, "bare")
    assert bare.is_error and "returned no structured content" in bare.content


def test_a_backtracking_output_pattern_is_answered_within_the_calls_timeout(
        served: tuple[MCPServers, dict[str, Tool]]) -> None:
    _, tools = served
    result = call(tools, "redos")
    # the SDK's re took 16 s here, holding the interpreter lock past the 10 s timeout:
    # the call ended as "timeout"; now it is answered, refused by the bounded matcher
    assert result.error_kind == "tool_error", result.content
    assert "does not match its output schema" in result.content
    assert not call(tools, "add").is_error  # the servers' event loop is free


def test_a_result_cut_while_it_was_read_is_shown_cut_not_checked() -> None:
    """Its structured content is the part read so far: it cannot match, and says so."""
    config = server_from_command(f"{sys.executable} {SCRIPT}", name="outputs")
    with MCPServers([config], connect_timeout=START, max_message_bytes=64 * 1024) as owner:
        tools = {t.name: t for t in owner.tools()}
        whole = call(tools, "good")
        cut = call(tools, "big")
    assert not whole.is_error
    assert not cut.is_error and "[result cut: " in cut.content
