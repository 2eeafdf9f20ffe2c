"""The conformance properties, each a hypothesis search over one parser and template."""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import jsonschema
from hypothesis import HealthCheck, Phase, Verbosity, given, reject, settings
from hypothesis import seed as hypothesis_seed
from hypothesis import strategies as st
from hypothesis.errors import Unsatisfiable, UnsatisfiedAssumption

from ..errors import (
    ParserConflictError,
    ParserNotFoundError,
    TemplateError,
)
from ..events import (
    DiagnosticEvent,
    Event,
    TextEvent,
    ToolCallDeltaEvent,
    ToolCallEndEvent,
    ToolCallStartEvent,
)
from ..families.selection import DERIVED_FAMILY, build_pipeline, select_parser
from ..hooks.manager import PluginManager
from ..parse.protocol import ParserSpec, collect_reply, merge_events
from ..parse.record import CallFormat, TaggedArguments
from ..templates.assistant_turns import REASONING_TAGS, AssistantTurnRenderer, Call, RenderedReply
from ..vocabulary.schema import (
    json_type_of,
    normalize_schema,
    resolve_ref,
    tool_parameters_by_name,
)
from . import strategies as tws
from .drifted_calls import DriftedCalls, check_calls, short_repr
from .report import PROPERTIES, PropertyResult

__all__ = ["PropertySuite"]

Case = tuple[list[dict[str, Any]], list[Call]]

Keep = Callable[[dict[str, Any], dict[str, Any]], bool]

_SHOWN = 2_000  # characters of a falsifying text kept in the report

# Hypothesis's "explain" phase (which parts of a failing example matter) costs more
# than the whole search here and its output is not reported.
_PHASES = (Phase.explicit, Phase.reuse, Phase.generate, Phase.target, Phase.shrink)

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


_CONTROL_TOKEN = re.compile(r"<[^<>\s]+>|\[[A-Z][A-Z_]+\]")
_WORD_OPENER = re.compile(r"[A-Za-z_]\w{2,}[\[{]")


def _control_tokens(marker: str) -> list[str]:
    """The tag-shaped pieces of a marker: ``<...>`` runs without blanks (``<|x|>``,
    ``</tag>``, ``<｜x｜>``, ``<|x>``), ``[UPPER_CASE]`` tokens, and a word opening a
    bracket at its start (firefunction's ``functools[`` of ``functools[{"name":``)."""
    opener = _WORD_OPENER.match(marker)
    return _CONTROL_TOKEN.findall(marker) + ([opener.group()] if opener else [])


_NULL_PROBE = "toolwire_null_probe"
_NULL_MEMBER = "toolwirenullmember"
_NULL_INNER = "toolwirenullinner"


def _probe_call(renderer: AssistantTurnRenderer, member: Mapping[str, Any],
                value: Any) -> str | None:
    """A call of the probe tool, whose one parameter has the schema ``member``, with
    ``value`` for it, as the template renders it (``None``: the template failed)."""
    parameters = {"type": "object",
                  "properties": {_NULL_MEMBER: {**member, "description": "a probe"}}}
    tools = [{"type": "function", "function": {"name": _NULL_PROBE, "description": "a probe",
                                               "parameters": parameters}}]
    try:
        return renderer.render([(_NULL_PROBE, {_NULL_MEMBER: value})], tools=tools).text
    except TemplateError:
        return None


def _drops_nulls(renderer: AssistantTurnRenderer) -> bool:
    """Whether the template leaves out a null argument, or a null member of an object."""
    for value, name in ((None, _NULL_MEMBER), ({_NULL_INNER: None}, _NULL_INNER)):
        text = _probe_call(renderer, {"type": ["object", "null"]}, value)
        if text is not None and _NULL_PROBE in text and name not in text:
            return True
    return False


_FREE_FORM_PROBES: tuple[Any, ...] = ("", [], {}, "1", 1, "true", True, [""], {"x": ""})


def _free_form_is_lossy(renderer: AssistantTurnRenderer) -> bool:
    """Whether the template renders two different values of a free-form object alike."""
    seen: set[str] = set()
    for value in _FREE_FORM_PROBES:
        text = _probe_call(renderer, {"type": "object", "additionalProperties": True},
                           {_NULL_INNER: value})
        if text is None:
            return False
        if text in seen:
            return True
        seen.add(text)
    return False


def _free_form_values(schema: Any, value: Any, root: Any) -> Iterator[Any]:
    """The values of ``value`` that its schema leaves free-form (an object without
    ``properties``, or no type at all)."""
    schema = resolve_ref(schema, root) if isinstance(schema, Mapping) else {}
    if not isinstance(schema, Mapping):
        return
    branches = [b for key in ("anyOf", "oneOf") for b in schema.get(key, ())]
    if branches:
        for branch in branches:
            yield from _free_form_values(branch, value, root)
        return
    if isinstance(value, Mapping):
        properties = schema.get("properties")
        if not isinstance(properties, Mapping):
            yield value
            return
        for key, item in value.items():
            yield from _free_form_values(properties.get(key, {}), item, root)
    elif isinstance(value, list):
        for item in value:
            yield from _free_form_values(schema.get("items", {}), item, root)


def _only_strings(value: Any) -> bool:
    if isinstance(value, Mapping):
        return bool(value) and all(_only_strings(v) for v in value.values())
    return isinstance(value, str) and bool(value)


def _free_form_strings_only(keep: Keep) -> Keep:
    def strings_only(schema: dict[str, Any], arguments: dict[str, Any]) -> bool:
        parameters = schema.get("parameters") or {}
        return all(_only_strings(v) for v in _free_form_values(parameters, arguments,
                                                               parameters)) \
            and keep(schema, arguments)

    return strings_only


# what str.splitlines breaks on besides "\n" and "\r" (JSON strings keep them)
_OTHER_LINE_BREAKS = "\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029"


def _lost_line_breaks(renderer: AssistantTurnRenderer) -> str:
    """The line breaks a template does not carry into a string value as written."""
    lost = ""
    for char in _OTHER_LINE_BREAKS:
        text = _probe_call(renderer, {"type": "string"}, f"a{char}b")
        if text is None:
            return ""
        if _NULL_PROBE in text and char not in text and json.dumps(char)[1:-1] not in text:
            lost += char
    return lost


def _without_characters(keep: Keep, characters: str) -> Keep:
    def refuse_characters(schema: dict[str, Any], arguments: dict[str, Any]) -> bool:
        return not any(c in s for s in _strings_in(arguments) for c in characters) \
            and keep(schema, arguments)

    return refuse_characters


def _holds_null(value: Any) -> bool:
    if value is None:
        return True
    if isinstance(value, Mapping):
        return any(_holds_null(v) for v in value.values())
    if isinstance(value, list | tuple):
        return any(_holds_null(v) for v in value)
    return False


def _without_nulls(keep: Keep) -> Keep:
    def refuse_nulls(schema: dict[str, Any], arguments: dict[str, Any]) -> bool:
        return not _holds_null(arguments) and keep(schema, arguments)

    return refuse_nulls


def _laid_out_kinds(spec: ParserSpec) -> tuple[TaggedArguments, ...]:
    """The raw tagged value syntaxes of the parser's record that read a newline on
    both sides of a value as layout (see :meth:`TaggedArguments.reads_as_layout`)."""
    fmt = spec.format
    if not isinstance(fmt, CallFormat):
        return ()
    return tuple(k for k in fmt.kinds if isinstance(k, TaggedArguments) and not k.trim_newline)


def _without_laid_out_values(keep: Keep, kinds: tuple[TaggedArguments, ...]) -> Keep:
    def refuse_laid_out(schema: dict[str, Any], arguments: dict[str, Any]) -> bool:
        return not any(isinstance(v, str) and k.reads_as_layout(v)
                       for v in arguments.values() for k in kinds) and keep(schema, arguments)

    return refuse_laid_out


def _json_type(value: Any) -> Any:
    """The JSON shape of a value: type names, recursively (integer and number apart)."""
    if isinstance(value, Mapping):
        return {k: _json_type(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_json_type(v) for v in value]
    return json_type_of(value)


def _check_call_events(events: Sequence[Event], count: int) -> None:
    """Calls are numbered 0, 1, ... in order; each call's start and deltas precede it."""
    finals = [(i, e) for i, e in enumerate(events) if isinstance(e, ToolCallEndEvent)]
    indices = [e.index for _, e in finals]
    if indices != list(range(count)):
        raise AssertionError(f"tool_call_end events are numbered {indices}, "
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
                                     "that call's tool_call_end event (or for no call at all)")
        if isinstance(event, ToolCallDeltaEvent) and started and event.index not in started:
            raise AssertionError(f"a tool_call_delta for call {event.index} precedes its "
                                 "tool_call_start")


def _canonical(events: Sequence[Event]) -> list[str]:
    return [tws.json_dumps(e.to_dict()) for e in merge_events(events)]


class PropertySuite(DriftedCalls):
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
        given = tuple(markers) if markers is not None else learnt
        # Reasoning tags the template writes are markup too, whoever passed the
        # format's markers: content holding "<think>" would rightly reopen reasoning.
        found = given + tuple(tag for tag in REASONING_TAGS if tag in learnt and tag not in given)
        # So is the template's end-of-turn token: a control token no model writes as
        # text (the pipeline drops it from the text).
        end = self.renderer.end_of_turn.strip() if self.renderer is not None else ""
        if end and end not in found:
            found += (end,)
        # A learnt marker is a run of markup between blanks ("<|section|><|call|>fn"):
        # the control tokens inside it are markers on their own, which no model
        # writes as text, so content and values never hold one either.
        self.markers: tuple[str, ...] = tuple(dict.fromkeys(
            found + tuple(t for m in found for t in _control_tokens(m) if t != m)))
        if self.renderer is not None:
            self.notes.extend(self.renderer.notes)
        self.keep = keep if keep is not None else _marker_free_keep(self.markers)
        if self.renderer is not None and _drops_nulls(self.renderer):
            # MiniMax-M3 leaves out every member whose value is null: no model writes
            # one through it, so calls holding a null are not tried
            self.notes.append("the template leaves out null values; calls holding a null "
                              "are not tried")
            self.keep = _without_nulls(self.keep)
        laid_out = _laid_out_kinds(spec)
        if laid_out:
            # a model laying a value out on its own lines writes a newline on both
            # sides, and the parser reads them as layout: a value that itself begins
            # and ends with a newline reads the same as one without them
            self.notes.append("a newline on both sides of a value is layout; values that "
                              "begin and end with a newline are not tried")
            self.keep = _without_laid_out_values(self.keep, laid_out)
        lost = _lost_line_breaks(self.renderer) if self.renderer is not None else ""
        if lost:
            # Jinja's indent filter (Command R+) splits on every Unicode line break and
            # writes "\x85" as a newline: no model writes such a value through it
            self.notes.append(f"the template rewrites the line breaks {lost!r} in values; "
                              "values holding them are not tried")
            self.keep = _without_characters(self.keep, lost)
        if self.renderer is not None and _free_form_is_lossy(self.renderer):
            # values without a schema written as text (MiniMax-M3's nested tags): "" and
            # [] and {} are alike there, as are "1" and 1, so only strings are tried
            self.notes.append("the template writes values without a schema alike for "
                              "different JSON values; free-form objects hold only strings")
            self.keep = _free_form_strings_only(self.keep)
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
        # nor ends with a marker's beginning: a reply that ends there was cut inside a
        # call's opening marker (text with a truncated_call diagnostic), where the
        # template writes the content last
        end = text.rstrip()
        return not any(m in text for m in self.markers) and not any(
            end.endswith(m[:i]) for m in self.markers for i in range(1, len(m)))

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
        return build_pipeline(self.spec, tool_parameters_by_name(list(tools)),
                              plugins=self.manager, chat_template=self.source,
                              prompt_tail=prompt_tail).run(pieces)

    def check_round_trip(self, events: Sequence[Event], calls: Sequence[Call],
                         content: str) -> None:
        reply = collect_reply(events)
        check_calls(reply, calls)
        if reply.content.strip() != content.strip():
            raise AssertionError(f"text differs: sent {short_repr(content.strip())}, "
                                 f"got {short_repr(reply.content.strip())}")
        if reply.reasoning.strip():
            raise AssertionError(f"reasoning from a reply that had none: "
                                 f"{short_repr(reply.reasoning)}")
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
            "drifted_calls": self.drifted_calls,
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
            elif name == "drifted_calls" and self.renderer is not None \
                    and (why := self._drift_skip()) is not None:
                results.append(PropertyResult(name, "skipped", reason=why))
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
                                 f"the text at once:\n  whole {short_repr(whole, 600)}\n"
                                 f"  split {short_repr(split, 600)}\n  deltas {short_repr(pieces)}")

    def no_markup_in_text(self, data: st.DataObject, recorder: _Recorder) -> None:
        tools, _, _, rendered = self.draw_turn(data, 1, 3)
        recorder.example(rendered.text)
        pieces = data.draw(tws.chunkings(rendered.text), label="chunks")
        events = self.parse(pieces, tools, rendered.prompt_tail)
        text = "".join(e.text for e in events if isinstance(e, TextEvent))
        leaked = [m for m in self.markers if m in text]
        if leaked:
            raise AssertionError(f"markup {leaked} in the text events: {short_repr(text)}")

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
            raise AssertionError(f"the parser returned non-events: {short_repr(strays)}")
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
                        f"{short_repr(value)}, got {_json_type(parsed[param])} "
                        f"{short_repr(parsed[param])}")
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
            refused = [c for c in choice.checks
                       if c.family == self.spec.name and c.outcome == "refused"]
            why = f": its claim was refused, {refused[0].reason}" if refused else ""
            return PropertyResult(
                "detection", "failed", 1,
                error=f"select_parser chose {choice.spec.name!r} (plugin {choice.spec.plugin!r}, "
                      f"score {choice.score:g}) over {self.spec.name!r} (score {score:g}){why}")
        return PropertyResult("detection", "passed", 1)


