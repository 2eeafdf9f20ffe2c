"""The parser conformance suite: one call checks a parser plugin against a real template.

::

    from pathlib import Path
    from toolwire.testing import check_parser
    import my_plugin

    def test_conformance():
        check_parser(my_plugin, Path("template.jinja").read_text())

:func:`check_parser` renders assistant turns through the *real* chat template
the plugin claims, cuts out what the model would have written, and feeds that
text to the plugin's parser, through the same pipeline (stream filters, then
the parser) a chat uses. Every property is a hypothesis search; a failure
is shrunk to a small example and reported by name, with the text the parser
was given. The properties (:data:`PROPERTIES`):

``round_trip``
    One call with mapping arguments, plus text before it, rendered and parsed
    back: the same name, arguments (compared as canonical JSON, so ``1``,
    ``1.0``, ``True`` and ``-0.0`` stay distinct), text, no reasoning, no
    diagnostics; call events numbered from 0 and in order (start, deltas, call).
``chunking_invariance``
    Rendered replies and garbage, split into deltas every which way, give the
    same merged events as the whole text fed at once.
``no_markup_in_text``
    When the content held none of the template's markers, no text event holds
    one either (streamed in random deltas).
``garbage_never_raises``
    Adversarial text built from the family's markers, near misses of them,
    JSON look-alikes, unicode, very long text, and real replies cut short or
    with garbage spliced in: ``feed``/``close`` never raise, return only events,
    never report ``parser_error``; ``detect`` returns a score in ``[0, 1]``.
``argument_typing``
    Values of typed parameters come back with their JSON types (integer,
    number, boolean, null, array, object) and the arguments validate against
    the tool's schema.
``parallel_calls``
    Several calls in one turn come back in order. Skipped, with the reason,
    when the template raises on a second call (Llama 3.x) or drops it (gpt-oss).
``detection``
    ``spec.detect(template) > 0`` and :func:`toolwire.select_parser` picks this
    parser among the built-ins (and the plugins of the given plugin manager).

**Cutting out the model's text.** :class:`AssistantTurnRenderer` does it the
same way for every template, from differences between renders:

1. The conversation ``[user]`` is rendered without and with the generation
   prompt; the difference is the generation prompt (``<|im_start|>assistant\\n``,
   perhaps followed by ``<think>\\n``).
2. ``[user, assistant]`` is rendered without a generation prompt; when it begins
   with the ``[user]`` render, the rest is the assistant turn. A template that
   closes every conversation with a block of its own (Command R+ appends a
   system instruction) does not: then the turn is what lies between the parts
   both renders share at the start (cut back to a tag boundary) and at the end.
3. If the turn begins with the generation prompt, the model's text starts after
   it (so a turn rendered as ``<think>\\n\\n</think>\\n\\n...`` after a generation
   prompt ending in ``<think>\\n`` starts inside the think block, as a real reply
   does, and the stream filters are told so). Otherwise it starts after the
   header a plain-text assistant turn gets (learnt once with a sentinel
   content), or failing that after what the turn shares with either, cut back
   to a tag boundary (Cohere opens calls with ``<|START_ACTION|>``, text with
   ``<|START_TEXT|>``).
4. The end-of-turn marker is learnt from the same plain-text turn (the text
   after the sentinel) and removed when the turn ends with it; failing that,
   the part of it the turn ends with, from a tag boundary.

The clock is fixed while rendering, so templates that print the date or time
render alike every time.

Limits: a template whose ``[user, assistant]`` render shares nothing at the
start with its ``[user]`` render cannot be used (:class:`~toolwire.TemplateError`),
nor one that renders no tool call with mapping arguments (SmolLM3, Gemma 2,
Functionary v3.2). A template that ends tool-call turns differently from
plain-text turns may leave part of its end in the reply (Command R7B ends every
render with an opened chatbot turn), so ``round_trip`` fails and shows it.
Templates that drop the content beside tool calls get empty content; templates
that render a call only when the content is ``None`` get ``None``.

**Markers.** The template's own markup is learnt by rendering a call whose
name, parameter, value and content are sentinels: the literal text between
them (split on whitespace, keeping pieces of 3 or more characters with a letter
or one of ``<>[]|``) plus the generation prompt's and header's pieces, and
``<think>``/``</think>`` when the template mentions ``</think>`` (the reasoning
filter acts on them). Content never contains a marker; argument strings are
free of markers unless ``keep`` says otherwise (a format may be unable to tell
a value holding its markup from markup: pass ``keep`` to test the values your
format can express).
"""

from __future__ import annotations

import json
import os
import re
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any, Literal

import attrs
import jsonschema
from hypothesis import HealthCheck, Phase, Verbosity, given, reject, settings
from hypothesis import seed as hypothesis_seed
from hypothesis import strategies as st
from hypothesis.errors import Unsatisfiable, UnsatisfiedAssumption

from ..chat_template import get_chat_template
from ..errors import (
    ParserConflictError,
    ParserNotFoundError,
    PluginLoadError,
    TemplateError,
    ToolwireError,
)
from ..events import (
    DiagnosticEvent,
    Event,
    TextEvent,
    ToolCallDeltaEvent,
    ToolCallEvent,
    ToolCallStartEvent,
)
from ..hookspecs import hookimpl
from ..parsing import ParserSpec, collect_reply, default_call_id, merge_events
from ..plugin_manager import PluginManager, PluginWarning
from ..schema import json_type_of, normalize_schema, tool_parameters_by_name
from ..selection import DERIVED_FAMILY, build_pipeline, select_parser, template_hash
from . import strategies as tws

__all__ = [
    "PROPERTIES",
    "AssistantTurnRenderer",
    "ConformanceError",
    "ConformanceReport",
    "PropertyResult",
    "RenderedReply",
    "check_parser",
]

PROPERTIES: tuple[str, ...] = (
    "round_trip",
    "chunking_invariance",
    "no_markup_in_text",
    "garbage_never_raises",
    "argument_typing",
    "parallel_calls",
    "detection",
)
"""The property names, in the order they run and are reported."""

Status = Literal["passed", "failed", "skipped"]
Call = tuple[str, dict[str, Any]]
Case = tuple[list[dict[str, Any]], list[Call]]
Keep = Callable[[dict[str, Any], dict[str, Any]], bool]

_USER = "hi"
_PROBE_CONTENT = "toolwireprobecontent"
_PROBE_TOOL = "toolwire_probe_tool"
_PROBE_TOOL_2 = "toolwire_second_probe"
_PROBE_PARAM = "toolwire_probe_param"
_PROBE_VALUE = "toolwireprobevalue"
_SENTINELS = re.compile("|".join(re.escape(s) for s in (
    _PROBE_CONTENT, _PROBE_TOOL, _PROBE_TOOL_2, _PROBE_PARAM, _PROBE_VALUE)))
_REASONING_TAGS = ("<think>", "</think>")
_FIXED_NOW = datetime(2026, 1, 15, 12, 0, 0)
_SHOWN = 2_000  # characters of a falsifying text kept in the report
# Hypothesis's "explain" phase (which parts of a failing example matter) costs more
# than the whole search here and its output is not reported.
_PHASES = (Phase.explicit, Phase.reuse, Phase.generate, Phase.target, Phase.shrink)


# -- the report -------------------------------------------------------------------------


class ConformanceError(ToolwireError, AssertionError):
    """A parser failed :func:`check_parser`; :attr:`report` says which properties.

    It is an :class:`AssertionError`, so pytest shows it as a test failure.
    """

    def __init__(self, report: ConformanceReport) -> None:
        super().__init__(report.describe_failures())
        self.report = report


@attrs.frozen
class PropertyResult:
    """The outcome of one property.

    :ivar name: the property (one of :data:`PROPERTIES`).
    :ivar status: ``"passed"``, ``"failed"`` or ``"skipped"``.
    :ivar examples: examples tried (up to and including the first failure).
    :ivar falsifying_text: the text the parser was fed in the smallest failing
        example (cut to 2000 characters), when there is one.
    :ivar error: what went wrong, for a failure.
    :ivar reason: why the property was skipped.
    """

    name: str
    status: Status
    examples: int = 0
    falsifying_text: str | None = None
    error: str | None = None
    reason: str | None = None

    @property
    def passed(self) -> bool:
        """``True`` unless the property failed (a skipped property did not fail)."""
        return self.status != "failed"

    def to_dict(self) -> dict[str, Any]:
        """This result as JSON-ready data."""
        return attrs.asdict(self)


@attrs.frozen
class ConformanceReport:
    """What :func:`check_parser` found, property by property.

    :ivar family: the parser family checked.
    :ivar plugin: the plugin that registered it.
    :ivar template: a label for the template (file name or sha256 prefix).
    :ivar results: one :class:`PropertyResult` per property, in :data:`PROPERTIES` order.
    :ivar markers: the template markup learnt (empty when it could not render a call).
    :ivar notes: what the suite learnt about the template (dropped content, no
        parallel calls, ...).
    """

    family: str
    plugin: str
    template: str
    results: tuple[PropertyResult, ...]
    markers: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()

    @property
    def passed(self) -> bool:
        """``True`` when no property failed."""
        return all(r.passed for r in self.results)

    @property
    def failed(self) -> tuple[str, ...]:
        """The names of the failed properties."""
        return tuple(r.name for r in self.results if r.status == "failed")

    @property
    def statuses(self) -> dict[str, Status]:
        """``{property name: status}``."""
        return {r.name: r.status for r in self.results}

    @property
    def examples(self) -> int:
        """Examples tried over all properties."""
        return sum(r.examples for r in self.results)

    def __getitem__(self, name: str) -> PropertyResult:
        for result in self.results:
            if result.name == name:
                return result
        raise KeyError(name)

    def to_dict(self) -> dict[str, Any]:
        """This report as JSON-ready data (what ``toolwire conformance --json`` prints)."""
        return {"family": self.family, "plugin": self.plugin, "template": self.template,
                "passed": self.passed, "markers": list(self.markers),
                "notes": list(self.notes), "properties": [r.to_dict() for r in self.results]}

    def describe_failures(self) -> str:
        """A readable account of every failed property (empty when all passed)."""
        lines = []
        for result in self.results:
            if result.status != "failed":
                continue
            lines.append(f"{self.family} on {self.template}: property {result.name!r} failed "
                         f"after {result.examples} example(s): {result.error}")
            if result.falsifying_text is not None:
                lines.append(f"  falsifying text: {result.falsifying_text!r}")
        return "\n".join(lines)

    def format_table(self) -> str:
        """The results as a small text table (property, status, examples, detail)."""
        rows = [("property", "status", "examples", "detail")]
        for r in self.results:
            detail = r.error if r.status == "failed" else r.reason or ""
            first = (detail or "").splitlines()[0] if detail else ""
            rows.append((r.name, r.status.upper(), str(r.examples), first[:90]))
        widths = [max(len(row[i]) for row in rows) for i in range(3)]
        return "\n".join(f"{a:<{widths[0]}}  {b:<{widths[1]}}  {c:>{widths[2]}}  {d}".rstrip()
                         for a, b, c, d in rows)


# -- rendering an assistant turn --------------------------------------------------------


@attrs.frozen
class RenderedReply:
    """One assistant turn rendered through a template, cut to what the model wrote.

    :ivar text: the model's text: after the generation prompt (or header), before
        the end-of-turn marker. Feed this to the parser.
    :ivar prompt_tail: everything rendered before ``text`` (pass it as
        ``build_pipeline(..., prompt_tail=...)`` so the stream filters know, e.g.,
        that the reply begins inside an open ``<think>`` block).
    :ivar turn: the whole rendered assistant turn, header and end marker included.
    """

    text: str
    prompt_tail: str
    turn: str


def _call_message(calls: Sequence[Call], content: str | None,
                  ids: Sequence[str]) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if calls:
        message["tool_calls"] = [
            {"id": call_id, "type": "function",
             "function": {"name": name, "arguments": arguments}}
            for call_id, (name, arguments) in zip(ids, calls, strict=True)]
    return message


def _common_prefix(a: str, b: str) -> int:
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


def _common_suffix(a: str, b: str) -> int:
    return _common_prefix(a[::-1], b[::-1])


_CLOSERS = ">]\n\t "
_OPENERS = "<[\n\t "


def _boundary_before(text: str, at: int) -> int:
    """The last cut at or before ``at`` that follows a tag's end or a blank (or 0)."""
    while at > 0 and text[at - 1] not in _CLOSERS:
        at -= 1
    return at


def _boundary_after(text: str, at: int) -> int:
    """How much of ``text`` from ``at`` on is an end marker starting at a tag or blank.

    ``at`` moves forward to the next ``<``, ``[`` or blank; returns the length of
    ``text[at:]`` (0 when there is none).
    """
    while at < len(text) and text[at] not in _OPENERS:
        at += 1
    return len(text) - at


def _probe_tools() -> list[dict[str, Any]]:
    parameters = {"type": "object", "properties": {_PROBE_PARAM: {"type": "string",
                                                                  "description": "a probe"}},
                  "required": [_PROBE_PARAM]}
    return [{"type": "function", "function": {"name": name, "description": "a probe",
                                              "parameters": parameters}}
            for name in (_PROBE_TOOL, _PROBE_TOOL_2)]


def _distinctive(token: str) -> bool:
    return len(token) >= 3 and any(c.isalpha() or c in "<>[]|" for c in token)


def _tokens(text: str) -> list[str]:
    return [t for fragment in _SENTINELS.split(text) for t in fragment.split()
            if _distinctive(t)]


class AssistantTurnRenderer:
    """Renders assistant tool-call turns through a chat template, generically.

    On creation it learns, from a few probe renders, where the model's text
    begins and ends, whether the template keeps content beside calls, whether it
    renders several calls in one turn, and its markers; the module docstring
    explains the method and its limits.

    :param source: the chat template source.
    :param make_call_id: makes call ids in the form the template requires.
    :raises TemplateError: the template cannot render a tool-call turn this way.

    :ivar header: what a plain-text assistant turn starts with.
    :ivar end_of_turn: what it ends with (removed from the model's text).
    :ivar content_with_calls: the template keeps the content beside tool calls.
    :ivar parallel_calls: the template renders several calls in one turn;
        ``parallel_reason`` says why not.
    :ivar markers: the template's own markup, learnt from a probe call.
    :ivar notes: what else was learnt, in words (for reports).
    """

    def __init__(self, source: str, *,
                 make_call_id: Callable[[int], str] = default_call_id) -> None:
        self._template = get_chat_template(source)
        self._source = source
        self._make_call_id = make_call_id
        self._empty: str | None = ""
        self._conversations: dict[str, tuple[str, str]] = {}
        self.notes: list[str] = []
        tools = _probe_tools()
        self._probe_ids = [make_call_id(0), make_call_id(1)]
        plain = self._turn(_call_message([], _PROBE_CONTENT, []), tools)[1]
        at = plain.find(_PROBE_CONTENT)
        if at < 0:
            raise TemplateError("the template does not render an assistant message's content")
        self.header = plain[:at]
        self.end_of_turn = plain[at + len(_PROBE_CONTENT):]
        one: list[Call] = [(_PROBE_TOOL, {_PROBE_PARAM: _PROBE_VALUE})]
        self._empty = self._probe_empty_content(one, tools)
        with_content = self._try(one, _PROBE_CONTENT, tools)
        self.content_with_calls = with_content is not None and all(
            s in with_content.text for s in (_PROBE_CONTENT, _PROBE_TOOL))
        if not self.content_with_calls:
            self.notes.append("the template drops the content beside tool calls; "
                              "content is left empty")
        self.parallel_calls, self.parallel_reason = self._probe_parallel(one, tools)
        if not self.parallel_calls:
            self.notes.append(self.parallel_reason)
        sample = with_content if self.content_with_calls and with_content else \
            self.render(one, tools=tools, ids=self._probe_ids[:1])
        self.markers = self._learn_markers(sample, tools)

    # -- rendering --------------------------------------------------------------

    def render(self, calls: Sequence[Call], *, content: str = "",
               tools: Sequence[Mapping[str, Any]] | None = None,
               ids: Sequence[str] | None = None) -> RenderedReply:
        """Render one assistant turn with ``calls`` (arguments as mappings) and ``content``.

        :param ids: the call ids (default: made by ``make_call_id``).
        :raises TemplateError: the template failed, or its render has an unexpected shape.
        """
        ids = list(ids) if ids is not None else \
            [self._make_call_id(i) for i in range(len(calls))]
        message = _call_message(calls, content if content else self._empty, ids)
        before, turn, generation = self._turn(message, tools)
        if generation and turn.startswith(generation):
            start = len(generation)
        elif turn.startswith(self.header):
            start = len(self.header)
        else:
            # The tool-call turn opens differently (Cohere: <|START_ACTION|> where text
            # gets <|START_TEXT|>): keep what it shares with either, up to a tag boundary.
            shared = max(_common_prefix(turn, generation), _common_prefix(turn, self.header))
            start = _boundary_before(turn, shared)
        stop = len(turn)
        if turn.endswith(self.end_of_turn):
            stop -= len(self.end_of_turn)
        else:
            stop -= _boundary_after(turn, len(turn) - _common_suffix(turn, self.end_of_turn))
        return RenderedReply(turn[start:max(stop, start)], before + turn[:start], turn)

    def prompt(self, tools: Sequence[Mapping[str, Any]] | None = None) -> str:
        """The prompt a live model continues: a user turn and the generation prompt."""
        return self._render([{"role": "user", "content": _USER}], tools, True)

    def _render(self, messages: list[dict[str, Any]],
                tools: Sequence[Mapping[str, Any]] | None, generation: bool) -> str:
        # The clock is fixed: templates that print the time (firefunction's
        # ``datetime``, Llama's ``strftime_now``) must render alike twice.
        return self._template.render(messages, tools=list(tools) if tools else None,
                                     add_generation_prompt=generation,
                                     strftime_now=_FIXED_NOW.strftime,
                                     datetime=_FIXED_NOW.strftime("%Y-%m-%d %H:%M:%S"))

    def _turn(self, message: dict[str, Any], tools: Sequence[Mapping[str, Any]] | None
              ) -> tuple[str, str, str]:
        """``(conversation before the turn, the turn, the generation prompt)``."""
        user = [{"role": "user", "content": _USER}]
        key = json.dumps(tools, sort_keys=True, default=repr)
        if key not in self._conversations:  # the same tools render the same [user] turn
            if len(self._conversations) >= 16:
                self._conversations.clear()
            self._conversations[key] = (self._render(user, tools, False),
                                        self._render(user, tools, True))
        before, prompt = self._conversations[key]
        full = self._render([*user, message], tools, False)
        if full.startswith(before):
            generation = prompt[len(before):] if prompt.startswith(before) else ""
            return before, full[len(before):], generation
        # Some templates close every conversation with a block of their own (Command R+
        # appends a system instruction after the last turn): the turn is what lies
        # between the part both renders share at the start and the part they share at
        # the end.
        start = _boundary_before(full, _common_prefix(full, before))
        after = _common_suffix(full[start:], before[start:])
        if start == 0 or after == 0:
            raise TemplateError("rendering an assistant turn changed the conversation before it, "
                                "so the turn cannot be cut out")
        return before[:start], full[start:len(full) - after], ""

    def _try(self, calls: Sequence[Call], content: str,
             tools: Sequence[Mapping[str, Any]]) -> RenderedReply | None:
        try:
            return self.render(calls, content=content, tools=tools,
                               ids=self._probe_ids[:len(calls)])
        except TemplateError:
            return None

    # -- probes -----------------------------------------------------------------

    def _probe_empty_content(self, one: Sequence[Call],
                             tools: Sequence[Mapping[str, Any]]) -> str | None:
        failure = "it renders no call"
        for empty in ("", None):
            self._empty = empty
            try:
                rendered = self.render(one, tools=tools, ids=self._probe_ids[:1])
            except TemplateError as exc:
                failure = str(exc)
                continue
            if _PROBE_TOOL in rendered.text:
                if empty is None:
                    self.notes.append("the template renders calls only when content is None")
                return empty
        raise TemplateError(f"the template cannot render an assistant tool call: {failure}")

    def _probe_parallel(self, one: Sequence[Call],
                        tools: Sequence[Mapping[str, Any]]) -> tuple[bool, str]:
        two = [*one, (_PROBE_TOOL_2, {_PROBE_PARAM: _PROBE_VALUE})]
        try:
            rendered = self.render(two, tools=tools, ids=self._probe_ids)
        except TemplateError as exc:
            return False, f"the template raises on two calls in one turn: {exc}"
        if _PROBE_TOOL_2 not in rendered.text:
            return False, "the template renders only the first call of a turn"
        return True, ""

    def _learn_markers(self, sample: RenderedReply,
                       tools: Sequence[Mapping[str, Any]]) -> tuple[str, ...]:
        generation = self._turn(_call_message([], _PROBE_CONTENT, []), tools)[2]
        text = sample.text
        for call_id in self._probe_ids:
            text = text.replace(call_id, _PROBE_VALUE) if call_id else text
        found = dict.fromkeys(_tokens(generation) + _tokens(self.header) + _tokens(text))
        if _REASONING_TAGS[1] in self._source:
            found.update(dict.fromkeys(_REASONING_TAGS))
        return tuple(found)


# -- the suite --------------------------------------------------------------------------


class _Recorder:
    """What the running property last fed the parser, and how many examples ran."""

    def __init__(self) -> None:
        self.examples = 0
        self.text: str | None = None
        self.failed = False

    def example(self, text: str) -> None:
        """The parser is about to be fed ``text``."""
        self.text = text

    def finish(self, *, failed: bool) -> None:
        """An example ran to the end; examples after the first failure (shrinking) don't count."""
        if not self.failed:
            self.examples += 1
        self.failed = self.failed or failed


def _strings_in(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, Mapping):
        for key, item in value.items():
            yield str(key)
            yield from _strings_in(item)
    elif isinstance(value, list | tuple):
        for item in value:
            yield from _strings_in(item)


def _marker_free_keep(markers: Sequence[str]) -> Keep:
    def keep(schema: dict[str, Any], arguments: dict[str, Any]) -> bool:
        return not any(m in s for s in _strings_in(arguments) for m in markers)

    return keep


def _json_type(value: Any) -> Any:
    """The JSON shape of a value: type names, recursively (integer and number apart)."""
    if isinstance(value, Mapping):
        return {k: _json_type(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_json_type(v) for v in value]
    return json_type_of(value)


def _short(value: Any, limit: int = 300) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + "..."


def _check_call_events(events: Sequence[Event], count: int) -> None:
    """Calls are numbered 0, 1, ... in order; each call's start and deltas precede it."""
    finals = [(i, e) for i, e in enumerate(events) if isinstance(e, ToolCallEvent)]
    indices = [e.index for _, e in finals]
    if indices != list(range(count)):
        raise AssertionError(f"tool_call events are numbered {indices}, "
                             f"expected {list(range(count))}")
    done_at = {e.index: i for i, e in finals}
    started: set[int] = set()
    for i, event in enumerate(events):
        if isinstance(event, ToolCallStartEvent):
            if event.index in started:
                raise AssertionError(f"two tool_call_start events for call {event.index}")
            started.add(event.index)
        if isinstance(event, ToolCallStartEvent | ToolCallDeltaEvent):
            end = done_at.get(event.index)
            if end is None or i > end:
                raise AssertionError(f"a {event.type} event for call {event.index} comes after "
                                     "that call's tool_call event (or for no call at all)")
        if isinstance(event, ToolCallDeltaEvent) and started and event.index not in started:
            raise AssertionError(f"a tool_call_delta for call {event.index} precedes its "
                                 "tool_call_start")


def _canonical(events: Sequence[Event]) -> list[str]:
    return [tws.json_dumps(e.to_dict()) for e in merge_events(events)]


class _Suite:
    """One conformance run: a parser, a template, the strategies, the properties."""

    def __init__(self, spec: ParserSpec, manager: PluginManager, source: str, *,
                 examples: int, tools_strategy: st.SearchStrategy[Case] | None,
                 keep: Keep | None, markers: Sequence[str] | None, seed: int | None,
                 progress: Callable[[str], None] | None) -> None:
        self.spec = spec
        self.manager = manager
        self.source = source
        self.examples = examples
        self.seed = seed
        self.progress = progress
        self.notes: list[str] = []
        self.renderer: AssistantTurnRenderer | None = None
        self.render_error = ""
        try:
            self.renderer = AssistantTurnRenderer(source, make_call_id=spec.make_call_id)
        except TemplateError as exc:
            self.render_error = str(exc)
        learnt = self.renderer.markers if self.renderer is not None else ()
        self.markers: tuple[str, ...] = tuple(markers) if markers is not None else learnt
        if self.renderer is not None:
            self.notes.extend(self.renderer.notes)
        self.keep = keep if keep is not None else _marker_free_keep(self.markers)
        fragments = tws.markup_fragments(self.markers)
        self.garbage_text = tws.adversarial_text(max_size=200, fragments=fragments,
                                                 very_long=True)
        clean = [f for f in fragments if not any(m in f for m in self.markers)]
        # With the default keep, values holding a marker are refused anyway: draw
        # near misses only, so few examples are wasted.
        self.value_text = tws.adversarial_text(fragments=fragments if keep else clean,
                                               very_long=True)
        self.content_text = tws.adversarial_text(fragments=clean).filter(self._content_ok)
        self.tools_strategy = tools_strategy
        self._cases: dict[tuple[int, int], st.SearchStrategy[Case]] = {}
        self.typed_cases = tools_strategy or tws.tool_calls_with_schemas(
            max_calls=1, strings=st.text(alphabet="abcxyz 019", max_size=8))

    # -- shared steps --------------------------------------------------------------

    def _content_ok(self, text: str) -> bool:
        return not any(m in text for m in self.markers)

    def cases(self, min_calls: int, max_calls: int) -> st.SearchStrategy[Case]:
        if self.tools_strategy is not None:
            return self.tools_strategy
        key = (min_calls, max_calls)
        if key not in self._cases:  # built once: hypothesis is slow to set up a strategy
            self._cases[key] = tws.tool_calls_with_schemas(
                min_calls=min_calls, max_calls=max_calls, strings=self.value_text)
        return self._cases[key]

    def draw_turn(self, data: st.DataObject, min_calls: int, max_calls: int,
                  cases: st.SearchStrategy[Case] | None = None
                  ) -> tuple[list[dict[str, Any]], list[Call], str, RenderedReply]:
        """Draw tools, calls the format can express and content; render the turn."""
        assert self.renderer is not None
        tools, calls = data.draw(cases if cases is not None else self.cases(min_calls, max_calls))
        schemas = {t["function"]["name"]: t["function"] for t in tools}
        calls = [(n, a) for n, a in calls if n in schemas and self.keep(schemas[n], a)]
        if not self.renderer.parallel_calls:
            calls = calls[:1]
        if not min_calls <= len(calls) <= max_calls:
            reject()
        content = data.draw(self.content_text) if self.renderer.content_with_calls else ""
        try:
            rendered = self.renderer.render(calls, content=content, tools=tools)
            bare = self.renderer.render(calls, tools=tools) if content else rendered
        except TemplateError:
            reject()  # the template cannot render this example: not the parser's fault
        if any(rendered.text.count(m) != bare.text.count(m) for m in self.markers):
            reject()  # the content ran into the template's text and made a marker ("<|x|" + ">")
        return tools, calls, content, rendered

    def parse(self, pieces: Sequence[str], tools: Sequence[Mapping[str, Any]],
              prompt_tail: str) -> list[Event]:
        pipeline = build_pipeline(self.spec, tool_parameters_by_name(list(tools)),
                                  plugins=self.manager, chat_template=self.source,
                                  prompt_tail=prompt_tail)
        events: list[Event] = []
        for piece in pieces:
            events.extend(pipeline.feed(piece))
        events.extend(pipeline.close())
        return events

    def check_round_trip(self, events: Sequence[Event], calls: Sequence[Call],
                         content: str) -> None:
        reply = collect_reply(events)
        want = [(n, tws.json_dumps(a)) for n, a in calls]
        got = [(c.name, tws.json_dumps(dict(c.arguments))) for c in reply.tool_calls]
        if got != want:
            raise AssertionError(f"calls differ: sent {_short(want, 600)}, "
                                 f"got {_short(got, 600)}")
        if reply.content.strip() != content.strip():
            raise AssertionError(f"text differs: sent {_short(content.strip())}, "
                                 f"got {_short(reply.content.strip())}")
        if reply.reasoning.strip():
            raise AssertionError(f"reasoning from a reply that had none: "
                                 f"{_short(reply.reasoning)}")
        if reply.diagnostics:
            raise AssertionError("diagnostics for a well-formed reply: " + "; ".join(
                f"{d.code}: {d.message}" for d in reply.diagnostics))
        _check_call_events(events, len(calls))

    # -- running -------------------------------------------------------------------

    def run(self) -> list[PropertyResult]:
        checks: dict[str, Callable[[st.DataObject, _Recorder], None]] = {
            "round_trip": self.round_trip,
            "chunking_invariance": self.chunking_invariance,
            "no_markup_in_text": self.no_markup_in_text,
            "garbage_never_raises": self.garbage_never_raises,
            "argument_typing": self.argument_typing,
            "parallel_calls": self.parallel_calls,
        }
        results = []
        for name in PROPERTIES:
            if self.progress is not None:
                self.progress(name)
            if name == "detection":
                results.append(self.detection())
            elif name == "parallel_calls" and self.renderer is not None \
                    and not self.renderer.parallel_calls:
                results.append(PropertyResult(name, "skipped",
                                              reason=self.renderer.parallel_reason))
            elif name == "no_markup_in_text" and self.renderer is not None \
                    and not self.markers:
                results.append(PropertyResult(name, "skipped",
                                              reason="no markers were learnt from the template"))
            elif self.renderer is None and name != "garbage_never_raises":
                results.append(PropertyResult(
                    name, "failed", error="cannot render an assistant tool-call turn through "
                    f"this template: {self.render_error}"))
            else:
                results.append(self._search(name, checks[name]))
        return results

    def _search(self, name: str, check: Callable[[st.DataObject, _Recorder], None]
                ) -> PropertyResult:
        recorder = _Recorder()

        @settings(max_examples=self.examples, database=None, deadline=None,
                  suppress_health_check=list(HealthCheck), report_multiple_bugs=False,
                  verbosity=Verbosity.quiet, print_blob=False, phases=_PHASES)
        @given(st.data())
        def search(data: st.DataObject) -> None:
            try:
                check(data, recorder)
            except UnsatisfiedAssumption:
                raise  # a rejected example is not a failure, nor counted
            except Exception:
                recorder.finish(failed=True)
                raise
            recorder.finish(failed=False)

        if self.seed is not None:
            search = hypothesis_seed(self.seed)(search)
        try:
            search()
        except Unsatisfiable as exc:
            return PropertyResult(name, "failed", recorder.examples,
                                  error=f"could not generate examples the template renders: "
                                        f"{exc}")
        except Exception as exc:
            text = recorder.text
            shown = text if text is None or len(text) <= _SHOWN else text[:_SHOWN] + "..."
            message = str(exc) or type(exc).__name__
            if not isinstance(exc, AssertionError):
                message = f"{type(exc).__name__}: {message}"
            return PropertyResult(name, "failed", recorder.examples, shown, message)
        return PropertyResult(name, "passed", recorder.examples)

    # -- the properties ------------------------------------------------------------

    def round_trip(self, data: st.DataObject, recorder: _Recorder) -> None:
        tools, calls, content, rendered = self.draw_turn(data, 1, 1)
        recorder.example(rendered.text)
        events = self.parse([rendered.text], tools, rendered.prompt_tail)
        self.check_round_trip(events, calls, content)

    def parallel_calls(self, data: st.DataObject, recorder: _Recorder) -> None:
        tools, calls, content, rendered = self.draw_turn(data, 2, 4)
        recorder.example(rendered.text)
        events = self.parse([rendered.text], tools, rendered.prompt_tail)
        self.check_round_trip(events, calls, content)

    def chunking_invariance(self, data: st.DataObject, recorder: _Recorder) -> None:
        assert self.renderer is not None
        if data.draw(st.booleans(), label="garbage"):
            tools, _ = data.draw(self.cases(1, 1))
            text = data.draw(self.garbage_text, label="text")
            try:
                tail = self.renderer.prompt(tools)
            except TemplateError:
                reject()
        else:
            tools, _, _, rendered = self.draw_turn(data, 1, 3)
            text, tail = rendered.text, rendered.prompt_tail
        recorder.example(text)
        whole = _canonical(self.parse([text], tools, tail))
        pieces = data.draw(tws.chunkings(text), label="chunks")
        split = _canonical(self.parse(pieces, tools, tail))
        if split != whole:
            raise AssertionError(f"fed in {len(pieces)} deltas the events differ from feeding "
                                 f"the text at once:\n  whole {_short(whole, 600)}\n"
                                 f"  split {_short(split, 600)}\n  deltas {_short(pieces)}")

    def no_markup_in_text(self, data: st.DataObject, recorder: _Recorder) -> None:
        tools, _, _, rendered = self.draw_turn(data, 1, 3)
        recorder.example(rendered.text)
        pieces = data.draw(tws.chunkings(rendered.text), label="chunks")
        events = self.parse(pieces, tools, rendered.prompt_tail)
        text = "".join(e.text for e in events if isinstance(e, TextEvent))
        leaked = [m for m in self.markers if m in text]
        if leaked:
            raise AssertionError(f"markup {leaked} in the text events: {_short(text)}")

    def garbage_never_raises(self, data: st.DataObject, recorder: _Recorder) -> None:
        tools, _ = data.draw(self.cases(1, 1))
        text = data.draw(self.garbage_text, label="garbage")
        tail = ""
        if self.renderer is not None and data.draw(st.booleans(), label="from a real reply"):
            _, _, _, rendered = self.draw_turn(data, 1, 3)
            real, tail = rendered.text, rendered.prompt_tail
            at = data.draw(st.integers(min_value=0, max_value=len(real)), label="at")
            text = real[:at] if data.draw(st.booleans(), label="cut") else \
                real[:at] + text + real[at:]
        recorder.example(text)
        try:
            score = self.spec.detect(text)
        except Exception as exc:
            raise AssertionError(f"detect() raised {type(exc).__name__}: {exc}") from exc
        if not isinstance(score, int | float) or not 0.0 <= score <= 1.0:
            raise AssertionError(f"detect() returned {score!r}, not a score in [0, 1]")
        pieces = data.draw(tws.chunkings(text), label="chunks")
        try:
            events = self.parse(pieces, tools, tail)
        except Exception as exc:
            raise AssertionError(f"the parser raised {type(exc).__name__}: {exc}") from exc
        strays = [e for e in events if not isinstance(e, Event)]
        if strays:
            raise AssertionError(f"the parser returned non-events: {_short(strays)}")
        errors = [e for e in events if isinstance(e, DiagnosticEvent) and e.code == "parser_error"]
        if errors:
            raise AssertionError(f"the parser reported its own failure: {errors[0].message}")

    def argument_typing(self, data: st.DataObject, recorder: _Recorder) -> None:
        tools, calls, _, rendered = self.draw_turn(data, 1, 1, self.typed_cases)
        recorder.example(rendered.text)
        schemas = {t["function"]["name"]: normalize_schema(t["function"].get("parameters") or {})
                   for t in tools}
        for name, arguments in calls:
            if any(jsonschema.Draft202012Validator(schemas[name]).iter_errors(arguments)):
                reject()  # the strategy drew arguments its own schema refuses
        got = collect_reply(self.parse([rendered.text], tools, rendered.prompt_tail)).tool_calls
        if len(got) != len(calls):
            raise AssertionError(f"sent {len(calls)} call(s), got {len(got)}")
        for (name, sent), call in zip(calls, got, strict=True):
            parsed = dict(call.arguments)
            for param, value in sent.items():
                if param not in parsed:
                    raise AssertionError(f"{name}: parameter {param!r} is missing")
                if _json_type(parsed[param]) != _json_type(value):
                    raise AssertionError(
                        f"{name}: parameter {param!r} sent as {_json_type(value)} "
                        f"{_short(value)}, got {_json_type(parsed[param])} "
                        f"{_short(parsed[param])}")
            problems = [e.message for e in
                        jsonschema.Draft202012Validator(schemas[name]).iter_errors(parsed)]
            if problems:
                raise AssertionError(f"{name}: parsed arguments do not validate: {problems[0]}")

    def detection(self) -> PropertyResult:
        if self.spec.name == DERIVED_FAMILY:
            # A derived parser claims nothing; it is what selection falls back to.
            try:
                chosen = select_parser(self.source, self.manager).spec.name
            except (ParserConflictError, ParserNotFoundError) as exc:
                return PropertyResult("detection", "failed", 1, error=str(exc))
            if chosen != DERIVED_FAMILY:
                return PropertyResult("detection", "failed", 1,
                                      error=f"plugin family {chosen!r} claims the template")
            return PropertyResult("detection", "passed", 1)
        try:
            score = float(self.spec.detect(self.source))
        except Exception as exc:
            return PropertyResult("detection", "failed", 1,
                                  error=f"detect() raised {type(exc).__name__}: {exc}")
        if score <= 0.0:
            return PropertyResult("detection", "failed", 1,
                                  error="detect() scores the template 0: not claimed")
        try:
            choice = select_parser(self.source, self.manager)
        except (ParserConflictError, ParserNotFoundError) as exc:
            return PropertyResult("detection", "failed", 1, error=str(exc))
        if choice.spec.name != self.spec.name:
            return PropertyResult(
                "detection", "failed", 1,
                error=f"select_parser chose {choice.spec.name!r} (plugin {choice.spec.plugin!r}, "
                      f"score {choice.score:g}) over {self.spec.name!r} (score {score:g})")
        return PropertyResult("detection", "passed", 1)


# -- resolving the parser under test ------------------------------------------------------


class _SpecPlugin:
    """A plugin object that registers one given :class:`ParserSpec`."""

    def __init__(self, spec: ParserSpec) -> None:
        self._spec = spec

    @hookimpl
    def register_parsers(self, register: Callable[[ParserSpec], None]) -> None:
        """Register the wrapped spec."""
        register(self._spec)


def _register(manager: PluginManager, plugin: object, name: str | None) -> str:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", PluginWarning)
        registered = manager.register(plugin, name=name)
        manager.parsers()  # runs the registration hooks
    info = next((i for i in manager.describe() if i.name == registered), None)
    problem = info.error if info is not None else None
    if problem is None:
        problem = next((str(w.message) for w in caught
                        if issubclass(w.category, PluginWarning)), None)
    if problem is not None:
        raise PluginLoadError(f"plugin {registered!r} could not be registered: {problem}",
                              plugin=registered)
    return registered


def _resolve(plugin_or_spec: object, source: str, family: str | None,
             plugins: PluginManager | None) -> tuple[ParserSpec, PluginManager]:
    if isinstance(plugin_or_spec, ParserSpec):
        spec = plugin_or_spec
        manager = plugins or PluginManager(builtins=True, entry_points=False)
        existing = manager.parsers().get(spec.name)
        if existing is None:
            if plugins is not None:
                raise ParserNotFoundError(f"parser {spec.name!r} is not registered in the "
                                          "plugin manager given")
            _register(manager, _SpecPlugin(spec), spec.plugin or f"{spec.name} (under test)")
        elif (existing.detect, existing.create) != (spec.detect, spec.create):
            raise PluginLoadError(f"family {spec.name!r} is already registered by plugin "
                                  f"{existing.plugin!r}; a parser under test needs its own name",
                                  plugin=spec.plugin)
        return manager.parser(spec.name), manager
    manager = plugins or PluginManager(builtins=True, entry_points=False)
    if plugins is None or not manager.pluggy.is_registered(plugin_or_spec):
        if plugins is not None:
            raise PluginLoadError("the plugin is not registered in the plugin manager given",
                                  plugin=repr(plugin_or_spec))
        name = _register(manager, plugin_or_spec, None)
    else:
        name = manager.pluggy.get_name(plugin_or_spec) or ""
    own = [s for s in manager.parsers().values() if s.plugin == name]
    if family is not None:
        matching = [s for s in own if s.name == family]
        if not matching:
            raise ParserNotFoundError(f"plugin {name!r} registers no parser {family!r} "
                                      f"(it registers: {', '.join(s.name for s in own) or 'none'})")
        return matching[0], manager
    if not own:
        raise ParserNotFoundError(f"plugin {name!r} registers no parser")

    def score(spec: ParserSpec) -> float:
        try:
            return float(spec.detect(source))
        except Exception:
            return 0.0

    return max(own, key=lambda s: (score(s), s.name)), manager


def check_parser(plugin_or_spec: object, chat_template: str | os.PathLike[str], *,
                 examples: int | None = None, family: str | None = None,
                 tools_strategy: st.SearchStrategy[Case] | None = None,
                 keep: Keep | None = None, raise_on_failure: bool = True,
                 markers: Sequence[str] | None = None, plugins: PluginManager | None = None,
                 template_name: str | None = None, seed: int | None = None,
                 progress: Callable[[str], None] | None = None) -> ConformanceReport:
    """Run the parser conformance suite (:data:`PROPERTIES`) through a real chat template.

    :param plugin_or_spec: a plugin (a module or object with
        ``@toolwire.hookimpl def register_parsers``) or a :class:`ParserSpec`.
    :param chat_template: the template source, or a path to the template file.
    :param examples: hypothesis examples per property (default: the active
        hypothesis profile's ``max_examples``).
    :param family: which parser, when the plugin registers several (default: the
        plugin's parser that scores the template highest).
    :param tools_strategy: draws ``(tools, calls)`` as
        :func:`~toolwire.testing.strategies.tool_calls_with_schemas` does (default:
        that strategy with adversarial string values holding the family's markup).
    :param keep: ``keep(function_schema, arguments)`` says whether the format can
        express a call; calls it rejects are not tried. Default: refuse arguments
        holding a marker of the template.
    :param raise_on_failure: raise :class:`ConformanceError` when a property failed.
    :param markers: the family's markup, instead of what is learnt from the template.
    :param plugins: select among this manager's plugins (the parser must be
        registered in it). Default: the built-ins plus the plugin, no entry points.
    :param template_name: the label used in the report (default: the file name or
        the sha256 prefix).
    :param seed: make the hypothesis search reproducible.
    :param progress: called with each property's name as it starts.
    :returns: the :class:`ConformanceReport`.
    :raises ConformanceError: a property failed (and ``raise_on_failure``).
    :raises PluginLoadError: the plugin could not be registered.
    :raises ParserNotFoundError: the plugin registers no (such) parser.
    :raises ValueError: ``chat_template`` is a file name given as a string.
    """
    if isinstance(chat_template, os.PathLike):
        path = Path(chat_template)
        source = path.read_text(encoding="utf-8")
        label = template_name or path.name
    else:
        source = chat_template
        label = template_name or f"sha256:{template_hash(source)[:12]}"
        if "\n" not in source and len(source) < 1024 and Path(source).is_file():
            raise ValueError(f"chat_template {source!r} is a file name; pass "
                             "Path(...) or the file's text")
    spec, manager = _resolve(plugin_or_spec, source, family, plugins)
    count = examples if examples is not None else settings().max_examples
    suite = _Suite(spec, manager, source, examples=max(count, 1), tools_strategy=tools_strategy,
                   keep=keep, markers=markers, seed=seed, progress=progress)
    results = suite.run()
    report = ConformanceReport(spec.name, spec.plugin, label, tuple(results),
                               suite.markers, tuple(suite.notes))
    if raise_on_failure and not report.passed:
        raise ConformanceError(report)
    return report
