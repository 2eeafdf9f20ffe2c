"""Built-in parser plugin for Llama 3.1 / 3.2 / 3.3 JSON tool calls.

The templates render a call as a bare JSON object, the whole assistant turn::

    {"name": "get_weather", "parameters": {"city": "Paris", "days": 3}}

optionally after ``<|python_tag|>``; they raise on a second call in one turn.
Llama 3.2 models also write pythonic lists (``[get_weather(city="Paris")]``),
which are read too. A call is recognised where the reply *begins* with a JSON
object whose keys are those of a call (``name``, ``parameters`` or ``arguments``,
optionally ``type``); any other object is an answer that happens to be JSON and
stays text, with no diagnostic. ``<|python_tag|>`` (Llama 3.1's marker for tool
code) may precede calls anywhere. Drifts read: several call objects separated
by ``;`` or blank lines, and an echoed ``<|eom_id|>`` / ``<|eot_id|>``.
"""

from __future__ import annotations

from collections.abc import Callable

import toolwire
from toolwire.plugin_api import (
    CallFormat,
    CallObjects,
    ParserSpec,
    PythonicCalls,
    calls_from_source,
    parser_spec,
)

__all__ = ["FAMILY", "LLAMA3_FORMAT", "PYTHON_TAG", "calls_from_source", "detect",
           "register_parsers"]

FAMILY = "llama3_json"
PYTHON_TAG = "<|python_tag|>"

LLAMA3_FORMAT = CallFormat(
    family=FAMILY,
    description='Llama 3.x {"name", "parameters"} JSON (and pythonic lists)',
    section_open=PYTHON_TAG,
    at_start=True,
    arguments=(CallObjects(name_keys=("name",), args_keys=("parameters", "arguments"),
                           separators=";"),
               PythonicCalls()),
    drops=("<|eom_id|>", "<|eot_id|>"),
    max_calls=1,
)
"""The Llama 3.x markup: bare JSON at the reply's start, or after ``<|python_tag|>``."""


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


@toolwire.hookimpl
def register_parsers(register: Callable[[ParserSpec], None]) -> None:
    """Register the ``llama3_json`` family."""
    register(parser_spec(LLAMA3_FORMAT, detect))
