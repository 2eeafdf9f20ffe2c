"""Conversation messages and the stored tool-exchange format.

In memory a conversation is a tuple of :class:`Message` records. An assistant
turn that called tools carries its :class:`ToolCall` records; each call is
answered by one ``tool`` message with the same ``tool_call_id``.

The *stored* format (``to_stored`` / ``from_stored``, used by ``/save`` and
``--resume``) is backend-neutral JSON: a tool exchange is one record
``{"role": "tool", "tool_name", "tool_args", "tool_call_id", "content"}``. It
replays as an assistant tool call followed by its result, and each backend
encodes that in its own protocol: mapping arguments for chat templates, JSON
strings for OpenAI-compatible providers.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Literal

import attrs

from .valid_text import valid_json_value, valid_text

__all__ = [
    "Message",
    "ToolCall",
    "from_stored",
    "to_openai_messages",
    "to_stored",
    "to_template_messages",
]

Role = Literal["system", "user", "assistant", "tool"]


def _as_dict(value: Mapping[str, Any] | None) -> Mapping[str, Any]:
    return valid_json_value(dict(value or {}))  # type: ignore[no-any-return]


def _as_calls(value: Iterable[ToolCall]) -> tuple[ToolCall, ...]:
    return tuple(value)


def _valid_or_none(value: str | None) -> str | None:
    return None if value is None else valid_text(value)


def _valid_mapping_or_none(value: Mapping[str, Any] | None) -> Mapping[str, Any] | None:
    return None if value is None else valid_json_value(value)


@attrs.frozen
class ToolCall:
    """One call the model made: id, tool name and arguments (a mapping).

    Its strings are valid text (:mod:`toolwire.vocabulary.valid_text`): a lone
    surrogate becomes ``U+FFFD`` as the record is made.
    """

    id: str = attrs.field(converter=valid_text)
    name: str = attrs.field(converter=valid_text)
    arguments: Mapping[str, Any] = attrs.field(converter=_as_dict, factory=dict)


@attrs.frozen
class Message:
    """One message of a conversation.

    :ivar role: ``system``, ``user``, ``assistant`` or ``tool``.
    :ivar content: the text (for a tool message, the result the model reads).
    :ivar reasoning: an assistant's reasoning text, kept for display and for
        templates that replay it.
    :ivar tool_calls: an assistant's calls.
    :ivar tool_call_id: for a tool message, the call it answers.
    :ivar name: for a tool message, the tool's name.
    :ivar arguments: for a tool message, the call's arguments (stored format).
    :ivar is_error: for a tool message, the call failed and ``content`` says why.

    Every string in it is valid text, made so as the record is made (a lone
    surrogate from a file name, a JSON escape or a terminal becomes ``U+FFFD``,
    see :mod:`toolwire.vocabulary.valid_text`), so a conversation can always be
    saved, sent and tokenized.
    """

    role: Role
    content: str = attrs.field(default="", converter=valid_text)
    reasoning: str | None = attrs.field(default=None, converter=_valid_or_none)
    tool_calls: tuple[ToolCall, ...] = attrs.field(converter=_as_calls, default=())
    tool_call_id: str | None = attrs.field(default=None, converter=_valid_or_none)
    name: str | None = attrs.field(default=None, converter=_valid_or_none)
    arguments: Mapping[str, Any] | None = attrs.field(default=None,
                                                      converter=_valid_mapping_or_none)
    is_error: bool = False

    @classmethod
    def system(cls, content: str) -> Message:
        """A system message."""
        return cls("system", content)

    @classmethod
    def user(cls, content: str) -> Message:
        """A user message."""
        return cls("user", content)

    @classmethod
    def assistant(cls, content: str = "", tool_calls: Iterable[ToolCall] = (),
                  reasoning: str | None = None) -> Message:
        """An assistant message, with the calls it made."""
        return cls("assistant", content, reasoning=reasoning, tool_calls=tool_calls)

    @classmethod
    def tool_result(cls, call: ToolCall, content: str, is_error: bool = False) -> Message:
        """The tool message answering ``call``."""
        return cls("tool", content, tool_call_id=call.id, name=call.name,
                   arguments=dict(call.arguments), is_error=is_error)


def to_stored(messages: Iterable[Message]) -> list[dict[str, Any]]:
    """Write a conversation in the stored tool-exchange format (JSON-ready)."""
    out: list[dict[str, Any]] = []
    for m in messages:
        if m.role == "tool":
            out.append({"role": "tool", "tool_name": m.name or "", "tool_args":
                        dict(m.arguments or {}), "tool_call_id": m.tool_call_id or "",
                        "content": m.content, "is_error": m.is_error})
        elif m.role == "assistant":
            record: dict[str, Any] = {"role": "assistant", "content": m.content}
            if m.reasoning:
                record["reasoning"] = m.reasoning
            out.append(record)
        else:
            out.append({"role": m.role, "content": m.content})
    return out


def from_stored(records: Sequence[Mapping[str, Any]],
                make_id: Callable[[int], str] | None = None) -> list[Message]:
    """Read the stored format back into messages.

    Each run of ``tool`` records becomes one assistant message holding those
    calls (joined to the assistant text right before it, if any) followed by one
    tool message per call, so a call is never without its result.

    :raises ValueError: a record has an unknown role or the wrong field types.
    """
    out: list[Message] = []
    counter = 0
    for i, record in enumerate(records):
        if not isinstance(record, Mapping):
            raise ValueError(f"stored message {i} is not an object")
        role = record.get("role")
        content = record.get("content", "")
        if content is None:
            content = ""
        if not isinstance(content, str):
            raise ValueError(f"stored message {i}: content must be a string")
        if role == "tool":
            call = stored_tool_call(record, f"stored message {i}", make_id, counter)
            counter += 1
            attach_call(out, call)
            out.append(Message.tool_result(call, content, bool(record.get("is_error", False))))
        elif role in ("system", "user", "assistant"):
            reasoning = record.get("reasoning")
            out.append(Message(role, content, reasoning=reasoning if isinstance(reasoning, str)
                               else None))
        else:
            raise ValueError(f"stored message {i}: unknown role {role!r}")
    return out


def stored_tool_call(record: Mapping[str, Any], where: str,
                     make_id: Callable[[int], str] | None, counter: int) -> ToolCall:
    """The call a stored ``tool`` record carries (``tool_name``, ``tool_args``, ``tool_call_id``).

    ``tool_args`` may be an object or a JSON text; a record without an id gets
    ``make_id(counter)`` (default ``call_<counter>``).

    :raises ValueError: the record lacks a name or its arguments are not an object.
    """
    name = record.get("tool_name") or record.get("name")
    args = record.get("tool_args", record.get("arguments", {}))
    if isinstance(args, str):
        try:
            args = json.loads(args) if args.strip() else {}
        except ValueError as exc:
            raise ValueError(f"{where}: tool_args is not JSON") from exc
    if not isinstance(name, str) or not name or not isinstance(args, Mapping):
        raise ValueError(f"{where}: tool record needs tool_name and tool_args")
    call_id = record.get("tool_call_id")
    if not (isinstance(call_id, str) and call_id):
        call_id = make_id(counter) if make_id else f"call_{counter}"
    return ToolCall(call_id, name, args)


def attach_call(out: list[Message], call: ToolCall) -> None:
    """Put ``call`` on the assistant message that opened the current tool run.

    When the run has no assistant message (a stored record replayed on its own),
    one is inserted before the run.
    """
    j = len(out) - 1
    while j >= 0 and out[j].role == "tool":
        j -= 1
    if j >= 0 and out[j].role == "assistant":
        out[j] = attrs.evolve(out[j], tool_calls=(*out[j].tool_calls, call))
        return
    out.insert(j + 1, Message.assistant("", (call,)))


def to_template_messages(messages: Iterable[Message], *,
                         arguments_as_json: bool = False) -> list[dict[str, Any]]:
    """The conversation as chat-template input (Hugging Face message dicts).

    Arguments are mappings by default: most templates iterate them; a few want
    JSON strings (``arguments_as_json=True``).
    """
    out: list[dict[str, Any]] = []
    for m in messages:
        if m.role == "assistant":
            record: dict[str, Any] = {"role": "assistant", "content": m.content}
            if m.reasoning:
                record["reasoning_content"] = m.reasoning
            if m.tool_calls:
                record["tool_calls"] = _openai_calls(m.tool_calls, arguments_as_json)
            out.append(record)
        elif m.role == "tool":
            out.append({"role": "tool", "tool_call_id": m.tool_call_id, "name": m.name,
                        "content": m.content})
        else:
            out.append({"role": m.role, "content": m.content})
    return out


def _openai_calls(calls: Sequence[ToolCall], arguments_as_json: bool) -> list[dict[str, Any]]:
    """An assistant's calls in the OpenAI shape (arguments a mapping, or a JSON text)."""
    return [{"id": c.id, "type": "function",
             "function": {"name": c.name,
                          "arguments": json.dumps(dict(c.arguments), ensure_ascii=False)
                          if arguments_as_json else dict(c.arguments)}}
            for c in calls]


def to_openai_messages(messages: Iterable[Message]) -> list[dict[str, Any]]:
    """The conversation in the OpenAI chat-completions shape (JSON-string arguments)."""
    out: list[dict[str, Any]] = []
    for m in messages:
        if m.role == "assistant":
            record: dict[str, Any] = {"role": "assistant", "content": m.content or None}
            if m.tool_calls:
                record["tool_calls"] = _openai_calls(m.tool_calls, arguments_as_json=True)
            elif record["content"] is None:
                record["content"] = ""
            out.append(record)
        elif m.role == "tool":
            out.append({"role": "tool", "tool_call_id": m.tool_call_id, "content": m.content})
        else:
            out.append({"role": m.role, "content": m.content})
    return out
