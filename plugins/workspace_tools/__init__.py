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

from collections.abc import Callable

import toolwire

from .confinement import PathRefusedError
from .tools import (
    LIMITS,
    TOOLS,
    WorkspaceLimits,
    list_dir,
    read_file,
    search_text,
    write_file,
)

__all__ = ["LIMITS", "TOOLS", "PathRefusedError", "WorkspaceLimits", "list_dir", "read_file",
           "search_text", "write_file"]


@toolwire.hookimpl
def register_tools(register: Callable[[toolwire.Tool], None]) -> None:
    """Contribute the workspace tools."""
    for tool in TOOLS:
        register(tool)
