"""Built-in parser plugin for Moonshot Kimi tool calls.

``kimi_k2`` (Kimi K2, K2 Thinking)
    Special-token sections with JSON arguments::

        <|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:0
        <|tool_call_argument_begin|>{"city": "Paris"}<|tool_call_end|>
        <|tool_calls_section_end|>

    The call id is the markup's ``functions.NAME:IDX`` (the templates number
    calls across the whole conversation and answer them with ``## Return of
    functions.NAME:IDX``), so the parser reports it as the call's id and the
    chat loop keeps it. Reasoning is a ``<think>`` block (the core's filter).

``kimi_k3`` (Kimi K3's typed "xtml" tags)
    ``<|open|>tools<|sep|><|open|>call tool="f" index="1"<|sep|><|open|>argument
    key="p" type="string"<|sep|>v<|close|>argument<|sep|>...<|close|>call<|sep|>
    <|close|>tools<|sep|>``: each argument carries its JSON type (``string``
    values are raw text, the others JSON); a call may instead hold one
    ``<|open|>json type="object"<|sep|>{...}<|close|>json<|sep|>`` block. The
    visible answer sits in ``<|open|>response<|sep|>...<|close|>response<|sep|>``
    and reasoning in ``<|open|>think<|sep|>...<|close|>think<|sep|>`` (filter
    ``kimi_k3_think``).
"""

from __future__ import annotations

from collections.abc import Callable

import toolwire
from toolwire.plugin_api import (
    CallFormat,
    Header,
    JsonArguments,
    ParserSpec,
    StreamFilterSpec,
    TaggedArguments,
    parser_spec,
    register_reasoning,
    template_mentions,
)

__all__ = [
    "K2_FAMILY",
    "K2_FORMAT",
    "K3_FAMILY",
    "K3_FORMAT",
    "detect_k2",
    "detect_k3",
    "kimi_call_id",
    "register_parsers",
    "register_stream_filters",
]

K2_FAMILY = "kimi_k2"
K3_FAMILY = "kimi_k3"


def kimi_call_id(index: int) -> str:
    """A call id in Kimi's ``functions.NAME:IDX`` shape, for calls made elsewhere.

    The parser reports the id the model wrote, which names the tool; this
    fallback (used when a call has no id from the markup) cannot know the
    name and uses ``call``.
    """
    return f"functions.call:{index}"


K2_FORMAT = CallFormat(
    family=K2_FAMILY,
    description="Kimi K2 <|tool_calls_section_begin|> with JSON arguments",
    section_open="<|tool_calls_section_begin|>",
    section_close="<|tool_calls_section_end|>",
    call_open="<|tool_call_begin|>",
    # the prefix and the index may be missing; the whole header is the call's id
    header=Header(patterns=("functions.{name}:{index}", "functions.{name}", "{name}:{index}",
                            "{name}"), id_is_header=True),
    header_end="<|tool_call_argument_begin|>",
    call_close="<|tool_call_end|>",
    arguments=JsonArguments(),
)
"""The Kimi K2 markup."""

_SEP = "<|sep|>"
K3_FORMAT = CallFormat(
    family=K3_FAMILY,
    description="Kimi K3 typed <|open|>call xtml tags",
    section_open=f"<|open|>tools{_SEP}",
    section_close=f"<|close|>tools{_SEP}",
    call_open="<|open|>call",
    header=Header(attributes={"name": "tool"}),
    header_end=_SEP,
    call_close=f"<|close|>call{_SEP}",
    arguments=TaggedArguments(
        open="<|open|>argument",
        header=Header(attributes={"name": "key", "kind": "type"},
                      kinds={"string": "string", "*": "json"}),
        header_end=_SEP, close=f"<|close|>argument{_SEP}",
        json_block=("<|open|>json", _SEP, f"<|close|>json{_SEP}")),
    drops=(f"<|open|>response{_SEP}", f"<|close|>response{_SEP}", f"<|close|>message{_SEP}",
           "<|end_of_msg|>"),
    reasoning=(f"<|open|>think{_SEP}", f"<|close|>think{_SEP}"),
    # the prompt opens the think block; a model that does not think opens its answer
    answer_open=f"<|open|>response{_SEP}",
)
"""The Kimi K3 xtml markup."""


detect_k2 = template_mentions("<|tool_calls_section_begin|>", "<|tool_call_argument_begin|>")
"""Scores a chat template: it renders ``<|tool_calls_section_begin|>`` sections."""


detect_k3 = template_mentions("'<|open|>'", "open_tag('call'", "argument")
"""Scores a chat template: it builds Kimi K3's ``<|open|>call`` xtml tags.

    The template writes tags through an ``open_tag`` macro, so its source holds
    the token ``<|open|>`` and the tag names as separate strings.
    """


@toolwire.hookimpl
def register_parsers(register: Callable[[ParserSpec], None]) -> None:
    """Register the ``kimi_k2`` and ``kimi_k3`` families."""
    register(parser_spec(K2_FORMAT, detect_k2, make_call_id=kimi_call_id))
    register(parser_spec(K3_FORMAT, detect_k3))


@toolwire.hookimpl
def register_stream_filters(register: Callable[[StreamFilterSpec], None]) -> None:
    """Register Kimi K3's ``<|open|>think<|sep|>`` reasoning filter."""
    register_reasoning(K3_FORMAT, register, name="kimi_k3_think",
                       template_uses=lambda source: detect_k3(source) > 0)
