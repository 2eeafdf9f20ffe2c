"""Become an MCP server that dies with its host: ``python -I -S host_bound_exec.py HOST_PID
PROGRAM ARGV0 [ARGS...]``.

A stdio server is a program of anyone's (``npx``, ``uvx``, a script), so toolwire
cannot make it ask the kernel to end it with its host, as the workspace search's
children do for themselves. This launcher asks in its place and then becomes the
server: ``prctl(PR_SET_PDEATHSIG, SIGKILL)`` survives ``exec``, so the server is
killed when the thread that started it ends (the servers' event-loop thread, which
lives as long as its :class:`~.toolset.MCPServers`), however the host ends: a
``kill -9`` of ``toolwire serve`` included, which no ``atexit`` or ``close()``
survives. The check after ``prctl`` closes the window in which the host died first.

Started with ``-I -S`` it imports nothing but the standard library's startup; it
runs only on Linux (elsewhere the server is started directly, as the SDK does).
"""

from __future__ import annotations

import os
import signal
import sys

_PR_SET_PDEATHSIG = 1


def main(argv: list[str]) -> None:
    """Ask to die with the host whose pid is ``argv[0]``, then exec ``argv[1]``."""
    host, program, *server_argv = argv
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != int(host):
        os._exit(0)  # the host is already gone
    os.execv(program, server_argv)


if __name__ == "__main__":
    main(sys.argv[1:])
