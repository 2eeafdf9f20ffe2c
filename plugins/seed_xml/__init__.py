"""Built-in parser plugin for ByteDance Seed-OSS tool calls.

The Seed-OSS template writes Qwen-like XML inside a ``seed:`` namespace, with
each value on the same line as its tags::

    <seed:tool_call>
    <function=get_weather>
    <parameter=city>Paris</parameter>
    <parameter=days>3</parameter>
    </function>
    </seed:tool_call>

Non-string values go through Jinja's ``|string``, so booleans, ``None`` and
nested lists or dicts arrive as Python literals (``True``, ``{'a': [1, None]}``);
JSON spellings are accepted as well. Reasoning is a ``<seed:think>`` block,
routed by this plugin's own stream filter (``seed_think``).
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

__all__ = ["FAMILY", "SEED_FORMAT", "detect", "register_parsers", "register_stream_filters"]

FAMILY = "seed_xml"

SEED_FORMAT = CallFormat(
    family=FAMILY,
    description="ByteDance Seed-OSS <seed:tool_call><function=...> XML",
    section_open="<seed:tool_call>",
    section_close="</seed:tool_call>",
    call_open="<function=",
    header_end=">",
    call_close="</function>",
    arguments=TaggedArguments(open="<parameter=", header_end=">", close="</parameter>",
                              python_values=True),
    reasoning=("<seed:think>", "</seed:think>"),
)
"""The Seed-OSS markup."""


detect = template_mentions("<seed:tool_call>", "<parameter=")
"""Scores a chat template: it renders calls inside ``<seed:tool_call>``."""


@toolwire.hookimpl
def register_parsers(register: Callable[[ParserSpec], None]) -> None:
    """Register the ``seed_xml`` family."""
    register(parser_spec(SEED_FORMAT, detect))


@toolwire.hookimpl
def register_stream_filters(register: Callable[[StreamFilterSpec], None]) -> None:
    """Register the ``<seed:think>`` reasoning filter."""
    register_reasoning(SEED_FORMAT, register, name="seed_think")
