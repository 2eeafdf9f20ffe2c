"""``tool_choice`` with the OpenAI meanings, checked once.

* ``"auto"`` (the default): the model decides; a local backend constrains a
  call once the model opens one (a lazy grammar);
* ``"required"``: the reply is one or more calls;
* ``{"type": "function", "function": {"name": N}}``: the reply is calls of ``N``;
* ``"none"``: no tools are offered.

:func:`resolve_tool_choice` turns any of those into a :class:`ResolvedChoice`;
a remote backend passes the original value to its provider as it is.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any, Final, Literal

import attrs

from ..errors import ToolChoiceError

__all__ = ["TOOL_CHOICE_MODES", "ResolvedChoice", "ToolChoice", "named_tool_choice",
           "resolve_tool_choice"]

ToolChoice = str | Mapping[str, Any]
"""``"auto"``, ``"required"``, ``"none"`` or ``{"type": "function", "function": {"name": N}}``."""

TOOL_CHOICE_MODES: Final = ("auto", "required", "none")
"""The string forms of ``tool_choice``."""

_NAMED_SHAPE: Final = '{"type": "function", "function": {"name": ...}}'


@attrs.frozen
class ResolvedChoice:
    """A checked ``tool_choice``.

    :ivar mode: ``auto``, ``required``, ``none`` or ``named``.
    :ivar name: the tool's name when ``mode`` is ``named``.
    """

    mode: Literal["auto", "required", "none", "named"] = "auto"
    name: str = ""

    @property
    def constrains_from_start(self) -> bool:
        """The reply must be calls (``required`` or a named tool)."""
        return self.mode in ("required", "named")

    def allowed(self, offered: Collection[str]) -> tuple[str, ...]:
        """The tool names a call may use, of those ``offered`` (in their order)."""
        if self.mode == "none":
            return ()
        if self.mode == "named":
            return (self.name,) if self.name in offered else ()
        return tuple(offered)

    def key(self) -> str:
        """A short text for caches and messages (``required``, ``named:search``)."""
        return f"named:{self.name}" if self.mode == "named" else self.mode


def named_tool_choice(name: str) -> dict[str, Any]:
    """The OpenAI form of choosing one tool:
    ``{"type": "function", "function": {"name": name}}``."""
    return {"type": "function", "function": {"name": name}}


def resolve_tool_choice(value: Any, offered: Collection[str] | None = None) -> ResolvedChoice:
    """Check a ``tool_choice`` (``None`` is ``"auto"``).

    :param offered: the offered tools' names; when given, a named tool must be
        among them and ``"required"`` needs at least one.
    :raises ToolChoiceError: the value is none of the forms, or names a tool
        that is not offered.
    """
    if value is None:
        return ResolvedChoice()
    if isinstance(value, ResolvedChoice):
        choice = value
    elif isinstance(value, str):
        if value not in TOOL_CHOICE_MODES:
            raise ToolChoiceError(f"tool_choice must be one of {', '.join(TOOL_CHOICE_MODES)} "
                                  f"or {_NAMED_SHAPE}, not {value!r}")
        choice = ResolvedChoice(value)  # type: ignore[arg-type]
    elif isinstance(value, Mapping):
        function = value.get("function")
        name = function.get("name") if isinstance(function, Mapping) else None
        if value.get("type") != "function" or not isinstance(name, str) or not name:
            raise ToolChoiceError(f"a named tool_choice is {_NAMED_SHAPE}, not {dict(value)!r}")
        choice = ResolvedChoice("named", name)
    else:
        raise ToolChoiceError(f"tool_choice must be a string or {_NAMED_SHAPE}, "
                              f"not {type(value).__name__}")
    if offered is not None:
        if choice.mode == "named" and choice.name not in offered:
            known = ", ".join(sorted(offered)) or "none"
            raise ToolChoiceError(f"tool_choice names {choice.name!r}, which is not among the "
                                  f"offered tools ({known})")
        if choice.mode == "required" and not offered:
            raise ToolChoiceError('tool_choice "required" needs at least one offered tool')
    return choice
