"""Built-in tool-source plugin ``mcp_tools``: any MCP server's tools in the registry.

Connects to Model Context Protocol servers over stdio (a command) or streamable
HTTP (a URL), lists their tools and registers them as :class:`toolwire.Tool`
objects: the server's name, description and input schema. A tool is read-only
only when its ``annotations.readOnlyHint`` says so *and* the user trusts the
server's hints (``"trust": "read-only-hints"`` in its configuration, ``trusted=``,
``--mcp-trust NAME``); every other tool is a write tool. Calls go through the one
dispatcher like any tool's::

    import toolwire
    from toolwire.plugins.mcp_tools import MCPServers, mcp_tools

    tools = mcp_tools("uvx mcp-server-time")          # connected until exit
    chat = toolwire.Chat(backend, tools=tools)

    async with MCPServers.from_config("mcp.json") as servers:   # closed on leaving
        chat = toolwire.Chat(backend, tools=await servers.atools())

``toolwire chat``/``serve``/``tools`` take ``--mcp``, ``--mcp-url``,
``--mcp-config`` and ``--mcp-trust`` and open the ``mcp`` tool source this plugin registers
(``register_tool_sources``). Servers are not registered through ``register_tools``:
that hook runs for every command and every plugin manager, and listing a server
means starting it, so MCP tools are added where a session asks for them.

Importing this plugin does not import the ``mcp`` SDK (the ``mcp`` extra); the
first server that starts does, and a missing SDK is a
:class:`MCPNotInstalledError` naming the extra. See ``docs/mcp.md``.
"""

from __future__ import annotations

from collections.abc import Iterable

from toolwire.plugin_api import RegisterToolSource, ToolSourceSpec, hookimpl

from .config import (
    TRUST_READ_ONLY_HINTS,
    ServerConfig,
    load_config,
    parse_config,
    server_from_command,
    server_from_url,
)
from .errors import (
    EXTRA_HINT,
    MCPConfigError,
    MCPNotInstalledError,
    MCPServerError,
    MCPSetupError,
)
from .naming import assign_names
from .results import render_result
from .toolset import (
    MCPServers,
    MCPToolFunction,
    close_all,
    mcp_tools,
)

__all__ = [
    "EXTRA_HINT",
    "SOURCE_OPTIONS",
    "TRUST_READ_ONLY_HINTS",
    "MCPConfigError",
    "MCPNotInstalledError",
    "MCPServerError",
    "MCPServers",
    "MCPSetupError",
    "MCPToolFunction",
    "ServerConfig",
    "assign_names",
    "close_all",
    "load_config",
    "mcp_source",
    "mcp_tools",
    "open_servers",
    "parse_config",
    "register_tool_sources",
    "render_result",
    "server_from_command",
    "server_from_url",
]


def mcp_source(tool: object) -> str | None:
    """``mcp:<server>`` for a tool made by this plugin, else ``None``."""
    function = getattr(tool, "function", None)
    if isinstance(function, MCPToolFunction):
        return f"mcp:{function.server}"
    return None


SOURCE_OPTIONS = ("commands", "urls", "config_files", "trusted")
"""What :func:`open_servers` (the ``mcp`` tool source) accepts."""


def open_servers(*, commands: Iterable[str] = (), urls: Iterable[str] = (),
                 config_files: Iterable[str] = (), trusted: Iterable[str] = ()) -> MCPServers:
    """The servers of these command lines, URLs and ``mcpServers`` files (not started yet).

    :param trusted: names of the servers whose read-only hints are trusted.
    :raises MCPConfigError: a command, URL or file is not usable, or a trusted name
        is none of the servers'.
    """
    configs = [server_from_command(c) for c in commands]
    configs += [server_from_url(u) for u in urls]
    for path in config_files:
        configs += load_config(path)
    return MCPServers(configs, trusted=trusted)


@hookimpl
def register_tool_sources(register: RegisterToolSource) -> None:
    """Register the ``mcp`` tool source: MCP servers started where a session asks."""
    register(ToolSourceSpec(name="mcp", open=open_servers, options=SOURCE_OPTIONS,
                            origin=mcp_source,
                            description="tools of MCP servers (stdio commands, HTTP URLs, "
                                        "mcpServers files)"))
