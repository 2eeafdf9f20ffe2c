"""Built-in parser plugin for pythonic tool calls (Liquid LFM2.5).

The LFM2.5-8B-A1B template renders a turn's calls as a Python list between
special tokens, ``<|tool_call_start|>[get_weather(city='Paris', days=3)]
<|tool_call_end|>``, writing each string value as ``'`` + the raw text + ``'``
without escaping; :mod:`toolwire.parse.pythonic_reader` documents how such
values are read (never evaluated). Reasoning is a ``<think>`` block (the core's
shared filter).
"""

from __future__ import annotations

from collections.abc import Callable

import toolwire
from toolwire.plugin_api import (
    CallFormat,
    ParserSpec,
    PythonicCalls,
    parser_spec,
    template_mentions,
)

__all__ = ["CALLS_CLOSE", "CALLS_OPEN", "FAMILY", "PYTHONIC_FORMAT", "detect",
           "register_parsers"]

FAMILY = "pythonic"
CALLS_OPEN = "<|tool_call_start|>"
CALLS_CLOSE = "<|tool_call_end|>"

PYTHONIC_FORMAT = CallFormat(
    family=FAMILY,
    description="LFM2.5 <|tool_call_start|>[f(a='x')] pythonic call lists",
    section_open=CALLS_OPEN,
    section_close=CALLS_CLOSE,
    arguments=PythonicCalls(raw_strings=True),
)
"""The LFM2.5 markup."""


detect = template_mentions(CALLS_OPEN, CALLS_CLOSE, score=0.9)
"""Scores a chat template: it renders ``<|tool_call_start|>[f(...)]<|tool_call_end|>``."""


@toolwire.hookimpl
def register_parsers(register: Callable[[ParserSpec], None]) -> None:
    """Register the ``pythonic`` family."""
    register(parser_spec(PYTHONIC_FORMAT, detect))
