"""Built-in parser plugin for pythonic tool calls: LFM2.5, Llama 4 and OLMo 3.

``pythonic`` (Liquid LFM2.5)
    The LFM2.5-8B-A1B template renders a turn's calls as a Python list between
    special tokens, ``<|tool_call_start|>[get_weather(city='Paris', days=3)]
    <|tool_call_end|>``, writing each string value as ``'`` + the raw text + ``'``
    without escaping. Reasoning is a ``<think>`` block (the core's shared filter).
``llama4_pythonic`` (Meta Llama 4)
    ``<|python_start|>[get_weather(city="Paris"), get_time()]<|python_end|>``:
    a Python list with Python's escaped string literals; the turn ends with
    ``<|eot|>`` (or ``<|eom|>`` after a call), which is dropped. Meta documents the
    response as the bare list, ``[get_weather(city="Paris")]<|eot|>``: a reply that
    begins with a pythonic call list is read as calls, the markers optional.
``olmo3`` (Ai2 OLMo 3)
    ``<function_calls>`` with one call per line, no list brackets, and
    ``</function_calls>``: ``get_weather(city='Paris', days=3)``, strings written
    raw between single quotes as LFM2.5 does, other values as JSON (``null``,
    ``true``, ``[1, 2]``).

:mod:`toolwire.parse.pythonic_reader` documents how such values are read (never
evaluated).
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

__all__ = ["CALLS_CLOSE", "CALLS_OPEN", "FAMILY", "LLAMA4_FORMAT", "OLMO3_FORMAT",
           "PYTHONIC_FORMAT", "detect", "detect_llama4", "detect_olmo3", "register_parsers"]

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

LLAMA4_FORMAT = CallFormat(
    family="llama4_pythonic",
    description="Llama 4 <|python_start|>[f(a=\"x\")]<|python_end|> pythonic call lists",
    section_open="<|python_start|>",
    section_close="<|python_end|>",
    # Meta documents the response as a bare list, [f(a=1), g(b="x")]<|eot|>: a reply
    # that begins with a pythonic call list is calls, with or without the markers
    at_start=True,
    arguments=PythonicCalls(),
    drops=("<|eot|>", "<|eom|>"),
)
"""The Llama 4 markup (Python's own string literals, with escapes); the list may stand
bare at the reply's start."""

detect_llama4 = template_mentions("<|python_start|>", "<|python_end|>", "<|header_start|>",
                                  score=0.9)
"""Scores a chat template: Llama 4's headers and its ``<|python_start|>`` block."""

OLMO3_FORMAT = CallFormat(
    family="olmo3",
    description="OLMo 3 <function_calls> one f(a='x') per line </function_calls>",
    section_open="<function_calls>",
    section_close="</function_calls>",
    arguments=PythonicCalls(raw_strings=True, bare=True),
    drops="<|im_end|>",
)
"""The OLMo 3 markup (bare calls, one per line; raw strings)."""

detect_olmo3 = template_mentions("<function_calls>", "</function_calls>", score=0.9)
"""Scores a chat template: it renders bare calls inside ``<function_calls>``."""


@toolwire.hookimpl
def register_parsers(register: Callable[[ParserSpec], None]) -> None:
    """Register the ``pythonic``, ``llama4_pythonic`` and ``olmo3`` families."""
    register(parser_spec(PYTHONIC_FORMAT, detect))
    register(parser_spec(LLAMA4_FORMAT, detect_llama4))
    register(parser_spec(OLMO3_FORMAT, detect_olmo3))
