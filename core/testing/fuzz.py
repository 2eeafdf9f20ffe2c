"""Fuzzing a parser at volume: many mutated replies, each parsed whole and in random cuts.

Hypothesis (the conformance kit, :mod:`toolwire.testing.strategies`) searches for a
small counterexample and shrinks it; that costs milliseconds per example. A fuzz
run wants volume instead: :func:`fuzz_parser` makes replies with a seeded
:class:`random.Random` by mutating real replies (rendered through the family's own
template) with the family's markup, near misses of it, blanks and odd characters,
and checks on each one the rules every parser keeps:

* feeding never raises and never reports the parser's own failure
  (``parser_error``);
* the events do not depend on how the reply is cut into deltas (whole, and at
  random cut points; 1-character deltas for short replies);

Replies go through the whole pipeline (stream filters included), with the prompt
tail the template renders, as in a live chat. The corpus also holds the drifts
of a rendered reply the rules read (:mod:`toolwire.testing.drift`: a closer left out
before the next call, end-of-turn markup inside an open call, several calls in one
block). A failure keeps the reply and the cuts that show it, so it can be replayed::

    report = fuzz_parser("qwen_xml", template=source, replies=100_000)
    assert report.passed, report.failures[0].replay()
"""

from __future__ import annotations

import itertools
import random
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any

import attrs

from ..errors import TemplateError
from ..events import DiagnosticEvent, Event
from ..families.pipeline import build_pipeline
from ..hooks.manager import PluginManager, default_plugin_manager
from ..parse.protocol import ParserSpec, merge_events
from ..parse.record import CallFormat
from ..templates.assistant_turns import AssistantTurnRenderer
from ..vocabulary.schema import tool_parameters_by_name
from .drift import drifts, end_tokens
from .report import KIT_AUDIT_EVENT
from .strategies import JSON_LOOKALIKES, MARKUP_FRAGMENTS, markup_fragments

__all__ = ["FuzzFailure", "FuzzReport", "fuzz_parser"]

_SAMPLE_TOOLS: tuple[dict[str, Any], ...] = (
    {"type": "function", "function": {"name": "write_file", "parameters": {
        "type": "object", "properties": {"path": {"type": "string"},
                                         "content": {"type": "string"},
                                         "mode": {"type": ["string", "null"]}},
        "required": ["path", "content"]}}},
    {"type": "function", "function": {"name": "search", "parameters": {
        "type": "object", "properties": {"query": {"type": "string"},
                                         "limit": {"type": "integer"},
                                         "filters": {"type": "object"},
                                         "exact": {"type": "boolean"}},
        "required": ["query"]}}},
)
_SAMPLE_TURNS: tuple[tuple[tuple[str, dict[str, Any]], ...], ...] = (
    (("search", {"query": "rust async", "limit": 3}),),
    (("write_file", {"path": "a.txt", "content": "line one\nline <two> & \"three\"\n"}),),
    (("search", {"query": "x", "filters": {"kind": ["a", "b"], "n": 1.5}, "exact": True}),
     ("write_file", {"path": "b.py", "content": "print('hi')", "mode": None})),
)
_ODD = ("\n", "\n\n", " ", "\t", "\\", "\\\"", "\"", "'", "{", "}", "[", "]", "<", ">", "</",
        "\u00e9", "\u4e2d", "\U0001f600", "\x00", "\r\n", "```", "```json\n")


@attrs.frozen
class FuzzFailure:
    """One reply that broke a rule.

    :ivar rule: ``raised``, ``parser_error`` or ``chunking``.
    :ivar reply: the reply text.
    :ivar cuts: where the reply was cut into deltas (offsets).
    :ivar detail: what went wrong.
    """

    rule: str
    reply: str
    cuts: tuple[int, ...]
    detail: str

    def replay(self) -> str:
        """The failure as a message with the reply and the deltas, to paste into a test."""
        bounds = (0, *self.cuts, len(self.reply))
        pieces = [self.reply[a:b] for a, b in itertools.pairwise(bounds)]
        return f"{self.rule}: {self.detail}\n  reply: {self.reply!r}\n  deltas: {pieces!r}"


@attrs.frozen
class FuzzReport:
    """The outcome of :func:`fuzz_parser`.

    :ivar family: the family fuzzed.
    :ivar replies: how many replies were checked.
    :ivar seconds: how long it took.
    :ivar failures: the first failures found (at most ``max_failures``).
    :ivar failed: how many replies failed in all.
    """

    family: str
    replies: int
    seconds: float
    failures: tuple[FuzzFailure, ...]
    failed: int

    @property
    def passed(self) -> bool:
        """No reply broke a rule."""
        return self.failed == 0

    def to_dict(self) -> dict[str, Any]:
        """The report as JSON-ready data."""
        return {"family": self.family, "replies": self.replies,
                "seconds": round(self.seconds, 2), "failed": self.failed,
                "failures": [attrs.asdict(f) for f in self.failures]}


class _ReplyMaker:
    """Mutated replies from a corpus of real ones and the family's fragments."""

    def __init__(self, rng: random.Random, corpus: Sequence[str],
                 fragments: Sequence[str]) -> None:
        self._rng = rng
        self._corpus = [c for c in corpus if c] or [""]
        self._fragments = list(fragments) + list(_ODD) + list(JSON_LOOKALIKES)

    def reply(self) -> str:
        rng = self._rng
        text = rng.choice(self._corpus)
        for _ in range(rng.randint(0, 4)):
            text = self._mutate(text)
        return text

    def _mutate(self, text: str) -> str:
        rng = self._rng
        at = rng.randint(0, len(text))
        op = rng.randrange(7)
        if op <= 1:  # insert a fragment (twice as likely)
            return text[:at] + rng.choice(self._fragments) + text[at:]
        if op == 2 and text:  # delete a span
            end = min(len(text), at + rng.randint(1, 12))
            return text[:at] + text[end:]
        if op == 3:  # cut the reply short
            return text[:at]
        if op == 4 and text:  # repeat a span
            end = min(len(text), at + rng.randint(1, 40))
            return text[:end] + text[at:end] + text[end:]
        if op == 5:  # splice another real reply in
            other = rng.choice(self._corpus)
            return text[:at] + other[rng.randint(0, len(other)):]
        return text[:at] + "".join(rng.choice(_ODD) for _ in range(rng.randint(1, 3))) + text[at:]

    def cuts(self, text: str) -> tuple[int, ...]:
        rng = self._rng
        n = len(text)
        if n <= 1:
            return ()
        if n <= 64 and rng.random() < 0.3:
            return tuple(range(1, n))  # every character its own delta
        if rng.random() < 0.5:  # token-like deltas of 1 to 4 characters
            out, at = [], rng.randint(1, 4)
            while at < n:
                out.append(at)
                at += rng.randint(1, 4)
            return tuple(out)
        return tuple(sorted(rng.sample(range(1, n), min(n - 1, rng.randint(1, 8)))))


def _corpus(source: str | None, spec: ParserSpec) -> tuple[list[str], str, tuple[str, ...]]:
    """Real replies rendered through the template, the prompt tail, and the markers."""
    if source is None:
        markers = spec.format.markup if spec.format is not None else ()
        return list(markers), "", tuple(markers)
    try:
        renderer = AssistantTurnRenderer(source, make_call_id=spec.make_call_id)
    except TemplateError:
        return [], "", ()
    replies: list[str] = []
    tail = ""
    for turn in _SAMPLE_TURNS:
        calls = [(name, dict(args)) for name, args in turn]
        if not renderer.parallel_calls:
            calls = calls[:1]
        for content in ("", "Sure, let me check."):
            try:
                rendered = renderer.render(calls, content=content if renderer.content_with_calls
                                           else "", tools=_SAMPLE_TOOLS)
            except TemplateError:
                continue
            replies.append(rendered.text)
            tail = rendered.prompt_tail
    fmt = spec.format
    if isinstance(fmt, CallFormat):  # the drifts the rules read: a closer left out...
        calls = [("search", {"query": "twdriftone"}), ("search", {"query": "twdrifttwo"})]
        try:
            rendered = renderer.render(calls if renderer.parallel_calls else calls[:1],
                                       tools=_SAMPLE_TOOLS)
        except TemplateError:
            return replies, tail, renderer.markers
        values = ["twdriftone", "twdrifttwo"][:len(calls) if renderer.parallel_calls else 1]
        replies.extend(d.reply for d in drifts(fmt, rendered.text, values))
        return replies, tail, (*renderer.markers, *end_tokens(fmt))
    return replies, tail, renderer.markers


def _feed(spec: ParserSpec, tools: dict[str, Any], source: str | None, tail: str,
          pieces: Sequence[str], plugins: PluginManager) -> list[Event]:
    return build_pipeline(spec, tools, plugins=plugins, chat_template=source,
                          prompt_tail=tail).run(pieces)


def _check(spec: ParserSpec, tools: dict[str, Any], source: str | None, tail: str, text: str,
           cuts: tuple[int, ...], plugins: PluginManager) -> FuzzFailure | None:
    try:
        whole = merge_events(_feed(spec, tools, source, tail, [text], plugins))
        bounds = (0, *cuts, len(text))
        pieces = [text[a:b] for a, b in itertools.pairwise(bounds)]
        split = merge_events(_feed(spec, tools, source, tail, pieces, plugins))
    except Exception as exc:  # the rule under test: feeding never raises
        return FuzzFailure("raised", text, cuts, f"{type(exc).__name__}: {exc}")
    errors = [e for e in whole if isinstance(e, DiagnosticEvent) and e.code == "parser_error"]
    if errors:
        return FuzzFailure("parser_error", text, cuts, errors[0].message)
    if whole != split:
        first = next((i for i, (a, b) in enumerate(zip(whole, split, strict=False)) if a != b),
                     min(len(whole), len(split)))
        return FuzzFailure("chunking", text, cuts,
                           f"event {first} differs: whole {whole[first:first + 1]!r}, "
                           f"cut {split[first:first + 1]!r}")
    return None


def fuzz_parser(family: str | ParserSpec, *, template: str | None = None, replies: int = 10_000,
                seed: int = 0, plugins: PluginManager | None = None, max_failures: int = 5,
                progress: Callable[[int], None] | None = None) -> FuzzReport:
    """Check ``replies`` mutated replies against a parser; see the module doc.

    :param family: a registered family name, or a :class:`ParserSpec`.
    :param template: the family's chat template source: real replies are rendered
        through it (and its prompt tail and reasoning filters apply). Without it the
        family's record markers seed the replies.
    :param seed: the random seed (a run is reproducible).
    :param max_failures: failures kept in the report (all are counted).
    :param progress: called with the number of replies checked, every 1,000.
    """
    plugins = plugins or default_plugin_manager()
    spec = family if isinstance(family, ParserSpec) else plugins.parser(family)
    rng = random.Random(seed)
    corpus, tail, markers = _corpus(template, spec)
    fragments = markup_fragments(markers) if markers else MARKUP_FRAGMENTS
    maker = _ReplyMaker(rng, corpus, fragments)
    tools = tool_parameters_by_name(_SAMPLE_TOOLS)
    failures: list[FuzzFailure] = []
    failed = 0
    sys.audit(KIT_AUDIT_EVENT, spec.name, "fuzz")
    started = time.perf_counter()
    for count in range(1, replies + 1):
        text = maker.reply()
        failure = _check(spec, tools, template, tail, text, maker.cuts(text), plugins)
        if failure is not None:
            failed += 1
            if len(failures) < max_failures:
                failures.append(failure)
        if progress is not None and count % 1000 == 0:
            progress(count)
    return FuzzReport(spec.name, replies, time.perf_counter() - started, tuple(failures), failed)
