"""One MCP server's connection: started on first use, restarted once after a crash, closed.

Everything here runs on the :class:`~.loop_thread.LoopThread`'s event loop. The
SDK's ``Client`` must be entered and left by one task, so each start creates an
*owner* task that opens the client (process or HTTP session, then the protocol
handshake), hands it over, and waits to be told to close it. Calls are separate
tasks that use the client while the owner keeps it open.

The handshake runs under a deadline (an anyio cancel scope in the owner, so the
SDK's shielded shutdown still stops the process). A server that closes the
connection, or a transport that fails, marks the connection lost: the owner
closes what is left, and the next use starts the server again, at most
``max_restarts`` times. Every failure is raised as the core's
:class:`~toolwire.ToolCallError` subclasses with a message for the model, or as
:class:`~.errors.MCPServerError` when the server cannot be started.

This module imports the SDK; :mod:`.toolset` imports it only when a server is used.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import os
import tempfile
from collections.abc import AsyncIterator
from typing import IO, Any

import anyio
import attrs
import mcp_types
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
from mcp_types import CONNECTION_CLOSED, REQUEST_TIMEOUT

from toolwire import ToolExecutionError, ToolTimeoutError, __version__
from toolwire.plugin_api import McpLimits

from .config import ServerConfig
from .errors import MCPServerError
from .http_transport import bounded_http_client
from .stdio_transport import bounded_stdio_client

__all__ = ["ServerConnection"]

_SHUTDOWN_WAIT = 8.0
"""Seconds to let a server close by itself (the SDK allows 2 s before it signals)."""
_FORCED_SHUTDOWN_WAIT = 4.0
_STDERR_TAIL_BYTES = 4000
_EVENT_SLACK = 64 * 1024


class ServerConnection:
    """The connection to one MCP server, owned by the loop thread.

    :param config: which server.
    :param connect_timeout: seconds the start (process or HTTP session, then the
        handshake) may take.
    :param max_restarts: how many times a server that stopped is started again.
    :param max_message_bytes: the most bytes of one message from the server that are
        read (a tool result over it is cut while it is read, see :mod:`.message_cut`).
    :param errlog: where a stdio server's standard error goes; ``None`` keeps it in
        a temporary file (its end is quoted when the server fails to start).
    """

    def __init__(self, config: ServerConfig, *, connect_timeout: float, max_restarts: int,
                 max_message_bytes: int, errlog: IO[Any] | None = None) -> None:
        self.config = config
        self.connect_timeout = connect_timeout
        self.max_restarts = max_restarts
        self.max_message_bytes = max_message_bytes
        self._errlog = errlog
        self._stderr: IO[bytes] | None = None
        self._client: Client | None = None
        self._starting: asyncio.Task[Client] | None = None
        self._run: _Run | None = None
        self._ending: set[asyncio.Task[None]] = set()
        self._starts = 0
        self._closed = False
        self._last_loss: str | None = None

    @property
    def name(self) -> str:
        """The server's name."""
        return self.config.name

    @property
    def starts(self) -> int:
        """How many times the server was started (1 + restarts)."""
        return self._starts

    @property
    def connected(self) -> bool:
        """Whether a live client is open."""
        return self._client is not None

    # -- use --------------------------------------------------------------------------

    async def list_tools(self) -> list[mcp_types.Tool]:
        """Every tool the server lists (all pages), starting the server if needed.

        :raises MCPServerError: the server did not start or did not answer the listing.
        """
        client = await self._connected_or_setup_error()
        tools: list[mcp_types.Tool] = []
        cursor: str | None = None
        try:
            async with asyncio.timeout(self.connect_timeout):
                for _ in range(McpLimits().max_list_pages):
                    page = await client.list_tools(cursor=cursor)
                    tools.extend(page.tools)
                    cursor = page.next_cursor
                    if not cursor:
                        break
        except TimeoutError as exc:
            raise MCPServerError(f"MCP server {self.name!r} did not list its tools within "
                                 f"{self.connect_timeout:g} seconds", server=self.name) from exc
        except Exception as exc:
            if _is_connection_loss(exc):
                self._lose(client, _describe(exc))
            raise MCPServerError(f"MCP server {self.name!r} did not list its tools: "
                                 f"{_describe(exc)}", server=self.name) from exc
        return tools

    async def call_tool(self, remote: str, arguments: dict[str, Any], *, label: str,
                        timeout: float) -> mcp_types.CallToolResult:
        """Call the server's tool ``remote``; ``label`` is its name in the registry.

        :raises ToolCallError: with a message for the model, for every failure.
        """
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        try:
            async with asyncio.timeout_at(deadline):
                try:
                    client = await self._connected_or_setup_error()
                except MCPServerError as exc:
                    raise ToolExecutionError(str(exc), tool=label) from exc
                try:
                    return await client.call_tool(
                        remote, arguments, read_timeout_seconds=max(0.0, deadline - loop.time()))
                except MCPError as exc:
                    if exc.code == REQUEST_TIMEOUT:
                        raise TimeoutError from exc
                    if exc.code != CONNECTION_CLOSED:
                        raise ToolExecutionError(
                            f"MCP server {self.name!r} refused the call to {remote!r}: "
                            f"{exc.message} (error {exc.code})", tool=label) from exc
                    self._lose(client, "it closed the connection")
                    raise ToolExecutionError(self._lost_message(remote, ""), tool=label) from exc
                except Exception as exc:
                    if not _is_connection_loss(exc):
                        raise ToolExecutionError(
                            f"MCP server {self.name!r} sent an answer to {remote!r} that could "
                            f"not be read: {_describe(exc)}", tool=label) from exc
                    self._lose(client, _describe(exc))
                    raise ToolExecutionError(self._lost_message(remote, _describe(exc)),
                                             tool=label) from exc
        except TimeoutError as exc:
            raise ToolTimeoutError(
                f"tool {label!r} did not finish within {timeout:g} seconds and was abandoned; "
                f"MCP server {self.name!r} was asked to cancel it. Try a smaller request.",
                tool=label) from exc

    # -- starting and stopping ------------------------------------------------------------

    def _lost_message(self, remote: str, detail: str) -> str:
        if self.config.transport == "stdio" and not detail:
            what = (f"MCP server {self.name!r} closed the connection while running {remote!r} "
                    "(its process crashed or exited)")
        else:
            what = (f"the connection to MCP server {self.name!r} was lost while running "
                    f"{remote!r}" + (f" ({detail})" if detail else ""))
        return f"{what}; the call may not have completed. {self._restart_note()}"

    def _restart_note(self) -> str:
        if self._closed:
            return "The session is closing."
        if self._starts <= self.max_restarts:
            return "The server will be restarted for the next call."
        return "It is not restarted again: do not call its tools any more."

    async def _connected_or_setup_error(self) -> Client:
        """The live client, starting the server when there is none.

        :raises MCPServerError: the server may not start again, or did not start.
        """
        if self._client is not None:
            return self._client
        if self._starting is None:
            self._check_may_start()
            self._starts += 1
            starting = asyncio.get_running_loop().create_task(self._start())
            starting.add_done_callback(_retrieve)
            self._starting = starting
        return await asyncio.shield(self._starting)

    def _check_may_start(self) -> None:
        if self._closed:
            raise MCPServerError(f"MCP server {self.name!r} is closed (its session ended)",
                                 server=self.name)
        if self._starts > self.max_restarts:
            why = f" (last: {self._last_loss})" if self._last_loss else ""
            raise MCPServerError(
                f"MCP server {self.name!r} is not available: it was started {self._starts} "
                f"time{'s' if self._starts > 1 else ''} and is not started again{why}. "
                "Do not call its tools any more.", server=self.name)

    async def _start(self) -> Client:
        loop = asyncio.get_running_loop()
        ready: asyncio.Future[Client] = loop.create_future()
        run = _Run(stop=asyncio.Event())
        run.owner = loop.create_task(self._own(ready, run))
        self._run = run
        try:
            client = await ready
        except MCPServerError:
            await self._finish(run)  # the failed start's process is gone before we report it
            raise
        finally:
            self._starting = None
        self._client = client
        return client

    async def _own(self, ready: asyncio.Future[Client], run: _Run) -> None:
        """Open the client, hand it over, keep it open until told to stop, close it."""
        failure: str | None = None
        try:
            with anyio.CancelScope(deadline=anyio.current_time() + self.connect_timeout) as scope:
                run.scope = scope
                async with self._open_client() as client:
                    scope.deadline = math.inf
                    ready.set_result(client)
                    await run.stop.wait()
            if scope.cancelled_caught and not ready.done():
                failure = "was closed while it started" if self._closed else (
                    f"did not complete the start-up handshake within "
                    f"{self.connect_timeout:g} seconds")
        except Exception as exc:
            failure = f"could not be started: {_describe(exc)}"
            if ready.done():
                self._last_loss = _describe(exc)
        finally:
            run.scope = None
            if ready.done() and ready.exception() is None and self._client is ready.result():
                # the connection ended without being asked to: the next use restarts it
                self._client = None
                self._last_loss = self._last_loss or "the connection ended"
            if self._run is run:
                self._run = None
            if not ready.done():
                message = f"MCP server {self.name!r} ({self.config.describe()}) " \
                          f"{failure or 'stopped before it was ready'}"
                tail = self.stderr_tail()
                if tail:
                    message += f"; its last output: {tail}"
                ready.set_exception(MCPServerError(message, server=self.name))

    @contextlib.asynccontextmanager
    async def _open_client(self) -> AsyncIterator[Client]:
        info = mcp_types.Implementation(name="toolwire", version=__version__)
        limit = self.max_message_bytes
        async with contextlib.AsyncExitStack() as stack:
            if self.config.command is not None:
                transport: Any = bounded_stdio_client(self.config, errlog=self._stderr_sink(),
                                                      max_message_bytes=limit)
            else:
                http = await stack.enter_async_context(bounded_http_client(
                    self.config.headers, max_message_bytes=limit))
                # the SDK's own event bound only backs ours up (a cut event is re-encoded)
                transport = streamable_http_client(str(self.config.url), http_client=http,
                                                   max_sse_event_size=2 * limit + _EVENT_SLACK)
            client = Client(transport, client_info=info, cache=None)
            opened = await stack.enter_async_context(client)
            _skip_sdk_output_checks(opened)
            yield opened

    def _stderr_sink(self) -> IO[Any]:
        if self._errlog is not None:
            return self._errlog
        if self._stderr is not None:
            self._stderr.close()
        self._stderr = tempfile.TemporaryFile()  # kept open while the process runs
        return self._stderr

    def stderr_tail(self, lines: int = 5) -> str:
        """The last lines a stdio server wrote to standard error (when it is captured)."""
        if self._stderr is None or self._stderr.closed:
            return ""
        fd = self._stderr.fileno()
        size = os.fstat(fd).st_size
        data = os.pread(fd, _STDERR_TAIL_BYTES, max(0, size - _STDERR_TAIL_BYTES))
        kept = [line.strip() for line in data.decode("utf-8", "replace").splitlines()
                if line.strip()]
        return " | ".join(kept[-lines:])

    def _lose(self, client: Client, why: str) -> None:
        """Forget a client whose connection is gone; its owner cleans up in the background.

        The caller does not wait for that (a stdio shutdown may take seconds), so the
        call that found the loss answers at once and the next use starts a new run.
        """
        if self._client is not client:
            return
        self._client = None
        self._last_loss = why
        if self._run is not None:
            self._end(self._run)
            self._run = None

    def _end(self, run: _Run) -> None:
        run.stop.set()
        ending = asyncio.get_running_loop().create_task(self._finish(run))
        self._ending.add(ending)
        ending.add_done_callback(self._ending.discard)

    @staticmethod
    async def _finish(run: _Run) -> None:
        """Wait for a run's owner to close; cancel its scope when it takes too long."""
        if run.owner is None:
            return
        done, _ = await asyncio.wait({run.owner}, timeout=_SHUTDOWN_WAIT)
        if not done:
            if run.scope is not None:
                run.scope.cancel()  # the SDK's shielded shutdown still stops the process
            await asyncio.wait({run.owner}, timeout=_FORCED_SHUTDOWN_WAIT)

    async def close(self) -> None:
        """Close the connection for good: the process is stopped, the session ended."""
        self._closed = True
        self._client = None
        run, self._run = self._run, None
        if run is not None:
            if self._starting is not None and run.scope is not None:
                run.scope.cancel()  # still starting: stop waiting for the handshake
            self._end(run)
        if self._ending:
            await asyncio.gather(*self._ending, return_exceptions=True)
        if self._stderr is not None:
            self._stderr.close()


async def _output_checked_by_toolwire(name: str, result: mcp_types.CallToolResult) -> None:
    """In place of the SDK's check (see :func:`_skip_sdk_output_checks`)."""


def _skip_sdk_output_checks(client: Client) -> None:
    """Turn off the SDK's own check of structured results against ``outputSchema``.

    The SDK checks them with jsonschema as it is and Python's ``re``, on this event
    loop that every server shares: an output ``pattern`` of ``^(a+)+$`` held the
    interpreter lock 16 s at 29 characters, and a 40-level ``anyOf`` chain never
    ended, so every tool of every server timed out until the process ended. toolwire
    checks them itself, within the schema limits, in the calling thread
    (:func:`.toolset._check_structured_content`). The session's ``validate_tool_result``
    is the one place the SDK checks (for direct calls and claimed results alike).
    """
    client.session.validate_tool_result = _output_checked_by_toolwire  # type: ignore[method-assign]


@attrs.define
class _Run:
    """One start of the server: its owner task, the event that tells it to close, its scope."""

    stop: asyncio.Event
    owner: asyncio.Task[None] | None = None
    scope: anyio.CancelScope | None = None


def _retrieve(task: asyncio.Task[Any]) -> None:
    """Mark a start's failure as seen when every caller stopped waiting for it."""
    if not task.cancelled():
        task.exception()


def _leaves(exc: BaseException) -> list[BaseException]:
    if isinstance(exc, BaseExceptionGroup):
        return [leaf for inner in exc.exceptions for leaf in _leaves(inner)]
    return [exc]


def _describe(exc: BaseException) -> str:
    parts = []
    for leaf in _leaves(exc):
        text = str(leaf).strip()
        parts.append(f"{type(leaf).__name__}: {text}" if text else type(leaf).__name__)
    return "; ".join(dict.fromkeys(parts)) or type(exc).__name__


def _is_connection_loss(exc: BaseException) -> bool:
    """Whether ``exc`` means the transport is gone (not a bad answer on a live one)."""
    import httpx2

    for leaf in _leaves(exc):
        if isinstance(leaf, MCPError):
            if leaf.code == CONNECTION_CLOSED:
                return True
            continue
        if isinstance(leaf, OSError | EOFError | httpx2.TransportError | anyio.BrokenResourceError
                      | anyio.ClosedResourceError | anyio.EndOfStream):
            return True
    return False
