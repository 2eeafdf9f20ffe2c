"""Built-in parser plugin for Upstage Solar Open tool calls.

After the prompt's ``<|begin|>assistant`` the model writes reasoning, text or
calls, each in its own special-token block::

    <|think|>...<|end|><|begin|>assistant<|content|>Sure.<|end|>
    <|tool_calls|><|tool_call:begin|>a1b2c3d4e5<|tool_call:name|>get_weather
    <|tool_call:args|>{"city": "Paris"}<|tool_call:end|><|calls|>

The model writes each call's id (ten lowercase letters or digits, as the
template's instructions ask) and the tool result refers to it, so the parser
reports it as the call's id. The parser routes ``<|think|>`` and
``<|content|>`` blocks itself; no reasoning filter is needed.
"""

from __future__ import annotations

import secrets
import string
from collections.abc import Callable, Mapping
from typing import Any

import toolwire
from toolwire.parse.protocol import ParserSpec, StreamParser
from toolwire.parse.tagged_stream import (
    CallHeader,
    JsonBody,
    TaggedCallParser,
    TaggedFormat,
    valid_name,
)

__all__ = ["FAMILY", "SOLAR_FORMAT", "detect", "register_parsers", "solar_call_id"]

FAMILY = "solar"
_NAME_TOKEN = "<|tool_call:name|>"
_ID_ALPHABET = string.ascii_lowercase + string.digits


def _call_header(header: str) -> CallHeader | None:
    call_id, sep, name = header.partition(_NAME_TOKEN)
    name = name.strip()
    if not sep or not valid_name(name):
        return None
    return CallHeader(name, call_id.strip())


def solar_call_id(index: int) -> str:
    """A fresh id of ten lowercase letters or digits, as the Solar template asks."""
    return "".join(secrets.choice(_ID_ALPHABET) for _ in range(10))


SOLAR_FORMAT = TaggedFormat(
    family=FAMILY,
    section_open=("<|tool_calls|>",),
    section_close=("<|calls|>",),
    call_open="<|tool_call:begin|>",
    call_header_end=("<|tool_call:args|>",),
    read_call_header=_call_header,
    call_close="<|tool_call:end|>",
    body=JsonBody,
    blocks={"<|think|>": ("reasoning", "<|end|>"), "<|content|>": ("text", "<|end|>")},
    dropped=("<|begin|>assistant", "<|end|>"),
)
"""The Solar Open markup."""


def detect(template: str) -> float:
    """Score a chat template: it renders ``<|tool_call:begin|>ID<|tool_call:name|>...``."""
    if "<|tool_call:begin|>" in template and _NAME_TOKEN in template:
        return 0.95
    return 0.0


def _create(tools: Mapping[str, Any]) -> StreamParser:
    return TaggedCallParser(SOLAR_FORMAT, tools)


@toolwire.hookimpl
def register_parsers(register: Callable[[ParserSpec], None]) -> None:
    """Register the ``solar`` family."""
    register(ParserSpec(name=FAMILY, detect=detect, create=_create, make_call_id=solar_call_id,
                        description="Solar Open <|tool_calls|><|tool_call:begin|>ID... JSON"))
