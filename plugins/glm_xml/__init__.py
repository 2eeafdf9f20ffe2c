"""Built-in parser plugin for GLM-style key/value tool calls.

Two families share the markup of a name followed by key/value pairs:

``glm_xml``
    Zhipu GLM-4.5/4.6/4.7 and Poolside Laguna, with or without newlines
    between the tags::

        <tool_call>get_weather
        <arg_key>city</arg_key>
        <arg_value>Paris</arg_value>
        </tool_call>

    Reasoning is a ``<think>`` block (the core's shared filter).

``hy3_xml``
    Tencent Hunyuan 3, whose every tag carries an ``:opensource`` suffix and
    whose calls sit in a ``<tool_calls:opensource>`` section ended by the
    end-of-sentence token; reasoning is ``<think:opensource>`` (filter
    ``hy3_think``).

String values are written verbatim; other values are JSON (``true``), Python
spellings (``True``) are accepted too.
"""

from __future__ import annotations

from collections.abc import Callable

import toolwire
from toolwire.plugin_api import (
    CallFormat,
    ParserSpec,
    StreamFilterSpec,
    TaggedArguments,
    parser_spec,
    register_reasoning,
    template_mentions,
)

__all__ = [
    "GLM_FAMILY",
    "GLM_FORMAT",
    "HY3_FAMILY",
    "HY3_FORMAT",
    "detect_glm",
    "detect_hy3",
    "register_parsers",
    "register_stream_filters",
]

GLM_FAMILY = "glm_xml"
HY3_FAMILY = "hy3_xml"

GLM_FORMAT = CallFormat(
    family=GLM_FAMILY,
    description="GLM-4.x / Laguna <tool_call>NAME<arg_key>... pairs",
    call_open="<tool_call>",
    header_end="\n",
    header_stop=("<arg_key>", "</tool_call>"),
    call_close="</tool_call>",
    arguments=TaggedArguments(open="<arg_key>", header_end="</arg_key>", value_open="<arg_value>",
                              close="</arg_value>", python_values=True),
)
"""The GLM / Laguna markup."""

_HY = ":opensource"
HY3_FORMAT = CallFormat(
    family=HY3_FAMILY,
    description="Tencent Hy3 <tool_call:opensource> key/value pairs",
    section_open=f"<tool_calls{_HY}>",
    section_close=f"</tool_calls{_HY}>",
    call_open=f"<tool_call{_HY}>",
    header_end=f"<tool_sep{_HY}>",
    call_close=f"</tool_call{_HY}>",
    arguments=TaggedArguments(open=f"<arg_key{_HY}>", header_end=f"</arg_key{_HY}>",
                              value_open=f"<arg_value{_HY}>", close=f"</arg_value{_HY}>",
                              python_values=True),
    trailers=f"<｜hy_eos{_HY}｜>",
    reasoning=(f"<think{_HY}>", f"</think{_HY}>"),
)
"""The Tencent Hy3 markup (GLM pairs with ``:opensource`` tags)."""


detect_glm = template_mentions("<arg_key>", "<arg_value>", "<tool_call>")
"""Scores a chat template: it renders ``<tool_call>NAME<arg_key>K</arg_key>...``."""


detect_hy3 = template_mentions(_HY, "<tool_sep", "<arg_key")
"""Scores a chat template: it builds Hy3's ``<arg_key:opensource>`` tags.

    The template assembles its tags with ``'<arg_key{}>'.format(':opensource')``,
    so the pieces, not the finished tags, are what its source contains.
    """


@toolwire.hookimpl
def register_parsers(register: Callable[[ParserSpec], None]) -> None:
    """Register the ``glm_xml`` and ``hy3_xml`` families."""
    register(parser_spec(GLM_FORMAT, detect_glm))
    register(parser_spec(HY3_FORMAT, detect_hy3))


@toolwire.hookimpl
def register_stream_filters(register: Callable[[StreamFilterSpec], None]) -> None:
    """Register Hy3's ``<think:opensource>`` reasoning filter."""
    register_reasoning(HY3_FORMAT, register, name="hy3_think",
                       template_uses=lambda source: detect_hy3(source) > 0)
