"""Chat messages in the OpenAI shape, read into toolwire messages.

The shape every OpenAI-compatible client sends (``toolwire serve``'s routes read
it): ``system`` / ``user`` / ``assistant`` messages whose content is a string or
a list of text parts, an assistant's ``tool_calls`` with arguments as a JSON
text, and ``role: "tool"`` messages answering a call by ``tool_call_id``.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from .history import Message, ToolCall, attach_call, stored_tool_call

__all__ = ["NO_RESULT_TEXT", "content_text", "messages_from_openai"]

NO_RESULT_TEXT = "No result was recorded for this call."
"""The error result given to a call that no ``tool`` message answers."""


def content_text(value: Any, where: str) -> str:
    """A message's ``content``: a string, ``null``, or a list of text parts."""
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        pieces: list[str] = []
        for part in value:
            if isinstance(part, str):
                pieces.append(part)
            elif (isinstance(part, Mapping) and part.get("type") == "text"
                  and isinstance(part.get("text"), str)):
                pieces.append(part["text"])
            else:
                raise ValueError(f"{where}: only text content parts are supported")
        return "".join(pieces)
    raise ValueError(f"{where}: content must be a string, null or a list of text parts")


def _arguments(value: Any, where: str) -> Mapping[str, Any]:
    """A call's arguments: a JSON object text (OpenAI) or an object."""
    if value is None:
        return {}
    if isinstance(value, str):
        if not value.strip():
            return {}
        try:
            value = json.loads(value)
        except ValueError as exc:
            raise ValueError(f"{where}: arguments are not valid JSON") from exc
    if not isinstance(value, Mapping):
        raise ValueError(f"{where}: arguments must be a JSON object")
    return value


def _tool_call(raw: Any, where: str, make_id: Callable[[int], str], counter: int) -> ToolCall:
    if not isinstance(raw, Mapping):
        raise ValueError(f"{where} is not an object")
    function = raw.get("function", raw)
    if not isinstance(function, Mapping):
        raise ValueError(f"{where}: function must be an object")
    name = function.get("name")
    if not isinstance(name, str) or not name:
        raise ValueError(f"{where}: the function name is missing")
    call_id = raw.get("id") or make_id(counter)
    if not isinstance(call_id, str):
        raise ValueError(f"{where}: id must be a string")
    return ToolCall(call_id, name, _arguments(function.get("arguments"), where))


def messages_from_openai(records: Sequence[Any],
                         make_id: Callable[[int], str] | None = None) -> list[Message]:
    """Read OpenAI-shape chat messages into toolwire :class:`Message` records.

    Understands ``system`` / ``user`` / ``assistant`` / ``tool`` messages: an
    assistant's ``tool_calls`` (arguments as a JSON text or an object), ``role:
    tool`` messages answering them by ``tool_call_id`` (an optional ``is_error``
    is kept), and an assistant's ``reasoning`` or ``reasoning_content``. Stored
    toolwire records (``{"role": "tool", "tool_name", "tool_args", ...}``, see
    :func:`toolwire.to_stored`) are accepted too. A call that no tool message
    answers gets an error result (:data:`NO_RESULT_TEXT`), so the history stays
    replayable.

    :param make_id: makes an id for a call that has none (default ``call_<n>``).
    :raises ValueError: a message is malformed, has an unknown role, or a tool
        message answers no earlier call.
    """
    new_id = make_id or (lambda n: f"call_{n}")
    out: list[Message] = []
    open_calls: dict[str, ToolCall] = {}
    counter = 0

    def answer_open_calls() -> None:
        for call in open_calls.values():
            out.append(Message.tool_result(call, NO_RESULT_TEXT, True))
        open_calls.clear()

    for i, record in enumerate(records):
        where = f"message {i}"
        if not isinstance(record, Mapping):
            raise ValueError(f"{where} is not an object")
        role = record.get("role")
        if role == "tool":
            content = content_text(record.get("content"), where)
            is_error = bool(record.get("is_error", False))
            call_id = record.get("tool_call_id")
            if isinstance(call_id, str) and call_id in open_calls:
                out.append(Message.tool_result(open_calls.pop(call_id), content, is_error))
                continue
            if not record.get("tool_name"):
                raise ValueError(f"{where}: a tool message answers no earlier call "
                                 f"(tool_call_id {call_id!r})")
            # a stored toolwire record: it carries its own call
            call = stored_tool_call(record, where, new_id, counter)
            counter += 1
            attach_call(out, call)
            out.append(Message.tool_result(call, content, is_error))
        elif role == "assistant":
            answer_open_calls()
            raw_calls = record.get("tool_calls") or []
            if not isinstance(raw_calls, list):
                raise ValueError(f"{where}: tool_calls must be a list")
            calls: list[ToolCall] = []
            for j, raw in enumerate(raw_calls):
                calls.append(_tool_call(raw, f"{where} tool call {j}", new_id, counter))
                counter += 1
            if len({c.id for c in calls}) != len(calls):
                raise ValueError(f"{where}: two tool calls share an id")
            reasoning = record.get("reasoning") or record.get("reasoning_content")
            out.append(Message.assistant(content_text(record.get("content"), where), calls,
                                         reasoning if isinstance(reasoning, str) else None))
            open_calls = {c.id: c for c in calls}
        elif role in ("system", "user"):
            answer_open_calls()
            out.append(Message(role, content_text(record.get("content"), where)))
        else:
            raise ValueError(f"{where}: unknown role {role!r}")
    answer_open_calls()
    return out
