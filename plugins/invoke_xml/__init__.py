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
``dsml`` (DeepSeek V3.2 and V4)
    ``<｜DSML｜function_calls>`` (V3.2) or ``<｜DSML｜tool_calls>`` (V4) around
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

from collections.abc import Callable, Mapping
from typing import Any

import toolwire
from toolwire.parse.protocol import ParserSpec, StreamFilterSpec, StreamParser
from toolwire.parse.reasoning import family_think_filter_spec
from toolwire.parse.tagged_stream import (
    ParamHeader,
    TaggedCallParser,
    TaggedFormat,
    attribute,
    name_attribute_call,
    name_attribute_param,
    valid_name,
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


def _dsml_param(header: str) -> ParamHeader | None:
    name = attribute(header, "name")
    if name is None or not valid_name(name):
        return None
    flag = attribute(header, "string")
    kind = {"true": "string", "false": "json"}.get((flag or "").strip().lower())
    return ParamHeader(name, kind)


def _tag_name_param(header: str) -> ParamHeader | None:
    name = header.strip()
    if not valid_name(name) or name.startswith("/"):
        return None
    return ParamHeader(name)


M2_FORMAT = TaggedFormat(
    family=M2_FAMILY,
    section_open=("<minimax:tool_call>",),
    section_close=("</minimax:tool_call>",),
    call_open="<invoke",
    call_header_end=(">",),
    read_call_header=name_attribute_call,
    call_close="</invoke>",
    param_open="<parameter",
    param_header_end=">",
    read_param_header=name_attribute_param,
    param_close="</parameter>",
    python_values=True,
)
"""The MiniMax-M2 markup."""

M3_TOKEN = "]<]minimax[>["
"""The token MiniMax-M3 writes before every tool-call tag."""

M3_FORMAT = TaggedFormat(
    family=M3_FAMILY,
    section_open=(M3_TOKEN + "<tool_call>",),
    section_close=(M3_TOKEN + "</tool_call>",),
    call_open=M3_TOKEN + "<invoke",
    call_header_end=(">",),
    read_call_header=name_attribute_call,
    call_close=M3_TOKEN + "</invoke>",
    param_open=M3_TOKEN + "<",
    param_header_end=">",
    read_param_header=_tag_name_param,
    nested=M3_TOKEN,
)
"""The MiniMax-M3 markup (nested-element values)."""

_DSML = "｜DSML｜"
DSML_FORMAT = TaggedFormat(
    family=DSML_FAMILY,
    section_open=(f"<{_DSML}function_calls>", f"<{_DSML}tool_calls>"),
    section_close=(f"</{_DSML}function_calls>", f"</{_DSML}tool_calls>"),
    call_open=f"<{_DSML}invoke",
    call_header_end=(">",),
    read_call_header=name_attribute_call,
    call_close=f"</{_DSML}invoke>",
    param_open=f"<{_DSML}parameter",
    param_header_end=">",
    read_param_header=_dsml_param,
    param_close=f"</{_DSML}parameter>",
)
"""The DeepSeek V3.2 / V4 DSML markup."""

MINICPM_FORMAT = TaggedFormat(
    family=MINICPM_FAMILY,
    call_open="<function",
    call_header_end=(">",),
    read_call_header=name_attribute_call,
    call_close="</function>",
    strict_open=False,
    param_open="<param",
    param_header_end=">",
    read_param_header=name_attribute_param,
    param_close="</param>",
    cdata=True,
    python_values=True,
)
"""The MiniCPM 5 markup (no section; CDATA-wrapped values)."""


def detect_m2(template: str) -> float:
    """Score a chat template: it renders ``<minimax:tool_call><invoke name=...>``."""
    if "<minimax:tool_call>" in template and "<invoke name=" in template:
        return 0.95
    return 0.0


def detect_m3(template: str) -> float:
    """Score a chat template: it prefixes its call tags with ``]<]minimax[>[``."""
    if M3_TOKEN in template and "<invoke name=" in template:
        return 0.95
    return 0.0


def detect_dsml(template: str) -> float:
    """Score a chat template: it renders DeepSeek's ``｜DSML｜`` invoke markup.

    The template assembles its tags from a ``dsml_token`` variable, so the
    token and the tag names are what its source contains.
    """
    if _DSML in template and "invoke name=" in template and "parameter name=" in template:
        return 0.95
    return 0.0


def detect_minicpm(template: str) -> float:
    """Score a chat template: it renders ``<function name=...><param name=...>``."""
    if "<function name=" in template and "<param name=" in template:
        return 0.9
    return 0.0


def _m3_template_uses(template: str) -> bool:
    return detect_m3(template) > 0


def _creator(fmt: TaggedFormat) -> Callable[[Mapping[str, Any]], StreamParser]:
    def create(tools: Mapping[str, Any]) -> StreamParser:
        return TaggedCallParser(fmt, tools)

    return create


@toolwire.hookimpl
def register_parsers(register: Callable[[ParserSpec], None]) -> None:
    """Register the ``minimax_xml``, ``minimax_m3``, ``dsml`` and ``minicpm_xml`` families."""
    register(ParserSpec(name=M2_FAMILY, detect=detect_m2, create=_creator(M2_FORMAT),
                        description="MiniMax-M2 <minimax:tool_call><invoke name=...> XML"))
    register(ParserSpec(name=M3_FAMILY, detect=detect_m3, create=_creator(M3_FORMAT),
                        description="MiniMax-M3 ]<]minimax[>[-prefixed nested-element XML"))
    register(ParserSpec(name=DSML_FAMILY, detect=detect_dsml, create=_creator(DSML_FORMAT),
                        description="DeepSeek V3.2/V4 <｜DSML｜invoke> XML with string flags"))
    register(ParserSpec(name=MINICPM_FAMILY, detect=detect_minicpm,
                        create=_creator(MINICPM_FORMAT),
                        description="MiniCPM 5 <function name=...><param name=...> XML"))


@toolwire.hookimpl
def register_stream_filters(register: Callable[[StreamFilterSpec], None]) -> None:
    """Register MiniMax-M3's ``<mm:think>`` reasoning filter."""
    register(family_think_filter_spec("<mm:think>", "</mm:think>", name="minimax_m3_think",
                                   families=(M3_FAMILY,), starts_unopened=True,
                                   template_uses=_m3_template_uses))
