"""Built-in parser plugin for DeepSeek R1 and V3.1 tool calls.

Both wrap calls in ``<｜tool▁calls▁begin｜>...<｜tool▁calls▁end｜>``; R1 writes
``function<｜tool▁sep｜>NAME`` and fenced JSON, V3.1 ``NAME<｜tool▁sep｜>{json}``.
The R1 ``<think>`` block goes through the core's reasoning filter. (DeepSeek
V3.2 / V4 write DSML invoke markup, another family.)

Drifts read, as seen from R1 models and llama.cpp's parser: the tokens spelt
with ``_`` or spaces instead of ``▁``, a missing ``<｜tool▁calls▁begin｜>`` (a lone
``<｜tool▁call▁begin｜>`` opens the section), a missing fence or closing token,
and the end of the reply before ``<｜tool▁calls▁end｜>``. ``<｜end▁of▁sentence｜>``
and ``<｜Assistant｜>`` are removed from the text: the R1-Distill-Qwen template
renders the content of a tool-call turn after them.
"""

from __future__ import annotations

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

__all__ = ["CALL_BEGIN", "DEEPSEEK_FORMAT", "FAMILY", "SEP", "detect", "register_parsers"]

FAMILY = "deepseek"
CALLS_BEGIN = "<｜tool▁calls▁begin｜>"
CALLS_END = "<｜tool▁calls▁end｜>"
CALL_BEGIN = "<｜tool▁call▁begin｜>"
CALL_END = "<｜tool▁call▁end｜>"
SEP = "<｜tool▁sep｜>"


def _spellings(token: str) -> tuple[str, ...]:
    """The token as the template writes it, then with ``_`` and with spaces for ``▁``."""
    return (token, token.replace("▁", "_"), token.replace("▁", " "))


DEEPSEEK_FORMAT = CallFormat(
    family=FAMILY,
    description="DeepSeek R1 / V3.1 <｜tool▁call▁begin｜> calls",
    section_open=_spellings(CALLS_BEGIN),
    section_close=_spellings(CALLS_END),
    call_open=_spellings(CALL_BEGIN),
    implicit_section=True,
    # R1 names the call type first: function<｜tool▁sep｜>NAME, then a fenced object
    header=Header(prefixes=tuple("function" + sep for sep in _spellings(SEP))),
    header_end=(*_spellings(SEP), "\n"),
    call_close=_spellings(CALL_END),
    arguments=JsonArguments(fence=True),
    drops=("<｜end▁of▁sentence｜>", "<｜Assistant｜>"),
)
"""The DeepSeek R1 / V3.1 markup."""


detect = template_mentions(CALL_BEGIN, SEP, score=0.8)
"""Scores a chat template: high when it renders DeepSeek's tool-call tokens."""


@toolwire.hookimpl
def register_parsers(register: Callable[[ParserSpec], None]) -> None:
    """Register the ``deepseek`` family."""
    register(parser_spec(DEEPSEEK_FORMAT, detect))
