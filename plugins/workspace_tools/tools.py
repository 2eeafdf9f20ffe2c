"""The four workspace tools: list, read, search, write.

Each opens paths only through :class:`~.confinement.Workspace` and works within
the bounds of :data:`LIMITS`, so neither a hostile path nor a hostile file (a
2 GB line, a fifo, a hard link out) nor a hostile pattern can escape, exhaust
memory or freeze the process. Every limit that cuts a result says so in the
result, truthfully.
"""

from __future__ import annotations

import os
import secrets
import stat
import time
from collections.abc import Generator

import attrs

import toolwire
from toolwire.plugin_api import (
    CancelToken,
    ChildStoppedError,
    ToolCallError,
    WorkspaceLimits,
    check_patterns,
    current_call,
    match_lines,
)

from .bounded_lines import bounded_lines, skip_lines
from .confinement import Workspace

__all__ = ["LIMITS", "TOOLS", "WorkspaceLimits", "current_limits", "list_dir", "read_file",
           "search_text", "write_file"]


LIMITS = WorkspaceLimits()
"""The bounds in force (:class:`toolwire.limits.WorkspaceLimits`, its regular-expression
time from ``TOOLWIRE_REGEX_TIMEOUT`` at import); replace it to change them."""

_Files = Generator[tuple[str, int | None, os.stat_result | None], None, None]


def current_limits() -> WorkspaceLimits:
    """The bounds in force: :data:`LIMITS` as it is now (replacing it takes effect at once)."""
    return globals()["LIMITS"]  # type: ignore[no-any-return]


# -- list_dir -------------------------------------------------------------------------


@toolwire.tool(read_only=True)
def list_dir(path: str = ".", workspace: object = None) -> str:
    """List a folder of the workspace: sub-folders end with '/', files show their size.

    :param path: folder relative to the workspace root
    """
    limits = current_limits()
    with Workspace(workspace, "list_dir", max_depth=limits.max_path_depth) as ws:
        folder_fd, _ = ws.open_folder(path)
        try:
            entries = list(ws.entries(folder_fd))
        finally:
            os.close(folder_fd)
    entries.sort(key=lambda item: (not stat.S_ISDIR(item[1].st_mode), item[0]))
    lines = [_describe_entry(name, info) for name, info in entries[:limits.max_entries]]
    if len(entries) > limits.max_entries:
        lines.append(f"... and {len(entries) - limits.max_entries} more")
    return "\n".join(lines) if lines else "(empty folder)"


def _describe_entry(name: str, info: os.stat_result) -> str:
    mode = info.st_mode
    if stat.S_ISDIR(mode):
        return name + "/"
    if stat.S_ISLNK(mode):
        return f"{name}  (symlink)"
    if stat.S_ISREG(mode):
        return f"{name}  ({info.st_size} bytes)"
    return f"{name}  (not a regular file)"


# -- read_file ------------------------------------------------------------------------


@toolwire.tool(read_only=True)
def read_file(path: str, start_line: int = 1, end_line: int | None = None,
              workspace: object = None) -> str:
    """Read a text file of the workspace, optionally a range of lines (1-based, inclusive).

    :param path: file relative to the workspace root
    :param start_line: first line to return
    :param end_line: last line to return (default: to the end, within a size limit)
    """
    if start_line < 1 or (end_line is not None and end_line < start_line):
        raise ToolCallError("start_line must be >= 1 and end_line >= start_line",
                            tool="read_file")
    limits = current_limits()
    with Workspace(workspace, "read_file", max_depth=limits.max_path_depth) as ws:
        fd, display, info = ws.open_file(path)
    with os.fdopen(fd, "rb") as stream:
        found = skip_lines(stream, start_line - 1)
        if found < start_line - 1:
            return _past_the_end(display, found, info.st_size, _last_byte(fd, info.st_size))
        shown: list[str] = []
        size = 0
        stopped_at: int | None = None
        for line in bounded_lines(stream, limits.max_line_bytes, first_number=start_line):
            if end_line is not None and line.number > end_line:
                break
            if len(shown) >= limits.max_read_lines or size + len(line.text) > limits.max_read_bytes:
                stopped_at = line.number
                break
            text = line.text
            if line.cut:
                text += f" [... line cut after {limits.max_line_bytes} bytes of {line.size}]"
            shown.append(f"{line.number:>6}| {text}")
            size += len(line.text)
    if not shown and stopped_at is None:
        return _past_the_end(display, start_line - 1, info.st_size, b"\n")
    if stopped_at is not None:
        shown.append(f"... truncated: showed lines {start_line}-{stopped_at - 1} "
                     f"({size} bytes; at most {limits.max_read_lines} lines or "
                     f"{limits.max_read_bytes} bytes per read); ask for lines from "
                     f"{stopped_at} on")
    return "\n".join(shown)


def _last_byte(fd: int, size: int) -> bytes:
    return os.pread(fd, 1, size - 1) if size > 0 else b""


def _past_the_end(display: str, newlines: int, size: int, last_byte: bytes) -> str:
    """A truthful answer for a start line beyond the end of the file."""
    if size == 0:
        return f"({display} is empty)"
    lines = newlines + (0 if last_byte == b"\n" else 1)
    return f"({display} has {lines} line{'' if lines == 1 else 's'}; there is no line {lines + 1})"


# -- search_text ----------------------------------------------------------------------


@attrs.define
class _SearchState:
    files: int = 0
    bytes_read: int = 0
    skipped_large: int = 0
    skipped_unusable: int = 0
    long_lines: int = 0
    stopped: str | None = None


@toolwire.tool(read_only=True)
def search_text(pattern: str, path: str = ".", regex: bool = False, max_results: int = 50,
                workspace: object = None) -> str:
    """Find lines containing a text (or a regular expression) in the workspace's files.

    :param pattern: the text to look for
    :param path: folder or file to search, relative to the workspace root
    :param regex: treat the pattern as a Python regular expression
    :param max_results: the most matching lines to return
    """
    limits = current_limits()
    if not pattern:
        raise ToolCallError("the pattern is empty", tool="search_text")
    if len(pattern) > limits.max_pattern_chars:
        raise ToolCallError(f"the pattern is {len(pattern)} characters; the limit is "
                            f"{limits.max_pattern_chars}", tool="search_text")
    wanted = max(1, min(max_results, limits.max_results))
    with Workspace(workspace, "search_text", max_depth=limits.max_path_depth) as ws:
        where = ws.resolve(path)
        try:
            info = os.stat(where.name, dir_fd=where.parent_fd, follow_symlinks=False)
        except OSError:
            os.close(where.parent_fd)
            raise ToolCallError(f"{path!r} does not exist", tool="search_text") from None
        state = _SearchState()
        if where.name == "." or stat.S_ISDIR(info.st_mode):
            os.close(where.parent_fd)
            folder_fd, display = ws.open_folder(path)
            files = _walk(ws, folder_fd, "" if display == "." else display, 0, state)
        else:
            files = _single(ws, where.parent_fd, where.name, where.display)
        matcher = _Matcher(pattern) if regex else None
        try:
            hits = _search(files, pattern, matcher, wanted, state)
        finally:
            files.close()
    return _report(pattern, hits, wanted, state)


class _Matcher:
    """A search's regular expression, matched in the pattern child process
    (:func:`toolwire.plugin_api.match_lines`) until the search's time runs out: its
    own ``regex_seconds``, or the dispatcher's deadline for the call when that comes first; a
    cancelled reply kills the match at once."""

    def __init__(self, pattern: str) -> None:
        problem = check_patterns([pattern])[0]
        if problem is not None:
            raise ToolCallError(f"bad regular expression: {problem}", tool="search_text")
        running = current_call()
        own = time.monotonic() + current_limits().regex_seconds
        deadline = running.deadline if running is not None else None
        self.pattern = pattern
        self.deadline = own if deadline is None else min(own, deadline)
        self.reason = "regex_seconds" if deadline is None or own <= deadline else "deadline"
        self.cancel: CancelToken | None = running.cancel if running is not None else None

    def lines(self, text: str, limit: int) -> list[int]:
        cancel = self.cancel
        return match_lines(self.pattern, text, limit, deadline=self.deadline,
                           cancelled=(lambda: cancel.cancelled) if cancel is not None else None)

    def why_stopped(self, stopped: ChildStoppedError) -> str:
        """Why the match stopped, for the model (``regex_seconds``: its own time ran out)."""
        if stopped.bound == "cancelled":
            return "the reply was cancelled"
        if stopped.bound not in ("wall time", "cpu time"):
            return f"the matching process ended unexpectedly ({stopped.how})"
        if self.reason == "deadline":
            return "the call's time limit ran out first"
        return "regex_seconds"


def _single(ws: Workspace, parent_fd: int, name: str,
            display: str) -> _Files:
    try:
        fd, info = ws.open_regular_in(parent_fd, name, display)
    finally:
        os.close(parent_fd)
    yield display, fd, info


def _walk(ws: Workspace, folder_fd: int, prefix: str, depth: int,
          state: _SearchState) -> _Files:
    """Files beneath an open folder, depth first, without following any symlink.

    Yields ``(name, fd, info)``; ``fd`` is ``None`` for an entry that could not be
    used (counted, not fatal: one bad entry never ends the search).
    """
    try:
        for name, info in ws.entries(folder_fd):
            display = f"{prefix}/{name}" if prefix else name
            if stat.S_ISDIR(info.st_mode):
                if name.startswith(".") or depth + 1 > current_limits().max_search_depth:
                    continue
                try:
                    child = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW
                                    | os.O_CLOEXEC, dir_fd=folder_fd)
                except OSError:
                    state.skipped_unusable += 1
                    continue
                yield from _walk(ws, child, display, depth + 1, state)
            elif stat.S_ISREG(info.st_mode):
                try:
                    fd, opened = ws.open_regular_in(folder_fd, name, display)
                except ToolCallError:
                    state.skipped_unusable += 1
                    continue
                yield display, fd, opened
    finally:
        os.close(folder_fd)


def _search(files: _Files, pattern: str,
            matcher: _Matcher | None, wanted: int, state: _SearchState) -> list[str]:
    limits = current_limits()
    hits: list[str] = []
    for display, fd, info in files:
        if fd is None or info is None:
            continue
        with os.fdopen(fd, "rb") as stream:
            if info.st_size > limits.max_search_file_bytes:
                state.skipped_large += 1
                continue
            if state.files >= limits.max_search_files:
                state.stopped = f"after {limits.max_search_files} files"
                break
            if state.bytes_read + info.st_size > limits.max_search_bytes:
                state.stopped = f"after reading {limits.max_search_bytes} bytes"
                break
            data = stream.read(limits.max_search_file_bytes + 1)
        state.files += 1
        state.bytes_read += len(data)
        if b"\x00" in data[:4096]:
            continue  # binary
        lines = data.decode("utf-8", "replace").splitlines()
        capped = [_cap(line, limits.max_match_line_chars, state) for line in lines]
        room = wanted - len(hits)
        try:
            found = (matcher.lines("\n".join(capped), room) if matcher is not None
                     else [i for i, line in enumerate(capped) if pattern in line][:room])
        except ChildStoppedError as stopped:
            assert matcher is not None
            why = matcher.why_stopped(stopped)
            if why != "regex_seconds":
                raise ToolCallError(f"the search was stopped while searching {display}, "
                                    f"after {len(hits)} matching line(s): {why}",
                                    tool="search_text") from None
            seconds = current_limits().regex_seconds
            raise ToolCallError(
                f"the regular expression ran longer than {seconds:g} seconds "
                f"(while searching {display}) and was stopped, after {len(hits)} matching "
                "line(s); it probably backtracks (nested repetition like (a+)+); "
                "simplify it or search for plain text", tool="search_text") from None
        for index in found:
            hits.append(f"{display}:{index + 1}: {lines[index].strip()[:200]}")
        if len(hits) >= wanted:
            break
    return hits


def _cap(line: str, limit: int, state: _SearchState) -> str:
    if len(line) <= limit:
        return line
    state.long_lines += 1
    return line[:limit]


def _report(pattern: str, hits: list[str], wanted: int, state: _SearchState) -> str:
    notes: list[str] = []
    limits = current_limits()
    if len(hits) >= wanted:
        notes.append(f"... stopped at {wanted} results")
    if state.stopped:
        notes.append(f"... the search stopped {state.stopped}; search a smaller folder")
    if state.skipped_large:
        notes.append(f"({state.skipped_large} file(s) over {limits.max_search_file_bytes} "
                     "bytes were not searched)")
    if state.skipped_unusable:
        notes.append(f"({state.skipped_unusable} entr(ies) were skipped: not regular files, "
                     "hard-linked, or unreadable)")
    if state.long_lines:
        notes.append(f"({state.long_lines} line(s) longer than {limits.max_match_line_chars} "
                     "characters were matched on their start only)")
    body = "\n".join(hits) if hits else f"no match for {pattern!r}"
    return "\n".join([body, *notes])


# -- write_file -----------------------------------------------------------------------


@toolwire.tool
def write_file(path: str, content: str, workspace: object = None) -> str:
    """Create or replace a text file in the workspace (folders are created as needed).

    :param path: file relative to the workspace root
    :param content: the complete new content of the file
    """
    limits = current_limits()
    data = content.encode("utf-8")
    if len(data) > limits.max_write_bytes:
        raise ToolCallError(f"content is {len(data)} bytes; the limit is "
                            f"{limits.max_write_bytes}", tool="write_file")
    with Workspace(workspace, "write_file", max_depth=limits.max_path_depth) as ws:
        where = ws.resolve(path, create_folders=True, missing_ok=True)
        try:
            if where.name == ".":
                raise ToolCallError(f"{path!r} is a folder", tool="write_file")
            _replace(ws, where.parent_fd, where.name, where.display, data)
        finally:
            os.close(where.parent_fd)
    return f"wrote {len(data)} bytes to {where.display}"


def _replace(ws: Workspace, folder_fd: int, name: str, display: str, data: bytes) -> None:
    """Write ``data`` to a new file beside ``name`` and rename it over ``name``.

    The old file is never opened for writing, so neither a hard link nor a file
    swapped in meanwhile is written through; the rename replaces only the entry.
    """
    mode = 0o666
    try:
        info: os.stat_result | None = os.stat(name, dir_fd=folder_fd, follow_symlinks=False)
    except FileNotFoundError:
        info = None
    if info is not None:
        problem = ws.regular_file_problem(info, display)
        if problem:
            raise ws.refuse(problem.replace("is a folder, not a file", "is a folder"))
        mode = stat.S_IMODE(info.st_mode)
    temporary = f".{name[:100]}.{secrets.token_hex(6)}.toolwire-tmp"
    try:
        fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
                     | os.O_CLOEXEC, mode, dir_fd=folder_fd)
    except OSError as exc:
        raise ws.fail(f"cannot write {display!r} ({exc.strerror})") from None
    try:
        with os.fdopen(fd, "wb") as handle:
            if info is not None:
                os.fchmod(handle.fileno(), mode)
            handle.write(data)
        os.rename(temporary, name, src_dir_fd=folder_fd, dst_dir_fd=folder_fd)
    except BaseException as exc:
        try:
            os.unlink(temporary, dir_fd=folder_fd)
        except OSError:
            pass
        if isinstance(exc, OSError):
            raise ws.fail(f"cannot write {display!r} ({exc.strerror})") from None
        raise


TOOLS = (list_dir, read_file, search_text, write_file)
