"""Shared support for the JSON-family parser tests (hermes_json, llama3_json, mistral,
deepseek, json_wrappers).

* the folder of real templates and which family each one selects;
* conformance runs (``toolwire.testing.check_parser``) sized to the test budget;
* a harness that renders a turn through templates the conformance renderer cannot
  drive (it cuts the model's text out between two known markers) and checks the
  same properties;
* BFCL cases turned into concrete calls for round trips.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Sequence
from types import ModuleType
from typing import Any

import attrs
from hypothesis import strategies as st

from tests.support.families import (
    Call,
    Case,
    canonical_calls,
    conformance_examples,
    parse,
    plugins,
    template_source,
)
from tests.support.templates import template_params, template_path
from toolwire import get_chat_template, merge_events
from toolwire.errors import ParserNotFoundError, TemplateError
from toolwire.events import DiagnosticEvent
from toolwire.families.selection import select_parser
from toolwire.parse.protocol import collect_reply
from toolwire.testing import (
    AssistantTurnRenderer,
    ConformanceReport,
    RenderedReply,
    check_parser,
)
from toolwire.testing import strategies as tws
from toolwire.vocabulary.call_ids import default_call_id

USER = "toolwire-user-turn"





def template_names() -> list[Any]:
    """Every real template file name as a parameter (one that skips when they are absent)."""
    return template_params()




def selected_family(name: str) -> str | None:
    """The family ``select_parser`` picks for a template, or ``None`` when none claims it."""
    try:
        return select_parser(template_source(name), plugins()).spec.name
    except ParserNotFoundError:
        return None




def conformance(plugin: ModuleType, name: str, *, markers: Sequence[str] | None = None,
                tools_strategy: st.SearchStrategy[Case] | None = None) -> ConformanceReport:
    """``check_parser`` through a real template; raises ``ConformanceError`` on a failure."""
    return check_parser(plugin, template_path(name), examples=conformance_examples(),
                        markers=markers, plugins=plugins(), tools_strategy=tools_strategy)


def _nullable_list_type(value: Any) -> bool:
    if isinstance(value, dict):
        kind = value.get("type")
        if isinstance(kind, list) and "null" in kind:
            return True
        return any(_nullable_list_type(v) for v in value.values())
    if isinstance(value, list):
        return any(_nullable_list_type(v) for v in value)
    return False


def cases_without_nullable_list_types(markers: Sequence[str]) -> st.SearchStrategy[Case]:
    """Tools and calls for templates that recurse forever on ``"type": [..., "null"]``.

    The Hermes 2 Pro / 3 templates iterate over a type name that is a string
    (``"null"``) as if it were a list of types, without end. The conformance suite
    rejects a turn the template cannot render, but not yet a prompt (its garbage
    branch of ``chunking_invariance``), so such tools are not drawn for them.
    """
    fragments = [f for f in tws.markup_fragments(markers) if not any(m in f for m in markers)]
    return tws.tool_calls_with_schemas(
        max_calls=2, strings=tws.adversarial_text(fragments=fragments, very_long=True)
    ).filter(lambda case: not _nullable_list_type(case[0]))


# -- parsing ---------------------------------------------------------------------------








def strip_blanks(text: str) -> str:
    return re.sub(r"\s", "", text)


def render_turn(renderer: AssistantTurnRenderer, calls: Sequence[Call],
                tools: Sequence[dict[str, Any]]) -> RenderedReply:
    """``renderer.render``, retried once: the lenient environment's default ``datetime``
    (FireFunction v2 prints it) has seconds, so two renders may straddle a tick and
    differ before the turn."""
    try:
        return renderer.render(calls, tools=tools)
    except TemplateError:
        return renderer.render(calls, tools=tools)


# -- the harness for templates the conformance renderer cannot drive --------------------


@attrs.frozen
class TurnCut:
    """How to cut a model's reply out of a rendered ``[user, assistant]`` conversation.

    :ivar template: the template file.
    :ivar family: the family that must claim it.
    :ivar start: the model's text begins after the first ``start`` following the user turn.
    :ivar end: ... and ends before the first ``end`` after that (or at the end).
    :ivar reason: why the conformance renderer cannot drive this template.
    :ivar string_args: the template needs arguments as JSON strings.
    :ivar content: the template renders content beside the calls.
    :ivar content_none: the template renders calls only when the content is ``None``.
    :ivar max_calls: the most calls the template renders correctly in one turn.
    :ivar markers: the family's markup, kept out of generated content and values.
    :ivar live_prefix: text the live generation prompt ends with that the history
        turn repeats (Functionary v3.2's ``>>>``); also tested with it removed.
    :ivar content_ok: content the format can tell from its markup (beyond holding
        no marker).
    :ivar unrepresentable: text the template cannot carry unchanged in a value or the
        content (kept out of both, like the markers).
    """

    template: str
    family: str
    start: str
    end: str
    reason: str
    markers: tuple[str, ...]
    string_args: bool = False
    content: bool = True
    content_none: bool = False
    max_calls: int = 3
    live_prefix: str = ""
    make_call_id: Callable[[int], str] = default_call_id
    content_ok: Callable[[str], bool] = lambda text: True
    unrepresentable: tuple[str, ...] = ()


def prompt_tools(tools: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """The tools as the templates' prompts show them: every parameter a described string.

    The tool list only shapes the system prompt, never how a call is rendered, and
    some templates choke on schemas they do not expect (Command R+ reads a
    ``description`` of every parameter and ``additionalProperties`` of objects).
    """
    out = []
    for tool in tools:
        function = dict(tool["function"])
        params = dict(function.get("parameters") or {})
        params["properties"] = {k: {"type": "string", "description": f"the {k}"}
                                for k in params.get("properties", {})}
        params.pop("$defs", None)
        function["parameters"] = params
        out.append({**tool, "function": function})
    return out


def render_cut(cut: TurnCut, calls: Sequence[Call], tools: Sequence[dict[str, Any]], *,
               content: str = "", reasoning: str = "") -> tuple[str, str]:
    """``(prompt_tail, reply)``: the turn rendered through the real template, cut out."""
    message: dict[str, Any] = {
        "role": "assistant",
        "content": None if cut.content_none else content,
        "tool_calls": [{"id": cut.make_call_id(i), "type": "function",
                        "function": {"name": name,
                                     "arguments": json.dumps(args, ensure_ascii=False)
                                     if cut.string_args else args}}
                       for i, (name, args) in enumerate(calls)]}
    if reasoning:
        message["reasoning_content"] = reasoning
    rendered = get_chat_template(template_source(cut.template)).render(
        [{"role": "user", "content": USER}, message], tools=prompt_tools(tools),
        add_generation_prompt=False)
    start = rendered.index(cut.start, rendered.index(USER)) + len(cut.start)
    stop = rendered.find(cut.end, start)
    return rendered[:start], rendered[start:stop if stop >= 0 else len(rendered)]


def marker_free(markers: Sequence[str]) -> Callable[[dict[str, Any], dict[str, Any]], bool]:
    """A ``keep`` for the strategies: no argument string holds a marker."""

    def strings(value: Any) -> Iterable[str]:
        if isinstance(value, str):
            yield value
        elif isinstance(value, dict):
            for key, item in value.items():
                yield key
                yield from strings(item)
        elif isinstance(value, list):
            for item in value:
                yield from strings(item)

    def keep(schema: dict[str, Any], arguments: dict[str, Any]) -> bool:
        return not any(m in s for s in strings(arguments) for m in markers)

    return keep


def cut_cases(cut: TurnCut) -> st.SearchStrategy[tuple[list[dict[str, Any]], list[Call]]]:
    fragments = [f for f in tws.markup_fragments(cut.markers)
                 if not any(m in f for m in cut.markers)]
    return tws.tool_calls_with_schemas(
        strings=tws.adversarial_text(fragments=fragments),
        keep=marker_free((*cut.markers, *cut.unrepresentable)), max_calls=cut.max_calls)


def cut_content(cut: TurnCut) -> st.SearchStrategy[str]:
    fragments = [f for f in tws.markup_fragments(cut.markers)
                 if not any(m in f for m in cut.markers)]
    avoid = (*cut.markers, *cut.unrepresentable)
    return tws.adversarial_text(fragments=fragments).filter(
        lambda s: not any(m in s for m in avoid) and cut.content_ok(s))


def check_cut_round_trip(cut: TurnCut, data: st.DataObject) -> None:
    """Render a drawn turn through the real template, parse it in random deltas, compare."""
    tools, calls = data.draw(cut_cases(cut), label="case")
    if not calls:
        return
    content = data.draw(cut_content(cut), label="content") if cut.content else ""
    tail, reply = render_cut(cut, calls, tools, content=content)
    variants = [(tail, reply)]
    if cut.live_prefix and reply.startswith(cut.live_prefix):
        variants.append((tail + cut.live_prefix, reply[len(cut.live_prefix):]))
    source = template_source(cut.template)
    for prompt_tail, text in variants:
        pieces = data.draw(tws.chunkings(text), label="chunks")
        events = parse(cut.family, pieces, tools, template=source, prompt_tail=prompt_tail)
        got = collect_reply(events)
        assert canonical_calls((c.name, c.arguments) for c in got.tool_calls) == \
            canonical_calls(calls), text
        assert got.content.strip() == content.strip(), text
        assert got.diagnostics == (), text
        leaked = [m for m in cut.markers if m in got.content]
        assert not leaked, (leaked, text)
        whole = merge_events(parse(cut.family, [text], tools, template=source,
                                   prompt_tail=prompt_tail))
        assert merge_events(events) == whole


def check_garbage(family: str, markup: Sequence[str], data: st.DataObject) -> None:
    """Adversarial text never raises nor reports a parser error, chunking is moot, and
    text holding none of the family's ``markup`` comes out whole."""
    text = data.draw(tws.adversarial_text(max_size=200, fragments=tws.markup_fragments(markup),
                                          very_long=True), label="garbage")
    whole = merge_events(parse(family, [text]))
    assert not any(isinstance(e, DiagnosticEvent) and e.code == "parser_error" for e in whole)
    pieces = data.draw(tws.chunkings(text), label="chunks")
    assert merge_events(parse(family, pieces)) == whole
    reply = collect_reply(whole)
    # the core's <think> filter acts on every family's replies when no template is known
    if not reply.tool_calls and not any(m in text for m in (*markup, "<think>", "</think>")):
        assert strip_blanks(reply.content + reply.reasoning) == strip_blanks(text)


# -- BFCL ------------------------------------------------------------------------------------








