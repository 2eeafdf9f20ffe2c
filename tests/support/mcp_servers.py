"""Real MCP servers for the tests, written with the official SDK.

Run as a script (the tests start it as a subprocess)::

    python tests/support/mcp_servers.py tools            # stdio
    python tests/support/mcp_servers.py other            # stdio, a tool name shared with 'tools'
    python tests/support/mcp_servers.py mute             # stdio, never answers the handshake
    python tests/support/mcp_servers.py raw              # stdio without the SDK (below)
    python tests/support/mcp_servers.py stubborn         # 'raw' that ignores SIGTERM, SIGHUP
                                                         # and the end of its input
    python tests/support/mcp_servers.py tools --http PORT   # streamable HTTP on 127.0.0.1:PORT/mcp
    python tests/support/mcp_servers.py tools --http PORT --json   # answers as JSON, not SSE

The 'tools' server's ``huge``, ``huge_failure`` and ``many_blocks`` return results of
any size. The 'raw' server speaks MCP with the standard library alone and writes
its ``huge`` result in pieces, never holding it whole, with the members in the
order the TypeScript SDK writes them (``result`` first, ``id`` last); so a
benchmark measures the client, not the server's own serialization.

``MCP_TEST_LOG`` names a file the 'tools' server appends one JSON line to per
tool call it receives (and per call it sees cancelled), so a test can check what
reached the server. The module imports only the SDK and the standard library.
"""

from __future__ import annotations

import base64
import json
import os
import sys
from typing import Any

import anyio
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import (
    AudioContent,
    CallToolResult,
    EmbeddedResource,
    ImageContent,
    ResourceLink,
    TextContent,
    TextResourceContents,
    ToolAnnotations,
)

__all__ = ["SCRIPT", "make_other_server", "make_tools_server"]

SCRIPT = os.path.abspath(__file__)
READ_ONLY = ToolAnnotations(read_only_hint=True)
PNG_BYTES = b"\x89PNG\r\n\x1a\n" + bytes(100)


def _log(event: str, **fields: Any) -> None:
    path = os.environ.get("MCP_TEST_LOG")
    if path:
        with open(path, "a", encoding="utf-8") as out:
            out.write(json.dumps({"event": event, "pid": os.getpid(), **fields}) + "\n")


def make_tools_server() -> MCPServer:
    """The main test server: read and write tools, failures, slowness, a crash, rich content."""
    server = MCPServer("tools")

    @server.tool(annotations=READ_ONLY)
    def add(a: int, b: int) -> int:
        """Add two whole numbers."""
        _log("call", tool="add", arguments={"a": a, "b": b})
        return a + b

    @server.tool(annotations=READ_ONLY)
    def lookup_city(city: str) -> str:
        """Look up facts about a city.

        :param city: the city's name
        """
        _log("call", tool="lookup_city", arguments={"city": city})
        return f"{city}: population 1.2 million, river Danube"

    @server.tool()
    def save_note(title: str, body: str = "") -> str:
        """Save a note (changes things: no read-only hint)."""
        _log("call", tool="save_note", arguments={"title": title, "body": body})
        return f"saved {title!r}"

    @server.tool(annotations=READ_ONLY)
    def search(query: str) -> str:
        """Search the 'tools' server's notes."""
        _log("call", tool="search", arguments={"query": query})
        return f"tools found {query}"

    @server.tool()
    def refuse(reason: str) -> str:
        """Always fails with an MCP isError result."""
        _log("call", tool="refuse", arguments={"reason": reason})
        raise ToolError(f"refused: {reason}")

    @server.tool()
    async def slow(seconds: float) -> str:
        """Sleep, then answer."""
        _log("call", tool="slow", arguments={"seconds": seconds})
        try:
            await anyio.sleep(seconds)
        except anyio.get_cancelled_exc_class():
            _log("cancelled", tool="slow")
            raise
        return f"slept {seconds}"

    @server.tool()
    def crash() -> str:
        """Exit the server process in the middle of the call."""
        _log("call", tool="crash", arguments={})
        os._exit(3)

    @server.tool(annotations=READ_ONLY)
    def pid() -> int:
        """The server's process id."""
        return os.getpid()

    @server.tool(annotations=READ_ONLY)
    def picture() -> CallToolResult:
        """Text, an image, audio, a resource link and embedded resources."""
        return CallToolResult(content=[
            TextContent(type="text", text="a red square"),
            ImageContent(type="image", data=base64.b64encode(PNG_BYTES).decode(),
                         mime_type="image/png"),
            AudioContent(type="audio", data=base64.b64encode(bytes(64)).decode(),
                         mime_type="audio/wav"),
            ResourceLink(type="resource_link", name="square.png", uri="file:///square.png",
                         mime_type="image/png", description="the square"),
            EmbeddedResource(type="resource", resource=TextResourceContents(
                uri="file:///notes.txt", mime_type="text/plain", text="embedded words")),
        ])

    @server.tool(annotations=READ_ONLY)
    def stats(city: str) -> dict[str, Any]:
        """Structured numbers about a city."""
        return {"city": city, "population": 1200000, "rivers": ["Danube"]}

    @server.tool(annotations=READ_ONLY)
    def huge(megabytes: float, fill: str = "x") -> CallToolResult:
        """A text result of this many MiB (``fill`` repeated)."""
        return CallToolResult(content=[TextContent(type="text", text=_filled(megabytes, fill))])

    @server.tool()
    def huge_failure(megabytes: float) -> CallToolResult:
        """An isError result whose text is this many MiB."""
        return CallToolResult(content=[TextContent(type="text", text=_filled(megabytes, "e"))],
                              is_error=True)

    @server.tool(annotations=READ_ONLY)
    def many_blocks(count: int) -> CallToolResult:
        """``count`` text blocks, ``block 0``, ``block 1``..."""
        return CallToolResult(content=[TextContent(type="text", text=f"block {i}")
                                       for i in range(count)])

    return server


def _filled(megabytes: float, fill: str) -> str:
    size = int(megabytes * 2**20)
    return (fill * (size // max(1, len(fill)) + 1))[:size]


def make_other_server() -> MCPServer:
    """A second server whose ``search`` collides with the 'tools' server's."""
    server = MCPServer("other")

    @server.tool(annotations=READ_ONLY)
    def search(query: str) -> str:
        """Search the 'other' server's archive."""
        return f"other found {query}"

    @server.tool(annotations=READ_ONLY)
    def archive_size() -> int:
        """How many items the archive holds."""
        return 42

    return server


async def _mute() -> None:
    """Accept the stdio streams, read everything, never answer (not even the handshake)."""
    from mcp.server.stdio import stdio_server

    async with stdio_server() as (read_stream, _write_stream):
        async for _message in read_stream:
            pass
        await anyio.sleep_forever()


_RAW_TOOLS = [
    {"name": "huge", "description": "A text result of this many MiB, written in pieces.",
     "inputSchema": {"type": "object", "properties": {"megabytes": {"type": "number"}},
                     "required": ["megabytes"]}},
    {"name": "add", "description": "Add two whole numbers.",
     "inputSchema": {"type": "object", "properties": {"a": {"type": "integer"},
                                                      "b": {"type": "integer"}},
                     "required": ["a", "b"]}},
]


def _raw_answer(out: Any, request: dict[str, Any]) -> None:
    """Answer one request the way the TypeScript SDK orders members: result, jsonrpc, id."""
    method, params = request.get("method"), request.get("params") or {}
    tail = json.dumps(request["id"])
    if method == "tools/call" and params.get("name") == "huge":
        size = int(float(params.get("arguments", {}).get("megabytes", 0)) * 2**20)
        out.write(b'{"result":{"content":[{"type":"text","text":"')
        piece = b"x" * 2**20
        for start in range(0, size, len(piece)):
            out.write(piece[:size - start])
        out.write(b'"}],"isError":false},"jsonrpc":"2.0","id":' + tail.encode() + b"}\n")
        out.flush()
        return
    if method == "initialize":
        result: dict[str, Any] = {
            "protocolVersion": params.get("protocolVersion", "2025-06-18"),
            "capabilities": {"tools": {}}, "serverInfo": {"name": "raw", "version": "1"}}
    elif method == "tools/list":
        result = {"tools": _RAW_TOOLS}
    elif method == "tools/call" and params.get("name") == "add":
        arguments = params.get("arguments", {})
        result = {"content": [{"type": "text", "text": str(arguments["a"] + arguments["b"])}]}
    elif method == "ping":
        result = {}
    else:
        out.write(json.dumps({"jsonrpc": "2.0", "id": request["id"], "error": {
            "code": -32601, "message": f"no method {method}"}}).encode() + b"\n")
        out.flush()
        return
    out.write(json.dumps({"result": result, "jsonrpc": "2.0"}).encode()[:-1]
              + b',"id":' + tail.encode() + b"}\n")
    out.flush()


def _raw() -> None:
    """The 'raw' server: JSON-RPC lines on stdin, answers on stdout, the standard library only."""
    for line in sys.stdin.buffer:
        try:
            request = json.loads(line)
        except ValueError:
            continue
        if isinstance(request, dict) and "id" in request and "method" in request:
            _raw_answer(sys.stdout.buffer, request)


def _stubborn() -> None:
    """The 'stubborn' server: 'raw', deaf to SIGTERM and SIGHUP, alive after its input ends
    (only SIGKILL, or death with its host, stops it)."""
    import signal
    import time

    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    _raw()
    while True:
        time.sleep(60)


def main(argv: list[str]) -> None:
    kind = argv[0] if argv else "tools"
    if kind == "mute":
        anyio.run(_mute)
        return
    if kind == "raw":
        _raw()
        return
    if kind == "stubborn":
        _stubborn()
        return
    server = make_tools_server() if kind == "tools" else make_other_server()
    if "--http" in argv:
        port = int(argv[argv.index("--http") + 1])
        server.run("streamable-http", host="127.0.0.1", port=port,
                   json_response="--json" in argv)
    else:
        server.run()


if __name__ == "__main__":
    main(sys.argv[1:])
