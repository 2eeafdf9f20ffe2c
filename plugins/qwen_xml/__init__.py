"""Built-in parser plugin for the Qwen3.5 / Qwen3-Coder XML tool-call markup.

The templates render a call as::

    <tool_call>
    <function=NAME>
    <parameter=P>
    VALUE
    </parameter>
    </function>
    </tool_call>

The family is a record run by the one engine; the newline after a parameter's
header and the one before its closing tag are markup (``trim_newline``), and
non-string values may be Python spellings (the templates print ``None``). Its
``<think>`` blocks go through the core's shared reasoning filter.
"""

from __future__ import annotations

from collections.abc import Callable

import toolwire
from toolwire.plugin_api import CallFormat, ParserSpec, TaggedArguments, parser_spec

__all__ = ["FAMILY", "QWEN_FORMAT", "detect", "register_parsers"]

FAMILY = "qwen_xml"

QWEN_FORMAT = CallFormat(
    family=FAMILY,
    description="Qwen3.5 / Qwen3-Coder <tool_call><function=...> XML",
    section_open="<tool_call>",
    section_close="</tool_call>",
    call_open="<function=",
    # Qwen3-Coder models drop the <tool_call> opener: a whole, well-formed <function=
    # call opens the section itself (prose mentioning <function= stays text)
    bare_calls=True,
    header_end=">",
    call_close="</function>",
    arguments=TaggedArguments(open="<parameter=", header_end=">", close="</parameter>",
                              trim_newline=True, python_values=True),
)
"""The Qwen XML markup."""


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


@toolwire.hookimpl
def register_parsers(register: Callable[[ParserSpec], None]) -> None:
    """Register the ``qwen_xml`` family."""
    register(parser_spec(QWEN_FORMAT, detect))
