"""Reading a ``POST /v1/messages`` body (Anthropic's Messages API) into the turn every API runs.

Claude Code and the ``anthropic`` SDKs send the whole conversation in each
request. The messages are read into the OpenAI chat messages every route
understands and then by :func:`toolwire.vocabulary.openai_messages.messages_from_openai`,
so a conversation is the same for the model whichever API carried it:

* ``system`` (a string or text blocks) and every ``system``-role message inside
  ``messages`` (Claude Code sends one) make the system prompt, in their order,
  joined by blank lines; the blocks of one message are joined as chat
  completions joins its parts;
* a ``user`` message's ``text`` blocks are its text and its ``tool_result``
  blocks (a string or text blocks, ``is_error`` kept) answer the calls they name;
  an ``image`` or ``document`` block is refused (``400``): the served model reads
  text only;
* an ``assistant`` message's ``thinking`` blocks are its reasoning, its ``text``
  blocks its text, its ``tool_use`` blocks its calls.

``tools`` with ``input_schema`` become :class:`toolwire.Tool` records; a tool with
``defer_loading`` is left out of the prompt until a ``tool_choice`` names it (the
model loads deferred tools only on request), and Anthropic's own tools (a ``type``
such as ``web_search_20250305``) are left out and reported (``ignored_tools``),
a ``tool_choice`` that names one being a ``400``. ``tool_choice`` ``auto``,
``any`` (``required``), ``tool`` (a named tool) and ``none`` map onto the choice
every route enforces with the family's grammar; ``disable_parallel_tool_use`` is
``parallel_tool_calls: false``.

:data:`REQUEST_FIELDS` says what becomes of each field (``docs/agents.md`` has the
same table, held to this module by a test); fields the API does not define are
ignored, and so are ``cache_control`` marks wherever they are.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

import attrs

from ...limits import ServerLimits
from ...vocabulary.backend import ReasoningRequest, ResponseFormat
from ...vocabulary.tools import Tool
from .chat_request import check_request_size
from .completion_request import (
    CompletionRequest,
    read_conversation,
    read_response_format,
    read_stop,
    read_tool,
)
from .http_input import RequestError
from .request_fields import (
    bad_value,
    read_boolean,
    read_integer,
    read_model,
    read_number,
    read_string,
)

__all__ = ["REQUEST_FIELDS", "MessagesRequest", "parse_messages_request"]

REQUEST_FIELDS: Final[dict[str, str]] = {
    "model": "supported", "messages": "supported", "system": "supported",
    "max_tokens": "supported", "tools": "supported", "tool_choice": "supported",
    "stop_sequences": "supported", "temperature": "supported", "top_p": "supported",
    "top_k": "supported", "thinking": "supported", "stream": "supported",
    "output_config": "supported", "output_format": "mapped",
    "metadata": "no effect", "service_tier": "no effect", "context_management": "no effect",
    "cache_control": "no effect", "speed": "no effect", "inference_geo": "no effect",
    "container": "refused", "mcp_servers": "refused",
}
"""What becomes of each field of the Messages request: ``supported``, ``mapped`` (the
beta ``output_format``, read as ``output_config.format``), ``no effect`` (accepted
and not used) or ``refused`` (a ``400`` when it asks for anything)."""

"""The most ``stop_sequences`` one request may send (each costs the stream a matcher)."""

_EFFORTS: Final = {"low": "low", "medium": "medium", "high": "high", "xhigh": "high",
                   "max": "high"}


@attrs.frozen
class MessagesRequest:
    """What the message's writer needs beside the turn.

    :ivar ignored_tools: the tools left out of the prompt (``{"name", "type", "reason"}``).
    """

    ignored_tools: tuple[Mapping[str, str], ...] = ()


def _blocks(value: Any, where: str) -> list[Mapping[str, Any]]:
    if isinstance(value, str):
        return [{"type": "text", "text": value}]
    if not isinstance(value, list) or not all(isinstance(b, Mapping) for b in value):
        raise bad_value("messages", f"{where}: content must be a string or a list of blocks")
    return value


def _text_of(block: Mapping[str, Any], where: str) -> str:
    text = block.get("text")
    if not isinstance(text, str):
        raise bad_value("messages", f"{where}: a text block needs its text")
    return text


def _no_sight(kind: str, where: str, param: str = "messages") -> RequestError:
    return RequestError(400, f"{param}: {where} is an {kind} block, but the served model reads "
                             "text only", param=param, code="unsupported_content")


def _result_text(value: Any, where: str) -> str:
    """A ``tool_result``'s content: a string or text blocks."""
    if value is None:
        return ""
    parts = []
    for j, block in enumerate(_blocks(value, where)):
        kind = block.get("type")
        if kind == "text":
            parts.append(_text_of(block, f"{where} block {j}"))
        elif kind in ("image", "document", "search_result"):
            raise _no_sight(str(kind), f"{where} block {j}")
        else:
            raise bad_value("messages", f"{where} block {j}: unknown block type {kind!r}")
    return "".join(parts)


def _system_text(value: Any, where: str, param: str) -> str:
    if isinstance(value, str):
        return value
    if not isinstance(value, list):
        raise bad_value(param, f"{where}: must be a string or a list of text blocks")
    parts = []
    for j, block in enumerate(value):
        if not isinstance(block, Mapping) or block.get("type") != "text" \
                or not isinstance(block.get("text"), str):
            raise bad_value(param, f"{where} block {j}: the system prompt takes text blocks")
        parts.append(block["text"])
    return "".join(parts)


def _records(data: Mapping[str, Any], limits: ServerLimits) -> list[dict[str, Any]]:
    """The conversation as OpenAI chat messages, the system prompt first."""
    value = data.get("messages")
    if not isinstance(value, list) or not value:
        raise bad_value("messages", "must be a non-empty list")
    check_request_size(value, limits)
    system: list[str] = []
    if data.get("system") is not None:
        text = _system_text(data.get("system"), "system", "system")
        if text:
            system.append(text)
    records: list[dict[str, Any]] = []
    for i, message in enumerate(value):
        where = f"message {i}"
        if not isinstance(message, Mapping):
            raise bad_value("messages", f"{where} is not an object")
        role = message.get("role")
        if role == "system":
            text = _system_text(message.get("content"), where, "messages")
            if text:
                system.append(text)
        elif role == "user":
            records.extend(_user(message.get("content"), where))
        elif role == "assistant":
            records.append(_assistant(message.get("content"), where))
        else:
            raise bad_value("messages", f"{where}: unknown role {role!r}")
    if system:
        records.insert(0, {"role": "system", "content": "\n\n".join(system)})
    return records


def _user(content: Any, where: str) -> list[dict[str, Any]]:
    results: list[dict[str, Any]] = []
    texts: list[str] = []
    for j, block in enumerate(_blocks(content, where)):
        kind, at = block.get("type"), f"{where} block {j}"
        if kind == "text":
            texts.append(_text_of(block, at))
        elif kind == "tool_result":
            results.append({"role": "tool", "tool_call_id": block.get("tool_use_id"),
                            "content": _result_text(block.get("content"), at),
                            "is_error": bool(block.get("is_error", False))})
        elif kind in ("image", "document", "search_result"):
            raise _no_sight(str(kind), at)
        else:
            raise bad_value("messages", f"{at}: unknown block type {kind!r} in a user message")
    if texts or not results:
        results.append({"role": "user", "content": "".join(texts)})
    return results


def _assistant(content: Any, where: str) -> dict[str, Any]:
    record: dict[str, Any] = {"role": "assistant", "content": ""}
    reasoning: list[str] = []
    calls: list[dict[str, Any]] = []
    for j, block in enumerate(_blocks(content, where)):
        kind, at = block.get("type"), f"{where} block {j}"
        if kind == "text":
            record["content"] += _text_of(block, at)
        elif kind == "thinking":
            thought = block.get("thinking")
            if not isinstance(thought, str):
                raise bad_value("messages", f"{at}: a thinking block needs its thinking")
            reasoning.append(thought)
        elif kind == "redacted_thinking":
            continue  # the provider's encrypted reasoning: nothing a template can show
        elif kind == "tool_use":
            name, call_id, arguments = block.get("name"), block.get("id"), block.get("input")
            if not isinstance(name, str) or not isinstance(call_id, str) \
                    or not isinstance(arguments, Mapping | None):
                raise bad_value("messages", f"{at}: a tool_use block needs its id, name and "
                                            "input object")
            calls.append({"id": call_id, "type": "function",
                          "function": {"name": name, "arguments": dict(arguments or {})}})
        else:
            raise bad_value("messages", f"{at}: unknown block type {kind!r} in an assistant "
                                        "message")
    if reasoning:
        record["reasoning"] = "".join(reasoning)
    if calls:
        record["tool_calls"] = calls
    return record


def _tools(value: Any, limits: ServerLimits) -> tuple[list[Tool], list[Tool], list[dict[str, str]]]:
    """The tools offered now, the deferred ones, and the tools left out."""
    if value is None:
        return [], [], []
    if not isinstance(value, list):
        raise bad_value("tools", "must be a list of tools")
    if len(value) > limits.max_tools:
        raise bad_value("tools", f"at most {limits.max_tools} tools may be offered")
    offered: list[Tool] = []
    deferred: list[Tool] = []
    ignored: list[dict[str, str]] = []
    names: set[str] = set()
    for i, entry in enumerate(value):
        where = f"tools[{i}]"
        if not isinstance(entry, Mapping):
            raise bad_value(where, "must be a tool object")
        kind = entry.get("type")
        if kind not in (None, "custom"):  # Anthropic's own tools: the provider runs them
            ignored.append({"name": str(entry.get("name") or ""), "type": str(kind),
                            "reason": "toolwire cannot run this tool: it is not in the model's "
                                      "prompt"})
            continue
        schema = entry.get("input_schema")
        if not isinstance(schema, Mapping):
            raise bad_value(where, "a tool needs its input_schema (a JSON schema object)")
        tool = read_tool({"name": entry.get("name"), "description": entry.get("description") or "",
                          "parameters": schema}, where, f"{where}.input_schema")
        if tool.name in names:
            raise bad_value(where, f"a second tool is named {tool.name!r}")
        names.add(tool.name)
        (deferred if entry.get("defer_loading") is True else offered).append(tool)
    return offered, deferred, ignored


def _tool_choice(value: Any, offered: list[Tool], deferred: list[Tool],
                 ignored: list[dict[str, str]]) -> tuple[str, list[Tool], bool]:
    """The choice every route uses, the tools the model sees, and whether parallel
    calls are allowed."""
    if value is None:
        return "auto", offered, True
    kind = value.get("type") if isinstance(value, Mapping) else None
    if kind not in ("auto", "any", "tool", "none"):
        raise bad_value("tool_choice", 'must be {"type": "auto"}, {"type": "any"}, '
                                       '{"type": "tool", "name": ...} or {"type": "none"}')
    assert isinstance(value, Mapping)
    parallel = not read_boolean(value, "disable_parallel_tool_use", False,
                                "tool_choice.disable_parallel_tool_use")
    if kind == "none":
        return "none", offered, parallel
    if kind == "auto":
        return "auto", offered, parallel
    if kind == "any":
        if not offered:
            raise bad_value("tool_choice", '"any" needs tools')
        return "required", offered, parallel
    name = value.get("name")
    if any(t["name"] == name for t in ignored):
        raise RequestError(400, f"tool_choice: names {name!r}, which toolwire cannot run",
                           param="tool_choice", code="unsupported_tool")
    loaded = next((t for t in deferred if t.name == name), None)
    if loaded is not None:
        offered = [*offered, loaded]
    if not any(t.name == name for t in offered):
        raise bad_value("tool_choice", f"names {name!r}, which is not among the tools")
    return str(name), offered, parallel


def _thinking(value: Any, effort: str | None) -> ReasoningRequest:
    """``thinking``: ``enabled`` (``budget_tokens`` a cap on the reasoning) and
    ``disabled`` set the template's switch; ``adaptive`` leaves the served model's own."""
    if value is None:
        return ReasoningRequest(effort=effort)
    kind = value.get("type") if isinstance(value, Mapping) else None
    if kind == "disabled":
        return ReasoningRequest(enabled=False)
    if kind == "adaptive":
        return ReasoningRequest(effort=effort)
    if kind != "enabled":
        raise bad_value("thinking", 'must be {"type": "enabled", "budget_tokens": N}, '
                                    '{"type": "adaptive"} or {"type": "disabled"}')
    assert isinstance(value, Mapping)
    budget = read_integer(value, "budget_tokens", 1, "thinking.budget_tokens")
    return ReasoningRequest(enabled=True, effort=effort, budget=budget)


def _output_config(data: Mapping[str, Any]) -> tuple[str | None, ResponseFormat | None]:
    """``output_config``: its ``effort`` (the template's ``reasoning_effort``) and its
    ``format`` (a JSON schema the reply's text follows, by the grammar); the beta
    ``output_format`` is read as that format."""
    config = data.get("output_config")
    if config is not None and not isinstance(config, Mapping):
        raise bad_value("output_config", "must be an object")
    config = config or {}
    effort = config.get("effort")
    if effort is not None and effort not in _EFFORTS:
        raise bad_value("output_config", f"effort must be low, medium, high, xhigh or max, "
                                         f"not {effort!r}")
    wanted = config.get("format")
    param = "output_config.format"
    if wanted is None and data.get("output_format") is not None:
        wanted, param = data.get("output_format"), "output_format"
    if wanted is not None and isinstance(wanted, Mapping) and wanted.get("type") == "json_schema":
        wanted = {**wanted, "strict": True}  # Anthropic's structured outputs are strict
    return (_EFFORTS[effort] if effort is not None else None,
            read_response_format(wanted, param))


def _refuse_unsupported(data: Mapping[str, Any]) -> None:
    for field in ("container", "mcp_servers"):
        value = data.get(field)
        if value not in (None, [], {}):
            raise RequestError(400, f"{field}: not supported by this server (toolwire runs no "
                                    "tools of its own here)", param=field,
                               code="unsupported_parameter")


def parse_messages_request(data: Any, limits: ServerLimits, *, counting: bool = False,
                           ) -> tuple[CompletionRequest, MessagesRequest]:
    """Check a Messages body (or, with ``counting``, a ``count_tokens`` body, which has
    no ``max_tokens``) and read it into the turn and what its writer needs.

    :raises RequestError: ``400`` naming the field that is wrong; ``413`` when the
        conversation exceeds the server's caps.
    """
    model = read_model(data)
    _refuse_unsupported(data)
    max_tokens = read_integer(data, "max_tokens", 1)
    if max_tokens is None and not counting:
        raise bad_value("max_tokens", "is required: the most tokens the reply may take")
    offered, deferred, ignored = _tools(data.get("tools"), limits)
    choice, offered, parallel = _tool_choice(data.get("tool_choice"), offered, deferred, ignored)
    records = _records(data, limits)
    check_request_size(records, limits)
    messages = read_conversation(records, "messages", limits)
    effort, response_format = _output_config(data)
    reasoning = _thinking(data.get("thinking"), effort)
    metadata = data.get("metadata")
    if metadata is not None and not isinstance(metadata, Mapping):
        raise bad_value("metadata", "must be an object")
    for field in ("service_tier", "speed", "inference_geo"):
        read_string(data, field)
    for field in ("context_management", "cache_control"):
        if data.get(field) is not None and not isinstance(data.get(field), Mapping):
            raise bad_value(field, "must be an object")
    parsed = CompletionRequest(
        model=model, messages=messages, tools=tuple(offered), tool_choice=choice,
        parallel_tool_calls=parallel, temperature=read_number(data, "temperature", 0.0, 1.0),
        top_p=read_number(data, "top_p", 0.0, 1.0), top_k=read_integer(data, "top_k", 1),
        max_tokens=max_tokens,
        stop=read_stop(data.get("stop_sequences"), "stop_sequences",
                       limits.max_stop_sequences),
        stream=read_boolean(data, "stream", False), response_format=response_format,
        reasoning=reasoning)
    return parsed, MessagesRequest(tuple(ignored))
