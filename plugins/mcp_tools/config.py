"""Which MCP servers to connect to: a command, a URL, or the shared ``mcpServers`` file.

The configuration format is the one MCP clients share::

    {"mcpServers": {
        "files": {"command": "npx", "args": ["-y", "@modelcontextprotocol/server-filesystem", "."],
                  "env": {"DEBUG": "0"}},
        "issues": {"url": "https://mcp.example.com/mcp",
                   "headers": {"Authorization": "Bearer ${ISSUES_TOKEN}"}}
    }}

An entry has either ``command`` (with optional ``args``, ``env``, ``cwd``: a local
server on standard input/output) or ``url`` (with optional ``headers``: streamable
HTTP). ``"disabled": true`` skips an entry; a ``type`` of ``stdio``, ``http`` or
``streamable-http`` is accepted, ``sse`` (the old HTTP transport) is refused by name.
Other keys (clients add their own) are ignored. ``${VAR}`` and ``${VAR:-default}``
in strings are replaced from the environment, so secrets stay out of the file.

``"trust": "read-only-hints"`` says the user trusts what this server claims about
its tools: only then does a tool's ``readOnlyHint`` make it a read-only tool (offered
in read-only mode, run without approval). By default a server is not trusted, as
the MCP specification asks of hints from servers the user has not vouched for, and
every tool it lists is a write tool whatever its hints say.
"""

from __future__ import annotations

import json
import os
import re
import shlex
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import attrs

from .errors import MCPConfigError

__all__ = ["TRUST_LEVELS", "TRUST_READ_ONLY_HINTS", "ServerConfig", "load_config",
           "parse_config", "server_from_command", "server_from_url", "trust_servers",
           "unique_names"]

TRUST_READ_ONLY_HINTS = "read-only-hints"
"""The trust that makes a server's ``readOnlyHint`` annotations count."""
TRUST_LEVELS = (TRUST_READ_ONLY_HINTS,)
"""Every value ``trust`` may have (besides none)."""

_LAUNCHERS = frozenset({"python", "python3", "py", "node", "npx", "uv", "uvx", "pipx", "deno",
                        "bun", "bunx", "docker", "podman", "npm", "pnpm", "yarn", "sh", "bash"})
_VARIABLE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")
_NAME_UNSAFE = re.compile(r"[^A-Za-z0-9_-]+")


def _string_map(value: Mapping[str, str] | None) -> dict[str, str]:
    return dict(value or {})


def _string_tuple(value: Iterable[str]) -> tuple[str, ...]:
    return tuple(value)


@attrs.frozen
class ServerConfig:
    """One MCP server: a command to run (stdio) or a URL (streamable HTTP).

    :ivar name: what the server is called in tool sources, prefixes and messages.
    :ivar command: the program to start (stdio servers).
    :ivar args: its arguments.
    :ivar env: variables added to the server's environment (over a safe default set).
    :ivar cwd: the folder to start it in.
    :ivar url: the streamable-HTTP endpoint (HTTP servers).
    :ivar headers: HTTP headers sent with every request (for example a token).
    :ivar trust: ``"read-only-hints"`` when the user trusts the server's read-only
        hints; ``None`` (the default) makes every tool of the server a write tool.
    """

    name: str
    command: str | None = None
    args: tuple[str, ...] = attrs.field(default=(), converter=_string_tuple)
    env: Mapping[str, str] = attrs.field(factory=dict, converter=_string_map)
    cwd: str | None = None
    url: str | None = None
    headers: Mapping[str, str] = attrs.field(factory=dict, converter=_string_map)
    trust: str | None = None

    def __attrs_post_init__(self) -> None:
        if not self.name:
            raise MCPConfigError("an MCP server needs a name")
        if (self.command is None) == (self.url is None):
            raise MCPConfigError(f"MCP server {self.name!r}: give either a command or a url")
        if self.command is not None and not self.command.strip():
            raise MCPConfigError(f"MCP server {self.name!r}: the command is empty")
        if self.url is not None:
            _check_url(self.url, self.name)
        if self.trust is not None and self.trust not in TRUST_LEVELS:
            raise MCPConfigError(f"MCP server {self.name!r}: trust {self.trust!r} is not "
                                 f"known (use {TRUST_READ_ONLY_HINTS!r}, or leave it out)")

    @property
    def trusts_read_only_hints(self) -> bool:
        """Whether the server's ``readOnlyHint`` makes a tool read-only."""
        return self.trust == TRUST_READ_ONLY_HINTS

    @property
    def transport(self) -> str:
        """``stdio`` or ``http``."""
        return "stdio" if self.command is not None else "http"

    def describe(self) -> str:
        """The command line or the URL, for messages."""
        if self.command is not None:
            return shlex.join([self.command, *self.args])
        return str(self.url)


def _check_url(url: str, name: str) -> None:
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise MCPConfigError(f"MCP server {name!r}: {url!r} is not an http(s) URL")


def _name_from_command(words: Sequence[str]) -> str:
    """A short name for a server started by ``words``: the script or package it runs.

    ``python -m pkg.server`` gives ``server``, ``npx -y @org/server-files`` gives
    ``server-files``, ``./weather-mcp --port 1`` gives ``weather-mcp``.
    """
    program = Path(words[0]).name
    stem = program.split(".")[0] if program.lower().startswith("python") else program
    if stem.lower() not in _LAUNCHERS:
        return _safe_name(Path(program).stem or program)
    rest = list(words[1:])
    for index, word in enumerate(rest):
        if word == "-m" and index + 1 < len(rest):
            return _safe_name(rest[index + 1].rsplit(".", 1)[-1])
        if word.startswith("-") or word in ("run", "exec", "x", "dlx"):
            continue
        last = word.rstrip("/").rsplit("/", 1)[-1]
        return _safe_name(Path(last.split("@")[0] or last).stem)
    return _safe_name(stem)


def _safe_name(text: str) -> str:
    return _NAME_UNSAFE.sub("_", text).strip("_") or "mcp"


def server_from_command(command_line: str, name: str | None = None, *,
                        trust: str | None = None) -> ServerConfig:
    """A stdio server from one command line (``--mcp 'COMMAND ARGS'``), split as a shell would.

    :param name: the server's name; by default the script or package it runs.
    :param trust: :data:`TRUST_READ_ONLY_HINTS` to believe its read-only hints.
    :raises MCPConfigError: an empty or unbalanced command line.
    """
    try:
        words = shlex.split(command_line)
    except ValueError as exc:
        raise MCPConfigError(f"cannot split the MCP command {command_line!r}: {exc}") from exc
    if not words:
        raise MCPConfigError("the MCP command is empty")
    return ServerConfig(name=name or _name_from_command(words), command=words[0],
                        args=tuple(words[1:]), trust=trust)


def server_from_url(url: str, name: str | None = None, *,
                    trust: str | None = None) -> ServerConfig:
    """A streamable-HTTP server (``--mcp-url URL``); named after its host and port by default.

    :param trust: :data:`TRUST_READ_ONLY_HINTS` to believe its read-only hints.
    :raises MCPConfigError: not an http(s) URL.
    """
    _check_url(url, name or url)
    parts = urlsplit(url)
    default = parts.hostname or "mcp"
    if parts.port is not None:
        default += f"_{parts.port}"
    return ServerConfig(name=name or _safe_name(default), url=url, trust=trust)


def _expand(text: str, where: str) -> str:
    def value(match: re.Match[str]) -> str:
        found = os.environ.get(match.group(1))
        if found is not None:
            return found
        if match.group(2) is not None:
            return match.group(2)
        raise MCPConfigError(f"{where}: environment variable {match.group(1)} is not set")

    return _VARIABLE.sub(value, text)


def _string(entry: Mapping[str, Any], key: str, where: str) -> str | None:
    value = entry.get(key)
    if value is None:
        return None
    if not isinstance(value, str):
        raise MCPConfigError(f"{where}: {key!r} must be a string")
    return _expand(value, where)


def _strings(entry: Mapping[str, Any], key: str, where: str) -> tuple[str, ...]:
    value = entry.get(key, [])
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise MCPConfigError(f"{where}: {key!r} must be a list of strings")
    return tuple(_expand(v, where) for v in value)


def _string_table(entry: Mapping[str, Any], key: str, where: str) -> dict[str, str]:
    value = entry.get(key, {})
    if not isinstance(value, Mapping) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in value.items()):
        raise MCPConfigError(f"{where}: {key!r} must map names to strings")
    return {k: _expand(v, where) for k, v in value.items()}


def _trust(entry: Mapping[str, Any], where: str) -> str | None:
    value = entry.get("trust")
    if value is None or (isinstance(value, str) and value in TRUST_LEVELS):
        return value
    raise MCPConfigError(f"{where}: 'trust' must be {TRUST_READ_ONLY_HINTS!r} (the server's "
                         f"read-only hints are then believed), not {value!r}")


def _server_from_entry(name: str, entry: Any, source: str) -> ServerConfig | None:
    where = f"{source}: server {name!r}"
    if not isinstance(entry, Mapping):
        raise MCPConfigError(f"{where} must be an object")
    if entry.get("disabled") is True:
        return None
    kind = entry.get("type", entry.get("transport"))
    if kind is not None and kind not in ("stdio", "http", "streamable-http", "streamable_http"):
        hint = " (the old SSE transport is not supported; use the server's streamable-HTTP " \
               "endpoint)" if kind == "sse" else ""
        raise MCPConfigError(f"{where}: unsupported transport {kind!r}{hint}")
    if "command" in entry and "url" in entry:
        raise MCPConfigError(f"{where}: give either 'command' or 'url', not both")
    trust = _trust(entry, where)
    if "command" in entry:
        command = _string(entry, "command", where)
        return ServerConfig(name=name, command=command, args=_strings(entry, "args", where),
                            env=_string_table(entry, "env", where),
                            cwd=_string(entry, "cwd", where), trust=trust)
    if "url" in entry:
        return ServerConfig(name=name, url=_string(entry, "url", where),
                            headers=_string_table(entry, "headers", where), trust=trust)
    raise MCPConfigError(f"{where} has neither 'command' nor 'url'")


def parse_config(data: Any, source: str = "MCP configuration") -> list[ServerConfig]:
    """The servers of a decoded ``{"mcpServers": {NAME: {...}}}`` document.

    :param source: names the document in error messages (a file name).
    :raises MCPConfigError: the document does not have that shape.
    """
    if not isinstance(data, Mapping) or not isinstance(data.get("mcpServers"), Mapping):
        raise MCPConfigError(f"{source}: expected an object with an 'mcpServers' object")
    servers = []
    for name, entry in data["mcpServers"].items():
        if not isinstance(name, str) or not name.strip():
            raise MCPConfigError(f"{source}: a server name must be a non-empty string")
        server = _server_from_entry(name, entry, source)
        if server is not None:
            servers.append(server)
    return servers


def load_config(path: str | os.PathLike[str]) -> list[ServerConfig]:
    """The servers listed in an ``mcpServers`` JSON file.

    :raises MCPConfigError: the file is missing, not JSON, or not in that format.
    """
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise MCPConfigError(f"cannot read the MCP configuration {path}: {exc}") from exc
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise MCPConfigError(f"the MCP configuration {path} is not valid JSON: {exc}") from exc
    return parse_config(data, str(path))


def unique_names(servers: Iterable[ServerConfig]) -> list[ServerConfig]:
    """The servers, a repeated name made unique with ``-2``, ``-3``... (first keeps it)."""
    seen: set[str] = set()
    out = []
    for server in servers:
        name, n = server.name, 2
        while name in seen:
            name, n = f"{server.name}-{n}", n + 1
        seen.add(name)
        out.append(server if name == server.name else attrs.evolve(server, name=name))
    return out


def trust_servers(servers: Iterable[ServerConfig], trusted: Iterable[str]) -> list[ServerConfig]:
    """The servers, those named in ``trusted`` with their read-only hints trusted.

    :raises MCPConfigError: a name in ``trusted`` is none of the servers' (a typo would
        otherwise leave a server silently untrusted).
    """
    listed = list(servers)
    wanted = set(trusted)
    unknown = sorted(wanted - {s.name for s in listed})
    if unknown:
        known = ", ".join(repr(s.name) for s in listed) or "none"
        raise MCPConfigError(f"cannot trust {', '.join(map(repr, unknown))}: no MCP server "
                             f"has that name (the servers: {known})")
    return [attrs.evolve(s, trust=TRUST_READ_ONLY_HINTS) if s.name in wanted else s
            for s in listed]
