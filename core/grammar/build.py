"""``grammar_for``: the grammar of one family's calls to some tools, cached.

A :class:`ToolGrammar` is GBNF text plus how to apply it:

* ``tool_choice="required"`` or a named tool: the reply is calls from its first
  token (after the reasoning block when the prompt opened one), so the grammar
  applies from the start (``lazy`` is ``False``);
* ``"auto"``: the model writes freely until it writes one of ``triggers`` (the
  family's call-opening markers); then the rest is calls (``lazy`` is ``True``;
  ``trigger_patterns`` are the regular expressions llama.cpp's lazy grammar
  sampler waits for: the whole text so far, ending with the marker, which is
  where the grammar starts).

Grammars are cached per family record, tools, choice and options, so a chat
builds each once.
"""

from __future__ import annotations

import copy
import json
import re
import threading
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from typing import Any, Final

import attrs

from ..errors import (
    GrammarError,
    GrammarFormatError,
    GrammarSchemaError,
    ToolChoiceError,
    ToolSchemaBudgetError,
)
from ..parse.record import CallFormat
from ..vocabulary.schema import normalize_schema
from ..vocabulary.schema_size import check_schema_size
from ..vocabulary.tool_choice import ResolvedChoice, ToolChoice, resolve_tool_choice
from .avoid import reasoning_blocks, reasoning_text
from .calls import CallsWriter
from .gbnf import RuleSet, alternatives, char_class, literal, sequence

__all__ = ["CACHE_SIZE", "ToolGrammar", "build_grammar", "clear_grammar_cache",
           "reasoning_in_prompt", "tool_shapes"]

CACHE_SIZE: Final = 128
"""Grammars kept (least recently used ones are dropped)."""

DEFAULT_REASONING: Final = ("<think>", "</think>")


@attrs.frozen
class ToolGrammar:
    """A grammar that constrains a family's calls, and how to apply it.

    :ivar gbnf: the grammar (GBNF, ``root`` first).
    :ivar family: the family it writes.
    :ivar tool_choice: ``required``, ``auto`` or ``named:NAME``.
    :ivar tools: the tools a call may use.
    :ivar lazy: apply only from a trigger on (``"auto"``).
    :ivar triggers: the markers that start the constrained part.
    :ivar trigger_patterns: for llama.cpp: regular expressions (ECMAScript) that
        match the whole text so far when it ends with a trigger; the first group
        is where the grammar starts.
    :ivar reasoning: the ``(open, close)`` tags of a reasoning block the prompt
        opened, which the grammar lets the model finish first.
    :ivar continuations: ``(marker, GBNF)``: for each trigger, the grammar of the
        rest of the calls once the model has written it (what a runtime switches
        to; see :mod:`toolwire.grammar.lazy`).
    :ivar start: for a family whose calls may stand bare at the reply's start,
        the grammar to begin with: bare calls, or any text that does not begin
        like one (``""``: none).
    :ivar bare_starts: the characters bare calls begin with.
    :ivar reasoning_tags: ``(open, close)`` of the reasoning blocks a reply may
        begin with (a marker inside one opens no call).
    """

    gbnf: str
    family: str
    tool_choice: str
    tools: tuple[str, ...]
    lazy: bool = False
    triggers: tuple[str, ...] = ()
    trigger_patterns: tuple[str, ...] = ()
    reasoning: tuple[str, str] | None = None
    continuations: tuple[tuple[str, str], ...] = ()
    start: str = ""
    bare_starts: str = ""
    reasoning_tags: tuple[tuple[str, str], ...] = ()

    def __str__(self) -> str:
        return self.gbnf


def tool_shapes(tools: Sequence[Any]) -> list[tuple[str, Mapping[str, Any]]]:
    """``(name, parameters)`` of each tool: a :class:`toolwire.Tool`, an OpenAI
    ``{"type": "function", "function": {...}}`` or a bare ``{"name", "parameters"}``.

    A schema given as a mapping is held to the schema limits here (a
    :class:`toolwire.Tool` was when it was made).

    :raises GrammarSchemaError: a schema over a limit (``keyword`` names it).
    """
    out: list[tuple[str, Mapping[str, Any]]] = []
    for item in tools:
        name = getattr(item, "name", None)
        params = getattr(item, "parameters", None)
        if not isinstance(name, str) and isinstance(item, Mapping):
            inner = item.get("function")
            function: Mapping[str, Any] = inner if isinstance(inner, Mapping) else item
            name = function.get("name")
            raw = function.get("parameters") or {"type": "object"}
            try:
                check_schema_size(raw, tool=str(name))
            except ToolSchemaBudgetError as exc:
                raise GrammarSchemaError(str(exc), tool=str(name), path="/",
                                         keyword=exc.budget) from None
            params = normalize_schema(raw)
        if not isinstance(name, str) or not name:
            raise GrammarError(f"a tool without a name: {item!r:.80}")
        out.append((name, params if isinstance(params, Mapping) else {"type": "object"}))
    return out


def reasoning_in_prompt(prompt_tail: str, fmt: CallFormat | None,
                        chat_template: str | None = None) -> tuple[str, str] | None:
    """The reasoning block the prompt leaves open (its tags), or ``None``.

    As the reasoning filters decide: the prompt ends (blanks aside) with the
    family's opening tag (or the tag and one of its optional headers), or with
    ``<think>`` where the template closes one.
    """
    tail = prompt_tail.rstrip()
    pairs = []
    if fmt is not None and fmt.reasoning is not None:
        pairs.append(fmt.reasoning)
    if chat_template is None or DEFAULT_REASONING[1] in chat_template:
        pairs.append(DEFAULT_REASONING)
    for open_tag, close_tag in pairs:
        headers = fmt.reasoning_headers if fmt is not None and fmt.reasoning == (
            open_tag, close_tag) else ()
        if any(tail.endswith(open_tag + h) for h in ("", *headers)):
            return open_tag, close_tag
    return None


def _regex(text: str) -> str:
    return re.sub(r"([\\^$.|?*+()\[\]{}/-])", r"\\\1", text)


def _trigger_patterns(openers: Sequence[str], bare: str,
                      reasoning: tuple[str, str] | None, may_reason: Sequence[tuple[str, str]]
                      ) -> tuple[str, ...]:
    if reasoning is not None:
        lead = f"[\\s\\S]*?{_regex(reasoning[1])}[\\s\\S]*?"
        start = f"[\\s\\S]*?{_regex(reasoning[1])}\\s*"
    elif may_reason:
        # a block opened at the reply's start is reasoning until it closes: no call in it
        opens = "|".join(_regex(o) for o, _ in may_reason)
        closed = "|".join(f"{_regex(o)}[\\s\\S]*?{_regex(c)}" for o, c in may_reason)
        lead = f"(?:(?!\\s*(?:{opens}))[\\s\\S]*?|\\s*(?:{closed})[\\s\\S]*?)"
        start = f"(?:\\s*(?:{closed}))?\\s*"
    else:
        lead = "[\\s\\S]*?"
        start = "\\s*"
    patterns = [f"{lead}({_regex(marker)})" for marker in openers]
    if bare:
        patterns.append(f"{start}([{''.join(_regex(c) for c in bare)}])")
    return tuple(patterns)


def build_grammar(fmt: CallFormat, tools: Sequence[Any], choice: ResolvedChoice, *,
                  parallel_tool_calls: bool = True, reasoning: tuple[str, str] | None = None,
                  may_reason: Sequence[tuple[str, str]] = (), end_markers: Sequence[str] = (),
                  max_calls: int | None = None,
                  max_reasoning_chars: int | None = None) -> ToolGrammar:
    """Write the grammar (uncached; see :func:`toolwire.grammar_for`).

    :raises GrammarError: the record or a schema cannot be written.
    :raises ToolChoiceError: ``"none"``, or a named tool that is not offered.
    """
    shapes = tool_shapes(tools)
    names = [name for name, _ in shapes]
    if choice.mode == "none":
        raise ToolChoiceError('tool_choice "none" offers no tools: there are no calls to '
                              "constrain")
    resolve_tool_choice(choice, names)
    allowed = set(choice.allowed(names))
    shapes = [(n, p) for n, p in shapes if n in allowed]
    rules = RuleSet()
    writer = CallsWriter(fmt, shapes, rules, end_markers=end_markers)
    limit = 1 if not parallel_tool_calls else max_calls
    calls = writer.calls(limit)
    if choice.mode == "auto":
        openers = writer.openers()
        bare = writer.bare_starts()
        if not openers and not bare:
            raise GrammarFormatError(f"{fmt.family}: no marker opens its calls, so a lazy "
                                     "grammar has nothing to wait for", family=fmt.family,
                                     feature="opening marker")
        continuations = []
        for marker in openers:
            rest = RuleSet()
            after = CallsWriter(fmt, shapes, rest, end_markers=end_markers)
            continuations.append((marker, rest.render(after.calls(limit, opened=marker))))
        start = ""
        if bare and reasoning is None:
            start = _start_grammar(fmt, shapes, end_markers, limit, bare, may_reason)
        return ToolGrammar(rules.render(calls), fmt.family, choice.key(), tuple(names),
                           lazy=True, triggers=openers,
                           trigger_patterns=_trigger_patterns(openers, bare, reasoning,
                                                              may_reason),
                           reasoning=reasoning, continuations=tuple(continuations),
                           start=start, bare_starts=bare, reasoning_tags=tuple(may_reason))
    root = calls
    if reasoning is not None:
        text = reasoning_text(rules, reasoning[1], max_reasoning_chars)
        root = sequence(text, literal(reasoning[1]), '[ \\n]{0,2}', calls)
    return ToolGrammar(rules.render(alternatives(root)), fmt.family, choice.key(),
                       tuple(names), reasoning=reasoning)


def _start_grammar(fmt: CallFormat, shapes: Sequence[tuple[str, Mapping[str, Any]]],
                   end_markers: Sequence[str], limit: int | None, bare: str,
                   may_reason: Sequence[tuple[str, str]]) -> str:
    """Bare calls at the reply's start, or any text that does not begin like one
    (after a reasoning block the reply may open with)."""
    rules = RuleSet()
    calls = CallsWriter(fmt, shapes, rules, end_markers=end_markers).bare(limit)
    blocks = reasoning_blocks(rules, may_reason)
    lead = sequence("[ \\t\\n]*", f"({alternatives(*blocks)} [ \\t\\n]*)?" if blocks else "")
    free = char_class(" \t\n\r\x00" + bare, negate=True) + " [^\\x00]*"
    return rules.render(sequence(lead, alternatives(calls, free)))


class GrammarCache:
    """Built grammars by (record, tools, choice, options); thread-safe, bounded."""

    def __init__(self, size: int = CACHE_SIZE) -> None:
        self.size = size
        self._items: OrderedDict[tuple[Any, ...], ToolGrammar | GrammarError] = OrderedDict()
        self._lock = threading.Lock()
        self._formats: dict[int, tuple[CallFormat, str]] = {}
        self._tools: dict[int, tuple[Any, str]] = {}

    def _format_key(self, fmt: CallFormat) -> str:
        known = self._formats.get(id(fmt))
        if known is not None and known[0] is fmt:
            return known[1]
        key = repr(fmt)
        if len(self._formats) > 4 * self.size:
            self._formats.clear()
        self._formats[id(fmt)] = (fmt, key)
        return key

    def _tool_key(self, tool: Any) -> str:
        if isinstance(tool, Mapping):
            return json.dumps(tool, sort_keys=True, default=str)
        known = self._tools.get(id(tool))
        if known is not None and known[0] is tool:
            return known[1]
        key = json.dumps([getattr(tool, "name", ""), getattr(tool, "parameters", None)],
                         sort_keys=True, default=str)
        if len(self._tools) > 16 * self.size:
            self._tools.clear()
        self._tools[id(tool)] = (tool, key)
        return key

    def get(self, fmt: CallFormat, tools: Sequence[Any], choice: ResolvedChoice,
            **options: Any) -> ToolGrammar:
        """The grammar, built on the first request (a failure is cached and raised again)."""
        with self._lock:
            key = (self._format_key(fmt), tuple(self._tool_key(t) for t in tools),
                   choice, tuple(sorted((k, _hashable(v)) for k, v in options.items())))
            found = self._items.get(key)
            if found is not None:
                self._items.move_to_end(key)
        if found is None:
            try:
                found = build_grammar(fmt, tools, choice, **options)
            except GrammarError as exc:
                found = exc
            with self._lock:
                self._items[key] = found
                while len(self._items) > self.size:
                    self._items.popitem(last=False)
        if isinstance(found, GrammarError):
            raise copy.copy(found).with_traceback(None)  # a fresh traceback each time
        return found

    def clear(self) -> None:
        """Forget every grammar."""
        with self._lock:
            self._items.clear()
            self._formats.clear()
            self._tools.clear()


def _hashable(value: Any) -> Any:
    if isinstance(value, list | tuple):
        return tuple(_hashable(v) for v in value)
    return value


CACHE: Final = GrammarCache()


def clear_grammar_cache() -> None:
    """Forget every cached grammar (benchmarks measure first builds with it)."""
    CACHE.clear()


def cached_grammar(fmt: CallFormat, tools: Sequence[Any], choice: ToolChoice | ResolvedChoice,
                   **options: Any) -> ToolGrammar:
    """:func:`build_grammar` through the shared cache."""
    resolved = choice if isinstance(choice, ResolvedChoice) else resolve_tool_choice(choice)
    return CACHE.get(fmt, tools, resolved, **options)
