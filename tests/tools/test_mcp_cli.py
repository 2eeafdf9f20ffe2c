"""The MCP options of the command line, through the real entry point and real servers.

``toolwire tools`` lists and runs tools (built-in and MCP) without a model;
``toolwire chat`` with ``--mcp`` offers the server's tools to a remote model
(a real OpenAI-wire server on 127.0.0.1) and runs its call on the MCP server;
``toolwire serve`` builds its chats with the same tools.
"""

from __future__ import annotations

import json
import os
import shlex
import sys
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("mcp")

from tests.support.cli import CliRun, run_cli
from tests.support.mcp_fixtures import SCRIPT, http_server, logged
from tests.support.openai_wire_server import Stream, WireServer, reply_chunks
from toolwire import ToolCall
from toolwire.apps.cli.main import _parser
from toolwire.apps.cli.serve import make_chat_factory
from toolwire.plugins.mcp_tools import close_all, mcp_source
from toolwire.testing.scripted import ScriptedBackend, isolated_plugin_manager

TOOLS_SERVER = shlex.join([sys.executable, SCRIPT, "tools"])
OTHER_SERVER = shlex.join([sys.executable, SCRIPT, "other"])


def toolwire(*args: str, cwd: Path | None = None, env: dict[str, str] | None = None) -> CliRun:
    return run_cli(*args, env={**os.environ, **(env or {})}, cwd=cwd)


@pytest.fixture
def config(tmp_path: Path) -> Path:
    path = tmp_path / "mcp.json"
    path.write_text(json.dumps({"mcpServers": {
        "alpha": {"command": sys.executable, "args": [SCRIPT, "tools"],
                  "env": {"MCP_TEST_LOG": str(tmp_path / "calls.jsonl")},
                  "trust": "read-only-hints"},
        "beta": {"command": sys.executable, "args": [SCRIPT, "other"],
                 "trust": "read-only-hints"},
        "retired": {"command": "/nonexistent", "disabled": True},
    }}))
    return path


@pytest.mark.process
def test_tools_lists_every_tool_with_its_source_access_and_schema(tmp_path: Path) -> None:
    run = toolwire("tools", "--mcp", TOOLS_SERVER, "--mcp-trust", "mcp_servers", "--json",
                   cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    rows = {row["name"]: row for row in json.loads(run.stdout)}
    assert rows["read_file"]["source"] == "toolwire.plugins.workspace_tools"
    assert rows["add"]["source"] == "mcp:mcp_servers" and rows["add"]["read_only"] is True
    assert rows["save_note"]["read_only"] is False
    assert rows["add"]["parameters"]["properties"]["a"]["type"] == "integer"
    assert rows["add"]["description"] == "Add two whole numbers."
    text = toolwire("tools", "--mcp", TOOLS_SERVER, "--mcp-trust", "mcp_servers", "--no-tools",
                    "--read-only", cwd=tmp_path)
    assert text.returncode == 0, text.stderr
    assert "add  (mcp:mcp_servers, read-only)" in text.stdout
    assert "read_file" not in text.stdout and "save_note" not in text.stdout


@pytest.mark.process
def test_an_untrusted_servers_hints_make_no_tool_read_only_and_a_note_says_so(
        tmp_path: Path) -> None:
    run = toolwire("tools", "--mcp", TOOLS_SERVER, "--no-tools", "--json", cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    rows = {row["name"]: row for row in json.loads(run.stdout)}
    assert "add" in rows and not any(row["read_only"] for row in rows.values())
    assert "MCP server 'mcp_servers' marks 8 tools read-only (add, " in run.stderr
    assert "--mcp-trust mcp_servers" in run.stderr
    read_only = toolwire("tools", "--mcp", TOOLS_SERVER, "--no-tools", "--read-only",
                         cwd=tmp_path)
    assert (read_only.returncode, read_only.stdout) == (0, "no tools\n"), read_only.stderr
    called = toolwire("tools", "--mcp", TOOLS_SERVER, "--call", "add", "--read-only",
                      "--args", '{"a": 1, "b": 2}', cwd=tmp_path)
    assert called.returncode == 1 and "read-only" in called.stdout


def test_trusting_a_server_that_is_not_there_is_an_input_error(tmp_path: Path) -> None:
    run = toolwire("tools", "--mcp", TOOLS_SERVER, "--mcp-trust", "mcp_server", cwd=tmp_path)
    assert run.returncode == 2
    assert "cannot trust 'mcp_server'" in run.stderr and "'mcp_servers'" in run.stderr


@pytest.mark.process
def test_tools_call_runs_one_call_through_dispatch(config: Path, tmp_path: Path) -> None:
    ok = toolwire("tools", "--mcp-config", str(config), "--call", "add",
                  "--args", '{"a": 40, "b": 2}', cwd=tmp_path)
    assert (ok.returncode, ok.stdout) == (0, "42\n"), ok.stderr
    assert "registered as 'alpha_search'" in ok.stderr  # the collision is said
    alone = tmp_path / "alpha.json"
    alone.write_text(json.dumps({"mcpServers": {
        "alpha": json.loads(config.read_text())["mcpServers"]["alpha"]}}))
    wrong = toolwire("tools", "--mcp-config", str(alone), "--call", "add",
                     "--args", '{"a": "forty", "b": 2}', "--json", cwd=tmp_path)
    assert wrong.returncode == 1
    result = json.loads(wrong.stdout)
    assert result["is_error"] and result["error_kind"] == "invalid_arguments"
    assert [e["arguments"] for e in logged(tmp_path / "calls.jsonl", tool="add")] == \
        [{"a": 40, "b": 2}]
    refused = toolwire("tools", "--mcp-config", str(alone), "--call", "save_note",
                       "--args", '{"title": "x"}', "--read-only", cwd=tmp_path)
    assert refused.returncode == 1 and "read-only" in refused.stdout


@pytest.mark.process
def test_tools_call_over_streamable_http(tmp_path: Path) -> None:
    with http_server() as (url, _process):
        run = toolwire("tools", "--mcp-url", url, "--call", "refuse",
                       "--args", '{"reason": "closed"}', cwd=tmp_path)
    assert run.returncode == 1
    assert "reported an error" in run.stdout and "refused: closed" in run.stdout


@pytest.mark.parametrize("args, message", [
    (["--args", "[1]"], "--args must be a JSON object"),
    (["--args", "{nope"], "--args is not valid JSON"),
])
def test_tools_call_with_bad_arguments_is_a_usage_error(tmp_path: Path, args: list[str],
                                                        message: str) -> None:
    run = toolwire("tools", "--call", "read_file", *args, cwd=tmp_path)
    assert run.returncode == 2 and message in run.stderr


def test_a_bad_mcp_configuration_is_a_usage_error_naming_the_file(tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text('{"servers": {}}')
    run = toolwire("tools", "--mcp-config", str(bad), cwd=tmp_path)
    assert run.returncode == 2
    assert f"{bad}: expected an object with an 'mcpServers' object" in run.stderr
    unbalanced = toolwire("tools", "--mcp", "python 'server.py", cwd=tmp_path)
    assert unbalanced.returncode == 2 and "cannot split the MCP command" in unbalanced.stderr


@pytest.mark.process
def test_a_server_that_fails_to_start_is_reported_and_the_rest_still_listed(
        tmp_path: Path) -> None:
    run = toolwire("tools", "--mcp", "/nonexistent/mcp-server", "--json", cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    assert "MCP server 'mcp-server'" in run.stderr and "could not be started" in run.stderr
    assert "read_file" in {row["name"] for row in json.loads(run.stdout)}


@pytest.mark.process
def test_chat_offers_mcp_tools_to_the_model_and_runs_its_call_on_the_server(
        config: Path, tmp_path: Path) -> None:
    with WireServer() as wire:
        wire.enqueue(Stream(reply_chunks("", [("c1", "lookup_city", {"city": "Vienna"})])),
                     Stream(reply_chunks("Vienna lies on the Danube.")))
        run = toolwire("chat", "--provider", "custom", "--base-url", wire.url, "--model", "m",
                       "--mcp-config", str(config), "--read-only", "--json",
                       "--message", "Tell me about Vienna", cwd=tmp_path)
        assert run.returncode == 0, run.stderr
        events = [json.loads(line) for line in run.stdout.splitlines() if line.strip()]
        result = next(e for e in events if e["type"] == "tool_result")
        assert result["content"] == "Vienna: population 1.2 million, river Danube"
        offered: list[dict[str, Any]] = wire.requests[0].body["tools"]
        by_name = {t["function"]["name"]: t["function"] for t in offered}
        assert {"lookup_city", "alpha_search", "beta_search", "read_file"} <= set(by_name)
        assert "save_note" not in by_name  # a write tool, and the session is read-only
        assert by_name["lookup_city"]["parameters"]["required"] == ["city"]
        assert wire.requests[1].body["messages"][-1] == {
            "role": "tool", "tool_call_id": "c1",
            "content": "Vienna: population 1.2 million, river Danube"}
    assert logged(tmp_path / "calls.jsonl", tool="lookup_city") == [
        {"event": "call", "pid": logged(tmp_path / "calls.jsonl")[0]["pid"],
         "tool": "lookup_city", "arguments": {"city": "Vienna"}}]


@pytest.mark.process
def test_serve_builds_its_chats_with_the_mcp_tools(tmp_path: Path) -> None:
    args = _parser()[0].parse_args(["serve", "--model", "stand-in.gguf", "--mcp", OTHER_SERVER,
                                    "--no-tools", "--workspace", str(tmp_path)])
    plugins = isolated_plugin_manager()
    make_chat, _label = make_chat_factory(args, plugins, ScriptedBackend(["hi"]))
    chat = make_chat((), None)
    try:
        assert sorted(chat.registry.names()) == ["archive_size", "search"]
        assert {mcp_source(t) for t in chat.registry} == {"mcp:mcp_servers"}
        assert chat.dispatcher.dispatch(ToolCall("c", "archive_size", {})).content == "42"
    finally:
        close_all()
    assert chat.dispatcher.dispatch(ToolCall("c", "archive_size", {})).is_error
