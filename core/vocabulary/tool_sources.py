"""Tool sources: tools that live outside the process, opened where a session asks.

A plugin's ``register_tools`` hook runs for every plugin manager, so it suits
tools that cost nothing to list. Tools that need a server started first (an MCP
server) come from a *tool source* instead: an application opens it with the
options the user gave (``toolwire chat --mcp ...``), asks it for its tools, and
closes it at the end of the session.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from typing import Protocol, runtime_checkable

import attrs

from .tools import Tool

__all__ = ["ToolSource", "ToolSourceSpec", "origin_of"]


@runtime_checkable
class ToolSource(Protocol):
    """An opened tool source.

    :ivar notes: what the user should know (a server that failed to start, a
        tool renamed because its name was taken), in the order it happened.
    """

    notes: Sequence[str]

    def tools(self, *, taken: Collection[str] = ()) -> list[Tool]:
        """The source's tools; one whose name is in ``taken`` is renamed or left out
        (with a note)."""
        ...

    def close(self) -> None:
        """Release what the source holds (servers, connections)."""
        ...


def _no_origin(tool: Tool) -> str | None:
    return None


def _names(value: Collection[str]) -> tuple[str, ...]:
    return tuple(value)


@attrs.frozen(kw_only=True)
class ToolSourceSpec:
    """A tool source's registration record.

    :ivar name: what ``PluginManager.tool_source(name)`` looks up (``mcp``).
    :ivar open: ``open(**options) -> ToolSource``; raises a
        :class:`toolwire.ToolwireError` naming what is wrong when the options are
        unusable. Heavy imports belong inside it.
    :ivar options: the option names ``open`` accepts.
    :ivar origin: ``origin(tool) -> str | None``: where a tool this source made comes
        from (``mcp:notes``), ``None`` for any other tool (``toolwire tools`` shows it).
    :ivar description: one line for ``toolwire plugins``.
    :ivar plugin: the registering plugin's name (stamped by the core).
    """

    name: str
    open: Callable[..., ToolSource]
    options: tuple[str, ...] = attrs.field(default=(), converter=_names)
    origin: Callable[[Tool], str | None] = _no_origin
    description: str = ""
    plugin: str = ""

    def __attrs_post_init__(self) -> None:
        if not self.name or not callable(self.open):
            raise TypeError("a ToolSourceSpec needs a name and a callable open")


def origin_of(tool: Tool, specs: Collection[ToolSourceSpec], default: str) -> str:
    """Where ``tool`` comes from by the first source that knows it, else ``default``."""
    for spec in specs:
        found = spec.origin(tool)
        if found:
            return found
    return default


