"""Built-in parser plugin for Google Gemma 4 tool calls.

The template writes each call as a special-token block with Gemma's own
object syntax (unquoted sorted keys, strings between ``<|"|>`` tokens)::

    <|tool_call>call:get_weather{city:<|"|>Paris<|"|>,days:3}<tool_call|>

Calls come before the turn's text, and the non-interleaved template ends a
call turn with ``<|tool_response>`` (where the tool's answer goes), which is
dropped once a call was made. Reasoning is the ``<|channel>thought ...
<channel|>`` block (filter ``gemma4_thought``); a block the model writes without
the ``thought`` header is reasoning too.
"""

from __future__ import annotations

from collections.abc import Callable

import toolwire
from toolwire.plugin_api import (
    CallFormat,
    GrammarArguments,
    Header,
    ObjectLiteral,
    ParserSpec,
    StreamFilterSpec,
    parser_spec,
    register_reasoning,
    template_mentions,
)

from .values import QUOTE, SYNTAX, read_gemma_object

__all__ = [
    "FAMILY",
    "GEMMA4_FORMAT",
    "QUOTE",
    "SYNTAX",
    "detect",
    "read_gemma_object",
    "register_parsers",
    "register_stream_filters",
]

FAMILY = "gemma4"

GEMMA4_FORMAT = CallFormat(
    family=FAMILY,
    description="Gemma 4 <|tool_call>call:NAME{...}<tool_call|>",
    call_open="<|tool_call>",
    header=Header(patterns=("call:{name}", "{name}")),
    header_stop="{",
    call_close="<tool_call|>",
    arguments=GrammarArguments(reader=ObjectLiteral(quote=QUOTE, escapes=False),
                               name="gemma4 object"),
    trailers="<|tool_response>",
    reasoning=("<|channel>", "<channel|>"),
    reasoning_headers="thought",
)
"""The Gemma 4 markup: a pure record, its arguments read by the engine's object-literal
reader (:data:`SYNTAX` is the same notation)."""


detect = template_mentions("<|tool_call>call:", "<tool_call|>")
"""Scores a chat template: it renders ``<|tool_call>call:NAME{...}<tool_call|>``."""


@toolwire.hookimpl
def register_parsers(register: Callable[[ParserSpec], None]) -> None:
    """Register the ``gemma4`` family."""
    register(parser_spec(GEMMA4_FORMAT, detect))


@toolwire.hookimpl
def register_stream_filters(register: Callable[[StreamFilterSpec], None]) -> None:
    """Register Gemma 4's ``<|channel>thought ... <channel|>`` reasoning filter."""
    register_reasoning(GEMMA4_FORMAT, register, name="gemma4_thought")
