"""A real MCP server (the official SDK, stdio) offering one ordinary tool and one whose
input schema holds a regular expression.

Run as a script: ``python tests/support/mcp_pattern_server.py KIND``. Tool ``add`` is
ordinary; tool ``matcher`` takes a string ``text`` whose ``pattern`` is, by ``KIND``:
``nested`` (600 nested groups), ``huge`` (7.2 MB) or ``redos`` (``^(a+)+$``, which
backtracks exponentially in Python's ``re``). The module imports only the SDK and
the standard library.
"""

from __future__ import annotations

import os
import sys

from mcp.server.mcpserver import MCPServer

__all__ = ["PATTERNS", "SCRIPT"]

SCRIPT = os.path.abspath(__file__)
PATTERNS = {"nested": "(" * 600 + "a" + ")" * 600, "huge": "a" * 7_200_000,
            "redos": "^(a+)+$"}


def make_server(kind: str) -> MCPServer:
    """The server: ``add`` and ``matcher``."""
    server = MCPServer("patterns")

    @server.tool()
    def add(a: int, b: int) -> int:
        """Add two whole numbers."""
        return a + b

    @server.tool()
    def matcher(text: str) -> str:
        """Its listed schema is replaced below."""
        return text

    # the SDK derives a schema from the signature; the listing sends this one instead
    server._tool_manager.get_tool("matcher").parameters = {
        "type": "object", "properties": {"text": {"type": "string", "pattern": PATTERNS[kind]}},
        "required": ["text"]}
    return server


if __name__ == "__main__":
    make_server(sys.argv[1]).run()
