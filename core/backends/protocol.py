"""What a model backend is: one model turn in, a stream of events out.

The chat loop hands a backend a :class:`ModelRequest` (the conversation so far
and the tools on offer) and iterates what it yields: the reply's events
(``text``, ``reasoning``, ``tool_call_start``, ``tool_call_delta``,
``tool_call``, ``diagnostic``, ``error``) and, last, one :class:`TurnEnd` with
the finish reason and usage. A backend checks the cancel token between deltas
and, when it is set, closes its stream and returns.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, Protocol, runtime_checkable

import attrs

from ..conversation.cancel import CancelToken
from ..conversation.history import Message
from ..conversation.tools import Tool
from ..events import Event
from ..grammar.choice import ToolChoice

__all__ = ["Backend", "BackendSpec", "ModelRequest", "TurnEnd"]


@attrs.frozen
class ModelRequest:
    """One model turn's input.

    :ivar messages: the conversation, system prompt first.
    :ivar tools: the tools offered this turn (empty on the reserved final turn).
    :ivar final_turn: ``True`` on the turn reserved for the answer.
    :ivar tool_choice: ``"auto"``, ``"required"``, ``"none"`` or ``{"type":
        "function", "function": {"name": N}}`` (OpenAI's meanings); a local
        backend enforces it with a grammar, a remote one passes it on as it is.
    :ivar parallel_tool_calls: ``False``: at most one call in the reply.
    """

    messages: tuple[Message, ...]
    tools: tuple[Tool, ...] = ()
    final_turn: bool = False
    tool_choice: ToolChoice = "auto"
    parallel_tool_calls: bool = True

    @property
    def offered_tools(self) -> tuple[Tool, ...]:
        """The tools the model sees: none under ``tool_choice="none"``."""
        return () if self.tool_choice == "none" else self.tools

    def tool_schemas(self) -> list[dict[str, Any]]:
        """The offered tools as ``[{"type": "function", "function": schema}]``."""
        return [t.openai_schema() for t in self.tools]

    def tool_parameters(self) -> dict[str, Mapping[str, Any]]:
        """``{tool name: parameters schema}``, for a parser to type values."""
        return {t.name: t.parameters for t in self.tools}


@attrs.frozen
class TurnEnd:
    """The last item of a backend's stream for one turn.

    :ivar reason: ``stop``, ``tool_calls``, ``length``, ``cancelled`` or ``error``.
    :ivar usage: token counts when known (``prompt_tokens``, ``completion_tokens``).
    :ivar timings: seconds when known (``load``, ``prompt``, ``generation``).
    """

    reason: str = "stop"
    usage: Mapping[str, Any] | None = None
    timings: Mapping[str, Any] | None = None


@runtime_checkable
class Backend(Protocol):
    """A model that answers one turn at a time."""

    name: str

    def stream_turn(self, request: ModelRequest, cancel: CancelToken) -> Iterator[Event | TurnEnd]:
        """Run one model turn; yield its events, then a :class:`TurnEnd`.

        Never raises for a failed request or stream: yield an ``ErrorEvent`` and
        a ``TurnEnd(reason="error")`` instead. Call ids may be left empty.
        """
        ...

    def make_call_id(self, index: int) -> str:
        """Make a call id in the form this backend's protocol requires."""
        ...


@attrs.frozen
class BackendSpec:
    """A backend plugin's registration record.

    :ivar create: ``create(**options) -> Backend``; imports heavy dependencies
        lazily.
    :ivar options: the option names ``create`` accepts, for ``toolwire plugins``.
    """

    name: str
    create: Callable[..., Backend]
    description: str = ""
    options: Sequence[str] = ()
    plugin: str = ""
