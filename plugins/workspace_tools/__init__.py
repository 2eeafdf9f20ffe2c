"""Example tools confined to the session's workspace: list, read, search, write.

Registered through ``register_tools`` like any plugin's tools. Each takes the
session's ``workspace`` (filled in by the dispatcher, never by the model). A
path that is absolute, climbs out with ``..``, or leads out through a symlink
is refused with a result that says so; nothing outside the workspace is read or
written.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterator
from pathlib import Path

import toolwire
from toolwire.errors import ToolCallError

__all__ = ["PathRefusedError", "list_dir", "read_file", "resolve_in_workspace", "search_text",
           "write_file"]

MAX_ENTRIES = 500
MAX_READ_LINES = 2000
MAX_READ_BYTES = 256 * 1024
MAX_SEARCH_FILE_BYTES = 2 * 1024 * 1024
MAX_WRITE_BYTES = 8 * 1024 * 1024


class PathRefusedError(ToolCallError, PermissionError):
    """A path names something outside the workspace (returned to the model)."""


def _root(workspace: object, tool: str) -> Path:
    if workspace is None:
        raise ToolCallError("no workspace is configured for this session", tool=tool)
    root = Path(str(workspace)).resolve()
    if not root.is_dir():
        raise ToolCallError(f"the workspace {root} does not exist", tool=tool)
    return root


def resolve_in_workspace(workspace: object, path: str, tool: str) -> Path:
    """The real path of ``path`` inside the workspace, or :class:`PathRefusedError`.

    Symlinks are resolved before the check, so a link pointing out is refused.
    """
    root = _root(workspace, tool)
    if not isinstance(path, str) or "\x00" in path:
        raise PathRefusedError(f"{path!r} is not a usable path", tool=tool)
    if os.path.isabs(path) or path.startswith("~"):
        raise PathRefusedError(
            f"absolute paths are refused ({path!r}); use a path relative to the workspace",
            tool=tool)
    target = (root / path).resolve()
    if target != root and root not in target.parents:
        raise PathRefusedError(f"{path!r} leads outside the workspace; refused", tool=tool)
    return target


def _relative(root: Path, path: Path) -> str:
    rel = path.relative_to(root).as_posix()
    return rel or "."


@toolwire.tool(read_only=True)
def list_dir(path: str = ".", workspace: object = None) -> str:
    """List a folder of the workspace: sub-folders end with '/', files show their size.

    :param path: folder relative to the workspace root
    """
    target = resolve_in_workspace(workspace, path, "list_dir")
    if not target.is_dir():
        raise ToolCallError(f"{path!r} is not a folder", tool="list_dir")
    entries = sorted(target.iterdir(), key=lambda p: (not p.is_dir(), p.name))
    lines = []
    for entry in entries[:MAX_ENTRIES]:
        if entry.is_dir():
            lines.append(entry.name + "/")
        else:
            try:
                lines.append(f"{entry.name}  ({entry.stat().st_size} bytes)")
            except OSError:
                lines.append(f"{entry.name}  (unreadable)")
    if len(entries) > MAX_ENTRIES:
        lines.append(f"... and {len(entries) - MAX_ENTRIES} more")
    return "\n".join(lines) if lines else "(empty folder)"


@toolwire.tool(read_only=True)
def read_file(path: str, start_line: int = 1, end_line: int | None = None,
              workspace: object = None) -> str:
    """Read a text file of the workspace, optionally a range of lines (1-based, inclusive).

    :param path: file relative to the workspace root
    :param start_line: first line to return
    :param end_line: last line to return (default: to the end, within a size limit)
    """
    target = resolve_in_workspace(workspace, path, "read_file")
    if not target.is_file():
        raise ToolCallError(f"{path!r} is not a file", tool="read_file")
    if start_line < 1 or (end_line is not None and end_line < start_line):
        raise ToolCallError("start_line must be >= 1 and end_line >= start_line",
                            tool="read_file")
    lines: list[str] = []
    size = 0
    truncated = False
    with target.open(encoding="utf-8", errors="replace") as handle:
        for number, line in enumerate(handle, start=1):
            if number < start_line:
                continue
            if end_line is not None and number > end_line:
                break
            if len(lines) >= MAX_READ_LINES or size + len(line) > MAX_READ_BYTES:
                truncated = True
                break
            lines.append(f"{number:>6}| {line.rstrip(chr(10))}")
            size += len(line)
    if not lines:
        return f"(no lines from line {start_line}; the file is shorter)"
    if truncated:
        lines.append(f"... truncated; ask for lines from {start_line + len(lines)} on")
    return "\n".join(lines)


def _walk_files(root: Path, start: Path) -> Iterator[Path]:
    for folder, dirs, files in os.walk(start, followlinks=False):
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        for name in sorted(files):
            candidate = Path(folder) / name
            try:
                real = candidate.resolve()
            except OSError:
                continue
            if root in real.parents and real.is_file():
                yield candidate


@toolwire.tool(read_only=True)
def search_text(pattern: str, path: str = ".", regex: bool = False, max_results: int = 50,
                workspace: object = None) -> str:
    """Find lines containing a text (or a regular expression) in the workspace's files.

    :param pattern: the text to look for
    :param path: folder or file to search, relative to the workspace root
    :param regex: treat the pattern as a Python regular expression
    :param max_results: the most matching lines to return
    """
    root = _root(workspace, "search_text")
    start = resolve_in_workspace(workspace, path, "search_text")
    try:
        matcher = re.compile(pattern if regex else re.escape(pattern))
    except re.error as exc:
        raise ToolCallError(f"bad regular expression: {exc}", tool="search_text") from None
    files = [start] if start.is_file() else list(_walk_files(root, start))
    hits: list[str] = []
    for file in files:
        try:
            if file.stat().st_size > MAX_SEARCH_FILE_BYTES:
                continue
            data = file.read_bytes()
        except OSError:
            continue
        if b"\x00" in data[:4096]:
            continue  # binary
        for number, line in enumerate(data.decode("utf-8", "replace").splitlines(), 1):
            if matcher.search(line):
                hits.append(f"{_relative(root, file)}:{number}: {line.strip()[:200]}")
                if len(hits) >= max_results:
                    return "\n".join(hits) + f"\n... stopped at {max_results} results"
    return "\n".join(hits) if hits else f"no match for {pattern!r}"


@toolwire.tool
def write_file(path: str, content: str, workspace: object = None) -> str:
    """Create or replace a text file in the workspace (folders are created as needed).

    :param path: file relative to the workspace root
    :param content: the complete new content of the file
    """
    target = resolve_in_workspace(workspace, path, "write_file")
    data = content.encode("utf-8")
    if len(data) > MAX_WRITE_BYTES:
        raise ToolCallError(f"content is {len(data)} bytes; the limit is {MAX_WRITE_BYTES}",
                            tool="write_file")
    if target.is_dir():
        raise ToolCallError(f"{path!r} is a folder", tool="write_file")
    target.parent.mkdir(parents=True, exist_ok=True)
    # Re-check after creating folders: a folder created meanwhile could be a link out.
    resolve_in_workspace(workspace, path, "write_file")
    target.write_bytes(data)
    return f"wrote {len(data)} bytes to {_relative(_root(workspace, 'write_file'), target)}"


TOOLS = (list_dir, read_file, search_text, write_file)


@toolwire.hookimpl
def register_tools(register: Callable[[toolwire.Tool], None]) -> None:
    """Contribute the workspace tools."""
    for tool in TOOLS:
        register(tool)
