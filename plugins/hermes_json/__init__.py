"""Built-in parser plugin for Hermes-style JSON calls inside ``<tool_call>`` tags.

The format of Hermes 2 Pro / Hermes 3 (``*-tool_use`` templates), Qwen2.5, QwQ,
Qwen3 (2504), Granite 4.0 / 4.1, MiMo-VL, Bielik and Reka Edge::

    <tool_call>
    {"name": "get_weather", "arguments": {"city": "Paris", "days": 3}}
    </tool_call>

Qwen3's ``<think>`` blocks go through the core's shared reasoning filter.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import toolwire
from toolwire.parse.protocol import ParserSpec, StreamParser

from .parser import CLOSE_CALL, OPEN_CALL, HermesJsonParser

__all__ = ["FAMILY", "HermesJsonParser", "detect"]

FAMILY = "hermes_json"

# Markup of other families that also mention <tool_call>: Qwen XML
# (<function=...>), GLM key/value (<arg_key>), Apriel (<tool_calls>[...]),
# MiniMax-M3 (its own namespaced tags).
_OTHER_FAMILIES = ("<function=", "<arg_key>", "<tool_calls>", "]<]minimax[>[")


def detect(template: str) -> float:
    """Score a chat template: high when it renders JSON calls inside ``<tool_call>`` tags.

    The call must be a JSON object with ``"arguments"`` (the quotes may be
    escaped in the template source), and no other family's markup may appear.
    """
    if OPEN_CALL not in template or CLOSE_CALL not in template:
        return 0.0
    if '"arguments"' not in template and '\\"arguments\\"' not in template:
        return 0.0
    if any(marker in template for marker in _OTHER_FAMILIES):
        return 0.0
    return 0.8


def _create(tools: Mapping[str, Any]) -> StreamParser:
    return HermesJsonParser(tools)


@toolwire.hookimpl
def register_parsers(register: Callable[[ParserSpec], None]) -> None:
    """Register the ``hermes_json`` family."""
    register(ParserSpec(name=FAMILY, detect=detect, create=_create,
                        description="Hermes / Qwen2.5 <tool_call>{json}</tool_call>"))
