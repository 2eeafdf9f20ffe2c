"""Starting the test MCP servers of :mod:`tests.support.mcp_servers`, and watching them.

The servers run as real processes: stdio servers are started by the plugin
under test (from a :class:`ServerConfig`), a streamable-HTTP server is started
here on 127.0.0.1 with a free port.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from toolwire.plugins.mcp_tools import ServerConfig

__all__ = ["SCRIPT", "free_port", "http_server", "logged", "processes_with", "running",
           "stdio_server", "wait_until"]

SCRIPT = str(Path(__file__).resolve().parent / "mcp_servers.py")


def stdio_server(kind: str, name: str | None = None, *, log: Path | None = None,
                 marker: str | None = None) -> ServerConfig:
    """A stdio test server (``tools``, ``other`` or ``mute``); ``marker`` tags its command line."""
    args = [SCRIPT, kind, *([marker] if marker else [])]
    env = {"MCP_TEST_LOG": str(log)} if log else {}
    return ServerConfig(name or kind, command=sys.executable, args=args, env=env)


def free_port() -> int:
    """A TCP port on 127.0.0.1 nobody listens on right now."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


@contextlib.contextmanager
def http_server(kind: str = "tools", *, log: Path | None = None, ready_within: float = 90.0,
                json_response: bool = False) -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    """A streamable-HTTP test server on 127.0.0.1: yields its URL and its process.

    :param json_response: answer each request with a JSON body instead of an SSE stream.
    """
    port = free_port()
    env = {**os.environ, **({"MCP_TEST_LOG": str(log)} if log else {})}
    flags = ["--json"] if json_response else []
    process = subprocess.Popen([sys.executable, SCRIPT, kind, "--http", str(port), *flags],
                               env=env,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + ready_within
        while True:
            if process.poll() is not None:
                raise RuntimeError(f"the HTTP test server exited with {process.returncode}")
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise RuntimeError("the HTTP test server did not listen in time") from None
                time.sleep(0.1)
        yield f"http://127.0.0.1:{port}/mcp", process
    finally:
        process.kill()
        process.wait(10)


def logged(log: Path, event: str = "call", tool: str | None = None) -> list[dict[str, Any]]:
    """The lines the 'tools' server wrote to its log, filtered by event and tool."""
    if not log.exists():
        return []
    lines = [json.loads(line) for line in log.read_text(encoding="utf-8").splitlines() if line]
    return [e for e in lines if e["event"] == event and (tool is None or e["tool"] == tool)]


def running(pid: int) -> bool:
    """Whether process ``pid`` exists and is not a zombie."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return False
    return state != "Z"


def processes_with(marker: str) -> list[int]:
    """Live processes whose command line contains ``marker``."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            command = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if marker in command and running(int(entry.name)):
            found.append(int(entry.name))
    return found


def wait_until(predicate: Any, within: float = 15.0) -> bool:
    """Poll ``predicate`` until it is true or ``within`` seconds pass; return its last value."""
    deadline = time.monotonic() + within
    while True:
        if predicate():
            return True
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
