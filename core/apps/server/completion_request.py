"""Reading a ``POST /v1/chat/completions`` body into a typed request.

Every field is checked; a bad one is a ``400`` :class:`RequestError` naming it
(OpenAI's ``param``). :data:`REQUEST_FIELDS` says what becomes of each field of
OpenAI's request (``docs/openai-server.md`` has the same table, and a test holds
the two to what this module reads): supported, mapped onto a supported one (the
deprecated ``functions`` and ``function_call``), accepted with no effect (ids for
the provider's own records), or refused with a ``400`` when it asks for
something this server does not do. Fields OpenAI does not define are ignored.

The messages are read by :func:`toolwire.vocabulary.openai_messages.
messages_from_openai` (``developer`` messages count as ``system``; the
deprecated assistant ``function_call`` and ``role: "function"`` results become a
tool call and its result); the tools become :class:`toolwire.Tool` objects
whose function is never called: the client runs its tools, this endpoint only
generates and parses. A tool whose schema is over a schema limit
(:mod:`toolwire.vocabulary.schema_size`) is a ``400`` with code
``tool_schema_too_complex``, naming the tool and the limit; so is a
``response_format`` schema over one.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Final

import attrs
import jsonschema
from jsonschema.exceptions import SchemaError
from jsonschema.validators import validator_for

from ...errors import ToolDefinitionError, ToolSchemaBudgetError
from ...limits import ServerLimits
from ...vocabulary.backend import ReasoningRequest, ResponseFormat
from ...vocabulary.history import Message
from ...vocabulary.openai_messages import messages_from_openai
from ...vocabulary.schema_size import check_schema_size
from ...vocabulary.tools import Tool
from .chat_request import check_conversation, check_request_size
from .http_input import RequestError
from .request_fields import bad_value as _bad
from .request_fields import read_boolean as _boolean
from .request_fields import read_integer as _integer
from .request_fields import read_model
from .request_fields import read_number as _number

__all__ = [
    "REQUEST_FIELDS",
    "CompletionRequest",
    "parse_completion_request",
    "read_response_format",
    "read_stop",
    "read_tool",
]

TOOL_CHOICES = ("none", "auto", "required")

REQUEST_FIELDS: Final[dict[str, str]] = {
    "model": "supported", "messages": "supported", "tools": "supported",
    "tool_choice": "supported", "parallel_tool_calls": "supported", "stop": "supported",
    "stream": "supported", "stream_options": "supported", "temperature": "supported",
    "top_p": "supported", "seed": "supported", "max_tokens": "supported",
    "max_completion_tokens": "supported", "n": "supported", "response_format": "supported",
    "logprobs": "supported", "top_logprobs": "supported",
    "functions": "mapped", "function_call": "mapped",
    "user": "no effect", "metadata": "no effect", "store": "no effect",
    "service_tier": "no effect", "prompt_cache_key": "no effect",
    "safety_identifier": "no effect",
    "logit_bias": "refused",
    "presence_penalty": "refused", "frequency_penalty": "refused", "modalities": "refused",
    "audio": "refused", "prediction": "refused", "web_search_options": "refused",
    "reasoning_effort": "refused", "verbosity": "refused",
}
"""What becomes of each field of OpenAI's request: ``supported``, ``mapped`` (onto
a supported field), ``no effect`` (accepted and not used) or ``refused`` (a
``400`` when it asks for anything: a penalty or bias that is not zero, another
modality)."""



@attrs.frozen
class CompletionRequest:
    """A checked request for one model turn: what every API the server speaks reads its
    body into (chat completions here; :mod:`.responses_request` and
    :mod:`.messages_request` the other two), so all of them run the same turn.

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
    :ivar response_format: the shape the reply's text must have, if any.
    :ivar legacy_functions: the request used the deprecated ``functions`` /
        ``function_call``: answer with ``function_call``, one call at most.
    :ivar logprobs: ``None``, or report the content tokens' log probabilities,
        each with this many most likely alternatives (``top_logprobs``, 0 to 20).
    :ivar top_k: sample from this many most likely tokens, if asked.
    :ivar reasoning: the reasoning switch, effort and budget asked for.
    :ivar max_calls: the most calls the reply may hold (its later calls are not
        sent and generation stops), if asked.
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
    response_format: ResponseFormat | None = None
    legacy_functions: bool = False
    logprobs: int | None = None
    top_k: int | None = None
    reasoning: ReasoningRequest = attrs.field(factory=ReasoningRequest)
    max_calls: int | None = None

    @property
    def offered_tools(self) -> tuple[Tool, ...]:
        """The tools the model sees: none for ``tool_choice="none"``."""
        return () if self.tool_choice == "none" else self.tools


def _never_called(**arguments: Any) -> Any:
    raise RuntimeError("the model APIs never run a tool: the client does")


def _tools(value: Any, limits: ServerLimits, field: str = "tools") -> tuple[Tool, ...]:
    """``tools`` (``{"type": "function", "function": {...}}`` entries), or the deprecated
    ``functions`` (the ``{...}`` alone)."""
    if value is None:
        return ()
    shape = '{"type": "function", "function": {...}}' if field == "tools" else \
        '{"name": ..., "parameters": {...}}'
    if not isinstance(value, list):
        raise _bad(field, f"must be a list of {shape}")
    if len(value) > limits.max_tools:
        raise _bad(field, f"at most {limits.max_tools} tools may be offered")
    tools: list[Tool] = []
    for i, entry in enumerate(value):
        where = f"{field}[{i}]"
        function = entry.get("function") if field == "tools" and isinstance(entry, Mapping) \
            else entry
        if not isinstance(entry, Mapping) or not isinstance(function, Mapping) or (
                field == "tools" and entry.get("type") != "function"):
            raise _bad(where, f"must be {shape}")
        tool = read_tool(function, where, f"{where}.function.parameters" if field == "tools"
                         else f"{where}.parameters")
        if any(t.name == tool.name for t in tools):
            raise _bad(where, f"a second tool is named {tool.name!r}")
        tools.append(tool)
    return tuple(tools)


def read_tool(function: Mapping[str, Any], where: str, schema_param: str) -> Tool:
    """A client's tool (``{"name", "description", "parameters"}``) as a
    :class:`~toolwire.Tool` whose function is never called (the client runs it).

    :param where: the field, for messages (``tools[3]``).
    :param schema_param: the field of its parameters' schema, for a schema over a
        limit (``tools[3].function.parameters``).
    :raises RequestError: ``400``, the definition is not one (``invalid_value``) or
        its schema is over a limit (``tool_schema_too_complex``).
    """
    try:
        return Tool(schema=function, function=_never_called)
    except ToolSchemaBudgetError as exc:
        raise RequestError(400, f"{where}: {exc}", param=schema_param,
                           code="tool_schema_too_complex") from None
    except ToolDefinitionError as exc:
        raise _bad(where, str(exc)) from None


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


def _function_call(value: Any, tools: Sequence[Tool]) -> str:
    """The deprecated ``function_call``: ``"auto"``, ``"none"`` or ``{"name": N}``."""
    if value is None or value in ("auto", "none"):
        return str(value or "auto")
    name = value.get("name") if isinstance(value, Mapping) else None
    if not isinstance(name, str):
        raise _bad("function_call", 'must be "auto", "none" or {"name": ...}')
    if not any(t.name == name for t in tools):
        raise _bad("function_call", f"names {name!r}, which is not among the functions")
    return name


def _legacy_messages(records: list[Any]) -> list[Any]:
    """The deprecated shapes as today's: an assistant's ``function_call`` as its one
    tool call, a ``role: "function"`` message as the result of the latest call of
    that function not answered yet."""
    out: list[Any] = []
    unanswered: list[tuple[str, str]] = []  # (call id, function name), oldest first
    for i, record in enumerate(records):
        if not isinstance(record, Mapping):
            out.append(record)
            continue
        role = record.get("role")
        call = record.get("function_call")
        if role == "assistant" and isinstance(call, Mapping) and not record.get("tool_calls"):
            call_id = f"call_legacy_{i}"
            unanswered.append((call_id, str(call.get("name"))))
            record = {**{k: v for k, v in record.items() if k != "function_call"},
                      "tool_calls": [{"id": call_id, "type": "function", "function": call}]}
        elif role == "function":
            name = record.get("name")
            match = next((c for c in reversed(unanswered) if c[1] == name), None)
            if match is None:
                raise _bad("messages", f"message {i}: a function message answers no earlier "
                                       f"function_call of {name!r}")
            unanswered.remove(match)
            record = {"role": "tool", "tool_call_id": match[0],
                      "content": record.get("content")}
        out.append(record)
    return out


def _response_format(value: Any) -> ResponseFormat | None:
    """``response_format``: ``text`` (nothing to enforce), ``json_object``, or
    ``json_schema`` with a schema that is valid and within the schema limits."""
    if value is None:
        return None
    kind = value.get("type") if isinstance(value, Mapping) else None
    if kind == "json_schema":
        spec = value.get("json_schema")
        if not isinstance(spec, Mapping):
            raise _bad("response_format", 'json_schema needs {"name": ..., "schema": {...}}')
        value = {**spec, "type": "json_schema"}
    return read_response_format(value, "response_format")


def read_response_format(value: Any, param: str) -> ResponseFormat | None:
    """A reply's format in its flat form, ``{"type": "text"}`` (nothing to enforce),
    ``{"type": "json_object"}`` or ``{"type": "json_schema", "name", "schema",
    "strict"}``, with a schema that is valid and within the schema limits.

    :param param: the field, for errors (``response_format``, ``text.format``...).
    :raises RequestError: ``400`` naming ``param``.
    """
    if value is None:
        return None
    kind = value.get("type") if isinstance(value, Mapping) else None
    if kind == "text":
        return None
    if kind == "json_object":
        return ResponseFormat("json_object")
    if kind != "json_schema":
        raise _bad(param, 'the type must be "text", "json_object" or '
                          f'"json_schema", not {kind!r}')
    assert isinstance(value, Mapping)
    name, schema, strict = value.get("name", ""), value.get("schema"), value.get("strict", False)
    if not isinstance(name, str) or not isinstance(strict, bool | None):
        raise _bad(param, "json_schema's name must be a string and strict true or false")
    if schema is None:
        schema = {}  # OpenAI's own default: any value
    if not isinstance(schema, Mapping):
        raise _bad(param, "json_schema's schema must be a JSON schema object")
    try:
        check_schema_size(schema, tool=name or param)
        validator_for(schema, default=jsonschema.Draft202012Validator).check_schema(dict(schema))
    except ToolSchemaBudgetError as exc:
        raise RequestError(400, f"{param}: {exc}", param=param,
                           code="tool_schema_too_complex") from None
    except SchemaError as exc:
        raise _bad(param, f"the schema is not a valid JSON schema: {exc.message}") from None
    return ResponseFormat("json_schema", schema, name, bool(strict))


_NO_EFFECT_VALUES: Final[dict[str, tuple[Any, ...]]] = {
    "presence_penalty": (0, 0.0), "frequency_penalty": (0, 0.0),
    "logit_bias": ({},), "modalities": (["text"],)}


def _refuse_unsupported(data: Mapping[str, Any]) -> None:
    """A ``400`` for a refused field that asks for anything (see :data:`REQUEST_FIELDS`)."""
    for field, disposition in REQUEST_FIELDS.items():
        if disposition != "refused":
            continue
        value = data.get(field)
        if value is None or any(value == v and type(value) is type(v)
                                for v in _NO_EFFECT_VALUES.get(field, ())):
            continue
        raise _bad(field, "not supported by this server")


def _logprobs(data: Mapping[str, Any], most: int) -> int | None:
    """``logprobs`` and ``top_logprobs``: the alternatives per token, or ``None``
    when no log probabilities are asked (``top_logprobs`` needs ``logprobs: true``)."""
    asked = _boolean(data, "logprobs", False)
    top = data.get("top_logprobs")
    if top is None:
        return 0 if asked else None
    if isinstance(top, bool) or not isinstance(top, int):
        raise _bad("top_logprobs", "must be an integer")
    if not 0 <= top <= most:
        raise _bad("top_logprobs", f"must be between 0 and {most}")
    if not asked:
        raise _bad("top_logprobs", "needs logprobs: true")
    return top


def read_stop(value: Any, param: str, most: int) -> tuple[str, ...]:
    """Stop strings: a string or a list of at most ``most`` strings (empty ones dropped).

    :raises RequestError: ``400`` naming ``param``.
    """
    if value is None:
        return ()
    items = [value] if isinstance(value, str) else value
    if not isinstance(items, list) or not all(isinstance(s, str) for s in items):
        raise _bad(param, "must be a string or a list of strings")
    if len(items) > most:
        raise _bad(param, f"at most {most} stop sequences")
    return tuple(s for s in items if s)


def _messages(value: Any, limits: ServerLimits) -> tuple[Message, ...]:
    if not isinstance(value, list) or not value:
        raise _bad("messages", "must be a non-empty list")
    check_request_size(value, limits)
    records = [{**r, "role": "system"} if isinstance(r, Mapping) and r.get("role") == "developer"
               else r for r in value]
    return read_conversation(records, "messages", limits)


def read_conversation(records: Sequence[Any], param: str, limits: ServerLimits
                      ) -> tuple[Message, ...]:
    """OpenAI chat messages (what every API's conversation is read into) as toolwire
    messages (:func:`~toolwire.vocabulary.openai_messages.messages_from_openai`), held
    to the request's bounds (:func:`~.chat_request.check_conversation`: a result counted
    for each unanswered call, the depth of each call's arguments).

    :raises RequestError: ``400`` naming ``param``: a malformed message, or a call's
        arguments nesting thousands of levels; ``413`` past a bound.
    """
    try:
        messages = tuple(messages_from_openai(records))
    except ValueError as exc:
        raise _bad(param, str(exc)) from None
    except RecursionError:  # a call's arguments text nesting thousands of levels
        raise _bad(param, "a tool call's arguments nest too deeply") from None
    check_conversation(messages, limits)
    return messages


def parse_completion_request(data: Any, limits: ServerLimits) -> CompletionRequest:
    """Check a chat-completions body and read it.

    :raises RequestError: ``400`` naming the field that is wrong; ``413`` when
        the messages exceed the server's caps.
    """
    model = read_model(data)
    _refuse_unsupported(data)
    records = data.get("messages")
    functions, function_call = data.get("functions"), data.get("function_call")
    legacy = functions is not None or function_call is not None
    if legacy:
        if data.get("tools") is not None or data.get("tool_choice") is not None:
            raise _bad("functions", "send tools and tool_choice, or the deprecated functions "
                                    "and function_call, not both")
        tools = _tools(functions, limits, "functions")
        choice = _function_call(function_call, tools)
        if isinstance(records, list):
            records = _legacy_messages(records)
    else:
        tools = _tools(data.get("tools"), limits)
        choice = _tool_choice(data.get("tool_choice"), tools)
    messages = _messages(records, limits)
    for user_field in ("user", "service_tier", "prompt_cache_key", "safety_identifier"):
        if data.get(user_field) is not None and not isinstance(data.get(user_field), str):
            raise _bad(user_field, "must be a string")
    metadata, store = data.get("metadata"), data.get("store")
    if metadata is not None and not isinstance(metadata, Mapping):
        raise _bad("metadata", "must be an object")
    if store is not None and not isinstance(store, bool):
        raise _bad("store", "must be true or false")
    n = data.get("n")
    if n is not None and n != 1:
        raise _bad("n", "only one choice per request is supported")
    max_tokens = _integer(data, "max_completion_tokens", 1)
    if max_tokens is None:
        max_tokens = _integer(data, "max_tokens", 1)
    else:
        _integer(data, "max_tokens", 1)
    stream = _boolean(data, "stream", False)
    options = data.get("stream_options")
    if options is not None and not isinstance(options, Mapping):
        raise _bad("stream_options", "must be an object")
    include_usage = _boolean(options or {}, "include_usage", False)
    seed = _integer(data, "seed", -(2 ** 63))
    return CompletionRequest(
        model=model, messages=messages, tools=tools, tool_choice=choice,
        parallel_tool_calls=_boolean(data, "parallel_tool_calls", True) and not legacy,
        temperature=_number(data, "temperature", 0.0, 2.0),
        top_p=_number(data, "top_p", 0.0, 1.0), max_tokens=max_tokens, seed=seed,
        stop=read_stop(data.get("stop"), "stop", limits.max_stop), stream=stream,
        include_usage=stream and include_usage,
        response_format=_response_format(data.get("response_format")),
        legacy_functions=legacy, logprobs=_logprobs(data, limits.max_top_logprobs))
