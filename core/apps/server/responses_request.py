"""Reading a ``POST /v1/responses`` body (OpenAI's Responses API) into the turn every API runs.

The Responses API is stateless here: each request carries the whole conversation
as ``input`` items, as Codex CLI and the Agents SDK send it with ``store: false``.
The items are read into the OpenAI chat messages every route understands and
then by :func:`toolwire.vocabulary.openai_messages.messages_from_openai`, so a
conversation sent through any of the three APIs is the same conversation for
the model:

* ``message`` items (``system``/``developer`` as the system prompt, ``user``,
  ``assistant``) whose ``content`` is a string or ``input_text`` /
  ``output_text`` parts (parts are joined as chat completions joins them);
* ``reasoning``, ``message`` and ``function_call`` items the model wrote
  together become one assistant message with its reasoning and calls, and a
  ``function_call_output`` is the result of the call with its ``call_id``;
* ``instructions`` is a system message before the items.

Tools: ``function`` tools become :class:`toolwire.Tool` records; a ``namespace``
group is flattened to its functions, each under its own name unless two share
one (then ``<namespace>__<name>``), and a call of one is answered with its name
and namespace as the client gave them (:class:`ToolNames`). Tools toolwire
cannot run (``web_search``, ``file_search``, a ``mcp`` server...) are left out of
the prompt and listed in the response's ``ignored_tools``; a ``tool_choice`` that
names one is a ``400``.

:data:`REQUEST_FIELDS` says what becomes of each field (``docs/agents.md`` has the
same table, and a test holds the two to this module); fields the API does not
define are ignored.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Final

import attrs

from ...limits import ServerLimits
from ...vocabulary.backend import REASONING_EFFORTS, ReasoningRequest
from ...vocabulary.tools import Tool
from .chat_request import check_request_size
from .completion_request import (
    CompletionRequest,
    read_conversation,
    read_response_format,
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

__all__ = ["BUILT_IN_TOOLS", "REQUEST_FIELDS", "ResponsesRequest", "ToolNames",
           "parse_responses_request"]

REQUEST_FIELDS: Final[dict[str, str]] = {
    "model": "supported", "input": "supported", "instructions": "supported",
    "tools": "supported", "tool_choice": "supported", "parallel_tool_calls": "supported",
    "max_output_tokens": "supported", "max_tool_calls": "supported",
    "temperature": "supported", "top_p": "supported", "top_logprobs": "supported",
    "text": "supported", "reasoning": "supported", "stream": "supported",
    "include": "supported", "store": "no effect", "metadata": "no effect",
    "prompt_cache_key": "no effect", "prompt_cache_retention": "no effect",
    "safety_identifier": "no effect", "service_tier": "no effect", "user": "no effect",
    "truncation": "no effect", "stream_options": "no effect",
    "context_management": "no effect", "client_metadata": "no effect",
    "previous_response_id": "refused", "conversation": "refused", "background": "refused",
    "prompt": "refused",
}
"""What becomes of each field of the Responses request: ``supported``, ``no effect``
(accepted and not used) or ``refused`` (a ``400`` when it asks for anything)."""

BUILT_IN_TOOLS: Final = frozenset({
    "web_search", "web_search_preview", "web_search_2025_08_26",
    "web_search_preview_2025_03_11", "file_search", "computer", "computer_use_preview",
    "code_interpreter", "image_generation", "mcp", "local_shell", "shell", "apply_patch",
    "custom", "tool_search"})
"""Tool types toolwire cannot run (the provider's own tools, and free-form ``custom``
tools): left out of the prompt and reported."""

_REFUSED_WHY: Final = {
    "previous_response_id": "this server keeps no responses: send the whole conversation "
                            "as input (store: false)",
    "conversation": "this server keeps no conversations: send the whole conversation as input",
    "background": "this server answers while the client waits: leave background out",
    "prompt": "this server keeps no stored prompts: send the instructions and input",
}
_INCLUDES: Final = frozenset({
    "reasoning.encrypted_content", "message.output_text.logprobs",
    "file_search_call.results", "web_search_call.results", "web_search_call.action.sources",
    "message.input_image.image_url", "computer_call_output.output.image_url",
    "code_interpreter_call.outputs"})
_FORMER_EFFORTS: Final = {"minimal": "low", "xhigh": "high", "max": "high"}


@attrs.frozen
class ToolNames:
    """The names the model sees for a request's tools, and the client's names back.

    :ivar client: model-facing name -> ``(name, namespace)`` as the client gave them
        (``namespace`` is ``None`` for a tool outside any group).
    """

    client: Mapping[str, tuple[str, str | None]] = attrs.field(factory=dict)

    def model_name(self, name: str, namespace: str | None) -> str:
        """The model-facing name of a client's tool (a name never offered stays itself)."""
        for seen, (own, group) in self.client.items():
            if own == name and group == namespace:
                return seen
        return name

    def for_client(self, name: str) -> tuple[str, str | None]:
        """A call's name and namespace as the client wants them."""
        return self.client.get(name, (name, None))


@attrs.frozen
class ResponsesRequest:
    """What the response's writer needs beside the turn.

    :ivar names: the tools' names for the model and for the client.
    :ivar ignored_tools: the tools left out of the prompt (``{"type", "reason"}``).
    :ivar echo: request fields the response object repeats (``instructions``,
        ``tools``, ``tool_choice``, ``metadata``...).
    """

    names: ToolNames
    ignored_tools: tuple[Mapping[str, str], ...] = ()
    echo: Mapping[str, Any] = attrs.field(factory=dict)


def _refuse_unsupported(data: Mapping[str, Any]) -> None:
    for field, why in _REFUSED_WHY.items():
        value = data.get(field)
        if value is None or value is False:
            continue
        raise RequestError(400, f"{field}: {why}", param=field, code="unsupported_parameter")


def _text(value: Any, where: str) -> str:
    """A message's ``content``: a string or text parts (``input_text``, ``output_text``,
    ``text``, ``refusal``), joined as chat completions joins its parts."""
    if isinstance(value, str):
        return value
    if value is None:
        return ""
    if not isinstance(value, list):
        raise bad_value("input", f"{where}: content must be a string or a list of parts")
    pieces: list[str] = []
    for j, part in enumerate(value):
        kind = part.get("type") if isinstance(part, Mapping) else None
        if kind in ("input_text", "output_text", "text"):
            text = part.get("text")
            if not isinstance(text, str):
                raise bad_value("input", f"{where} part {j}: text must be a string")
            pieces.append(text)
        elif kind == "refusal":
            pieces.append(str(part.get("refusal") or ""))
        elif kind in ("input_image", "input_file", "input_audio"):
            raise RequestError(400, f"input: {where} part {j} is {kind}, but the served model "
                                    "reads text only", param="input", code="unsupported_content")
        else:
            raise bad_value("input", f"{where} part {j}: unknown content type {kind!r}")
    return "".join(pieces)


_STAGE: Final = {"reasoning": 0, "message": 1, "function_call": 2}


class _Conversation:
    """Input items gathered into OpenAI chat messages."""

    def __init__(self, names: ToolNames) -> None:
        self.names = names
        self.records: list[dict[str, Any]] = []
        self._assistant: dict[str, Any] | None = None  # the assistant turn being gathered
        self._stage = -1

    def _turn(self, stage: int) -> dict[str, Any]:
        """The assistant message an item of ``stage`` belongs to (a new one when the
        item cannot follow what it holds)."""
        current = self._assistant
        if current is None or stage < self._stage or (stage == 1 and self._stage == 1):
            current = {"role": "assistant", "content": ""}
            self.records.append(current)
            self._assistant = current
        self._stage = stage
        return current

    def _close(self) -> None:
        self._assistant, self._stage = None, -1

    def add(self, item: Any, i: int) -> None:
        where = f"input[{i}]"
        if not isinstance(item, Mapping):
            raise bad_value("input", f"{where} must be an object")
        kind = item.get("type", "message" if "role" in item else None)
        if kind == "message":
            role = item.get("role")
            text = _text(item.get("content"), where)
            if role == "assistant":
                turn = self._turn(_STAGE["message"])
                turn["content"] += text
            elif role in ("system", "developer", "user"):
                self._close()
                self.records.append({"role": "system" if role == "developer" else role,
                                     "content": text})
            else:
                raise bad_value("input", f"{where}: unknown role {role!r}")
        elif kind == "reasoning":
            turn = self._turn(_STAGE["reasoning"])
            turn["reasoning"] = _reasoning_text(item, where)
        elif kind == "function_call":
            name, call_id = item.get("name"), item.get("call_id")
            if not isinstance(name, str) or not name or not isinstance(call_id, str):
                raise bad_value("input", f"{where}: a function_call needs its name and call_id")
            namespace = item.get("namespace")
            model_name = self.names.model_name(name, namespace if isinstance(namespace, str)
                                               else None)
            turn = self._turn(_STAGE["function_call"])
            turn.setdefault("tool_calls", []).append(
                {"id": call_id, "type": "function",
                 "function": {"name": model_name, "arguments": item.get("arguments") or "{}"}})
        elif kind == "function_call_output":
            self._close()
            self.records.append({"role": "tool", "tool_call_id": item.get("call_id"),
                                 "content": _text(item.get("output"), where)})
        elif kind == "item_reference":
            raise RequestError(400, f"input: {where} refers to a stored item; this server "
                                    "keeps none: send the item itself", param="input",
                               code="unsupported_parameter")
        else:
            raise bad_value("input", f"{where}: items of type {kind!r} are not supported")


def _reasoning_text(item: Mapping[str, Any], where: str) -> str:
    """A reasoning item's text: its ``content`` (the reasoning itself) when given, else
    its summary (the reasoning this server returned)."""
    for key in ("content", "summary"):
        parts = item.get(key)
        if isinstance(parts, list) and parts:
            texts = [p.get("text") for p in parts if isinstance(p, Mapping)]
            if not all(isinstance(t, str) for t in texts):
                raise bad_value("input", f"{where}: reasoning {key} parts need their text")
            return "\n\n".join(t for t in texts if isinstance(t, str))
    return ""


def _tools(value: Any, limits: ServerLimits) -> tuple[list[Tool], ToolNames, list[dict[str, str]]]:
    """The offered functions (namespaces flattened), their names, the tools left out."""
    if value is None:
        return [], ToolNames(), []
    if not isinstance(value, list):
        raise bad_value("tools", "must be a list of tools")
    functions: list[tuple[str, str | None, Mapping[str, Any], str]] = []
    ignored: list[dict[str, str]] = []
    for i, entry in enumerate(value):
        where = f"tools[{i}]"
        kind = entry.get("type") if isinstance(entry, Mapping) else None
        if kind == "function":
            functions.append((str(entry.get("name")), None, entry, where))
        elif kind == "namespace":
            group, members = entry.get("name"), entry.get("tools")
            if not isinstance(group, str) or not group or not isinstance(members, list):
                raise bad_value(where, 'a namespace is {"type": "namespace", "name": ..., '
                                       '"tools": [...]}')
            for j, member in enumerate(members):
                if not isinstance(member, Mapping) or member.get("type", "function") \
                        != "function":
                    raise bad_value(f"{where}.tools[{j}]", "a namespace holds function tools")
                functions.append((str(member.get("name")), group, member,
                                  f"{where}.tools[{j}]"))
        elif isinstance(kind, str) and (kind in BUILT_IN_TOOLS or kind.startswith("web_search")):
            ignored.append({"type": kind, "reason": "toolwire cannot run this tool: it is not "
                                                    "in the model's prompt"})
        else:
            raise bad_value(where, f"unknown tool type {kind!r}")
    if len(functions) > limits.max_tools:
        raise bad_value("tools", f"at most {limits.max_tools} tools may be offered")
    counts: dict[str, int] = {}
    for name, _, _, _ in functions:
        counts[name] = counts.get(name, 0) + 1
    tools: list[Tool] = []
    client: dict[str, tuple[str, str | None]] = {}
    for name, group, entry, where in functions:
        seen = name if counts[name] == 1 or group is None else f"{group}__{name}"
        schema = {"name": seen, "description": entry.get("description") or "",
                  "parameters": entry.get("parameters") or {"type": "object",
                                                            "properties": {}}}
        tool = read_tool(schema, where, f"{where}.parameters")
        if tool.name in client:
            raise bad_value(where, f"a second tool is named {name!r}")
        client[tool.name] = (name, group)
        tools.append(tool)
    return tools, ToolNames(client), ignored


def _tool_choice(value: Any, tools: list[Tool], names: ToolNames,
                 ignored: Sequence[Mapping[str, str]]) -> tuple[str, list[Tool]]:
    """The choice in the form every route uses (``auto``, ``none``, ``required`` or a
    tool's name), and the tools the model may use (``allowed_tools`` narrows them)."""
    if value is None:
        return "auto", tools
    if isinstance(value, str):
        if value not in ("auto", "none", "required"):
            raise bad_value("tool_choice", 'must be "auto", "none", "required" or an object')
        if value == "required" and not tools:
            raise bad_value("tool_choice", '"required" needs function tools')
        return value, tools
    kind = value.get("type") if isinstance(value, Mapping) else None
    if kind == "function":
        name = value.get("name")
        if not isinstance(name, str):
            raise bad_value("tool_choice", 'a named choice is {"type": "function", "name": ...}')
        namespace = value.get("namespace")
        seen = names.model_name(name, namespace if isinstance(namespace, str) else None)
        if seen not in names.client and name in {own for own, _ in names.client.values()}:
            seen = next(s for s, (own, _) in names.client.items() if own == name)
        if seen not in names.client:
            raise bad_value("tool_choice", f"names {name!r}, which is not among the tools")
        return seen, tools
    if kind == "allowed_tools":
        mode, allowed = value.get("mode", "auto"), value.get("tools")
        if mode not in ("auto", "required") or not isinstance(allowed, list):
            raise bad_value("tool_choice", 'allowed_tools needs "mode" (auto or required) and '
                                           '"tools"')
        keep = set()
        for entry in allowed:
            if not isinstance(entry, Mapping) or entry.get("type") != "function":
                raise bad_value("tool_choice", "allowed_tools may list function tools only")
            namespace = entry.get("namespace")
            keep.add(names.model_name(str(entry.get("name")),
                                      namespace if isinstance(namespace, str) else None))
        narrowed = [t for t in tools if t.name in keep]
        if mode == "required" and not narrowed:
            raise bad_value("tool_choice", "allowed_tools names none of the function tools")
        return str(mode), narrowed
    if isinstance(kind, str) and (kind in BUILT_IN_TOOLS or kind.startswith("web_search")
                                  or any(t.get("type") == kind for t in ignored)):
        raise RequestError(400, f"tool_choice: names the {kind} tool, which toolwire cannot "
                                "run", param="tool_choice", code="unsupported_tool")
    raise bad_value("tool_choice", f"unknown choice type {kind!r}")


def _reasoning(value: Any) -> ReasoningRequest:
    """``reasoning``: ``effort`` ``none`` turns the template's switch off, another effort
    turns it on and is passed as the template's ``reasoning_effort``; ``summary`` is
    accepted (the reasoning is returned as one summary part)."""
    if value is None:
        return ReasoningRequest()
    if not isinstance(value, Mapping):
        raise bad_value("reasoning", "must be an object")
    effort = value.get("effort")
    if effort is None:
        return ReasoningRequest()
    if effort == "none":
        return ReasoningRequest(enabled=False)
    effort = _FORMER_EFFORTS.get(effort, effort)
    if effort not in REASONING_EFFORTS:
        raise bad_value("reasoning", f"effort must be none, minimal, low, medium, high or "
                                     f"xhigh, not {value.get('effort')!r}")
    return ReasoningRequest(enabled=True, effort=effort)


def _include(value: Any) -> tuple[str, ...]:
    if value is None:
        return ()
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise bad_value("include", "must be a list of strings")
    unknown = [v for v in value if v not in _INCLUDES]
    if unknown:
        raise bad_value("include", f"unknown value {unknown[0]!r}")
    return tuple(value)


def _format(value: Any) -> Any:
    if value is None:
        return None
    if not isinstance(value, Mapping):
        raise bad_value("text", "must be an object")
    return read_response_format(value.get("format"), "text.format")


def parse_responses_request(data: Any, limits: ServerLimits,
                            ) -> tuple[CompletionRequest, ResponsesRequest]:
    """Check a Responses body and read it into the turn and what its writer needs.

    :raises RequestError: ``400`` naming the field that is wrong; ``413`` when the
        conversation exceeds the server's caps.
    """
    model = read_model(data)
    _refuse_unsupported(data)
    tools, names, ignored = _tools(data.get("tools"), limits)
    choice, offered = _tool_choice(data.get("tool_choice"), tools, names, ignored)
    conversation = _Conversation(names)
    instructions = read_string(data, "instructions")
    if instructions:
        conversation.records.append({"role": "system", "content": instructions})
    items = data.get("input")
    if isinstance(items, str):
        conversation.records.append({"role": "user", "content": items})
    elif isinstance(items, list):
        check_request_size(items, limits)
        for i, item in enumerate(items):
            conversation.add(item, i)
    elif items is not None:
        raise bad_value("input", "must be a string or a list of items")
    if not conversation.records:
        raise bad_value("input", "must hold the conversation (or send instructions)")
    check_request_size(conversation.records, limits)
    messages = read_conversation(conversation.records, "input", limits)
    for field in ("prompt_cache_key", "safety_identifier", "service_tier", "user", "truncation",
                  "prompt_cache_retention"):
        read_string(data, field)
    for field in ("stream_options", "client_metadata"):
        if data.get(field) is not None and not isinstance(data.get(field), Mapping):
            raise bad_value(field, "must be an object")
    if data.get("context_management") is not None \
            and not isinstance(data.get("context_management"), list | Mapping):
        raise bad_value("context_management", "must be a list of edits")
    metadata, store = data.get("metadata"), data.get("store")
    if metadata is not None and not isinstance(metadata, Mapping):
        raise bad_value("metadata", "must be an object")
    if store is not None and not isinstance(store, bool):
        raise bad_value("store", "must be true or false")
    include = _include(data.get("include"))
    top = read_integer(data, "top_logprobs", 0)
    if top is not None and top > limits.max_top_logprobs:
        raise bad_value("top_logprobs", f"must be between 0 and {limits.max_top_logprobs}")
    logprobs = top if top is not None else (
        0 if "message.output_text.logprobs" in include else None)
    max_calls = read_integer(data, "max_tool_calls", 1)
    reasoning = _reasoning(data.get("reasoning"))
    parsed = CompletionRequest(
        model=model, messages=messages, tools=tuple(offered), tool_choice=choice,
        parallel_tool_calls=read_boolean(data, "parallel_tool_calls", True),
        temperature=read_number(data, "temperature", 0.0, 2.0),
        top_p=read_number(data, "top_p", 0.0, 1.0),
        max_tokens=read_integer(data, "max_output_tokens", 1),
        stream=read_boolean(data, "stream", False),
        response_format=_format(data.get("text")), logprobs=logprobs,
        reasoning=reasoning, max_calls=max_calls)
    echo = {key: data.get(key) for key in ("instructions", "metadata", "max_output_tokens",
                                           "max_tool_calls", "temperature", "top_p",
                                           "top_logprobs", "prompt_cache_key",
                                           "safety_identifier", "user", "service_tier")}
    echo.update(tools=list(data.get("tools") or []),
                tool_choice=data.get("tool_choice") or "auto",
                parallel_tool_calls=parsed.parallel_tool_calls,
                store=bool(store) if store is not None else False,
                text=data.get("text") or {"format": {"type": "text"}},
                reasoning=data.get("reasoning") or {"effort": None, "summary": None},
                truncation=data.get("truncation") or "disabled")
    return parsed, ResponsesRequest(names, tuple(ignored), echo)
