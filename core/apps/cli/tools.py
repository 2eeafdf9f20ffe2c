"""``toolwire tools``: every tool a session would offer, or one call run through dispatch.

``toolwire tools [--mcp 'COMMAND ARGS'] [--mcp-url URL] [--mcp-config FILE]
[--mcp-trust NAME] [--json]``
lists each tool with its source (the plugin, or ``mcp:<server>``), whether it is
read-only, and its JSON schema. ``toolwire tools --call NAME --args JSON`` runs one
call through the same dispatcher a chat uses (validation, read-only refusal, the
timeout) and prints the result the model would read, for debugging a tool or an
MCP server without a model. Exit status: 0, or 1 when the call's result is an error.
An MCP server is untrusted: everything it wrote (names, descriptions, schemas, results,
the notes about it) is printed through :func:`terminal_safe` (``--json``: :func:`json_safe`).

This module also holds what ``chat``, ``serve`` and ``tools`` share about tools:
the MCP options (:func:`add_mcp_arguments`) and the session's tool list
(:func:`session_tools`). MCP servers started here are stopped when the process
exits.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from ...conversation.dispatch import Dispatcher
from ...errors import ToolwireError
from ...hooks.manager import PluginManager
from ...limits import DispatchLimits, bound
from ...vocabulary.cancel import CancelToken
from ...vocabulary.history import ToolCall
from ...vocabulary.tool_sources import ToolSource, origin_of
from ...vocabulary.tools import Tool, ToolRegistry
from .common import fail
from .terminal_text import json_safe, terminal_safe
from .user_functions import add_function_arguments, function_tools

__all__ = ["add_mcp_arguments", "open_mcp_servers", "register", "run", "session_tools"]


def add_mcp_arguments(parser: argparse.ArgumentParser) -> None:
    """The MCP server options of ``chat``, ``serve`` and ``tools``."""
    parser.add_argument("--mcp", action="append", default=[], metavar="'COMMAND ARGS'",
                        help="use the tools of an MCP server started with this command "
                             "(stdio); repeatable")
    parser.add_argument("--mcp-url", action="append", default=[], metavar="URL",
                        help="use the tools of an MCP server at this streamable-HTTP URL; "
                             "repeatable")
    parser.add_argument("--mcp-config", action="append", default=[], metavar="FILE",
                        help='use the MCP servers of a {"mcpServers": {...}} file')
    parser.add_argument("--mcp-trust", action="append", default=[], metavar="NAME",
                        help="trust the read-only hints of the MCP server called NAME (as "
                             "'toolwire tools' shows it: mcp:NAME); an untrusted server's "
                             "tools are all write tools; repeatable")


def open_mcp_servers(args: argparse.Namespace, plugins: PluginManager) -> ToolSource | None:
    """The MCP servers the options name, opened through the plugins' ``mcp`` tool source
    (nothing started yet), or ``None`` when there are none."""
    options = {"commands": list(getattr(args, "mcp", None) or ()),
               "urls": list(getattr(args, "mcp_url", None) or ()),
               "config_files": list(getattr(args, "mcp_config", None) or ()),
               "trusted": list(getattr(args, "mcp_trust", None) or ())}
    if not any(options.values()):
        return None
    try:
        return plugins.tool_source("mcp").open(**options)
    except ToolwireError as exc:
        fail(str(exc))


def session_tools(args: argparse.Namespace, plugins: PluginManager) -> list[Tool]:
    """The plugins' tools (unless ``--no-tools``), the ``--functions`` tools, then the
    tools of the MCP servers named.

    An MCP server that fails to start is reported on standard error and left out;
    so is every renamed tool.
    """
    tools = _local_tools(args, plugins)
    servers = open_mcp_servers(args, plugins)
    return tools if servers is None else _with_mcp_tools(tools, servers)


def _local_tools(args: argparse.Namespace, plugins: PluginManager) -> list[Tool]:
    """The plugins' tools (unless ``--no-tools``) and the ``--functions`` tools."""
    tools = [] if getattr(args, "no_tools", False) else plugins.tools()
    taken = {t.name for t in tools}
    for item in function_tools(args):
        if item.name in taken:
            fail(f"--functions: {item.name!r} is also the name of a plugin tool; rename the "
                 "function, or pass --no-tools to leave the plugins' tools out")
        tools.append(item)
    return tools


def _with_mcp_tools(tools: list[Tool], servers: ToolSource) -> list[Tool]:
    """``tools`` and the servers' tools (renamed where a name is taken), notes on stderr."""
    added = servers.tools(taken=[t.name for t in tools])
    for note in servers.notes:
        print(f"toolwire: {terminal_safe(note)}", file=sys.stderr, flush=True)
    return tools + added


def register(subparsers: Any) -> None:
    """Add the ``tools`` command."""
    p = subparsers.add_parser(
        "tools", help="list every tool a session offers (plugins, MCP servers) or run one",
        description="List every registered tool (name, source, read-only, schema), or run "
                    "one call through the dispatcher and print its result.")
    add_mcp_arguments(p)
    add_function_arguments(p)
    p.add_argument("--json", action="store_true", help="print JSON")
    p.add_argument("--call", metavar="NAME", help="run this tool once and print the result")
    p.add_argument("--args", default="{}", metavar="JSON",
                   help="the call's arguments as a JSON object (with --call)")
    p.add_argument("--workspace", default=".", help="folder the tools work in")
    p.add_argument("--read-only", action="store_true",
                   help="list and run only read-only tools, as a read-only session does")
    p.add_argument("--no-tools", action="store_true",
                   help="leave out the plugins' tools (MCP servers named are still used)")
    seconds = bound(DispatchLimits, "tool_seconds")
    p.add_argument(str(seconds.flag), type=float, default=seconds.default, metavar="SECONDS",
                   help=seconds.help)
    p.set_defaults(run=run)


def _sources(plugins: PluginManager) -> dict[str, str]:
    return {name: info.name for info in plugins.describe() for name in info.tools}


def _source(tool: Tool, plugins: PluginManager, plugin_sources: dict[str, str]) -> str:
    return origin_of(tool, plugins.tool_sources().values(),
                     plugin_sources.get(tool.name, "python"))


def run(args: argparse.Namespace, plugins: PluginManager) -> int:
    """Run ``toolwire tools``; return the exit status."""
    arguments = _call_arguments(args) if args.call else None
    if not Path(args.workspace).expanduser().is_dir():
        fail(f"--workspace {args.workspace}: not an existing folder")
    tools = _local_tools(args, plugins)
    servers = open_mcp_servers(args, plugins)
    try:
        if servers is not None:
            tools = _with_mcp_tools(tools, servers)
        dispatcher = Dispatcher(ToolRegistry(tools), read_only=args.read_only,
                                workspace=Path(args.workspace).resolve(), timeout=args.timeout)
        if arguments is not None:
            return _run_call(dispatcher, args.call, arguments, as_json=args.json)
        _list(dispatcher.offered_tools(), plugins, as_json=args.json)
        return 0
    finally:
        if servers is not None:
            servers.close()


def _call_arguments(args: argparse.Namespace) -> dict[str, Any]:
    try:
        value = json.loads(args.args)
    except ValueError as exc:
        fail(f"--args is not valid JSON: {exc}")
    if not isinstance(value, dict):
        fail("--args must be a JSON object of the tool's arguments")
    return value


def _run_call(dispatcher: Dispatcher, name: str, arguments: dict[str, Any], *,
              as_json: bool) -> int:
    result = dispatcher.dispatch(ToolCall("cli_call", name, arguments), cancel=CancelToken())
    if as_json:
        print(json_safe(json.dumps({"name": name, "content": result.content,
                                    "is_error": result.is_error,
                                    "error_kind": result.error_kind}, ensure_ascii=False)))
    else:
        print(terminal_safe(result.content))
    return 1 if result.is_error else 0


def _list(tools: list[Tool], plugins: PluginManager, *, as_json: bool) -> None:
    plugin_sources = _sources(plugins)
    rows = [{"name": t.name, "source": _source(t, plugins, plugin_sources),
             "read_only": t.read_only,
             "description": t.description, "parameters": dict(t.parameters)} for t in tools]
    if as_json:
        print(json_safe(json.dumps(rows, indent=2, ensure_ascii=False)))
        return
    if not rows:
        print("no tools")
        return
    for row in rows:
        access = "read-only" if row["read_only"] else "writes"
        print(terminal_safe(f"{row['name']}  ({row['source']}, {access})"))
        # split on newlines only: a CR or another control must show, not end the line
        summary = str(row["description"]).strip().split("\n")[0]
        if summary:
            print(f"  {terminal_safe(summary)}")
        print(f"  schema: {json_safe(json.dumps(row['parameters'], ensure_ascii=False))}")
