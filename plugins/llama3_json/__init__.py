"""Built-in parser plugin for Llama 3.1 / 3.2 / 3.3 JSON tool calls.

The templates render a call as a bare JSON object, the whole assistant turn::

    {"name": "get_weather", "parameters": {"city": "Paris", "days": 3}}

optionally after ``<|python_tag|>``; they raise on a second call in one turn.
Llama 3.2 models also write pythonic lists (``[get_weather(city="Paris")]``),
which are read too.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import toolwire
from toolwire.parse.protocol import ParserSpec, StreamParser

from .parser import PYTHON_TAG, Llama3JsonParser
from .pythonic import PythonicListReader, calls_from_source

__all__ = ["FAMILY", "PYTHON_TAG", "Llama3JsonParser", "PythonicListReader",
           "calls_from_source", "detect"]

FAMILY = "llama3_json"


def detect(template: str) -> float:
    """Score a chat template: high when it renders Llama 3's bare JSON calls.

    The Llama 3.x templates write ``{"name": "`` then ``"parameters": `` inside
    Llama 3 headers; Functionary (``<function=``) and FireFunction
    (``functools[``) share the headers but not that markup.
    """
    if "<|start_header_id|>" not in template or '"parameters": ' not in template:
        return 0.0
    if '{"name": "' not in template:
        return 0.0
    if "<function=" in template or "functools[" in template:
        return 0.0
    return 0.8


def _create(tools: Mapping[str, Any]) -> StreamParser:
    return Llama3JsonParser(tools)


@toolwire.hookimpl
def register_parsers(register: Callable[[ParserSpec], None]) -> None:
    """Register the ``llama3_json`` family."""
    register(ParserSpec(name=FAMILY, detect=detect, create=_create,
                        description="Llama 3.x {\"name\", \"parameters\"} JSON (and pythonic "
                                    "lists)"))
