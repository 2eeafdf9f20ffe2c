"""Huge MCP results from real servers are cut while they are read (issue 28, item 6).

A result of 100 MB timed out and one of 400 MB peaked at 1.7 GB in the host. Now
each message is read through a bound (``max_message_bytes``, 4 MiB by default):
the model gets the first part with a ``[result cut ...]`` note, the host's memory
stays at a small multiple of the bound, and the session goes on. The servers are
real processes: the SDK's own server (stdio, and streamable HTTP answering with
SSE or with JSON) and a server written without the SDK that writes its result in
pieces with the ``id`` after the result, as the TypeScript SDK does.
"""

from __future__ import annotations

import sys
import time
import tracemalloc
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("mcp")

from tests.support.mcp_fixtures import SCRIPT, http_server
from toolwire import Dispatcher, DispatchResult, ToolCall, ToolRegistry
from toolwire.plugins.mcp_tools import MCPServerError, MCPServers, ServerConfig
from toolwire.vocabulary.tools import Tool

pytestmark = pytest.mark.process

START = 90.0
MiB = 2**20
NOTE = "[result cut: the MCP server's answer was "


def server(kind: str) -> ServerConfig:
    return ServerConfig(kind, command=sys.executable, args=[SCRIPT, kind])


def measured(tools: list[Tool], name: str, **arguments: object
             ) -> tuple[DispatchResult, float, float]:
    """The call's result, its seconds, and the host's peak of traced memory in MiB."""
    dispatcher = Dispatcher(ToolRegistry(tools), timeout=240)
    tracemalloc.start()
    started = time.monotonic()
    try:
        result = dispatcher.dispatch(ToolCall("c1", name, arguments))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return result, time.monotonic() - started, peak / MiB


def answer_bytes(content: str) -> int:
    return int(content.split(NOTE, 1)[1].split(" bytes", 1)[0].replace(",", ""))


@pytest.fixture(scope="module")
def sdk_stdio() -> Iterator[MCPServers]:
    with MCPServers([server("tools")], connect_timeout=START) as owner:
        yield owner


def test_a_400_mb_result_is_cut_while_read_in_bounded_memory() -> None:
    with MCPServers([server("raw")], connect_timeout=START) as owner:
        tools = owner.tools(strict=True)
        result, seconds, peak = measured(tools, "huge", megabytes=400)
        assert not result.is_error, result.content[:300]
        assert result.content.startswith("x" * 1000)
        assert answer_bytes(result.content) > 400 * MiB
        assert len(result.content) <= 100_000  # the note survives the dispatcher's cut
        assert peak < 64, f"the host traced {peak:.0f} MiB"
        assert seconds < 120  # was a timeout; the benchmark measures it
        again, _, _ = measured(tools, "add", a=2, b=3)
        assert again.content == "5" and owner.connection("raw").starts == 1


def test_a_100_mb_result_of_the_sdks_own_server_is_cut_and_the_session_goes_on(
        sdk_stdio: MCPServers) -> None:
    tools = sdk_stdio.tools(strict=True)
    result, _, peak = measured(tools, "huge", megabytes=100)
    assert not result.is_error, result.content[:300]
    assert result.content.startswith("x" * 1000) and NOTE in result.content
    assert answer_bytes(result.content) > 100 * MiB
    assert peak < 64, f"the host traced {peak:.0f} MiB"
    assert measured(tools, "add", a=20, b=22)[0].content == "42"
    assert sdk_stdio.connection("tools").starts == 1


@pytest.mark.parametrize("answers", ["sse", "json"])
def test_a_huge_result_over_streamable_http_is_cut_while_read(answers: str,
                                                              tmp_path: Path) -> None:
    with http_server(json_response=answers == "json") as (url, _process), \
            MCPServers([url], connect_timeout=START) as owner:
        tools = owner.tools(strict=True)
        result, _, peak = measured(tools, "huge", megabytes=64)
        assert not result.is_error, result.content[:300]
        assert result.content.startswith("x" * 1000) and answer_bytes(result.content) > 64 * MiB
        assert peak < 64, f"the host traced {peak:.0f} MiB"
        assert measured(tools, "add", a=1, b=2)[0].content == "3"


@pytest.mark.parametrize("kind", ["stdio", "http"])
def test_a_cut_result_keeps_its_error_flag_its_whole_blocks_and_its_characters(
        kind: str) -> None:
    def check(owner: MCPServers) -> None:
        tools = owner.tools(strict=True)
        failed = measured(tools, "huge_failure", megabytes=2)[0]
        assert failed.is_error and failed.error_kind == "tool_error"
        assert "reported an error: eeee" in failed.content and NOTE in failed.content
        assert len(failed.content) <= 100_000
        blocks = measured(tools, "many_blocks", count=50_000)[0].content
        shown = blocks.split("\n[result cut", 1)[0].split("\n")
        assert shown[:3] == ["block 0", "block 1", "block 2"]
        assert all(line == f"block {i}" for i, line in enumerate(shown[:-1]))
        mixed = measured(tools, "huge", megabytes=2, fill='é"\\\n😀')[0].content
        assert mixed.startswith('é"\\\n😀é"\\\n😀') and NOTE in mixed
        assert "\ufffd" not in mixed

    if kind == "stdio":
        with MCPServers([server("tools")], connect_timeout=START,
                        max_message_bytes=256 * 1024) as owner:
            check(owner)
    else:
        with http_server() as (url, _process), \
                MCPServers([url], connect_timeout=START, max_message_bytes=256 * 1024) as owner:
            check(owner)


def test_a_listing_over_the_bound_is_a_clear_error_naming_it() -> None:
    with MCPServers([server("tools")], connect_timeout=START, max_message_bytes=3000) as owner, \
            pytest.raises(MCPServerError, match=r"did not list its tools: .*more than the "
                                                r"3,000 bytes toolwire reads of one message "
                                                r"\(max_message_bytes\)"):
        owner.tools(strict=True)
