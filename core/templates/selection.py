"""Choosing the parser for a chat template, and building a reply's pipeline.

Every registered parser scores the template; the highest score wins, a tie is
an error naming both plugins, and a family named by the user overrides the
scores. When nothing claims the template, the caller learns which well-known
tool-call markers the template contains, so the message can say what family
it looks like and how to add a plugin.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from typing import Any

import attrs

from ..conversation.schema import tool_parameters_by_name
from ..errors import ParserConflictError, ParserNotFoundError
from ..events import Event
from ..hooks.manager import PluginManager, default_plugin_manager
from ..parse.protocol import FilterContext, ParsedReply, ParserSpec, ReplyPipeline, collect_reply

__all__ = [
    "DERIVED_FAMILY",
    "KNOWN_MARKERS",
    "ParserChoice",
    "build_pipeline",
    "parse_reply",
    "score_parsers",
    "select_parser",
    "template_hash",
]

KNOWN_MARKERS: tuple[str, ...] = (
    "<tool_call>", "<function=", "<parameter=", "[TOOL_CALLS]", "<|python_tag|>",
    "<｜tool▁calls▁begin｜>", "<｜DSML｜", "<|tool_calls_section_begin|>", "to=functions",
    "<|tool_call>", "<arg_key>", "<invoke", "<minimax:tool_call>", "functools[",
    "<|START_ACTION|>", "<TOOLCALL>", "<tool_calls>", "<|tool_call_start|>",
    "<seed:tool_call>", "<|tools_prefix|>", "<|function_call|>", ">>>", "Action:",
)
"""Tool-call markers of known families, reported when no parser claims a template."""


def template_hash(source: str) -> str:
    """The sha256 of a template source (hex), as shown by ``toolwire detect``."""
    return hashlib.sha256(source.encode("utf-8", "surrogatepass")).hexdigest()


def seen_markers(source: str) -> tuple[str, ...]:
    """The :data:`KNOWN_MARKERS` that appear in a template source."""
    return tuple(m for m in KNOWN_MARKERS if m in source)


@attrs.frozen
class ParserChoice:
    """The outcome of scoring: the winner and everyone's scores, best first."""

    spec: ParserSpec
    score: float
    ranking: tuple[tuple[str, float], ...]


def score_parsers(source: str, plugins: PluginManager) -> list[tuple[ParserSpec, float]]:
    """Every parser's score for ``source``, best first (a failing detector scores 0)."""
    scored: list[tuple[ParserSpec, float]] = []
    for spec in plugins.parsers().values():
        try:
            score = float(spec.detect(source))
        except Exception:  # a broken detector must not break selection for the others
            score = 0.0
        scored.append((spec, score))
    scored.sort(key=lambda pair: (-pair[1], pair[0].name))
    return scored


DERIVED_FAMILY = "derived"
"""The family name that asks for a parser derived from the template itself."""


def select_parser(source: str | None, plugins: PluginManager | None = None, *,
                  family: str | None = None, derive: bool = True) -> ParserChoice:
    """Pick the parser for a chat template (or the named ``family``).

    Every registered parser scores the template and the highest wins. When none
    claims it (and ``derive`` is true), a parser derived from the template's own
    rendering of tool calls is used (family ``derived``, score ``0``); it never
    wins over a plugin. ``family="derived"`` asks for it explicitly.

    :raises ParserNotFoundError: no parser claims the template and none could be
        derived (or the family is not registered); the message names the markers
        seen and why derivation failed.
    :raises ParserConflictError: two parsers tie for the highest score.
    """
    plugins = plugins or default_plugin_manager()
    if family == DERIVED_FAMILY:
        if source is None:
            raise ParserNotFoundError("a derived parser needs the chat template")
        return _derived_choice(source, ())
    if family is not None:
        spec = plugins.parser(family)
        return ParserChoice(spec, 1.0, ((spec.name, 1.0),))
    if source is None:
        raise ParserNotFoundError("no chat template and no family given: cannot choose a parser")
    scored = score_parsers(source, plugins)
    ranking = tuple((s.name, score) for s, score in scored)
    if not scored or scored[0][1] <= 0.0:
        if derive:
            return _derived_choice(source, ranking)
        raise _not_claimed(source, "")
    if len(scored) > 1 and scored[1][1] == scored[0][1]:
        a, b = scored[0][0], scored[1][0]
        raise ParserConflictError(
            f"parsers {a.name!r} (plugin {a.plugin!r}) and {b.name!r} (plugin {b.plugin!r}) "
            f"both claim this template with score {scored[0][1]:g}; choose one with family=...")
    return ParserChoice(scored[0][0], scored[0][1], ranking)


def _not_claimed(source: str, why: str) -> ParserNotFoundError:
    markers = seen_markers(source)
    seen = ", ".join(repr(m) for m in markers) or "no known tool-call markers"
    derived = f" A parser could not be derived from the template either: {why}." if why else ""
    return ParserNotFoundError(
        f"no parser plugin claims this chat template (sha256 {template_hash(source)[:12]}); "
        f"seen: {seen}.{derived} Tool calls will stay text. Install or write a parser plugin "
        "for this family (see docs/plugin-tutorial.md), or force one with family=...",
        seen_markers=markers)


_DERIVED: dict[str, tuple[ParserSpec | None, str]] = {}


def _derived_choice(source: str, ranking: tuple[tuple[str, float], ...]) -> ParserChoice:
    from ..parse.family import parser_spec
    from ..parse.protocol import nine_char_call_id
    from .derive import DerivationError, derive_format

    key = template_hash(source)
    cached = _DERIVED.get(key)
    if cached is None:
        try:
            # verified with 9-character ids, the strictest form templates demand (Mistral),
            # so replayed history renders the same way
            derived = attrs.evolve(parser_spec(derive_format(source), lambda _: 0.0,
                                               make_call_id=nine_char_call_id),
                                   plugin="toolwire.templates.derive")
            cached = (derived, "")
        except DerivationError as exc:
            cached = (None, str(exc))
        if len(_DERIVED) > 64:
            _DERIVED.clear()
        _DERIVED[key] = cached
    spec, why = cached
    if spec is None:
        raise _not_claimed(source, why)
    return ParserChoice(spec, 0.0, (*ranking, (DERIVED_FAMILY, 0.0)))


def build_pipeline(spec: ParserSpec | None, tools: Mapping[str, Any], *,
                   plugins: PluginManager | None = None, chat_template: str | None = None,
                   prompt_tail: str = "") -> ReplyPipeline:
    """The stream filters that apply, then a fresh parser from ``spec``."""
    plugins = plugins or default_plugin_manager()
    fmt = spec.format if spec is not None else None
    context = FilterContext(
        family=spec.name if spec else None, chat_template=chat_template,
        prompt_tail=prompt_tail,
        call_open=(*fmt.section_open, *fmt.call_open) if fmt is not None else (),
        call_close=(*fmt.section_close, *fmt.call_close) if fmt is not None else ())
    filters = []
    for filter_spec in plugins.stream_filters():
        made = filter_spec.create(context)
        if made is not None:
            filters.append(made)
    return ReplyPipeline(filters, spec.create(tools) if spec is not None else None)


def parse_reply(text: str, *, family: str | None = None, chat_template: str | None = None,
                tools: Sequence[Any] | None = None, chunk_size: int = 0,
                plugins: PluginManager | None = None) -> ParsedReply:
    """Parse a whole model reply in the format of a family or a chat template.

    :param text: the raw reply, as the model wrote it.
    :param family: the parser family (``qwen_xml``); wins over ``chat_template``.
    :param chat_template: a template source; its parser is selected by score.
    :param tools: OpenAI-style ``tools`` (or :class:`Tool` objects), used to type
        argument values by their schemas.
    :param chunk_size: feed the parser this many characters at a time (``0``:
        all at once); the result does not depend on it.
    :raises ParserNotFoundError: no parser for the family or template.
    """
    plugins = plugins or default_plugin_manager()
    if family is None and chat_template is None:
        raise ParserNotFoundError("parse_reply needs family=... or chat_template=...")
    choice = select_parser(chat_template, plugins, family=family)
    pipeline = build_pipeline(choice.spec, tool_parameters_by_name(tools), plugins=plugins,
                              chat_template=chat_template)
    events: list[Event] = []
    step = chunk_size if chunk_size > 0 else max(len(text), 1)
    for start in range(0, len(text), step):
        events.extend(pipeline.feed(text[start:start + step]))
    events.extend(pipeline.close())
    return collect_reply(events, choice.spec.name)
