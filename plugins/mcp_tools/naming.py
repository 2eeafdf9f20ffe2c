"""The names MCP tools are registered under: their own, unless that would collide.

A tool keeps the name its server gives it. Only when two servers list the same
name, or a tool of the session already has it, is every MCP tool of that name
prefixed with its server's name (``alpha_search``, ``beta_search``): no server is
favoured by the order it was given in, and a built-in tool keeps its name. A
name toolwire cannot register (characters outside letters, digits, ``_ . -``, or
over 128 characters) is spelled with ``_`` instead. Each renamed tool carries a
note saying what it was called and why it was renamed; the note is shown to the
user and added to the description the model reads.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Sequence

import attrs

__all__ = ["NamedTool", "assign_names", "server_prefix", "valid_tool_name"]

_MAX_NAME = 128
_INVALID_CHARACTERS = re.compile(r"[^A-Za-z0-9_.\-]")
_PREFIX_UNSAFE = re.compile(r"[^A-Za-z0-9_]+")


@attrs.frozen
class NamedTool:
    """Where one listed tool ends up.

    :ivar server: the server's name.
    :ivar remote: the tool's name on the server (what calls send).
    :ivar name: the name in the registry, or ``None`` when the tool is skipped.
    :ivar note: why ``name`` differs from ``remote`` (or why it is skipped).
    """

    server: str
    remote: str
    name: str | None
    note: str | None = None


def valid_tool_name(name: str) -> str:
    """``name`` spelled as a toolwire tool name (unchanged when it already is one)."""
    spelled = _INVALID_CHARACTERS.sub("_", name)
    if not spelled or not (spelled[0].isascii() and (spelled[0].isalpha() or spelled[0] == "_")):
        spelled = "_" + spelled
    return spelled[:_MAX_NAME]


def server_prefix(server: str) -> str:
    """The prefix a server's colliding tools get: its name in letters, digits and ``_``."""
    prefix = _PREFIX_UNSAFE.sub("_", server).strip("_") or "mcp"
    return prefix if prefix[0].isalpha() else f"mcp_{prefix}"


def assign_names(listed: Sequence[tuple[str, str]], taken: Collection[str] = ()) -> list[NamedTool]:
    """Registry names for ``(server, tool name)`` pairs, in the order given.

    :param taken: names the session's other tools already use.
    :returns: one :class:`NamedTool` per pair; every ``name`` that is not ``None``
        is unique and not in ``taken``.
    """
    spelled = [(server, remote, valid_tool_name(remote)) for server, remote in listed]
    servers_of: dict[str, set[str]] = {}
    for server, _, base in spelled:
        servers_of.setdefault(base, set()).add(server)
    used = set(taken)
    seen: set[tuple[str, str]] = set()
    out: list[NamedTool] = []
    for server, remote, base in spelled:
        if (server, base) in seen:
            out.append(NamedTool(server, remote, None, f"server {server!r} lists more than one "
                                 f"tool named {base!r}; only the first is registered"))
            continue
        seen.add((server, base))
        others = sorted(servers_of[base] - {server})
        collides = bool(others) or base in taken
        name = f"{server_prefix(server)}_{base}"[:_MAX_NAME] if collides else base
        unique, n = name, 2
        while unique in used:
            suffix = f"_{n}"
            unique, n = name[:_MAX_NAME - len(suffix)] + suffix, n + 1
        used.add(unique)
        out.append(NamedTool(server, remote, unique,
                             _note(server, remote, base, unique, others, base in taken)))
    return out


def _note(server: str, remote: str, base: str, name: str, others: list[str],
          built_in: bool) -> str | None:
    if name == remote:
        return None
    reasons = []
    if base != remote:
        reasons.append("its name has characters a tool name cannot have")
    if others:
        listed = ", ".join(repr(o) for o in others)
        reasons.append(f"server{'s' if len(others) > 1 else ''} {listed} "
                       f"also {'have' if len(others) > 1 else 'has'} a tool named {base!r}")
    if built_in:
        reasons.append(f"another tool of this session is named {base!r}")
    if not reasons:
        reasons.append(f"the name {base!r} is already used")
    return (f"MCP server {server!r} calls this tool {remote!r}; it is registered as "
            f"{name!r} because {' and '.join(reasons)}")
