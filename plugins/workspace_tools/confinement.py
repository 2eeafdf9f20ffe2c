"""Opening paths strictly beneath the workspace folder.

A path check followed by an ``open`` by name is a race: between the two, another
local process can swap a folder for a symlink that leads out. So nothing here
opens a path by name from the host's root. The workspace folder is opened once,
and every path is walked one component at a time, relative to an open folder
handle (``dir_fd``), with ``O_NOFOLLOW``:

* ``..`` pops back to the parent handle and is refused at the workspace root;
* a symlink is never opened through: its target is read and spliced into the
  walk, so it is resolved by the same rules (a link that leads out is refused,
  a link to a file inside is followed); more than 40 links is refused as a loop;
* what was opened is checked again with ``fstat`` against what was looked at, so
  a swap between the two shows as an error, never as a file outside;
* only regular files are read or replaced (a fifo, device or socket is refused
  without blocking), and a file with more than one hard link is refused, since
  its other name may be outside the workspace;
* a path goes through at most ``max_depth`` folders
  (:attr:`~toolwire.plugin_api.WorkspaceLimits.max_path_depth`), so no path can make a
  write create a chain of thousands of folders, nor the walk hold a handle for each.

Every message names paths relative to the workspace, never the host's absolute
paths, because the messages are read by the model.
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Iterator
from pathlib import Path

import attrs

from toolwire.plugin_api import ToolCallError

__all__ = ["MAX_SYMLINKS", "PathRefusedError", "Resolved", "Workspace"]

MAX_SYMLINKS = 40
"""The most links one path follows (Linux's own bound: past it, a loop)."""
_SHOWN_PATH_CHARS = 80
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


def _folder_depth(parts: list[str]) -> int:
    """How many folders deep the literal path goes (its last component is not counted)."""
    depth = deepest = 0
    meaningful = [p for p in parts if p not in ("", ".")]
    for part in meaningful[:-1]:
        depth = max(0, depth - 1) if part == ".." else depth + 1
        deepest = max(deepest, depth)
    return deepest


class PathRefusedError(ToolCallError, PermissionError):
    """A path names something outside the workspace or not allowed (returned to the model)."""


@attrs.frozen
class Resolved:
    """Where a workspace path leads: an open parent folder and a final name.

    :ivar parent_fd: handle of the folder holding ``name`` (owned by the caller
        of :meth:`Workspace.resolve`, who closes it).
    :ivar name: the last component; ``"."`` when the path is the workspace root.
    :ivar display: the path relative to the workspace, for messages.
    """

    parent_fd: int
    name: str
    display: str


class Workspace:
    """One tool call's view of the workspace folder.

    :param workspace: the session's workspace folder (from the dispatcher).
    :param tool: the tool's name, for error messages.
    :param max_depth: the most folders a path may go through beneath the root.
    """

    def __init__(self, workspace: object, tool: str, *, max_depth: int) -> None:
        self.tool = tool
        self.max_depth = max_depth
        if workspace is None:
            raise ToolCallError("no workspace is configured for this session", tool=tool)
        self.path = Path(str(workspace))
        try:
            self.root_fd = os.open(self.path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        except OSError:
            raise ToolCallError("the session's workspace folder does not exist or cannot be "
                                "opened", tool=tool) from None

    def close(self) -> None:
        """Close the workspace handle."""
        os.close(self.root_fd)

    def __enter__(self) -> Workspace:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def refuse(self, message: str) -> PathRefusedError:
        """A refusal for the model, naming this tool."""
        return PathRefusedError(message, tool=self.tool)

    def fail(self, message: str) -> ToolCallError:
        """A plain failure for the model, naming this tool."""
        return ToolCallError(message, tool=self.tool)

    # -- walking -------------------------------------------------------------------

    def resolve(self, path: object, *, create_folders: bool = False,
                missing_ok: bool = False) -> Resolved:
        """Walk ``path`` beneath the workspace and return its parent folder handle.

        :param create_folders: create missing folders on the way (for writes).
        :param missing_ok: the final component may not exist (for writes).
        :raises PathRefusedError: the path leads out, loops, or is unusable.
        """
        pending = self._components(path)
        if _folder_depth(pending) > self.max_depth:
            raise self.refuse(self._too_deep(path))  # before any folder is created
        stack = [os.dup(self.root_fd)]
        names: list[str] = []
        links = 0
        try:
            while pending:
                part = pending.pop(0)
                if part in ("", "."):
                    continue
                if part == "..":
                    if len(stack) == 1:
                        raise self.refuse(f"{path!r} leads outside the workspace; refused")
                    os.close(stack.pop())
                    names.pop()
                    continue
                last = not any(p not in ("", ".") for p in pending)
                if not last and len(names) >= self.max_depth:
                    raise self.refuse(self._too_deep(path))
                try:
                    info = os.stat(part, dir_fd=stack[-1], follow_symlinks=False)
                except FileNotFoundError:
                    if last and missing_ok:
                        return self._resolved(stack, names, part)
                    if not last and create_folders:
                        self._make_folder(stack[-1], part, path)
                        info = os.stat(part, dir_fd=stack[-1], follow_symlinks=False)
                    else:
                        shown = "/".join([*names, part])
                        raise self.fail(f"{shown!r} does not exist") from None
                except OSError as exc:
                    raise self.fail(f"{path!r} cannot be looked up ({exc.strerror})") from None
                if stat.S_ISLNK(info.st_mode):
                    links += 1
                    if links > MAX_SYMLINKS:
                        raise self.refuse(f"{path!r} goes through too many symlinks (a loop?)")
                    pending[:0], stack, names = self._follow(stack, names, part, path)
                    continue
                if last:
                    return self._resolved(stack, names, part)
                if not stat.S_ISDIR(info.st_mode):
                    shown = "/".join([*names, part])
                    raise self.fail(f"{shown!r} is not a folder")
                stack.append(self._open_dir_checked(stack[-1], part, info, path))
                names.append(part)
            # The path named the workspace root, or a folder reached through "..".
            if len(stack) == 1:
                return Resolved(stack.pop(), ".", ".")
            parent_fd = stack.pop(-2)
            os.close(stack.pop())
            name = names.pop()
            return Resolved(parent_fd, name, "/".join([*names, name]))
        finally:
            for fd in stack:
                os.close(fd)

    def _too_deep(self, path: object) -> str:
        shown = str(path)
        if len(shown) > _SHOWN_PATH_CHARS:
            shown = shown[:_SHOWN_PATH_CHARS] + "..."
        return (f"{shown!r} goes through more than {self.max_depth} folders; the limit "
                f"is {self.max_depth} folders deep")

    def _resolved(self, stack: list[int], names: list[str], part: str) -> Resolved:
        fd = stack.pop()
        return Resolved(fd, part, "/".join([*names, part]))

    def _components(self, path: object) -> list[str]:
        if not isinstance(path, str) or not path or "\x00" in path:
            raise self.refuse(f"{path!r} is not a usable path")
        if os.path.isabs(path) or path.startswith("~"):
            raise self.refuse(
                f"absolute paths are refused ({path!r}); use a path relative to the workspace")
        return path.split("/")

    def _follow(self, stack: list[int], names: list[str], part: str,
                path: object) -> tuple[list[str], list[int], list[str]]:
        """Splice a symlink's target into the walk; absolute targets restart at the root."""
        try:
            target = os.readlink(part, dir_fd=stack[-1])
        except OSError as exc:
            raise self.fail(f"{path!r} cannot be followed ({exc.strerror})") from None
        if not os.path.isabs(target):
            return target.split("/"), stack, names
        real_root = os.path.realpath(self.path)
        relative = os.path.relpath(target, real_root)
        if relative == ".." or relative.startswith("../") or os.path.isabs(relative):
            raise self.refuse(f"{path!r} leads outside the workspace; refused")
        for fd in stack[1:]:
            os.close(fd)
        return relative.split("/"), stack[:1], []

    def _open_dir_checked(self, parent_fd: int, name: str, info: os.stat_result,
                          path: object) -> int:
        try:
            fd = os.open(name, _DIR_FLAGS, dir_fd=parent_fd)
        except OSError as exc:
            raise self._changed_or_failed(path, exc) from None
        opened = os.fstat(fd)
        if (opened.st_dev, opened.st_ino) != (info.st_dev, info.st_ino):
            os.close(fd)
            raise self.refuse(f"{path!r} changed while it was being opened; refused")
        return fd

    def _make_folder(self, parent_fd: int, name: str, path: object) -> None:
        try:
            os.mkdir(name, dir_fd=parent_fd)
        except FileExistsError:
            pass
        except OSError as exc:
            raise self.fail(f"cannot create a folder for {path!r} ({exc.strerror})") from None

    def _changed_or_failed(self, path: object, exc: OSError) -> ToolCallError:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR):
            return self.refuse(f"{path!r} changed while it was being opened; refused")
        return self.fail(f"{path!r} cannot be opened ({exc.strerror})")

    # -- opening -------------------------------------------------------------------

    def open_folder(self, path: object) -> tuple[int, str]:
        """An open handle of the folder ``path`` and its workspace-relative name."""
        where = self.resolve(path)
        try:
            if where.name == ".":
                return os.dup(where.parent_fd), where.display
            info = self._lstat(where, path)
            if not stat.S_ISDIR(info.st_mode):
                raise self.fail(f"{where.display!r} is not a folder")
            return self._open_dir_checked(where.parent_fd, where.name, info, path), where.display
        finally:
            os.close(where.parent_fd)

    def open_file(self, path: object) -> tuple[int, str, os.stat_result]:
        """An open read handle of the regular file ``path``, its name and its ``fstat``."""
        where = self.resolve(path)
        try:
            if where.name == ".":
                raise self.fail(f"{path!r} is a folder, not a file")
            fd, info = self.open_regular_in(where.parent_fd, where.name, where.display)
            return fd, where.display, info
        finally:
            os.close(where.parent_fd)

    def open_regular_in(self, folder_fd: int, name: str,
                        display: str) -> tuple[int, os.stat_result]:
        """Open ``name`` in an open folder for reading, if it is a singly-linked regular file.

        Opened without following links and without blocking (a fifo would
        otherwise wait for a writer); what was opened is what is checked.
        """
        try:
            fd = os.open(name, _FILE_FLAGS, dir_fd=folder_fd)
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                raise self.refuse(f"{display!r} is a symlink; refused") from None
            if exc.errno == errno.ENXIO:
                raise self.refuse(f"{display!r} is not a regular file; refused") from None
            raise self.fail(f"{display!r} cannot be opened ({exc.strerror})") from None
        info = os.fstat(fd)
        problem = self.regular_file_problem(info, display)
        if problem:
            os.close(fd)
            raise self.refuse(problem)
        os.set_blocking(fd, True)
        return fd, info

    @staticmethod
    def regular_file_problem(info: os.stat_result, display: str) -> str | None:
        """Why a file may not be used, or ``None``."""
        if stat.S_ISDIR(info.st_mode):
            return f"{display!r} is a folder, not a file"
        if not stat.S_ISREG(info.st_mode):
            return f"{display!r} is not a regular file (a device, fifo or socket); refused"
        if info.st_nlink > 1:
            return (f"{display!r} has {info.st_nlink} hard links, so it may also be a file "
                    "outside the workspace; refused")
        return None

    def _lstat(self, where: Resolved, path: object) -> os.stat_result:
        try:
            return os.stat(where.name, dir_fd=where.parent_fd, follow_symlinks=False)
        except OSError as exc:
            raise self.fail(f"{path!r} cannot be looked up ({exc.strerror})") from None

    def entries(self, folder_fd: int) -> Iterator[tuple[str, os.stat_result]]:
        """The entries of an open folder, sorted by name, each with its ``lstat``.

        Entries that vanish or cannot be looked at are skipped.
        """
        try:
            names = sorted(os.listdir(folder_fd))
        except OSError:
            return
        for name in names:
            try:
                yield name, os.stat(name, dir_fd=folder_fd, follow_symlinks=False)
            except OSError:
                continue
