"""A real MCP server (stdio, the standard library only) whose tools declare output schemas.

Run as a script: ``python tests/support/mcp_output_server.py``. Every tool takes no
arguments and answers with structured content (and the same as text):

* ``add``: no output schema, ``{"sum": 3}``;
* ``good``: an output schema the answer matches;
* ``liar``: an output schema asking for an integer, and a string in its place;
* ``bare``: an output schema, and no structured content at all;
* ``redos``: an output ``pattern`` of ``^(a+)+$`` (Python's ``re`` backtracks on it
  for 16 s at 29 characters, holding the interpreter lock), and ``'a' * 28 + '!'``;
* ``chain``: an output schema chaining 40 levels of ``anyOf`` of two references (2^41
  subschemas for one value), and a value it takes that long to check;
* ``big``: an output schema its answer matches, an answer of about 260 kB (a client that
  reads less of one message cuts it).

It speaks just enough of the protocol for a client: ``initialize``, ``tools/list``,
``tools/call``, ``ping``; notifications are read and dropped.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

__all__ = ["REDOS_TEXT", "SCRIPT", "TOOLS", "chain_output_schema"]

SCRIPT = os.path.abspath(__file__)
REDOS_TEXT = "a" * 28 + "!"
_NO_ARGUMENTS: dict[str, Any] = {"type": "object", "properties": {}}


def chain_output_schema(levels: int = 40) -> dict[str, Any]:
    """An object whose ``x`` passes ``levels`` levels of two-way ``anyOf`` references."""
    defs: dict[str, Any] = {f"n{i}": {"anyOf": [{"$ref": f"#/$defs/n{i + 1}"},
                                                {"$ref": f"#/$defs/n{i + 1}"}]}
                            for i in range(levels)}
    defs[f"n{levels}"] = {"type": "integer"}
    return {"type": "object", "properties": {"x": {"$ref": "#/$defs/n0"}}, "$defs": defs}


TOOLS: dict[str, tuple[dict[str, Any] | None, Any]] = {
    "add": (None, {"sum": 3}),
    "good": ({"type": "object", "properties": {"city": {"type": "string"}},
              "required": ["city"]}, {"city": "Oslo"}),
    "liar": ({"type": "object", "properties": {"count": {"type": "integer"}},
              "required": ["count"]}, {"count": "many"}),
    "bare": ({"type": "object"}, None),
    "redos": ({"type": "object", "properties": {"text": {"type": "string",
                                                         "pattern": "^(a+)+$"}}},
              {"text": REDOS_TEXT}),
    "chain": (chain_output_schema(), {"x": "not an integer"}),
    "big": ({"type": "object", "properties": {"items": {"type": "array",
                                                        "items": {"type": "string"}}},
             "required": ["items"]}, {"items": ["x" * 10] * 20_000}),
}
"""Each tool's output schema (``None``: none) and structured answer (``None``: none)."""


def _listing() -> list[dict[str, Any]]:
    tools = []
    for name, (schema, _) in TOOLS.items():
        tool: dict[str, Any] = {"name": name, "description": f"The {name} tool.",
                                "inputSchema": _NO_ARGUMENTS}
        if schema is not None:
            tool["outputSchema"] = schema
        tools.append(tool)
    return tools


def _result(name: str) -> dict[str, Any]:
    _, answer = TOOLS[name]
    result: dict[str, Any] = {"content": [{"type": "text", "text": json.dumps(answer)}]}
    if answer is not None:
        result["structuredContent"] = answer
    return result


def _answer(request: dict[str, Any]) -> dict[str, Any]:
    method, params = request.get("method"), request.get("params") or {}
    if method == "initialize":
        return {"result": {"protocolVersion": params.get("protocolVersion", "2025-06-18"),
                           "capabilities": {"tools": {}},
                           "serverInfo": {"name": "outputs", "version": "1"}}}
    if method == "tools/list":
        return {"result": {"tools": _listing()}}
    if method == "tools/call" and params.get("name") in TOOLS:
        return {"result": _result(params["name"])}
    if method == "ping":
        return {"result": {}}
    return {"error": {"code": -32601, "message": f"no method {method}"}}


def main() -> None:
    for line in sys.stdin.buffer:
        try:
            request = json.loads(line)
        except ValueError:
            continue
        if isinstance(request, dict) and "id" in request and "method" in request:
            sys.stdout.write(json.dumps({"jsonrpc": "2.0", "id": request["id"],
                                         **_answer(request)}) + "\n")
            sys.stdout.flush()


if __name__ == "__main__":
    main()
