"""Reading a ``POST /v1/chat/completions`` body into a typed request.

Every field is checked; a bad one is a ``400`` :class:`RequestError` naming it
(OpenAI's ``param``). Unknown fields are ignored, as OpenAI-compatible servers
do. The messages are read by :func:`toolwire.vocabulary.openai_messages.
messages_from_openai` (``developer`` messages count as ``system``); the tools
become :class:`toolwire.Tool` objects whose function is never called: the client
runs its tools, this endpoint only generates and parses. A tool whose schema is
over a schema budget (:mod:`toolwire.vocabulary.schema_budget`) is a ``400``
with code ``tool_schema_too_complex``, naming the tool and the budget.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import attrs

from ...errors import ToolDefinitionError, ToolSchemaBudgetError
from ...vocabulary.history import Message
from ...vocabulary.openai_messages import messages_from_openai
from ...vocabulary.tools import Tool
from .chat_request import check_request_size
from .http_input import RequestError
from .limits import ServerLimits

__all__ = ["CompletionRequest", "parse_completion_request"]

TOOL_CHOICES = ("none", "auto", "required")
MAX_STOP_SEQUENCES = 4


@attrs.frozen
class CompletionRequest:
    """A checked chat-completions request.

    :ivar model: the model id asked for.
    :ivar messages: the conversation.
    :ivar tools: the tools offered (never run here).
    :ivar tool_choice: ``"auto"``, ``"none"``, ``"required"`` or a tool's name.
    :ivar parallel_tool_calls: ``False``: at most one call per reply.
    :ivar temperature: the sampling temperature asked for, if any.
    :ivar top_p: nucleus sampling asked for, if any.
    :ivar max_tokens: the reply's token budget asked for, if any.
    :ivar seed: the sampling seed asked for, if any.
    :ivar stop: strings that end the reply's text (at most four).
    :ivar stream: answer as ``chat.completion.chunk`` server-sent events.
    :ivar include_usage: end the stream with a usage chunk.
    """

    model: str
    messages: tuple[Message, ...]
    tools: tuple[Tool, ...] = ()
    tool_choice: str = "auto"
    parallel_tool_calls: bool = True
    temperature: float | None = None
    top_p: float | None = None
    max_tokens: int | None = None
    seed: int | None = None
    stop: tuple[str, ...] = ()
    stream: bool = False
    include_usage: bool = False

    @property
    def offered_tools(self) -> tuple[Tool, ...]:
        """The tools the model sees: none for ``tool_choice="none"``."""
        return () if self.tool_choice == "none" else self.tools


def _never_called(**arguments: Any) -> Any:
    raise RuntimeError("the chat-completions endpoint never runs a tool: the client does")


def _bad(param: str, message: str) -> RequestError:
    return RequestError(400, f"{param}: {message}", param=param, code="invalid_value")


def _number(data: Mapping[str, Any], key: str, low: float, high: float) -> float | None:
    value = data.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise _bad(key, "must be a number")
    if not low <= value <= high:
        raise _bad(key, f"must be between {low:g} and {high:g}")
    return float(value)


def _integer(data: Mapping[str, Any], key: str, low: int) -> int | None:
    value = data.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise _bad(key, "must be an integer")
    if value < low:
        raise _bad(key, f"must be at least {low}")
    return value


def _boolean(data: Mapping[str, Any], key: str, default: bool) -> bool:
    value = data.get(key, default)
    if value is None:
        return default
    if not isinstance(value, bool):
        raise _bad(key, "must be true or false")
    return value


def _tools(value: Any, limits: ServerLimits) -> tuple[Tool, ...]:
    if value is None:
        return ()
    if not isinstance(value, list):
        raise _bad("tools", "must be a list of {\"type\": \"function\", \"function\": {...}}")
    if len(value) > limits.max_tools:
        raise _bad("tools", f"at most {limits.max_tools} tools may be offered")
    tools: list[Tool] = []
    for i, entry in enumerate(value):
        where = f"tools[{i}]"
        if not isinstance(entry, Mapping) or entry.get("type") != "function" \
                or not isinstance(entry.get("function"), Mapping):
            raise _bad(where, 'must be {"type": "function", "function": {...}}')
        try:
            tool = Tool(schema=entry["function"], function=_never_called)
        except ToolSchemaBudgetError as exc:
            raise RequestError(400, f"{where}: {exc}", param=f"{where}.function.parameters",
                               code="tool_schema_too_complex") from None
        except ToolDefinitionError as exc:
            raise _bad(where, str(exc)) from None
        if any(t.name == tool.name for t in tools):
            raise _bad(where, f"a second tool is named {tool.name!r}")
        tools.append(tool)
    return tuple(tools)


def _tool_choice(value: Any, tools: Sequence[Tool]) -> str:
    if value is None:
        return "auto"
    if isinstance(value, str):
        if value not in TOOL_CHOICES:
            raise _bad("tool_choice", f"must be one of {', '.join(TOOL_CHOICES)} or "
                                      '{"type": "function", "function": {"name": ...}}')
        if value == "required" and not tools:
            raise _bad("tool_choice", '"required" needs tools')
        return value
    function = value.get("function") if isinstance(value, Mapping) else None
    name = function.get("name") if isinstance(function, Mapping) else None
    if not isinstance(value, Mapping) or value.get("type") != "function" \
            or not isinstance(name, str):
        raise _bad("tool_choice", 'a named choice is {"type": "function", "function": '
                                  '{"name": ...}}')
    if not any(t.name == name for t in tools):
        raise _bad("tool_choice", f"names {name!r}, which is not among the tools")
    return name


def _stop(value: Any) -> tuple[str, ...]:
    if value is None:
        return ()
    items = [value] if isinstance(value, str) else value
    if not isinstance(items, list) or not all(isinstance(s, str) for s in items):
        raise _bad("stop", "must be a string or a list of strings")
    if len(items) > MAX_STOP_SEQUENCES:
        raise _bad("stop", f"at most {MAX_STOP_SEQUENCES} stop sequences")
    return tuple(s for s in items if s)


def _messages(value: Any, limits: ServerLimits) -> tuple[Message, ...]:
    if not isinstance(value, list) or not value:
        raise _bad("messages", "must be a non-empty list")
    check_request_size(value, limits)
    records = [{**r, "role": "system"} if isinstance(r, Mapping) and r.get("role") == "developer"
               else r for r in value]
    try:
        return tuple(messages_from_openai(records))
    except ValueError as exc:
        raise _bad("messages", str(exc)) from None


def parse_completion_request(data: Any, limits: ServerLimits) -> CompletionRequest:
    """Check a chat-completions body and read it.

    :raises RequestError: ``400`` naming the field that is wrong; ``413`` when
        the messages exceed the server's caps.
    """
    if not isinstance(data, Mapping):
        raise RequestError(400, "the body must be a JSON object", code="invalid_value")
    model = data.get("model")
    if not isinstance(model, str) or not model:
        raise _bad("model", "must name the model (GET /v1/models lists it)")
    messages = _messages(data.get("messages"), limits)
    tools = _tools(data.get("tools"), limits)
    choice = _tool_choice(data.get("tool_choice"), tools)
    n = data.get("n")
    if n is not None and n != 1:
        raise _bad("n", "only one choice per request is supported")
    max_tokens = _integer(data, "max_completion_tokens", 1)
    if max_tokens is None:
        max_tokens = _integer(data, "max_tokens", 1)
    stream = _boolean(data, "stream", False)
    options = data.get("stream_options")
    if options is not None and not isinstance(options, Mapping):
        raise _bad("stream_options", "must be an object")
    include_usage = _boolean(options or {}, "include_usage", False)
    seed = _integer(data, "seed", -(2 ** 63))
    return CompletionRequest(
        model=model, messages=messages, tools=tools, tool_choice=choice,
        parallel_tool_calls=_boolean(data, "parallel_tool_calls", True),
        temperature=_number(data, "temperature", 0.0, 2.0),
        top_p=_number(data, "top_p", 0.0, 1.0), max_tokens=max_tokens, seed=seed,
        stop=_stop(data.get("stop")), stream=stream, include_usage=stream and include_usage)
