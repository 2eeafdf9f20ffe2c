"""toolwire-bracket-calls: an example toolwire parser plugin.

Models of this (made-up) family write a tool call as one bracketed line::

    Let me look.
    [[call search {"query": "alex", "limit": 5}]]

The whole plugin is a record of that markup, run by toolwire's engine, a
``detect`` function that recognises chat templates rendering it, and the
``register_parsers`` hook. ``pyproject.toml`` publishes this module in the
``toolwire`` entry-point group.
"""

from __future__ import annotations

from collections.abc import Callable

import toolwire
from toolwire import CallFormat, JsonArguments, ParserSpec
from toolwire.plugin_api import parser_spec

__all__ = ["BRACKET_FORMAT", "FAMILY", "detect", "register_parsers"]

FAMILY = "bracket_calls"

BRACKET_FORMAT = CallFormat(
    family=FAMILY,
    description="[[call NAME {json}]] bracketed calls (example plugin)",
    call_open="[[call ",  # a call opens with this marker,
    header_stop="{",  # its name runs up to the arguments' "{",
    arguments=JsonArguments(),  # which are one JSON object,
    call_close="]]",  # and it closes with this marker
)


def detect(template: str) -> float:
    """Score a chat template: ``0.8`` when it renders ``[[call NAME {json}]]``, else ``0.0``."""
    return 0.8 if "[[call " in template else 0.0


@toolwire.hookimpl
def register_parsers(register: Callable[[ParserSpec], None]) -> None:
    """Register the ``bracket_calls`` family."""
    register(parser_spec(BRACKET_FORMAT, detect))
