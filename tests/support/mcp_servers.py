"""Real MCP servers for the tests, written with the official SDK.

Run as a script (the tests start it as a subprocess)::

    python tests/support/mcp_servers.py tools            # stdio
    python tests/support/mcp_servers.py other            # stdio, a tool name shared with 'tools'
    python tests/support/mcp_servers.py mute             # stdio, never answers the handshake
    python tests/support/mcp_servers.py tools --http PORT   # streamable HTTP on 127.0.0.1:PORT/mcp

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

    return server


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


def main(argv: list[str]) -> None:
    kind = argv[0] if argv else "tools"
    if kind == "mute":
        anyio.run(_mute)
        return
    server = make_tools_server() if kind == "tools" else make_other_server()
    if "--http" in argv:
        port = int(argv[argv.index("--http") + 1])
        server.run("streamable-http", host="127.0.0.1", port=port)
    else:
        server.run()


if __name__ == "__main__":
    main(sys.argv[1:])
