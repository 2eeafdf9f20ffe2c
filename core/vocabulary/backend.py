"""What a model backend is: one model turn in, a stream of events out.

The chat loop hands a backend a :class:`ModelRequest` (the conversation so far
and the tools on offer) and iterates what it yields: the reply's events
(``text``, ``reasoning``, ``tool_call_start``, ``tool_call_delta``,
``tool_call``, ``diagnostic``, ``error``) and, last, one :class:`TurnEnd` with
the finish reason and usage. A backend checks the cancel token between deltas
and, when it is set, closes its stream and returns.

A request may carry :class:`SamplingOverrides` (the served APIs' ``temperature``,
``top_p``, ``top_k``, ``max_tokens`` and ``seed``): each field that is set
replaces the backend's own setting for that turn only; and a
:class:`ReasoningRequest` (the APIs' reasoning switches: on or off, an effort, a
budget), which a templated backend hands to the chat template's own switch.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, Final, Protocol, runtime_checkable

import attrs

from ..events import Event
from .cancel import CancelToken
from .history import Message
from .tool_choice import ToolChoice
from .tools import Tool

__all__ = ["REASONING_EFFORTS", "Backend", "BackendSpec", "ModelRequest", "ReasoningRequest",
           "ResponseFormat", "SamplingOverrides", "TurnEnd"]


def _optional_range(low: float, high: float | None) -> Callable[[Any, Any, Any], None]:
    def check(instance: Any, attribute: Any, value: Any) -> None:
        if value is None:
            return
        if isinstance(value, bool) or not isinstance(value, int | float) \
                or not math.isfinite(value):
            raise ValueError(f"{attribute.name} must be a finite number, not {value!r}")
        if value < low or (high is not None and value > high):
            upper = f" and {high:g}" if high is not None else ""
            raise ValueError(f"{attribute.name} must be {'between' if upper else 'at least'} "
                             f"{low:g}{upper}, not {value!r}")
    return check


def _optional_int(low: int) -> Callable[[Any, Any, Any], None]:
    def check(instance: Any, attribute: Any, value: Any) -> None:
        if value is None:
            return
        if isinstance(value, bool) or not isinstance(value, int):
            raise ValueError(f"{attribute.name} must be an integer, not {value!r}")
        if value < low:
            raise ValueError(f"{attribute.name} must be at least {low}, not {value!r}")
    return check


@attrs.frozen
class SamplingOverrides:
    """One turn's sampling settings, each replacing the backend's own when set.

    ``None`` everywhere (the default) leaves the backend as it was configured.

    :ivar temperature: the sampling temperature (``0``: greedy), at least 0.
    :ivar top_p: nucleus sampling, between 0 and 1.
    :ivar max_tokens: the most tokens this reply may take, at least 1. A local
        backend caps the reply at the smaller of this and its own ``max_tokens``
        (its prompt room is ``n_ctx`` minus its own), a remote one sends it.
    :ivar seed: the sampling seed: the same seed, prompt and settings give the
        same reply where the backend can promise it (llama.cpp does).
    :ivar top_k: sample only from the ``top_k`` most likely tokens, at least 1
        (last: the record's positional order is kept).
    :raises ValueError: a value is out of range or of the wrong type.
    """

    temperature: float | None = attrs.field(default=None, validator=_optional_range(0.0, None))
    top_p: float | None = attrs.field(default=None, validator=_optional_range(0.0, 1.0))
    max_tokens: int | None = attrs.field(default=None, validator=_optional_int(1))
    seed: int | None = attrs.field(default=None, validator=_optional_int(-(2 ** 63)))
    top_k: int | None = attrs.field(default=None, validator=_optional_int(1))

    @property
    def is_empty(self) -> bool:
        """``True`` when no field is set (the backend's own settings hold)."""
        return self == _NO_OVERRIDES

    def fields(self) -> dict[str, float | int]:
        """The fields that are set, by name (``{"temperature": 0.2, "seed": 7}``)."""
        return {name: value for name, value in attrs.asdict(self).items() if value is not None}


_NO_OVERRIDES: Final = SamplingOverrides()

REASONING_EFFORTS: Final = ("low", "medium", "high")
"""The efforts a chat template's ``reasoning_effort`` switch takes (gpt-oss's)."""


@attrs.frozen
class ReasoningRequest:
    """What a turn asks of the model's reasoning, where its chat template has a switch.

    The default asks nothing: the backend's own setting holds (``enable_thinking``
    of a templated backend).

    :ivar enabled: ``True``/``False`` turn the template's reasoning switch on or off
        (``enable_thinking`` and ``thinking``, the names templates read); ``None``:
        the backend's own setting.
    :ivar effort: ``low``, ``medium`` or ``high``: the template's ``reasoning_effort``
        (gpt-oss's Harmony template reads it); ``None``: not passed.
    :ivar budget: the most tokens the reply may spend reasoning; a templated backend
        stops a reply whose reasoning reaches it (as a reply stops at ``max_tokens``).
    :raises ValueError: an effort other than those, or a budget below 1.
    """

    enabled: bool | None = None
    effort: str | None = attrs.field(
        default=None, validator=attrs.validators.optional(attrs.validators.in_(REASONING_EFFORTS)))
    budget: int | None = attrs.field(default=None, validator=_optional_int(1))

    def template_switches(self) -> dict[str, Any]:
        """The chat-template variables this request sets (none by default)."""
        switches: dict[str, Any] = {}
        if self.enabled is not None:
            switches["enable_thinking"] = switches["thinking"] = self.enabled
        if self.effort is not None:
            switches["reasoning_effort"] = self.effort
        return switches


_NO_REASONING: Final = ReasoningRequest()

RESPONSE_FORMAT_TYPES: Final = ("json_object", "json_schema")


@attrs.frozen
class ResponseFormat:
    """The shape a turn's text must have (OpenAI's ``response_format``).

    A local backend enforces it with a grammar written from the schema (see
    :mod:`toolwire.grammar.response_format`) on a turn that offers no tools.

    :ivar type: ``json_object`` (any JSON object) or ``json_schema``.
    :ivar schema: for ``json_schema``, the JSON schema the text's value follows.
    :ivar name: for ``json_schema``, the schema's name.
    :ivar strict: ``True``: a schema the grammar cannot express fails the turn
        instead of loosening to any JSON object.
    :raises ValueError: an unknown ``type``, or ``json_schema`` without a schema.
    """

    type: str = attrs.field(validator=attrs.validators.in_(RESPONSE_FORMAT_TYPES))
    schema: Mapping[str, Any] | None = None
    name: str = ""
    strict: bool = False

    def __attrs_post_init__(self) -> None:
        if self.type == "json_schema" and not isinstance(self.schema, Mapping):
            raise ValueError("a json_schema response format needs its schema")


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
    :ivar sampling: this turn's sampling settings, where they differ from the
        backend's own (the default changes nothing).
    :ivar response_format: the shape the reply's text must have, or ``None``.
    :ivar logprobs: ``None``, or ask for each generated token's log probability
        with this many most likely alternatives (0 to 20): a backend that can give
        them (its ``token_logprobs`` attribute is ``True``) yields a
        :class:`~toolwire.events.TokenLogprobEvent` per token; others ignore it.
    :ivar reasoning: the reasoning switch, effort and budget asked for (the default
        leaves the backend's own setting).
    """

    messages: tuple[Message, ...]
    tools: tuple[Tool, ...] = ()
    final_turn: bool = False
    tool_choice: ToolChoice = "auto"
    parallel_tool_calls: bool = True
    sampling: SamplingOverrides = _NO_OVERRIDES
    response_format: ResponseFormat | None = None
    logprobs: int | None = attrs.field(default=None, validator=_optional_int(0))
    reasoning: ReasoningRequest = _NO_REASONING

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
