"""Built-in parser plugin for Hermes-style JSON calls inside ``<tool_call>`` tags.

The format of Hermes 2 Pro / Hermes 3 (``*-tool_use`` templates), Qwen2.5, QwQ,
Qwen3 (2504), Granite 4.0 / 4.1, MiMo-VL, Bielik and Reka Edge::

    <tool_call>
    {"name": "get_weather", "arguments": {"city": "Paris", "days": 3}}
    </tool_call>

Drifts read (the engine's, for every JSON family): a list of call objects (or
several objects) in one block, ``"parameters"`` instead of ``"arguments"``,
arguments encoded as a JSON string, a missing ``</tool_call>`` at the end of the
reply, and a call object missing its final ``}`` right before ``</tool_call>``.
Qwen3's ``<think>`` blocks go through the core's shared reasoning filter.
"""

from __future__ import annotations

from collections.abc import Callable

import toolwire
from toolwire.plugin_api import CallFormat, CallObjects, ParserSpec, parser_spec

__all__ = ["CLOSE_CALL", "FAMILY", "HERMES_FORMAT", "OPEN_CALL", "detect", "register_parsers"]

FAMILY = "hermes_json"
OPEN_CALL = "<tool_call>"
CLOSE_CALL = "</tool_call>"

HERMES_FORMAT = CallFormat(
    family=FAMILY,
    description="Hermes / Qwen2.5 <tool_call>{json}</tool_call>",
    section_open=OPEN_CALL,
    section_close=CLOSE_CALL,
    arguments=CallObjects(name_keys=("name",), args_keys=("arguments", "parameters")),
)
"""The Hermes markup: each ``<tool_call>`` block holds JSON call objects."""

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


@toolwire.hookimpl
def register_parsers(register: Callable[[ParserSpec], None]) -> None:
    """Register the ``hermes_json`` family."""
    register(parser_spec(HERMES_FORMAT, detect))
