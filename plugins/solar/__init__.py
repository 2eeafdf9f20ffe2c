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
from collections.abc import Callable

import toolwire
from toolwire.plugin_api import (
    CallFormat,
    Header,
    JsonArguments,
    ParserSpec,
    parser_spec,
    template_mentions,
)

__all__ = ["FAMILY", "SOLAR_FORMAT", "detect", "register_parsers", "solar_call_id"]

FAMILY = "solar"
_NAME_TOKEN = "<|tool_call:name|>"
_ID_ALPHABET = string.ascii_lowercase + string.digits


def solar_call_id(index: int) -> str:
    """A fresh id of ten lowercase letters or digits, as the Solar template asks."""
    return "".join(secrets.choice(_ID_ALPHABET) for _ in range(10))


SOLAR_FORMAT = CallFormat(
    family=FAMILY,
    description="Solar Open <|tool_calls|><|tool_call:begin|>ID... JSON",
    section_open="<|tool_calls|>",
    section_close="<|calls|>",
    call_open="<|tool_call:begin|>",
    header=Header(patterns=("{id}" + _NAME_TOKEN + "{name}", _NAME_TOKEN + "{name}")),
    header_end="<|tool_call:args|>",
    call_close="<|tool_call:end|>",
    arguments=JsonArguments(),
    blocks={"<|think|>": ("reasoning", "<|end|>"), "<|content|>": ("text", "<|end|>")},
    drops=("<|begin|>assistant", "<|end|>"),
)
"""The Solar Open markup."""


detect = template_mentions("<|tool_call:begin|>", _NAME_TOKEN)
"""Scores a chat template: it renders ``<|tool_call:begin|>ID<|tool_call:name|>...``."""


@toolwire.hookimpl
def register_parsers(register: Callable[[ParserSpec], None]) -> None:
    """Register the ``solar`` family."""
    register(parser_spec(SOLAR_FORMAT, detect, make_call_id=solar_call_id))
