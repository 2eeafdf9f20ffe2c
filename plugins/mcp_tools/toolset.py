"""MCP servers as toolwire tools: :class:`MCPServers` owns the connections.

Each listed MCP tool becomes a :class:`toolwire.Tool` whose function is an
:class:`MCPToolFunction`. The dispatcher calls it in a worker thread like any
tool, after validating the arguments against the server's own input schema; the
function hands the call to the servers' event-loop thread and waits, giving up
at the dispatcher's deadline or when the reply is cancelled (both read from
:func:`toolwire.plugin_api.current_call`), and then cancels the request on the
server too. Every failure is raised as a :class:`toolwire.ToolCallError`, which
the dispatcher turns into the tool's result for the model.

A tool's ``outputSchema`` passes the one place every schema from outside passes
(:func:`toolwire.plugin_api.checked_validator`: the schema limits, its regular
expressions compiled within theirs, and jsonschema's check): over a limit, or not
a schema, it leaves its tool out with a note, as an ``inputSchema`` does. A result's
structured content is then checked against it in the calling thread, within the
dispatcher's step allowance and the call's deadline
(:func:`toolwire.plugin_api.value_problems`), never by the SDK, which would check
it with an unbounded validator and Python's backtracking ``re`` on the servers'
event loop (:mod:`.connection` turns that off).

Servers start on first listing or first call, never at construction. Closing
(``close()``, ``with``/``async with``, or interpreter exit for owners left open)
stops every server process.
"""

from __future__ import annotations

import asyncio
import atexit
import concurrent.futures
import os
import threading
import time
from collections.abc import Iterable, Mapping, Sequence
from typing import IO, TYPE_CHECKING, Any

from toolwire import (
    Tool,
    ToolCancelledError,
    ToolDefinitionError,
    ToolExecutionError,
    ToolTimeoutError,
)
from toolwire.plugin_api import (
    McpLimits,
    ValidationStepsExceeded,
    checked_validator,
    current_call,
    value_problems,
)

from .config import (
    TRUST_READ_ONLY_HINTS,
    ServerConfig,
    load_config,
    server_from_command,
    server_from_url,
    trust_servers,
    unique_names,
)
from .errors import MCPNotInstalledError, MCPServerError
from .loop_thread import LoopThread
from .naming import NamedTool, assign_names
from .results import cut_while_read, render_result

if TYPE_CHECKING:
    import mcp_types
    from jsonschema.protocols import Validator

    from .connection import ServerConnection

__all__ = ["MCPServers", "MCPToolFunction",
           "close_all", "mcp_tools"]

_LIMITS = McpLimits()
_CANCEL_POLL_SECONDS = 0.05
_DEADLINE_GRACE = 1.0  # the request times itself out on the loop; this only backs that up
_CLOSE_WAIT = 30.0
_FAILURE_PREFIX = "Error: "
"""What the dispatcher writes before a failure's message (room is kept for it, so a cut
error result keeps its note within the same bound)."""

_OPEN: set[MCPServers] = set()
_OPEN_LOCK = threading.Lock()


def close_all() -> None:
    """Close every :class:`MCPServers` still open (those :func:`mcp_tools` made, too).

    This runs at interpreter exit, so no server process outlives the program.
    """
    with _OPEN_LOCK:
        owners = list(_OPEN)
    for owner in owners:
        owner.close()


atexit.register(close_all)


def _as_config(server: ServerConfig | str) -> ServerConfig:
    if isinstance(server, ServerConfig):
        return server
    if server.startswith(("http://", "https://")):
        return server_from_url(server)
    return server_from_command(server)


class MCPToolFunction:
    """The function of a registered MCP tool: calls the server's tool from any thread.

    :ivar server: the server's name.
    :ivar remote: the tool's name on the server.
    :ivar name: the tool's name in the registry.
    """

    def __init__(self, owner: MCPServers, server: str, remote: str, name: str,
                 output: Validator | None = None) -> None:
        self._owner = owner
        self.server = server
        self.remote = remote
        self.name = name
        self.output = output
        """The bounded validator of the tool's ``outputSchema`` (``None``: it has none)."""
        self.__name__ = name
        self.__doc__ = f"MCP tool {remote!r} of server {server!r}"

    def __call__(self, **arguments: Any) -> str:
        """Run the call; return the result's text or raise a ToolCallError for the model."""
        return self._owner.call(self, arguments)

    def __repr__(self) -> str:
        return f"<MCP tool {self.remote!r} of server {self.server!r} as {self.name!r}>"


class MCPServers:
    """Connections to MCP servers, and their tools as toolwire tools.

    Use it as a context manager (``with`` or ``async with``) so the servers are
    stopped when you are done; an owner left open is closed at interpreter exit::

        async with MCPServers(["uvx mcp-server-time", "http://127.0.0.1:8000/mcp"]) as mcp:
            chat = toolwire.Chat(backend, tools=await mcp.atools())
            ...

    :param servers: command lines (a stdio server), ``http(s)://`` URLs (streamable
        HTTP) or :class:`ServerConfig` records; a repeated name gets ``-2``...
    :param connect_timeout: seconds a server may take to start, answer the handshake,
        and list its tools.
    :param call_timeout: seconds a call may take when the session sets no timeout.
    :param max_restarts: how many times a server that stopped is started again.
    :param max_result_chars: the most characters of one result the model reads.
    :param max_message_bytes: the most bytes of one message from a server that are
        read; a tool result over it is cut while it is read (its first part, and a
        note), any other answer over it is an error, so neither time nor memory grows
        with what a server sends.
    :param trusted: names of servers whose read-only hints are trusted (as
        ``"trust": "read-only-hints"`` does for a configured server); every other
        server's tools are write tools whatever their hints say.
    :param errlog: where stdio servers' standard error goes (default: kept in a
        temporary file, quoted when a server fails to start).
    """

    def __init__(self, servers: Iterable[ServerConfig | str] = (), *,
                 connect_timeout: float = _LIMITS.connect_timeout,
                 call_timeout: float = _LIMITS.call_timeout, max_restarts: int = 1,
                 max_result_chars: int = _LIMITS.max_result_chars,
                 max_message_bytes: int = _LIMITS.max_message_bytes,
                 trusted: Iterable[str] = (), errlog: IO[Any] | None = None) -> None:
        if max_message_bytes < 1:
            raise ValueError("max_message_bytes must be at least 1")
        self.configs: tuple[ServerConfig, ...] = tuple(trust_servers(
            unique_names(_as_config(s) for s in servers), trusted))
        self.connect_timeout = connect_timeout
        self.call_timeout = call_timeout
        self.max_restarts = max_restarts
        self.max_result_chars = max_result_chars
        self.max_message_bytes = max_message_bytes
        self._errlog = errlog
        self._notes: list[str] = []
        self.notes: Sequence[str] = self._notes  # read-only to users, as ToolSource says
        """What the user should know: renamed tools, skipped tools, servers that failed."""
        self.failures: dict[str, str] = {}
        """Servers that could not be started or listed, with the reason."""
        self._loop = LoopThread()
        self._connections: dict[str, ServerConnection] | None = None
        self._lock = threading.Lock()
        self._listings: set[concurrent.futures.Future[Any]] = set()
        self._closed = False
        with _OPEN_LOCK:
            _OPEN.add(self)

    @classmethod
    def from_config(cls, path: str | os.PathLike[str], **options: Any) -> MCPServers:
        """The servers of an ``{"mcpServers": {...}}`` file (options as for the constructor)."""
        return cls(load_config(path), **options)

    # -- the connections ---------------------------------------------------------------

    def _connection(self, server: str) -> ServerConnection:
        with self._lock:
            if self._closed:
                raise MCPServerError(f"MCP server {server!r} is closed (its session ended)",
                                     server=server)
            if self._connections is None:
                try:
                    from .connection import ServerConnection
                except ImportError as exc:
                    raise MCPNotInstalledError(str(exc)) from exc
                self._connections = {
                    c.name: ServerConnection(c, connect_timeout=self.connect_timeout,
                                             max_restarts=self.max_restarts,
                                             max_message_bytes=self.max_message_bytes,
                                             errlog=self._errlog)
                    for c in self.configs}
            return self._connections[server]

    def connection(self, server: str) -> ServerConnection:
        """The connection of the server called ``server`` (for inspection and tests)."""
        return self._connection(server)

    # -- listing --------------------------------------------------------------------------

    def tools(self, *, taken: Iterable[str] = (), strict: bool = False) -> list[Tool]:
        """Start every server, list its tools, and return them as toolwire tools.

        :param taken: names the session's other tools use (an MCP tool with one of
            them is prefixed with its server's name).
        :param strict: raise :class:`MCPServerError` when a server fails; by default
            its failure is kept in :attr:`failures` and :attr:`notes` and the other
            servers' tools are returned.
        """
        bound = 2 * self.connect_timeout + _CLOSE_WAIT
        names = ", ".join(repr(c.name) for c in self.configs)
        listing = self._start_listing()
        try:
            listed = listing.result(timeout=bound)
        except concurrent.futures.TimeoutError as exc:
            listing.cancel()
            raise MCPServerError(f"MCP servers {names} did not list their tools within "
                                 f"{bound:g} seconds", server=names) from exc
        except concurrent.futures.CancelledError as exc:
            raise MCPServerError(f"MCP servers {names} were closed while their tools were "
                                 "listed", server=names) from exc
        return self._build(listed, taken, strict)

    async def atools(self, *, taken: Iterable[str] = (), strict: bool = False) -> list[Tool]:
        """:meth:`tools` for asyncio code (the servers run on their own loop thread)."""
        listed = await asyncio.wrap_future(self._start_listing())
        return self._build(listed, taken, strict)

    def _start_listing(self) -> concurrent.futures.Future[Any]:
        """Submit a listing of every server; :meth:`close` lets it finish before it ends."""
        for config in self.configs:
            self._connection(config.name)
        listing = self._loop.submit(self._list_all())
        with self._lock:
            self._listings.add(listing)
        listing.add_done_callback(self._listing_done)
        return listing

    def _listing_done(self, listing: concurrent.futures.Future[Any]) -> None:
        with self._lock:
            self._listings.discard(listing)

    async def _list_all(self) -> list[tuple[ServerConfig, list[mcp_types.Tool] | BaseException]]:
        connections = [self._connection(c.name) for c in self.configs]
        answers = await asyncio.gather(*(c.list_tools() for c in connections),
                                       return_exceptions=True)
        return list(zip(self.configs, answers, strict=True))

    def _build(self, listed: Sequence[tuple[ServerConfig, Any]], taken: Iterable[str],
               strict: bool) -> list[Tool]:
        found: list[tuple[ServerConfig, mcp_types.Tool]] = []
        problems = []
        for config, answer in listed:
            if isinstance(answer, BaseException):
                message = str(answer) if isinstance(answer, MCPServerError) \
                    else f"MCP server {config.name!r} failed: {type(answer).__name__}: {answer}"
                self.failures[config.name] = message
                self._notes.append(message)
                problems.append(message)
                continue
            found.extend((config, item) for item in answer)
        if strict and problems:
            raise MCPServerError("; ".join(problems), server=next(iter(self.failures)))
        names = assign_names([(config.name, item.name) for config, item in found],
                             frozenset(taken))
        tools = []
        for (config, item), named in zip(found, names, strict=True):
            if named.note:
                self._notes.append(named.note)
            tool = self._tool(config, item, named)
            if tool is not None:
                tools.append(tool)
        self._notes.extend(_untrusted_hint_notes(found))
        return tools

    def _tool(self, config: ServerConfig, item: mcp_types.Tool, named: NamedTool) -> Tool | None:
        if named.name is None:
            return None
        description = item.description or item.title or ""
        if named.name != item.name:
            description += (f"\n\n(MCP server {config.name!r} calls this tool {item.name!r}.)"
                            if description else
                            f"(MCP server {config.name!r} calls this tool {item.name!r}.)")
        read_only = config.trusts_read_only_hints and _hints_read_only(item)
        schema = {"name": named.name, "description": description,
                  "parameters": dict(item.input_schema or {"type": "object"})}
        function = MCPToolFunction(self, config.name, item.name, named.name)
        try:
            tool = Tool(schema=schema, function=function, read_only=read_only)
            output = getattr(item, "output_schema", None)
            if output is not None:
                function.output = checked_validator(output, tool=named.name)
            return tool
        except ToolDefinitionError as exc:
            self._notes.append(f"MCP tool {item.name!r} of server {config.name!r} is skipped: "
                              f"{exc}")
            return None

    # -- calling ----------------------------------------------------------------------------

    def call(self, function: MCPToolFunction, arguments: Mapping[str, Any]) -> str:
        """Run one MCP tool call from a worker thread (what :class:`MCPToolFunction` does).

        Waits until the dispatcher's deadline (or :attr:`call_timeout` without one) or
        the reply's cancellation, whichever comes first, then cancels the request.

        :raises ToolCallError: every failure, with a message for the model.
        """
        running = current_call()
        started = time.monotonic()
        deadline = running.deadline if running is not None and running.deadline is not None \
            else started + self.call_timeout
        cancel = running.cancel if running is not None else None
        try:
            connection = self._connection(function.server)
        except MCPServerError as exc:
            raise ToolExecutionError(str(exc), tool=function.name) from exc
        request = connection.call_tool(function.remote, dict(arguments), label=function.name,
                                       timeout=max(0.0, deadline - started))
        future = self._loop.submit(request)
        try:
            result = self._wait(future, function, deadline, cancel)
        finally:
            if not future.done():
                future.cancel()  # cancels the request's task: the server is told to stop
        if not getattr(result, "is_error", False):
            if function.output is not None and cut_while_read(result) is None:
                # (a result cut while it was read says so; its first part cannot match)
                _check_structured_content(function, result, deadline)
            return render_result(result, max_chars=self.max_result_chars)
        said = f"MCP tool {function.remote!r} (server {function.server!r}) reported an error: "
        room = self.max_result_chars - len(said) - len(_FAILURE_PREFIX)
        raise ToolExecutionError(said + render_result(result, max_chars=max(0, room)),
                                 tool=function.name)

    def _wait(self, future: concurrent.futures.Future[Any], function: MCPToolFunction,
              deadline: float, cancel: Any) -> Any:
        allowed = max(0.0, deadline - time.monotonic())
        while True:
            remaining = deadline + _DEADLINE_GRACE - time.monotonic()
            step = max(0.0, remaining if cancel is None else min(remaining, _CANCEL_POLL_SECONDS))
            try:
                return future.result(timeout=step)
            except concurrent.futures.TimeoutError:
                if cancel is not None and cancel.cancelled:
                    raise ToolCancelledError(
                        f"tool {function.name!r} was still running when the reply was "
                        f"cancelled; MCP server {function.server!r} was asked to stop it",
                        tool=function.name) from None
                if time.monotonic() >= deadline + _DEADLINE_GRACE:
                    raise ToolTimeoutError(
                        f"tool {function.name!r} did not finish within {allowed:g} seconds "
                        f"and was abandoned; MCP server {function.server!r} was asked to "
                        "cancel it", tool=function.name) from None
            except concurrent.futures.CancelledError:
                raise ToolExecutionError(f"MCP server {function.server!r} was closed while "
                                         f"running {function.remote!r}",
                                         tool=function.name) from None

    # -- closing ---------------------------------------------------------------------------

    def close(self) -> None:
        """Stop every server (idempotent); later calls of its tools report it is closed."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            connections = list((self._connections or {}).values())
        with _OPEN_LOCK:
            _OPEN.discard(self)
        if connections and self._loop.running:
            try:
                self._loop.run(_close_all(connections), timeout=_CLOSE_WAIT)
            except TimeoutError:
                pass  # the loop's end below cancels what is left; the SDK kills on cancel
            # a listing still running answers with the servers' failures, not a cancellation
            with self._lock:
                listings = list(self._listings)
            concurrent.futures.wait(listings, timeout=_CLOSE_WAIT)
        self._loop.stop()

    async def aclose(self) -> None:
        """:meth:`close` for asyncio code."""
        await asyncio.to_thread(self.close)

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` was called."""
        return self._closed

    def __enter__(self) -> MCPServers:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    async def __aenter__(self) -> MCPServers:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    def __repr__(self) -> str:
        names = ", ".join(c.name for c in self.configs)
        return f"<MCPServers [{names}]{' closed' if self._closed else ''}>"


def _check_structured_content(function: MCPToolFunction, result: Any, deadline: float) -> None:
    """Hold a result's structured content to its tool's output schema (bounded in steps
    and by the call's deadline).

    :raises ToolExecutionError: it is missing, does not match, or could not be checked.
    """
    assert function.output is not None
    said = f"MCP tool {function.remote!r} (server {function.server!r})"
    structured = getattr(result, "structured_content", None)
    if structured is None:
        raise ToolExecutionError(f"{said} has an output schema but returned no structured "
                                 "content", tool=function.name)
    try:
        problems = value_problems(function.output, structured, deadline=deadline)
    except ValidationStepsExceeded as exc:
        why = "before the call's deadline" if exc.timed_out else \
            f"within {exc.steps:,} steps"
        raise ToolExecutionError(f"{said} returned structured content that could not be "
                                 f"checked against its output schema {why}",
                                 tool=function.name) from None
    if problems:
        raise ToolExecutionError(f"{said} returned structured content that does not match "
                                 f"its output schema: {'; '.join(problems)}",
                                 tool=function.name)


def _hints_read_only(item: mcp_types.Tool) -> bool:
    annotations = item.annotations
    return bool(annotations is not None and annotations.read_only_hint is True)


def _untrusted_hint_notes(found: Sequence[tuple[ServerConfig, mcp_types.Tool]]) -> list[str]:
    """One note per untrusted server whose tools claim to be read-only."""
    hinted: dict[str, list[str]] = {}
    for config, item in found:
        if not config.trusts_read_only_hints and _hints_read_only(item):
            hinted.setdefault(config.name, []).append(item.name)
    notes = []
    for server, names in hinted.items():
        shown = ", ".join(names[:5]) + (f" and {len(names) - 5} more" if len(names) > 5 else "")
        notes.append(f"MCP server {server!r} marks {len(names)} tool"
                     f"{'s' if len(names) > 1 else ''} read-only ({shown}); its hints are not "
                     f"trusted, so they are write tools. To trust them: \"trust\": "
                     f"\"{TRUST_READ_ONLY_HINTS}\" in its mcpServers entry, or --mcp-trust "
                     f"{server}")
    return notes


async def _close_all(connections: Sequence[ServerConnection]) -> None:
    await asyncio.gather(*(c.close() for c in connections), return_exceptions=True)


def mcp_tools(*servers: ServerConfig | str, config: str | os.PathLike[str] | None = None,
              taken: Iterable[str] = (), **options: Any) -> list[Tool]:
    """The tools of MCP servers as toolwire tools, ready for ``toolwire.Chat(tools=...)``.

    Each argument is a command line (a stdio server), an ``http(s)://`` URL
    (streamable HTTP) or a :class:`ServerConfig`; ``config`` adds the servers of an
    ``mcpServers`` JSON file. The servers start now (to list their tools) and stay
    connected until the interpreter exits or :func:`close_all`; use
    :class:`MCPServers` to own them yourself. Options are those of :class:`MCPServers`.

    :raises MCPServerError: a server did not start or list its tools (the others are
        closed again).
    :raises MCPConfigError: a command line, URL or file is not usable.
    :raises MCPNotInstalledError: the ``mcp`` extra is not installed.
    """
    configs: list[ServerConfig | str] = list(servers)
    if config is not None:
        configs.extend(load_config(config))
    owner = MCPServers(configs, **options)
    try:
        return owner.tools(taken=taken, strict=True)
    except BaseException:
        owner.close()
        raise
