"""Built-in parser plugin for the families that wrap JSON calls in their own markers.

One plugin registers one parser per record of :data:`.formats.FORMATS`
(Nemotron Nano v2, Apriel, MiniMax-M1, FireFunction v2, Apertus, Command R7B /
Cohere2, Command R+, Functionary v3.1 and v3.2, GigaChat 3 / 3.1), all run by
the one engine: the formats differ only in their markers and keys. Families
whose reasoning block is not ``<think>`` (Apriel, Apertus, Cohere) get a
reasoning filter too.
"""

from __future__ import annotations

from collections.abc import Callable

import toolwire
from toolwire.plugin_api import (
    CallFormat,
    ParserSpec,
    StreamFilterSpec,
    parser_spec,
    register_reasoning,
)

from .formats import CLAIMS, FORMATS

__all__ = ["CLAIMS", "FORMATS", "detector", "register_parsers", "register_stream_filters"]

CLAIM_SCORE = 0.8


def detector(fmt: CallFormat) -> Callable[[str], float]:
    """The ``detect`` function of a format: :data:`CLAIM_SCORE` for its templates, else 0."""
    claims = CLAIMS[fmt.family]

    def detect(template: str) -> float:
        return CLAIM_SCORE if claims(template) else 0.0

    detect.__doc__ = f"Score a chat template: high when it renders {fmt.family} markup."
    return detect


@toolwire.hookimpl
def register_parsers(register: Callable[[ParserSpec], None]) -> None:
    """Register every wrapper family."""
    for fmt in FORMATS:
        register(parser_spec(fmt, detector(fmt)))


@toolwire.hookimpl
def register_stream_filters(register: Callable[[StreamFilterSpec], None]) -> None:
    """Register the reasoning filters of the families that have their own tags."""
    for fmt in FORMATS:
        register_reasoning(fmt, register)
