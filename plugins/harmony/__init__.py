"""Built-in parser plugin for harmony-framed replies: gpt-oss and Muse Glimmer.

``harmony`` (OpenAI gpt-oss)
    Messages on channels: ``analysis`` is reasoning, ``final`` (and
    ``commentary`` without a recipient) is text, and a message addressed
    ``to=functions.NAME`` is a call with JSON arguments::

        <|channel|>analysis<|message|>...<|end|>
        <|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json
        <|message|>{"city": "Paris"}<|call|>

    The template renders only the first call of an assistant message, and it
    renders an assistant message's content beside a call as the ``analysis``
    message (so it comes back as reasoning). A message to a built-in tool
    (``to=python``, ``to=browser.search``) is a call only when the request
    offered a tool of that name; otherwise it is dropped with an
    ``unoffered_recipient`` diagnostic. ``<|call|>`` ends only a message with a
    recipient, and an end token inside a JSON string of a tool body ends nothing.

``glimmer`` (Muse Glimmer, "ATEM")
    The same framing with recipients instead of channels: ``to=self`` is
    reasoning, ``to=user`` text, and ``to=NAME`` a call whose body is
    ``<atem:function_calls><atem:invoke name="NAME"><atem:parameter
    name="P">V</atem:parameter>...`` (string values raw, other values JSON).
    One call per message; the template drops the content beside calls.

Neither needs a reasoning filter: the parser routes the channels itself.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import toolwire
from toolwire.plugin_api import (
    CallFormat,
    Header,
    ParserSpec,
    TaggedArguments,
    template_mentions,
)

from .parser import (
    HarmonyDialect,
    HarmonyHeader,
    HarmonyParser,
    Route,
    function_recipient,
)

__all__ = [
    "GLIMMER_DIALECT",
    "GLIMMER_FAMILY",
    "GLIMMER_FORMAT",
    "HARMONY_DIALECT",
    "HARMONY_FAMILY",
    "HarmonyParser",
    "detect_glimmer",
    "detect_harmony",
    "register_parsers",
]

HARMONY_FAMILY = "harmony"
GLIMMER_FAMILY = "glimmer"


def _gpt_oss_route(header: HarmonyHeader) -> Route:
    recipient = header.recipient
    if recipient.startswith("functions."):
        return Route("call", function_recipient(recipient))
    if recipient and recipient not in ("user", "all", "assistant"):
        # a built-in tool (python, browser.search): the request must offer it by name
        return Route("builtin", recipient)
    if header.channel == "analysis":
        return Route("reasoning")
    return Route("text")


def _glimmer_route(header: HarmonyHeader) -> Route:
    recipient = header.recipient
    if recipient == "self" or header.channel == "analysis":
        return Route("reasoning")
    if not recipient or recipient in ("user", "all", "assistant"):
        return Route("text")
    return Route("call", function_recipient(recipient))


GLIMMER_FORMAT = CallFormat(
    family=GLIMMER_FAMILY,
    section_open="<atem:function_calls>",
    section_close="</atem:function_calls>",
    call_open="<atem:invoke",
    header=Header(attributes={"name": "name"}),
    header_end=">",
    call_close="</atem:invoke>",
    arguments=TaggedArguments(open="<atem:parameter", header=Header(attributes={"name": "name"}),
                              header_end=">", close="</atem:parameter>"),
)
"""The ``<atem:invoke>`` body of a Glimmer tool message."""

HARMONY_DIALECT = HarmonyDialect(family=HARMONY_FAMILY, route=_gpt_oss_route)
GLIMMER_DIALECT = HarmonyDialect(family=GLIMMER_FAMILY, route=_glimmer_route,
                                 call_format=GLIMMER_FORMAT)


detect_harmony = template_mentions("<|channel|>", "<|message|>", "<|call|>")
"""Scores a chat template: gpt-oss harmony (channels and ``<|call|>``)."""


detect_glimmer = template_mentions("<atem:function_calls>", "<|message|>")
"""Scores a chat template: Muse Glimmer's ``<atem:function_calls>`` messages."""


@toolwire.hookimpl
def register_parsers(register: Callable[[ParserSpec], None]) -> None:
    """Register the ``harmony`` and ``glimmer`` families."""
    register(ParserSpec(name=HARMONY_FAMILY, detect=detect_harmony,
                        create=functools.partial(HarmonyParser, HARMONY_DIALECT),
                        description="gpt-oss harmony channels, to=functions.NAME JSON calls"))
    register(ParserSpec(name=GLIMMER_FAMILY, detect=detect_glimmer,
                        create=functools.partial(HarmonyParser, GLIMMER_DIALECT),
                        description="Muse Glimmer to=NAME messages with <atem:invoke> XML"))
