"""MCP tools against real MCP servers (the SDK's own, run as processes on stdio and HTTP).

Every call goes through toolwire's one dispatcher, as a chat's calls do: the
server's schema validates first, the session's timeout and cancellation apply,
and each failure (an ``isError`` result, a crash, a hang, a lost connection)
becomes the tool's result while the session and the other servers go on.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("mcp")

from tests.support.mcp_fixtures import (
    SCRIPT,
    http_server,
    logged,
    processes_with,
    running,
    stdio_server,
    wait_until,
)
from tests.support.paths import REPO
from tests.support.tiers import needs
from toolwire import (
    Approval,
    ApprovalRequest,
    CancelToken,
    Chat,
    Dispatcher,
    DispatchResult,
    ToolCall,
    ToolRegistry,
)
from toolwire.plugins.mcp_tools import (
    TRUST_READ_ONLY_HINTS,
    MCPConfigError,
    MCPServerError,
    MCPServers,
    mcp_source,
    mcp_tools,
    server_from_url,
)
from toolwire.testing.scripted import ScriptedBackend
from toolwire.vocabulary.tools import Tool

START = 90.0  # seconds a server may take to start on a busy two-core machine
HANDSHAKE = 15.0  # long enough for a real server to start here, short enough to wait out
READ_TOOLS = {"add", "lookup_city", "search", "pid", "picture", "stats", "huge", "many_blocks"}
WRITE_TOOLS = {"save_note", "refuse", "slow", "crash", "huge_failure"}


@pytest.fixture(scope="module")
def log(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("mcp") / "calls.jsonl"


@pytest.fixture(scope="module")
@needs("process")
def servers(log: Path) -> Iterator[MCPServers]:
    with MCPServers([stdio_server("tools", log=log)], connect_timeout=START,
                    trusted=["tools"]) as owner:
        yield owner


@pytest.fixture(scope="module")
@needs("process")
def tools(servers: MCPServers) -> list[Tool]:
    return servers.tools(strict=True)


def run(tools: list[Tool], name: str, timeout: float = 30.0, read_only: bool = False,
        cancel: CancelToken | None = None, **arguments: object) -> DispatchResult:
    dispatcher = Dispatcher(ToolRegistry(tools), timeout=timeout, read_only=read_only)
    return dispatcher.dispatch(ToolCall("call_1", name, arguments), cancel=cancel)


# -- listing -------------------------------------------------------------------------------


def test_listing_registers_each_tool_with_its_name_description_and_schema_as_given(
        servers: MCPServers, tools: list[Tool]) -> None:
    listed = servers._loop.run(servers.connection("tools").list_tools(), timeout=START)
    assert [t.name for t in tools] == [t.name for t in listed]
    assert set(READ_TOOLS | WRITE_TOOLS) == {t.name for t in tools}
    for tool, given in zip(tools, listed, strict=True):
        assert tool.description == (given.description or "")
        assert dict(tool.parameters) == given.input_schema
        assert mcp_source(tool) == "mcp:tools"
    add = next(t for t in tools if t.name == "add")
    assert add.description == "Add two whole numbers."
    assert add.parameters["required"] == ["a", "b"]
    assert {k: v["type"] for k, v in add.parameters["properties"].items()} == \
        {"a": "integer", "b": "integer"}


def test_the_read_only_hint_marks_read_only_and_a_tool_without_it_writes(
        tools: list[Tool]) -> None:
    assert {t.name for t in tools if t.read_only} == READ_TOOLS
    assert {t.name for t in tools if not t.read_only} == WRITE_TOOLS


def test_a_read_only_session_offers_only_hinted_tools_and_refuses_the_rest_by_name(
        tools: list[Tool], log: Path) -> None:
    dispatcher = Dispatcher(ToolRegistry(tools), read_only=True)
    assert {t.name for t in dispatcher.offered_tools()} == READ_TOOLS
    result = run(tools, "save_note", read_only=True, title="x")
    assert result.is_error and result.error_kind == "read_only"
    assert "'save_note' changes things and this session is read-only" in result.content
    assert logged(log, tool="save_note") == []


@pytest.mark.process
def test_an_untrusted_servers_read_only_hints_make_write_tools_with_a_note() -> None:
    with MCPServers([stdio_server("tools"), stdio_server("other")], trusted=["other"],
                    connect_timeout=START) as owner:
        tools = owner.tools(strict=True, taken=["search"])
        by_name = {t.name: t for t in tools}
        assert not any(by_name[name].read_only for name in READ_TOOLS - {"search"})
        assert not by_name["tools_search"].read_only
        assert by_name["archive_size"].read_only and by_name["other_search"].read_only
        assert [n for n in owner.notes if "hints are not trusted" in n] == [
            "MCP server 'tools' marks 8 tools read-only (add, lookup_city, search, pid, "
            "picture and 3 more); its hints are not trusted, so they are write tools. To "
            "trust them: \"trust\": \"read-only-hints\" in its mcpServers entry, or "
            "--mcp-trust tools"]
        read_only = Dispatcher(ToolRegistry(tools), read_only=True)
        assert {t.name for t in read_only.offered_tools()} == {"archive_size", "other_search"}
        refused = read_only.dispatch(ToolCall("c", "add", {"a": 1, "b": 2}))
        assert refused.error_kind == "read_only"
        asked: list[str] = []

        def approver(request: ApprovalRequest) -> Approval:
            asked.append(request.tool.name)
            return Approval.DENY

        gated = Dispatcher(ToolRegistry(tools), approve=approver, timeout=30)
        assert gated.dispatch(ToolCall("c", "add", {"a": 1, "b": 2})).error_kind == "denied"
        assert gated.dispatch(ToolCall("c", "archive_size", {})).content == "42"
        assert asked == ["add"]  # the trusted server's read-only tool ran without asking


@pytest.mark.process
def test_a_config_files_trust_entry_and_the_trusted_option_are_the_same_trust(
        tmp_path: Path) -> None:
    config = tmp_path / "mcp.json"
    config.write_text(json.dumps({"mcpServers": {
        "calc": {"command": sys.executable, "args": [stdio_server("tools").args[0], "tools"],
                 "trust": "read-only-hints"}}}))
    with MCPServers.from_config(config, connect_timeout=START) as owner:
        assert {t.name for t in owner.tools(strict=True) if t.read_only} == READ_TOOLS
    with pytest.raises(MCPConfigError, match=r"cannot trust 'calc2': no MCP server has that "
                                             r"name \(the servers: 'calc'\)"):
        MCPServers.from_config(config, trusted=["calc2"])


# -- calls ---------------------------------------------------------------------------------


def test_a_valid_call_is_validated_and_runs_on_the_server(tools: list[Tool], log: Path) -> None:
    result = run(tools, "add", a=2, b=40)
    assert (result.content, result.is_error) == ("42", False)
    assert {"a": 2, "b": 40} in [e["arguments"] for e in logged(log, tool="add")]


def test_a_wrong_typed_call_is_rejected_before_it_reaches_the_server(
        tools: list[Tool], log: Path) -> None:
    result = run(tools, "add", a="two", b=2)
    assert result.is_error and result.error_kind == "invalid_arguments"
    assert "parameter 'a' must be of type integer" in result.content
    missing = run(tools, "add", a=1)
    assert missing.error_kind == "invalid_arguments" and "'b'" in missing.content
    assert all(e["arguments"]["a"] != "two" for e in logged(log, tool="add"))


def test_an_is_error_result_becomes_an_error_result_with_the_servers_words(
        tools: list[Tool]) -> None:
    result = run(tools, "refuse", reason="no key")
    assert result.is_error and result.error_kind == "tool_error"
    assert result.content.startswith("Error: MCP tool 'refuse' (server 'tools') reported an "
                                     "error: ")
    assert "refused: no key" in result.content


def test_text_structured_and_other_content_all_reach_the_model(tools: list[Tool]) -> None:
    picture = run(tools, "picture").content.splitlines()
    assert picture[0] == "a red square"
    assert picture[1].startswith("[image: image/png, 108 bytes")
    assert picture[2].startswith("[audio: audio/wav, 64 bytes")
    assert picture[3] == "[resource link: square.png <file:///square.png> (image/png): the square]"
    assert picture[4:] == ["[resource <file:///notes.txt> (text/plain)]", "embedded words"]
    stats = run(tools, "stats", city="Vienna")
    assert not stats.is_error
    assert '"population": 1200000' in stats.content and "Danube" in stats.content


def test_a_slow_tool_past_the_timeout_is_abandoned_and_cancelled_on_the_server(
        tools: list[Tool], log: Path) -> None:
    started = time.monotonic()
    result = run(tools, "slow", timeout=1.0, seconds=60)
    assert result.is_error and result.error_kind == "timeout"
    assert "'slow' did not finish within 1 seconds" in result.content
    assert time.monotonic() - started < 30  # (not the tool's 60 s: a loaded machine's room)
    assert wait_until(lambda: logged(log, "cancelled", "slow"), within=30)
    assert run(tools, "add", a=1, b=1).content == "2"  # the session goes on


def test_cancelling_the_reply_while_an_mcp_tool_runs_cancels_it_on_the_server(
        tools: list[Tool], log: Path) -> None:
    before = len(logged(log, "cancelled", "slow"))
    calls = len(logged(log, "call", "slow"))
    token = CancelToken()
    cancelled_at: list[float] = []

    def cancel_once_running() -> None:
        # cancel when the server runs the tool: a cancel sent before the call reached
        # it (a fixed delay, on a loaded machine) leaves the server nothing to cancel
        wait_until(lambda: len(logged(log, "call", "slow")) > calls, within=30)
        cancelled_at.append(time.monotonic())
        token.cancel()

    threading.Thread(target=cancel_once_running, daemon=True).start()
    result = run(tools, "slow", timeout=60.0, cancel=token, seconds=60)
    assert result.is_error and result.error_kind == "cancelled"
    assert cancelled_at and time.monotonic() - cancelled_at[0] < 30  # (not the tool's 60 s)
    assert wait_until(lambda: len(logged(log, "cancelled", "slow")) > before, within=30)


def test_concurrent_calls_from_many_threads_with_timeouts_all_get_their_own_answer(
        tools: list[Tool]) -> None:
    answers: dict[int, DispatchResult] = {}

    def worker(n: int) -> None:
        if n % 4 == 0:
            answers[n] = run(tools, "slow", timeout=0.5, seconds=30)
        else:
            answers[n] = run(tools, "add", a=n, b=1000)

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(24)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert not any(t.is_alive() for t in threads)
    for n, result in sorted(answers.items()):
        if n % 4 == 0:
            assert result.error_kind == "timeout"
        else:
            assert (result.content, result.is_error) == (str(n + 1000), False)
    assert len(answers) == 24


def test_the_synchronous_api_works_from_inside_a_running_event_loop(
        servers: MCPServers) -> None:
    async def blocking_caller() -> str:
        # a caller that blocks its own loop in synchronous code: the servers have their own
        listed = servers.tools()
        return run(listed, "add", a=1, b=2).content

    assert asyncio.run(blocking_caller()) == "3"


def test_the_chat_loop_runs_an_mcp_tool_like_any_other(tools: list[Tool]) -> None:
    call = ("<tool_call>\n<function=lookup_city>\n<parameter=city>\nVienna\n</parameter>\n"
            "</function>\n</tool_call>")
    chat = Chat(ScriptedBackend([call, "Vienna lies on the Danube."]), tools=tools)
    events = list(chat.send("Tell me about Vienna"))
    result = next(e for e in events if e.type == "tool_result")
    assert result.content == "Vienna: population 1.2 million, river Danube"
    assert events[-1].type == "done" and events[-1].reason == "stop"


# -- failures of a whole server --------------------------------------------------------------


@pytest.mark.process
def test_a_server_that_crashes_mid_call_is_reported_restarted_once_then_given_up(
        tmp_path: Path) -> None:
    log = tmp_path / "calls.jsonl"
    with MCPServers([stdio_server("tools", log=log), stdio_server("other")],
                    connect_timeout=START) as owner:
        tools = owner.tools(strict=True)
        first = int(run(tools, "pid").content)
        crashed = run(tools, "crash")
        assert crashed.is_error and crashed.error_kind == "tool_error"
        assert "MCP server 'tools' closed the connection while running 'crash'" in crashed.content
        assert "will be restarted for the next call" in crashed.content
        assert wait_until(lambda: not running(first))
        second = run(tools, "pid", timeout=START)
        assert not second.is_error and int(second.content) != first
        again = run(tools, "crash")
        assert "is not restarted again" in again.content
        gone = run(tools, "add", a=1, b=2)
        assert gone.is_error and "MCP server 'tools' is not available" in gone.content
        assert owner.connection("tools").starts == 2
        assert run(tools, "archive_size").content == "42"  # the other server is untouched


@pytest.mark.process
def test_a_server_that_never_answers_the_handshake_fails_alone_and_is_stopped() -> None:
    marker = f"mute-{uuid.uuid4().hex}"
    with MCPServers([stdio_server("mute", marker=marker), stdio_server("other")],
                    connect_timeout=HANDSHAKE, trusted=["other"]) as owner:
        started = time.monotonic()
        tools = owner.tools()
        assert time.monotonic() - started < START
        assert {t.name for t in tools} == {"search", "archive_size"}
        assert f"did not complete the start-up handshake within {HANDSHAKE:g} seconds" in \
            owner.failures["mute"]
        assert owner.notes == [owner.failures["mute"]]
        assert processes_with(marker) == []  # the hung process was killed, not left behind


@pytest.mark.process
def test_closing_while_a_server_starts_stops_it_without_waiting_for_the_handshake() -> None:
    marker = f"mute-{uuid.uuid4().hex}"
    owner = MCPServers([stdio_server("mute", marker=marker)], connect_timeout=START)
    listing: list[list[Tool]] = []
    lister = threading.Thread(target=lambda: listing.append(owner.tools()))
    lister.start()
    assert wait_until(lambda: processes_with(marker), within=START)
    started = time.monotonic()
    owner.close()
    lister.join(START)
    assert not lister.is_alive() and listing == [[]]
    assert time.monotonic() - started < START / 2
    assert "'mute'" in owner.failures["mute"] and "closed while it started" in \
        owner.failures["mute"]
    assert processes_with(marker) == []


_HOST = """
import sys, time
from toolwire.plugins.mcp_tools import MCPServers
servers = MCPServers([sys.argv[1]], connect_timeout=float(sys.argv[2]))
print(len(servers.tools()), flush=True)
time.sleep(600)
"""


@pytest.mark.process
def test_a_server_that_ignores_its_input_and_sigterm_dies_with_a_host_killed_by_sigkill() -> None:
    marker = f"stubborn-{uuid.uuid4().hex}"
    command = f"{sys.executable} {SCRIPT} stubborn {marker}"
    host = subprocess.Popen([sys.executable, "-c", _HOST, command, str(START)],
                            stdout=subprocess.PIPE, text=True)
    try:
        assert host.stdout is not None and int(host.stdout.readline()) > 0
        assert processes_with(marker)  # the server runs, a child of the host
    finally:
        host.kill()  # no atexit, no close: only the kernel can stop the server now
        host.wait()
    try:
        assert wait_until(lambda: not processes_with(marker), within=15.0)
    finally:
        for pid in processes_with(marker):
            os.kill(pid, signal.SIGKILL)


@pytest.mark.process
def test_a_server_that_cannot_be_started_is_a_clear_error_from_mcp_tools() -> None:
    with pytest.raises(MCPServerError, match=r"could not be started: FileNotFoundError"):
        mcp_tools("/nonexistent/mcp-server --stdio")


@pytest.mark.process
def test_two_servers_with_a_colliding_tool_name_both_get_their_server_prefix() -> None:
    with MCPServers([stdio_server("tools"), stdio_server("other")],
                    connect_timeout=START) as owner:
        tools = owner.tools(taken=["lookup_city"])
        names = [t.name for t in tools]
        assert "search" not in names and {"tools_search", "other_search"} <= set(names)
        assert "tools_lookup_city" in names and "archive_size" in names
        assert run(tools, "tools_search", query="q").content == "tools found q"
        assert run(tools, "other_search", query="q").content == "other found q"
        other = next(t for t in tools if t.name == "other_search")
        assert other.description.endswith("(MCP server 'other' calls this tool 'search'.)")
        assert any("registered as 'other_search' because server 'tools' also has a tool "
                   "named 'search'" in note for note in owner.notes)
        assert any("another tool of this session is named 'lookup_city'" in note
                   for note in owner.notes)


@pytest.mark.process
def test_closing_stops_every_server_process() -> None:
    owner = MCPServers([stdio_server("tools"), stdio_server("tools", "twin")],
                       connect_timeout=START)
    tools = owner.tools(strict=True)
    pids = [int(run(tools, name).content) for name in ("tools_pid", "twin_pid")]
    assert all(running(pid) for pid in pids)
    owner.close()
    assert not any(running(pid) for pid in pids)
    after = run(tools, "tools_add", a=1, b=1)
    assert after.is_error and "closed" in after.content
    owner.close()  # idempotent


@pytest.mark.process
def test_an_owner_left_open_is_closed_when_the_interpreter_exits(tmp_path: Path) -> None:
    script = tmp_path / "leave_open.py"
    script.write_text(
        "import sys\n"
        "from toolwire import Dispatcher, ToolCall, ToolRegistry\n"
        "from toolwire.plugins.mcp_tools import mcp_tools\n"
        f"tools = mcp_tools({sys.executable!r} + ' ' + {stdio_server('tools').args[0]!r}"
        " + ' tools', connect_timeout=90)\n"
        "print(Dispatcher(ToolRegistry(tools)).dispatch(ToolCall('c', 'pid', {})).content)\n")
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                          cwd=REPO, timeout=180)
    assert done.returncode == 0, done.stderr
    pid = int(done.stdout.strip())
    assert wait_until(lambda: not running(pid), within=10)


# -- streamable HTTP -------------------------------------------------------------------------


@pytest.mark.process
def test_a_streamable_http_server_lists_validates_and_runs_calls(tmp_path: Path) -> None:
    log = tmp_path / "calls.jsonl"
    with http_server(log=log) as (url, _process), \
            MCPServers([server_from_url(url, trust=TRUST_READ_ONLY_HINTS)],
                       connect_timeout=START) as owner:
        tools = owner.tools(strict=True)
        assert {t.name for t in tools if t.read_only} == READ_TOOLS
        assert all(mcp_source(t) == f"mcp:{owner.configs[0].name}" for t in tools)
        assert run(tools, "add", a=20, b=22).content == "42"
        assert run(tools, "add", a=[1], b=2).error_kind == "invalid_arguments"
        assert run(tools, "refuse", reason="r").error_kind == "tool_error"
        timed_out = run(tools, "slow", timeout=1.0, seconds=60)
        assert timed_out.error_kind == "timeout"
        assert wait_until(lambda: logged(log, "cancelled", "slow"), within=15)
        assert [e["arguments"] for e in logged(log, tool="add")] == [{"a": 20, "b": 22}]


@pytest.mark.process
def test_an_http_server_that_goes_away_becomes_tool_results_and_the_chat_goes_on() -> None:
    with http_server() as (url, process), MCPServers([url], connect_timeout=10) as owner:
        tools = owner.tools(strict=True)
        assert run(tools, "add", a=1, b=1).content == "2"
        process.kill()
        process.wait(10)
        lost = run(tools, "add", a=1, b=1)
        assert lost.is_error and lost.error_kind == "tool_error"
        assert "MCP server" in lost.content and "running 'add'" in lost.content
        restart = run(tools, "add", a=1, b=1)
        assert restart.is_error and "could not be" in restart.content
        gone = run(tools, "add", a=1, b=1)
        assert "is not available" in gone.content
        chat = Chat(ScriptedBackend(["<tool_call>\n<function=pid>\n</function>\n</tool_call>",
                                     "The server is down."]), tools=tools)
        events = list(chat.send("pid?"))
        assert events[-1].type == "done" and events[-1].reason == "stop"
        assert [m.role for m in chat.history] == ["user", "assistant", "tool", "assistant"]


# -- asyncio ---------------------------------------------------------------------------------


@pytest.mark.process
def test_the_async_context_manager_owns_the_connections() -> None:
    async def session() -> tuple[int, str]:
        async with MCPServers([stdio_server("tools")], connect_timeout=START) as owner:
            tools = await owner.atools(strict=True)
            call = ("<tool_call>\n<function=pid>\n</function>\n</tool_call>")
            chat = Chat(ScriptedBackend([call, "done"]), tools=tools)
            results = [e async for e in chat.asend("pid?") if e.type == "tool_result"]
            pid = int(results[0].content)
            assert running(pid)
        return pid, repr(owner)

    pid, shown = asyncio.run(session())
    assert not running(pid)
    assert shown == "<MCPServers [tools] closed>"
