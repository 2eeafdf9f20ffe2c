"""Checking a parser's claim on a template against the template's own rendered call.

A detector scores a template by the markers it mentions, and markers alone cannot
tell variants apart: a release may keep one family's ``<|tool_call_start|>`` and
put a JSON list between the markers instead of pythonic calls. So before a
claimed parser is used, the template renders a probe turn (a call with a string,
an integer and an object argument, and a second call where the template renders
two) and the parser must read those calls back exactly, from the whole text and
from 1-character deltas, through the same pipeline (reasoning filters included)
a live reply goes through.

A template that renders no call, or raises on the probe, cannot vouch for any
parser: the claim is *unverifiable* and selection falls back to the scores.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any, Final, Literal

import attrs

from ..errors import TemplateError
from ..events import Event
from ..hooks.manager import PluginManager
from ..parse.protocol import ParserSpec, collect_reply
from ..templates.assistant_turns import AssistantTurnRenderer, RenderedReply
from ..vocabulary.schema import tool_parameters_by_name
from .pipeline import build_pipeline

__all__ = ["PROBE_CALLS", "PROBE_TOOLS", "ClaimCheck", "check_claim"]

_LOOKUP, _NOTE = "toolwire_probe_lookup", "toolwire_probe_note"

PROBE_TOOLS: Final[tuple[dict[str, Any], ...]] = (
    {"type": "function", "function": {
        "name": _LOOKUP, "description": "Look something up.",
        "parameters": {"type": "object", "properties": {
            "query": {"type": "string", "description": "what to look for"},
            "limit": {"type": "integer", "description": "how many results"},
            # additionalProperties spelled out: templates that print Python type
            # hints (Command R+) read it from every object parameter
            "filters": {"type": "object", "description": "narrowing conditions",
                        "additionalProperties": {"type": "string"}}},
            "required": ["query", "limit", "filters"]}}},
    {"type": "function", "function": {
        "name": _NOTE, "description": "Write a note.",
        "parameters": {"type": "object", "properties": {
            "text": {"type": "string", "description": "the note"}},
            "required": ["text"]}}},
)
"""The tools the probe turn is rendered with (and parsed against)."""

PROBE_CALLS: Final[tuple[tuple[str, dict[str, Any]], ...]] = (
    (_LOOKUP, {"query": "two words", "limit": 7, "filters": {"kind": "file", "scope": "src"}}),
    (_NOTE, {"text": "second call"}),
)
"""The calls of the probe turn: a string, an integer and an object; then a second call."""

Outcome = Literal["verified", "refused", "unverifiable"]


@attrs.frozen
class ClaimCheck:
    """What the probe said about one claimed parser.

    :ivar family: the parser's family.
    :ivar plugin: the plugin that registered it.
    :ivar score: its detector's score for the template.
    :ivar outcome: ``verified`` (it read the probe back), ``refused`` (it did
        not) or ``unverifiable`` (the template could not render the probe).
    :ivar reason: why it was refused or could not be verified (``""`` if verified).
    :ivar probe: the reply text the template rendered for the probe calls.
    """

    family: str
    plugin: str
    score: float
    outcome: Outcome
    reason: str = ""
    probe: str = ""

    def to_dict(self) -> dict[str, Any]:
        """The check as JSON-ready data (``toolwire detect --json``)."""
        return attrs.asdict(self)


def _render_probe(spec: ParserSpec, source: str) -> RenderedReply:
    calls = [(name, dict(args)) for name, args in PROBE_CALLS]
    renderer = AssistantTurnRenderer(source, make_call_id=spec.make_call_id,
                                     prefetch=[(calls, PROBE_TOOLS)])
    return renderer.render(calls if renderer.parallel_calls else calls[:1], tools=PROBE_TOOLS)


def _read_back(spec: ParserSpec, source: str, rendered: RenderedReply, step: int,
               plugins: PluginManager) -> list[tuple[str, dict[str, Any]]]:
    pipeline = build_pipeline(spec, tool_parameters_by_name(PROBE_TOOLS), plugins=plugins,
                              chat_template=source, prompt_tail=rendered.prompt_tail)
    text = rendered.text
    events: list[Event] = []
    for at in range(0, len(text), step):
        events.extend(pipeline.feed(text[at:at + step]))
    events.extend(pipeline.close())
    return [(call.name, dict(call.arguments)) for call in collect_reply(events).tool_calls]


def _shown(calls: Sequence[tuple[str, Mapping[str, Any]]]) -> str:
    return ", ".join(f"{name}({json.dumps(args, sort_keys=True)})" for name, args in calls) \
        or "no call"


def check_claim(spec: ParserSpec, score: float, source: str, *,
                plugins: PluginManager) -> ClaimCheck:
    """Render the probe turn through ``source`` and read it back with ``spec``.

    Never raises: a parser that raises is refused, a template that cannot render
    the probe makes the claim unverifiable.
    """
    def verdict(outcome: Outcome, reason: str = "", probe: str = "") -> ClaimCheck:
        return ClaimCheck(spec.name, spec.plugin, score, outcome, reason, probe)

    try:
        rendered = _render_probe(spec, source)
    except TemplateError as exc:
        return verdict("unverifiable", f"the template cannot render the probe call: {exc}")
    except Exception as exc:  # a call-id factory or the renderer failing on odd output
        return verdict("unverifiable", f"rendering the probe call failed: "
                                       f"{type(exc).__name__}: {exc}")
    expected = [(name, dict(args)) for name, args in
                PROBE_CALLS[:2 if _NOTE in rendered.text else 1]]
    for step, how in ((max(len(rendered.text), 1), "the whole reply"), (1, "1-character deltas")):
        try:
            got = _read_back(spec, source, rendered, step, plugins)
        except Exception as exc:
            return verdict("refused", f"the parser raised on {how}: {type(exc).__name__}: {exc}",
                           rendered.text)
        if got != expected:
            return verdict("refused", f"from {how} it read {_shown(got)}; the template wrote "
                                      f"{_shown(expected)}", rendered.text)
    return verdict("verified", probe=rendered.text)
