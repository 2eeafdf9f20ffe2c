"""Built-in parser plugin for the Qwen3.5 / Qwen3-Coder XML tool-call markup.

Registered through the same hooks and entry-point group as a third-party
parser. It claims chat templates that render ``<tool_call>`` with
``<function=NAME>`` and ``<parameter=P>`` tags, Its ``<think>`` blocks go through
the core's shared reasoning filter.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import toolwire
from toolwire.parse.protocol import ParserSpec, StreamParser

from .parser import QwenXmlParser

__all__ = ["FAMILY", "QwenXmlParser", "detect"]

FAMILY = "qwen_xml"


def detect(template: str) -> float:
    """Score a chat template: high when it renders the Qwen XML call markup.

    The markers appear in the template source inside Jinja strings, where the
    newline of ``'<tool_call>\\n<function='`` is a two-character escape; the tags
    themselves are unambiguous, so their presence is what counts. Seed-OSS
    uses the same inner tags under ``<seed:tool_call>`` and is not claimed.
    """
    if "<seed:tool_call>" in template:
        return 0.0
    if "<function=" in template and "<parameter=" in template and "<tool_call>" in template:
        return 0.9
    return 0.0


def _create(tools: Mapping[str, Any]) -> StreamParser:
    return QwenXmlParser(tools)


@toolwire.hookimpl
def register_parsers(register: Callable[[ParserSpec], None]) -> None:
    """Register the ``qwen_xml`` family."""
    register(ParserSpec(name=FAMILY, detect=detect, create=_create,
                        description="Qwen3.5 / Qwen3-Coder <tool_call><function=...> XML"))
