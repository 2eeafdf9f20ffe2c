"""Turning a :class:`~toolwire.parse.record.CallFormat` into what a plugin registers.

A family plugin is a record plus detection::

    FORMAT = CallFormat(family="my_xml", ...)

    @toolwire.hookimpl
    def register_parsers(register):
        register(parser_spec(FORMAT, detect=template_mentions("<my_call>", "<arg ")))

    @toolwire.hookimpl
    def register_stream_filters(register):
        register_reasoning(FORMAT, register)   # when the family has its own reasoning tags
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from ..vocabulary.call_ids import default_call_id
from .engine import CallParser
from .protocol import ParserSpec, StreamFilterSpec, StreamParser
from .reasoning import family_think_filter_spec
from .record import CallFormat

__all__ = ["parser_spec", "reasoning_filter", "register_reasoning", "template_mentions"]


def template_mentions(*needles: str, unless: tuple[str, ...] = (),
                      score: float = 0.95) -> Callable[[str], float]:
    """A ``detect``: ``score`` when the template source holds every needle and none of
    ``unless`` (markers appear in a template source inside Jinja strings)."""

    def detect(template: str) -> float:
        if all(n in template for n in needles) and not any(u in template for u in unless):
            return score
        return 0.0

    return detect


def parser_spec(fmt: CallFormat, detect: Callable[[str], float], *,
                make_call_id: Callable[[int], str] = default_call_id,
                description: str = "") -> ParserSpec:
    """The :class:`ParserSpec` of a family described by ``fmt``, run by the one engine."""

    def create(tools: Mapping[str, Any]) -> StreamParser:
        return CallParser(fmt, tools)

    return ParserSpec(name=fmt.family, detect=detect, create=create, make_call_id=make_call_id,
                      description=description or fmt.description, format=fmt)


def reasoning_filter(fmt: CallFormat, *, name: str | None = None,
                     template_uses: Callable[[str], bool] | None = None,
                     priority: int = 100) -> StreamFilterSpec | None:
    """The stream filter for the family's own reasoning tags (``None`` when it has none)."""
    if fmt.reasoning is None:
        return None
    open_tag, close_tag = fmt.reasoning
    return family_think_filter_spec(open_tag, close_tag, name=name or f"{fmt.family}_reasoning",
                                    families=(fmt.family,),
                                    starts_unopened=fmt.reasoning_unopened,
                                    answer_open=fmt.answer_open,
                                    open_headers=fmt.reasoning_headers,
                                    template_uses=template_uses, priority=priority)


def register_reasoning(fmt: CallFormat, register: Callable[[StreamFilterSpec], None], *,
                       name: str | None = None,
                       template_uses: Callable[[str], bool] | None = None) -> None:
    """Register :func:`reasoning_filter` of ``fmt`` if the family has reasoning tags."""
    spec = reasoning_filter(fmt, name=name, template_uses=template_uses)
    if spec is not None:
        register(spec)
