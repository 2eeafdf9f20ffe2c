"""Built-in parser plugin for Mistral's ``[TOOL_CALLS]`` tool calls.

Mistral Nemo writes a JSON list after ``[TOOL_CALLS]``; Devstral and
Ministral 3 write ``[TOOL_CALLS]name[ARGS]{...}``; Mistral Small 3.2 adds
``[CALL_ID]id`` before ``[ARGS]``. The templates demand call ids of 9
alphanumeric characters, so the family's ``make_call_id`` makes those.
Reasoning models (Ministral 3 Reasoning, Magistral) think inside
``[THINK]...[/THINK]``; the plugin registers a reasoning filter for it.

Drifts read: a single call object instead of a list, blanks after the marker,
and a second ``name[ARGS]{...}`` written without repeating ``[TOOL_CALLS]``.
The id a model writes is not kept: the chat loop gives every call a fresh
9-character id (the form these templates demand).
"""

from __future__ import annotations

from collections.abc import Callable

import toolwire
from toolwire.plugin_api import (
    CallFormat,
    CallObjects,
    Header,
    JsonArguments,
    ParserSpec,
    StreamFilterSpec,
    nine_char_call_id,
    parser_spec,
    register_reasoning,
    template_mentions,
)

__all__ = ["ARGS", "CALL_ID", "FAMILY", "MISTRAL_FORMAT", "TOOL_CALLS", "detect",
           "register_parsers", "register_stream_filters"]

FAMILY = "mistral"
TOOL_CALLS = "[TOOL_CALLS]"
ARGS = "[ARGS]"
CALL_ID = "[CALL_ID]"

MISTRAL_FORMAT = CallFormat(
    family=FAMILY,
    description="Mistral [TOOL_CALLS] (Nemo list, name[ARGS], [CALL_ID])",
    section_open=TOOL_CALLS,
    arguments=(CallObjects(name_keys=("name",), args_keys=("arguments", "parameters")),
               JsonArguments()),
    header=Header(patterns=("{name}" + CALL_ID + "{any}", "{name}")),
    header_end=ARGS,
    reasoning=("[THINK]", "[/THINK]"),
)
"""The Mistral markup, in its three generations."""


detect = template_mentions(TOOL_CALLS, score=0.8)
"""Scores a chat template: high when it renders ``[TOOL_CALLS]``."""


@toolwire.hookimpl
def register_parsers(register: Callable[[ParserSpec], None]) -> None:
    """Register the ``mistral`` family."""
    register(parser_spec(MISTRAL_FORMAT, detect, make_call_id=nine_char_call_id))


@toolwire.hookimpl
def register_stream_filters(register: Callable[[StreamFilterSpec], None]) -> None:
    """Register the ``[THINK]...[/THINK]`` reasoning filter."""
    register_reasoning(MISTRAL_FORMAT, register, name="mistral_think")
