"""The MCP plugin's errors: setup problems that reach the caller.

Failures of one call (an ``isError`` result, a crashed or hung server, a lost
connection) are not here: they are the core's :class:`toolwire.ToolCallError`
subclasses, which the dispatcher turns into the tool's result for the model::

    ToolwireError
    └── MCPSetupError                      the MCP servers cannot be used as asked
        ├── MCPConfigError (ValueError)    a bad command, URL or mcpServers file
        ├── MCPNotInstalledError (ImportError)  the 'mcp' extra is not installed
        └── MCPServerError                 a server did not start or list its tools
"""

from __future__ import annotations

from toolwire import ToolwireError
from toolwire.plugin_api import extra_hint

__all__ = ["EXTRA_HINT", "MCPConfigError", "MCPNotInstalledError", "MCPServerError",
           "MCPSetupError"]

EXTRA_HINT = extra_hint("mcp")
"""How to install the SDK (the ``mcp`` extra; toolwire installs from its source)."""


class MCPSetupError(ToolwireError):
    """The MCP servers cannot be used as asked."""


class MCPConfigError(MCPSetupError, ValueError):
    """A command line, URL or ``mcpServers`` configuration is not usable."""


class MCPNotInstalledError(MCPSetupError, ImportError):
    """The official ``mcp`` SDK (the ``mcp`` extra) is not installed."""

    def __init__(self, detail: str = "") -> None:
        suffix = f" ({detail})" if detail else ""
        super().__init__(f"MCP tools need the 'mcp' extra: {EXTRA_HINT}{suffix}")


class MCPServerError(MCPSetupError):
    """A server could not be started or did not list its tools.

    :ivar server: the server's name.
    """

    def __init__(self, message: str, *, server: str) -> None:
        super().__init__(message)
        self.server = server
