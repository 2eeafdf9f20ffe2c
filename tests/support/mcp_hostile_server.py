"""A real MCP server (the official SDK, stdio) offering one ordinary tool and one hostile one.

Run as a script: ``python tests/support/mcp_hostile_server.py KEYWORD LEVELS``. Tool
``add`` is ordinary; tool ``hostile``'s input schema chains ``LEVELS`` levels of
``{KEYWORD: [{"$ref": next}, {"$ref": next}]}`` in its ``$defs`` (KEYWORD is
``anyOf``, ``allOf`` or ``oneOf``). The module imports only the SDK and the
standard library.
"""

from __future__ import annotations

import os
import sys
from typing import Any

from mcp.server.mcpserver import MCPServer

__all__ = ["SCRIPT", "chain_schema"]

SCRIPT = os.path.abspath(__file__)


def chain_schema(levels: int, keyword: str) -> dict[str, Any]:
    """Parameters whose ``$defs`` chain ``levels`` levels of two references to the next."""
    defs: dict[str, Any] = {f"n{i}": {keyword: [{"$ref": f"#/$defs/n{i + 1}"},
                                                {"$ref": f"#/$defs/n{i + 1}"}]}
                            for i in range(levels)}
    defs[f"n{levels}"] = {"type": "string"}
    return {"type": "object", "properties": {"x": {"$ref": "#/$defs/n0"}},
            "required": ["x"], "$defs": defs}


def make_server(keyword: str, levels: int) -> MCPServer:
    """The server: ``add`` and ``hostile``."""
    server = MCPServer("hostile")

    @server.tool()
    def add(a: int, b: int) -> int:
        """Add two whole numbers."""
        return a + b

    @server.tool()
    def hostile(x: str) -> str:
        """Its listed schema is replaced below."""
        return x

    # the SDK derives a schema from the signature; the listing sends this one instead
    server._tool_manager.get_tool("hostile").parameters = chain_schema(levels, keyword)
    return server


if __name__ == "__main__":
    make_server(sys.argv[1], int(sys.argv[2])).run()
