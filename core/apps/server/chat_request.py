"""Reading a ``POST /v1/chat`` body, and the size caps every conversation request obeys."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import attrs

from ...limits import ServerLimits
from ...vocabulary.history import Message
from ...vocabulary.openai_messages import NO_RESULT_TEXT, messages_from_openai
from .http_input import RequestError, json_depth_exceeds

__all__ = ["ChatRequest", "check_conversation", "check_request_size", "message_chars",
           "parse_chat_request"]


@attrs.frozen
class ChatRequest:
    """A parsed ``POST /v1/chat`` body.

    :ivar history: the messages before the last user message.
    :ivar system: the leading system messages' text, or ``None`` when there are none.
    :ivar message: the last user message's text, the one to answer.
    """

    history: tuple[Message, ...]
    system: str | None
    message: str


def _text_size(value: Any) -> int:
    if isinstance(value, str):
        return len(value)
    if isinstance(value, list):
        return sum(_text_size(part.get("text") if isinstance(part, Mapping) else part)
                   for part in value)
    if isinstance(value, Mapping):
        return len(json.dumps(value, ensure_ascii=False, default=str))
    return 0


def message_chars(record: Any) -> int:
    """The characters of text in one OpenAI-shape message record (contents, reasoning,
    call arguments and tool arguments); malformed parts count as nothing."""
    if not isinstance(record, Mapping):
        return 0
    total = sum(_text_size(record.get(key)) for key in
                ("content", "reasoning", "reasoning_content", "tool_args"))
    calls = record.get("tool_calls")
    if isinstance(calls, list):
        for call in calls:
            function = call.get("function", call) if isinstance(call, Mapping) else None
            if isinstance(function, Mapping):
                total += _text_size(function.get("arguments"))
    return total


def check_request_size(records: Sequence[Any], limits: ServerLimits) -> None:
    """Refuse a conversation over the server's caps (``413``, naming the cap).

    :raises RequestError: more than ``limits.max_messages`` messages or more than
        ``limits.max_chars`` characters of text.
    """
    if len(records) > limits.max_messages:
        raise RequestError(413, f"the request has {len(records)} messages; this server takes "
                                f"at most {limits.max_messages} (toolwire serve --max-messages)",
                           param="messages", code="too_many_messages")
    chars = 0
    for record in records:
        chars += message_chars(record)
        if chars > limits.max_chars:
            raise RequestError(413, f"the messages hold more than {limits.max_chars} characters "
                                    "of text (toolwire serve --max-chars)",
                               param="messages", code="too_many_characters")


def check_conversation(messages: Sequence[Message], limits: ServerLimits) -> None:
    """Refuse a conversation that, once read, is over the caps its records passed.

    A call that no ``tool`` message answers gets a result of its own when the
    records are read, so the messages are counted again here, against the same
    ``--max-messages`` (30,000 calls in one message were 30,000 messages the first
    count never saw). A call's arguments are a JSON text inside the body, so they are
    held to the body's nesting bound too.

    :raises RequestError: ``413`` over ``limits.max_messages``; ``400`` for
        arguments nested deeper than ``limits.max_json_depth``.
    """
    if len(messages) > limits.max_messages:
        unanswered = sum(1 for m in messages if m.role == "tool" and m.is_error
                         and m.content == NO_RESULT_TEXT)
        raise RequestError(413, f"the request holds {len(messages):,} messages once every "
                                f"tool call has its result ({unanswered:,} calls are answered "
                                f"by no tool message); this server takes at most "
                                f"{limits.max_messages:,} (toolwire serve --max-messages)",
                           param="messages", code="too_many_messages")
    for message in messages:
        arguments = [call.arguments for call in message.tool_calls]
        if message.arguments is not None:
            arguments.append(message.arguments)
        if any(json_depth_exceeds(value, limits.max_json_depth) for value in arguments):
            raise RequestError(400, f"a tool call's arguments nest arrays and objects more "
                                    f"than {limits.max_json_depth} levels deep",
                               param="messages", code="invalid_value")


def parse_chat_request(data: Any, make_id: Callable[[int], str] | None = None, *,
                       limits: ServerLimits | None = None) -> ChatRequest:
    """Read a ``POST /v1/chat`` body: ``{"messages": [...]}`` (other keys are ignored).

    The last message must be the user's: it is the one answered. Leading system
    messages become the system prompt (joined by blank lines).

    :raises ValueError: the body is not of that shape.
    :raises RequestError: ``413``, the messages exceed ``limits`` (when given).
    """
    if not isinstance(data, Mapping):
        raise ValueError('the body must be a JSON object: {"messages": [...]}')
    records = data.get("messages")
    if not isinstance(records, list) or not records:
        raise ValueError('"messages" must be a non-empty list')
    if limits is not None:
        check_request_size(records, limits)
    last_user = next((i for i in range(len(records) - 1, -1, -1)
                      if isinstance(records[i], Mapping) and records[i].get("role") == "user"),
                     None)
    if last_user is None:
        raise ValueError("there is no user message to answer")
    if last_user != len(records) - 1:
        raise ValueError("the last message must be the user message to answer")
    try:
        messages = messages_from_openai(records, make_id)
    except RecursionError:  # a call's arguments text nesting thousands of levels
        raise ValueError("a tool call's arguments nest too deeply") from None
    if limits is not None:
        check_conversation(messages, limits)
    message = messages.pop().content
    if not message.strip():
        raise ValueError("the user message is empty")
    system_parts: list[str] = []
    while messages and messages[0].role == "system":
        system_parts.append(messages.pop(0).content)
    system = "\n\n".join(system_parts) if system_parts else None
    return ChatRequest(tuple(messages), system, message)
