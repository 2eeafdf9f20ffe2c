"""Tools confined to the session's workspace: list, read, search, write.

Registered through ``register_tools`` like any plugin's tools. Each takes the
session's ``workspace`` (filled in by the dispatcher, never by the model).

Everything the model passes is untrusted, and so is the workspace's content
(another local process may change it while a tool runs). The tools therefore:

* walk paths beneath an open handle of the workspace, never by name from the
  host's root, refusing ``..`` out, links out, link loops, hard-linked files,
  and anything that is not a regular file (:mod:`.confinement`);
* read within byte bounds per call and per line, streaming, with a truthful
  note when a result is cut (:mod:`.bounded_lines`, :data:`LIMITS`);
* match regular expressions with the ``regex`` package in toolwire's pattern
  child process, under a time bound (``TOOLWIRE_REGEX_TIMEOUT``, default 5 s), the
  call's deadline and its cancellation, so a backtracking pattern cannot freeze the
  host (:func:`toolwire.plugin_api.match_lines`);
* write through a new file renamed into place, creating at most
  ``max_path_depth`` levels of folders.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import toolwire

from .confinement import PathRefusedError, Workspace
from .tools import (
    LIMITS,
    TOOLS,
    WorkspaceLimits,
    current_limits,
    list_dir,
    read_file,
    search_text,
    write_file,
)

__all__ = ["LIMITS", "TOOLS", "PathRefusedError", "WorkspaceLimits", "list_dir", "read_file",
           "resolve_in_workspace", "search_text", "write_file"]


def resolve_in_workspace(workspace: object, path: str, tool: str) -> Path:
    """Where ``path`` leads inside the workspace, or :class:`PathRefusedError`.

    Links are followed by the workspace's own rules (a link that leads out is
    refused). The answer is a check at one moment: the tools themselves never
    open by this path, they open beneath a folder handle.
    """
    with Workspace(workspace, tool, max_depth=current_limits().max_path_depth) as ws:
        where = ws.resolve(path)
        try:
            return ws.path if where.name == "." else ws.path / where.display
        finally:
            os.close(where.parent_fd)


@toolwire.hookimpl
def register_tools(register: Callable[[toolwire.Tool], None]) -> None:
    """Contribute the workspace tools."""
    for tool in TOOLS:
        register(tool)
