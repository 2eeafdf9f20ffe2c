"""Built-in parser plugin for DeepSeek R1 and V3.1 tool calls.

Both wrap calls in ``<｜tool▁calls▁begin｜>...<｜tool▁calls▁end｜>``; R1 writes
``function<｜tool▁sep｜>NAME`` and fenced JSON, V3.1 ``NAME<｜tool▁sep｜>{json}``.
The R1 ``<think>`` block goes through the core's reasoning filter. (DeepSeek
V3.2 / V4 write DSML invoke markup, another family.)
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import toolwire
from toolwire.parse.protocol import ParserSpec, StreamParser

from .parser import CALL_BEGIN, SEP, DeepSeekParser

__all__ = ["FAMILY", "DeepSeekParser", "detect"]

FAMILY = "deepseek"


def detect(template: str) -> float:
    """Score a chat template: high when it renders DeepSeek's tool-call tokens."""
    return 0.8 if CALL_BEGIN in template and SEP in template else 0.0


def _create(tools: Mapping[str, Any]) -> StreamParser:
    return DeepSeekParser(tools)


@toolwire.hookimpl
def register_parsers(register: Callable[[ParserSpec], None]) -> None:
    """Register the ``deepseek`` family."""
    register(ParserSpec(name=FAMILY, detect=detect, create=_create,
                        description="DeepSeek R1 / V3.1 <｜tool▁call▁begin｜> calls"))
