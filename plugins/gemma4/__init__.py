"""Built-in parser plugin for Google Gemma 4 tool calls.

The template writes each call as a special-token block with Gemma's own
object syntax (unquoted sorted keys, strings between ``<|"|>`` tokens)::

    <|tool_call>call:get_weather{city:<|"|>Paris<|"|>,days:3}<tool_call|>

Calls come before the turn's text, and the non-interleaved template ends a
call turn with ``<|tool_response>`` (where the tool's answer goes), which is
dropped once a call was made. Reasoning is the ``<|channel>thought ...
<channel|>`` block (filter ``gemma4_thought``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import toolwire
from toolwire.parse.protocol import ParserSpec, StreamFilterSpec, StreamParser
from toolwire.parse.reasoning import family_think_filter_spec
from toolwire.parse.tagged_stream import (
    CallHeader,
    TaggedCallParser,
    TaggedFormat,
    valid_name,
)

from .values import QUOTE, GemmaBody, read_gemma_object

__all__ = [
    "FAMILY",
    "GEMMA4_FORMAT",
    "QUOTE",
    "GemmaBody",
    "detect",
    "read_gemma_object",
    "register_parsers",
    "register_stream_filters",
]

FAMILY = "gemma4"


def _call_header(header: str) -> CallHeader | None:
    name = header.strip().removeprefix("call:").strip()
    return CallHeader(name) if valid_name(name) else None


GEMMA4_FORMAT = TaggedFormat(
    family=FAMILY,
    call_open="<|tool_call>",
    call_header_stop=("{",),
    read_call_header=_call_header,
    call_close="<tool_call|>",
    body=GemmaBody,
    trailers=("<|tool_response>",),
)
"""The Gemma 4 markup."""


def detect(template: str) -> float:
    """Score a chat template: it renders ``<|tool_call>call:NAME{...}<tool_call|>``."""
    if "<|tool_call>call:" in template and "<tool_call|>" in template:
        return 0.95
    return 0.0


def _create(tools: Mapping[str, Any]) -> StreamParser:
    return TaggedCallParser(GEMMA4_FORMAT, tools)


@toolwire.hookimpl
def register_parsers(register: Callable[[ParserSpec], None]) -> None:
    """Register the ``gemma4`` family."""
    register(ParserSpec(name=FAMILY, detect=detect, create=_create,
                        description="Gemma 4 <|tool_call>call:NAME{...}<tool_call|>"))


@toolwire.hookimpl
def register_stream_filters(register: Callable[[StreamFilterSpec], None]) -> None:
    """Register Gemma 4's ``<|channel>thought ... <channel|>`` reasoning filter."""
    register(family_think_filter_spec("<|channel>thought", "<channel|>", name="gemma4_thought",
                                   families=(FAMILY,)))
