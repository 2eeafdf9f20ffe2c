"""Built-in parser plugin for the families that wrap JSON calls in their own markers.

One plugin registers one :class:`~toolwire.parse.protocol.ParserSpec` per format of
:data:`.formats.FORMATS` (Nemotron Nano v2, Apriel, MiniMax-M1, FireFunction v2,
Apertus, Command R7B / Cohere2, Command R+, Functionary v3.1 and v3.2,
GigaChat 3 / 3.1), all served by one configurable parser: the formats differ
only in their markers and keys. Families whose reasoning block is not
``<think>`` (Apriel, Apertus, Cohere) get a reasoning filter too.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import toolwire
from toolwire.parse.protocol import ParserSpec, StreamFilterSpec, StreamParser
from toolwire.parse.reasoning import family_think_filter_spec

from .formats import FORMATS, WrapperFormat
from .parser import WrapperParser

__all__ = ["FORMATS", "WrapperFormat", "WrapperParser", "detector", "parser_spec",
           "reasoning_filter_spec"]

CLAIM_SCORE = 0.8


def detector(fmt: WrapperFormat) -> Callable[[str], float]:
    """The ``detect`` function of a format: :data:`CLAIM_SCORE` for its templates, else 0."""

    def detect(template: str) -> float:
        return CLAIM_SCORE if fmt.claims(template) else 0.0

    detect.__doc__ = f"Score a chat template: high when it renders {fmt.family} markup."
    return detect


def parser_spec(fmt: WrapperFormat) -> ParserSpec:
    """The :class:`ParserSpec` of one wrapper format."""

    def create(tools: Mapping[str, Any]) -> StreamParser:
        return WrapperParser(fmt, tools)

    return ParserSpec(name=fmt.family, detect=detector(fmt), create=create,
                      description=fmt.description)


def reasoning_filter_spec(fmt: WrapperFormat) -> StreamFilterSpec:
    """The filter that routes a format's own reasoning block to reasoning events."""
    assert fmt.reasoning is not None
    open_tag, close_tag = fmt.reasoning
    return family_think_filter_spec(open_tag, close_tag, name=f"{fmt.family}_reasoning",
                                    families=(fmt.family,), starts_unopened=fmt.reasoning_auto)


@toolwire.hookimpl
def register_parsers(register: Callable[[ParserSpec], None]) -> None:
    """Register every wrapper family."""
    for fmt in FORMATS:
        register(parser_spec(fmt))


@toolwire.hookimpl
def register_stream_filters(register: Callable[[StreamFilterSpec], None]) -> None:
    """Register the reasoning filters of the families that have their own tags."""
    for fmt in FORMATS:
        if fmt.reasoning is not None:
            register(reasoning_filter_spec(fmt))
