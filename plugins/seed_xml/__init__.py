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

from collections.abc import Callable, Mapping
from typing import Any

import toolwire
from toolwire.parse.protocol import ParserSpec, StreamFilterSpec, StreamParser
from toolwire.parse.reasoning import family_think_filter_spec
from toolwire.parse.tagged_stream import TaggedCallParser, TaggedFormat

__all__ = ["FAMILY", "SEED_FORMAT", "detect", "register_parsers", "register_stream_filters"]

FAMILY = "seed_xml"

SEED_FORMAT = TaggedFormat(
    family=FAMILY,
    section_open=("<seed:tool_call>",),
    section_close=("</seed:tool_call>",),
    call_open="<function=",
    call_header_end=(">",),
    call_close="</function>",
    param_open="<parameter=",
    param_header_end=">",
    param_close="</parameter>",
    python_values=True,
)
"""The Seed-OSS markup."""


def detect(template: str) -> float:
    """Score a chat template: it renders calls inside ``<seed:tool_call>``."""
    if "<seed:tool_call>" in template and "<parameter=" in template:
        return 0.95
    return 0.0


def _create(tools: Mapping[str, Any]) -> StreamParser:
    return TaggedCallParser(SEED_FORMAT, tools)


@toolwire.hookimpl
def register_parsers(register: Callable[[ParserSpec], None]) -> None:
    """Register the ``seed_xml`` family."""
    register(ParserSpec(name=FAMILY, detect=detect, create=_create,
                        description="ByteDance Seed-OSS <seed:tool_call><function=...> XML"))


@toolwire.hookimpl
def register_stream_filters(register: Callable[[StreamFilterSpec], None]) -> None:
    """Register the ``<seed:think>`` reasoning filter."""
    register(family_think_filter_spec("<seed:think>", "</seed:think>", name="seed_think",
                                   families=(FAMILY,)))
