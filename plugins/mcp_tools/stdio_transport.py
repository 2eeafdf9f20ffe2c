"""The stdio transport: a server as a child process, each message bounded while it is read.

It does what the SDK's ``stdio_client`` does: start the server in a new process
group with a safe part of the environment, exchange newline-delimited JSON-RPC
on its standard input and output, and at the end close its input, wait, then
signal the whole group (``SIGTERM``, then ``SIGKILL``): a server is anyone's
program, which may start programs of its own, so it keeps the process group the
SDK's way of ending it needs, and is not one of toolwire's supervised children
(no JSON-lines pipe of toolwire's, no memory or CPU bound: a server may need
both). It differs from the SDK in two ways. On Linux the server is started through
toolwire's launcher (:func:`toolwire.plugin_api.host_bound_command`), so it dies
with toolwire however toolwire ends (even ``kill -9``), not only when it is closed.
And in reading:
the SDK joins a line's pieces until its newline comes (``buffer + chunk``), so a
100 MB line costs quadratic time and several copies of the line in memory; a
result of 100 MB timed out, one of 400 MB peaked at 1.7 GB. Here each line goes
through a :class:`~.message_cut.MessageReader`: at most ``max_message_bytes`` of
it are kept, the rest is counted and dropped, and an oversized line becomes the
message :func:`~.message_cut.cut_message` makes of it (a tool result's first
part, marked as cut; an error for any other answer).

A line that is not JSON-RPC is handed to the session as an exception, as the SDK
does; blank lines are skipped.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import IO, Any

import anyio
import anyio.abc
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream
from mcp.client.stdio import get_default_environment
from mcp.os.posix.utilities import terminate_posix_process_tree
from mcp.shared.message import SessionMessage

from toolwire.plugin_api import find_program, host_bound_command

from .config import ServerConfig
from .message_cut import MessageReader
from .session_messages import read_message

__all__ = ["Streams", "bounded_stdio_client", "server_command"]

Streams = tuple[MemoryObjectReceiveStream[SessionMessage | Exception],
                MemoryObjectSendStream[SessionMessage]]
"""What a transport yields to the SDK's ``Client``: what the server sent, what to send."""

_EXIT_WAIT = 2.0
"""Seconds the server has to exit by itself once its input is closed."""
_SIGNAL_WAIT = 2.0
"""Seconds between ``SIGTERM`` and ``SIGKILL`` to the server's process group."""
_REAP_WAIT = 2.0
_POLL = 0.01
_READ_BYTES = 1024 * 1024


@contextlib.asynccontextmanager
async def bounded_stdio_client(config: ServerConfig, *, errlog: IO[Any],
                               max_message_bytes: int) -> AsyncIterator[Streams]:
    """Start the stdio server ``config`` and yield the session's read and write streams.

    :raises OSError: the server's program could not be started.
    """
    assert config.command is not None
    env = get_default_environment() | dict(config.env)
    process = await anyio.open_process(
        server_command(config.command, config.args, env, config.cwd), env=env,
        stderr=errlog, cwd=config.cwd, start_new_session=True)
    to_session, read_stream = anyio.create_memory_object_stream[SessionMessage | Exception](0)
    write_stream, from_session = anyio.create_memory_object_stream[SessionMessage](0)

    async def read_stdout() -> None:
        assert process.stdout is not None
        reader = MessageReader(max_message_bytes)
        try:
            async with to_session:
                while chunk := await _receive(process.stdout):
                    start = 0
                    while (newline := chunk.find(b"\n", start)) >= 0:
                        reader.feed(chunk[start:newline])
                        start = newline + 1
                        message = read_message(reader.finish())
                        if message is not None:
                            await to_session.send(message)
                    reader.feed(chunk[start:])
        except (anyio.ClosedResourceError, anyio.BrokenResourceError, anyio.EndOfStream,
                OSError):
            pass  # the session or the pipe is gone
        finally:
            await _drain(process)

    async def write_stdin() -> None:
        assert process.stdin is not None
        try:
            async with from_session:
                async for message in from_session:
                    line = message.message.model_dump_json(by_alias=True, exclude_unset=True)
                    await process.stdin.send(line.encode("utf-8") + b"\n")
        except (anyio.ClosedResourceError, anyio.BrokenResourceError, OSError):
            await to_session.aclose()  # the session sees the connection end, not a hang

    async with anyio.create_task_group() as tasks:
        tasks.start_soon(read_stdout)
        tasks.start_soon(write_stdin)
        try:
            yield read_stream, write_stream
        finally:
            with anyio.CancelScope(shield=True):  # the process must stop, cancelled or not
                read_stream.close()  # the reader now only drains, so the server can exit
                write_stream.close()
                await _stop(process)
            tasks.cancel_scope.cancel()


def server_command(command: str, args: Sequence[str], env: Mapping[str, str],
                   cwd: str | os.PathLike[str] | None) -> list[str]:
    """The command line that starts the server so that it dies with this process.

    The program is found here, as ``exec`` would find it (a name on ``env``'s
    ``PATH``, a path from ``cwd``), so a missing one is the same
    :class:`FileNotFoundError` as when it is started directly.

    :raises OSError: the program is not there, or may not be run.
    """
    if not sys.platform.startswith("linux"):
        return [command, *args]
    return host_bound_command(find_program(command, env, cwd), [command, *args])


async def _receive(stdout: anyio.abc.ByteReceiveStream) -> bytes:
    """The next bytes the server wrote (as much as the pipe holds), ``b""`` at its end."""
    try:
        return await stdout.receive(_READ_BYTES)
    except anyio.EndOfStream:
        return b""


async def _drain(process: anyio.abc.Process) -> None:
    """Read and drop what the server still writes, so it never blocks on a full pipe."""
    assert process.stdout is not None
    with contextlib.suppress(anyio.EndOfStream, anyio.ClosedResourceError,
                             anyio.BrokenResourceError, OSError):
        while True:
            await process.stdout.receive()


async def _stop(process: anyio.abc.Process) -> None:
    """Close the server's input, wait, then signal its process group; close the pipes."""
    assert process.stdin is not None and process.stdout is not None
    with contextlib.suppress(OSError, anyio.BrokenResourceError, anyio.ClosedResourceError):
        await process.stdin.aclose()
    if not await _exited(process, _EXIT_WAIT):
        await terminate_posix_process_tree(process, _SIGNAL_WAIT)
        await _exited(process, _REAP_WAIT)
    with contextlib.suppress(OSError, anyio.BrokenResourceError, anyio.ClosedResourceError):
        await process.stdout.aclose()


async def _exited(process: anyio.abc.Process, within: float) -> bool:
    """Whether the process ended within ``within`` seconds (polled: a pipe a grandchild
    still holds open must not make an ended server look alive)."""
    with anyio.move_on_after(within):
        while process.returncode is None:
            await anyio.sleep(_POLL)
    return process.returncode is not None
