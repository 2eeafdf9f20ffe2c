"""Built-in parser plugin for pythonic tool calls (Liquid LFM2.5).

The LFM2.5-8B-A1B template renders a turn's calls as a Python list between
special tokens, ``<|tool_call_start|>[get_weather(city='Paris', days=3)]
<|tool_call_end|>``; :class:`PythonicParser` documents how values are read
(never evaluated). Reasoning is a ``<think>`` block (the core's shared filter).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import toolwire
from toolwire.parse.protocol import ParserSpec, StreamParser

from .parser import CALLS_CLOSE, CALLS_OPEN, PythonicParser

__all__ = ["CALLS_CLOSE", "CALLS_OPEN", "FAMILY", "PythonicParser", "detect",
           "register_parsers"]

FAMILY = "pythonic"


def detect(template: str) -> float:
    """Score a chat template: it renders ``<|tool_call_start|>[f(...)]<|tool_call_end|>``."""
    if CALLS_OPEN in template and CALLS_CLOSE in template:
        return 0.9
    return 0.0


def _create(tools: Mapping[str, Any]) -> StreamParser:
    return PythonicParser(tools)


@toolwire.hookimpl
def register_parsers(register: Callable[[ParserSpec], None]) -> None:
    """Register the ``pythonic`` family."""
    register(ParserSpec(name=FAMILY, detect=detect, create=_create,
                        description="LFM2.5 <|tool_call_start|>[f(a='x')] pythonic call lists"))
