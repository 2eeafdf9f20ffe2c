"""Built-in parser plugin for Mistral's ``[TOOL_CALLS]`` tool calls.

Mistral Nemo writes a JSON list after ``[TOOL_CALLS]``; Devstral and
Ministral 3 write ``[TOOL_CALLS]name[ARGS]{...}``; Mistral Small 3.2 adds
``[CALL_ID]id`` before ``[ARGS]``. The templates demand call ids of 9
alphanumeric characters, so the family's ``make_call_id`` makes those.
Reasoning models (Ministral 3 Reasoning, Magistral) think inside
``[THINK]...[/THINK]``; the plugin registers a reasoning filter for it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import toolwire
from toolwire.parse.protocol import ParserSpec, StreamFilterSpec, StreamParser, nine_char_call_id
from toolwire.parse.reasoning import family_think_filter_spec

from .parser import TOOL_CALLS, MistralParser

__all__ = ["FAMILY", "MistralParser", "detect"]

FAMILY = "mistral"
THINK_OPEN = "[THINK]"
THINK_CLOSE = "[/THINK]"


def detect(template: str) -> float:
    """Score a chat template: high when it renders ``[TOOL_CALLS]``."""
    return 0.8 if TOOL_CALLS in template else 0.0


def _create(tools: Mapping[str, Any]) -> StreamParser:
    return MistralParser(tools)


@toolwire.hookimpl
def register_parsers(register: Callable[[ParserSpec], None]) -> None:
    """Register the ``mistral`` family."""
    register(ParserSpec(name=FAMILY, detect=detect, create=_create,
                        make_call_id=nine_char_call_id,
                        description="Mistral [TOOL_CALLS] (Nemo list, name[ARGS], [CALL_ID])"))


@toolwire.hookimpl
def register_stream_filters(register: Callable[[StreamFilterSpec], None]) -> None:
    """Register the ``[THINK]...[/THINK]`` reasoning filter."""
    register(family_think_filter_spec(THINK_OPEN, THINK_CLOSE, name="mistral_think",
                                          families=(FAMILY,)))
