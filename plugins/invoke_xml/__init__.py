"""Built-in parser plugin for the ``invoke``-style XML tool calls.

Four families write a call as an element naming the tool, holding one element
per parameter:

``minimax_xml`` (MiniMax-M2)
    ``<minimax:tool_call><invoke name="f"><parameter name="p">v</parameter>
    </invoke></minimax:tool_call>``; non-string values are JSON.
``minimax_m3`` (MiniMax-M3)
    Every tag is prefixed with the token ``]<]minimax[>[``, the parameter name
    is the tag name, and nested objects and lists are written as nested
    elements (``<item>`` for list items) rather than JSON. Reasoning is
    ``<mm:think>``; a reply without reasoning starts with a lone ``</mm:think>``
    (filter ``minimax_m3_think``).
``dsml`` (DeepSeek V3.2, V4 and V4.1)
    ``<｜DSML｜function_calls>`` (V3.2), ``<｜DSML｜tool_calls>`` (V4) or
    ``<｜DSML｜ calls>`` (V4.1, which puts a space after ``｜DSML｜`` in every tag) around
    ``<｜DSML｜invoke name="f"><｜DSML｜parameter name="p" string="true">v...``;
    the ``string`` flag says whether the value is raw text or JSON.
``minicpm_xml`` (MiniCPM 5)
    ``<function name="f"><param name="p">v</param></function>`` with no
    surrounding section; values holding ``<``, ``&`` or a newline are wrapped in
    ``<![CDATA[...]]>``, and non-string values are Python literals (``True``).

Muse Glimmer's ``<atem:invoke>`` bodies travel inside harmony-style messages
and are parsed by the ``harmony`` plugin.
"""

from __future__ import annotations

from collections.abc import Callable

import toolwire
from toolwire.plugin_api import (
    CallFormat,
    Header,
    ParserSpec,
    StreamFilterSpec,
    TaggedArguments,
    parser_spec,
    register_reasoning,
    template_mentions,
)

__all__ = [
    "DSML_FAMILY",
    "DSML_FORMAT",
    "M2_FAMILY",
    "M2_FORMAT",
    "M3_FAMILY",
    "M3_FORMAT",
    "M3_TOKEN",
    "MINICPM_FAMILY",
    "MINICPM_FORMAT",
    "detect_dsml",
    "detect_m2",
    "detect_m3",
    "detect_minicpm",
    "register_parsers",
    "register_stream_filters",
]

M2_FAMILY = "minimax_xml"
M3_FAMILY = "minimax_m3"
DSML_FAMILY = "dsml"
MINICPM_FAMILY = "minicpm_xml"

_NAME_ATTRIBUTE = Header(attributes={"name": "name"})

M2_FORMAT = CallFormat(
    family=M2_FAMILY,
    description="MiniMax-M2 <minimax:tool_call><invoke name=...> XML",
    section_open="<minimax:tool_call>",
    section_close="</minimax:tool_call>",
    call_open="<invoke",
    header=_NAME_ATTRIBUTE,
    header_end=">",
    call_close="</invoke>",
    arguments=TaggedArguments(open="<parameter", header=_NAME_ATTRIBUTE, header_end=">",
                              close="</parameter>", python_values=True),
)
"""The MiniMax-M2 markup."""

M3_TOKEN = "]<]minimax[>["
"""The token MiniMax-M3 writes before every tool-call tag."""

M3_FORMAT = CallFormat(
    family=M3_FAMILY,
    description="MiniMax-M3 ]<]minimax[>[-prefixed nested-element XML",
    section_open=M3_TOKEN + "<tool_call>",
    section_close=M3_TOKEN + "</tool_call>",
    call_open=M3_TOKEN + "<invoke",
    header=_NAME_ATTRIBUTE,
    header_end=">",
    call_close=M3_TOKEN + "</invoke>",
    arguments=TaggedArguments(open=M3_TOKEN + "<", header_end=">",
                              close=M3_TOKEN + "</{name}>", nested=M3_TOKEN),
    reasoning=("<mm:think>", "</mm:think>"),
    reasoning_unopened=True,
)
"""The MiniMax-M3 markup (nested-element values)."""

_DSML = "｜DSML｜"
_SECTIONS = ("function_calls", "tool_calls", " calls")  # V3.2, V4, V4.1
DSML_FORMAT = CallFormat(
    family=DSML_FAMILY,
    description="DeepSeek V3.2/V4/V4.1 <｜DSML｜invoke> XML with string flags",
    section_open=tuple(f"<{_DSML}{tag}>" for tag in _SECTIONS),
    section_close=tuple(f"</{_DSML}{tag}>" for tag in _SECTIONS),
    call_open=(f"<{_DSML}invoke", f"<{_DSML} invoke"),
    header=_NAME_ATTRIBUTE,
    header_end=">",
    call_close=(f"</{_DSML}invoke>", f"</{_DSML} invoke>"),
    arguments=TaggedArguments(
        open=f"<{_DSML}parameter",
        header=Header(attributes={"name": "name", "kind": "string"},
                      kinds={"true": "string", "false": "json"}),
        header_end=">", close=f"</{_DSML}parameter>",
        spellings={f"<{_DSML}parameter": (f"<{_DSML} parameter",),
                   f"</{_DSML}parameter>": (f"</{_DSML} parameter>",)}),
)
"""The DeepSeek V3.2 / V4 / V4.1 DSML markup (V4.1 writes a space after ``｜DSML｜``
and ``calls`` for the section; each spelling is read)."""

MINICPM_FORMAT = CallFormat(
    family=MINICPM_FAMILY,
    description="MiniCPM 5 <function name=...><param name=...> XML",
    call_open="<function",
    header=_NAME_ATTRIBUTE,
    header_end=">",
    call_close="</function>",
    strict_open=False,
    arguments=TaggedArguments(open="<param", header=_NAME_ATTRIBUTE, header_end=">",
                              close="</param>", cdata=True, python_values=True),
)
"""The MiniCPM 5 markup (no section; CDATA-wrapped values)."""


detect_m2 = template_mentions("<minimax:tool_call>", "<invoke name=")
"""Scores a chat template: it renders ``<minimax:tool_call><invoke name=...>``."""


detect_m3 = template_mentions(M3_TOKEN, "<invoke name=")
"""Scores a chat template: it prefixes its call tags with ``]<]minimax[>[``."""


detect_dsml = template_mentions(_DSML, "invoke name=", "parameter name=")
"""Scores a chat template: it renders DeepSeek's ``｜DSML｜`` invoke markup.

    The template assembles its tags from a ``dsml_token`` variable, so the
    token and the tag names are what its source contains.
    """


detect_minicpm = template_mentions("<function name=", "<param name=", score=0.9)
"""Scores a chat template: it renders ``<function name=...><param name=...>``."""


@toolwire.hookimpl
def register_parsers(register: Callable[[ParserSpec], None]) -> None:
    """Register the ``minimax_xml``, ``minimax_m3``, ``dsml`` and ``minicpm_xml`` families."""
    for fmt, detect in ((M2_FORMAT, detect_m2), (M3_FORMAT, detect_m3),
                        (DSML_FORMAT, detect_dsml), (MINICPM_FORMAT, detect_minicpm)):
        register(parser_spec(fmt, detect))


@toolwire.hookimpl
def register_stream_filters(register: Callable[[StreamFilterSpec], None]) -> None:
    """Register MiniMax-M3's ``<mm:think>`` reasoning filter."""
    register_reasoning(M3_FORMAT, register, name="minimax_m3_think",
                       template_uses=lambda source: detect_m3(source) > 0)
