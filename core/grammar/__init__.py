"""Grammar-constrained tool calls, generated from a family's record.

A family is a :class:`~toolwire.parse.record.CallFormat`; from it and the
offered tools' JSON schemas, :func:`grammar_for` writes a GBNF grammar whose
every sentence is a reply the family's parser reads back as valid calls: the
family's markup, only the offered tools' names, each tool's parameters (the
required ones present, none twice) with values of their types. A local
backend hands it to llama.cpp's sampler, so a small model cannot write a
malformed call. See ``docs/grammar.md``.

* :func:`grammar_for`: the grammar for a family (by name, record or chat
  template), some tools and a ``tool_choice``;
* :class:`ToolGrammar`: the grammar and how to apply it (lazily in ``"auto"``);
* :func:`resolve_tool_choice`: ``tool_choice`` checked (the OpenAI forms);
* :class:`GrammarError` (:class:`GrammarFormatError`, :class:`GrammarSchemaError`)
  and :class:`ToolChoiceError`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from ..parse.record import CallFormat
from .build import (
    DEFAULT_REASONING,
    ToolGrammar,
    cached_grammar,
    clear_grammar_cache,
    reasoning_in_prompt,
)
from .choice import (
    TOOL_CHOICE_MODES,
    ResolvedChoice,
    ToolChoice,
    named_tool_choice,
    resolve_tool_choice,
)
from .errors import GrammarError, GrammarFormatError, GrammarSchemaError, ToolChoiceError

if TYPE_CHECKING:
    from ..hooks.manager import PluginManager
    from ..parse.protocol import ParserSpec

__all__ = [
    "TOOL_CHOICE_MODES",
    "GrammarError",
    "GrammarFormatError",
    "GrammarSchemaError",
    "ResolvedChoice",
    "ToolChoice",
    "ToolChoiceError",
    "ToolGrammar",
    "clear_grammar_cache",
    "format_of",
    "grammar_for",
    "named_tool_choice",
    "reasoning_in_prompt",
    "resolve_tool_choice",
]


def format_of(spec: ParserSpec) -> CallFormat:
    """The record a parser runs.

    :raises GrammarFormatError: the parser is hand-written (no record), so no
        grammar can be generated for its family.
    """
    fmt = spec.format
    if not isinstance(fmt, CallFormat):
        raise GrammarFormatError(
            f"{spec.name}: its parser is hand-written code, not a CallFormat record, so no "
            "grammar can be generated for its calls", family=spec.name, feature="no record")
    return fmt


def grammar_for(family: str | CallFormat | ParserSpec | None = None,
                tools: Sequence[Any] = (), *, template: str | None = None,
                tool_choice: ToolChoice = "required", parallel_tool_calls: bool = True,
                plugins: PluginManager | None = None, prompt_tail: str = "",
                end_markers: Sequence[str] = (), max_calls: int | None = None,
                max_reasoning_chars: int | None = None) -> ToolGrammar:
    """The grammar of ``family``'s calls to ``tools`` under ``tool_choice`` (cached).

    :param family: a family name (``qwen_xml``), its record, or its parser spec;
        ``None`` with ``template`` selects the family as a chat does (a derived
        record when no plugin claims the template).
    :param tools: :class:`toolwire.Tool` objects or OpenAI tool schemas.
    :param template: the chat template's source (to select the family, and to
        know its reasoning tags).
    :param tool_choice: ``"required"`` (the default here), a named tool
        (``{"type": "function", "function": {"name": N}}``), or ``"auto"`` (a
        lazy grammar: see :class:`ToolGrammar`).
    :param parallel_tool_calls: ``False``: exactly one call.
    :param plugins: where family names are looked up.
    :param prompt_tail: the rendered prompt's end: a reasoning block it opens is
        left for the model to finish before its calls.
    :param end_markers: texts of the runtime's end-of-generation tokens.
    :param max_calls: the most calls the grammar allows (default: the record's
        ``max_calls``, else no limit).
    :param max_reasoning_chars: bound the reasoning the grammar lets the model
        finish (``None``: no bound).
    :raises GrammarError: the family or a schema cannot be written as a grammar
        (:class:`GrammarFormatError`, :class:`GrammarSchemaError`).
    :raises ToolChoiceError: a malformed ``tool_choice``, ``"none"``, or a tool
        name that is not among ``tools``.
    :raises toolwire.ParserNotFoundError: ``family`` names no registered parser.
    """
    fmt = _record(family, template, plugins)
    pairs = [p for p in (fmt.reasoning, DEFAULT_REASONING) if p is not None]
    if template is not None:
        pairs = [p for p in pairs if p[1] in template or p == fmt.reasoning]
    return cached_grammar(fmt, list(tools), resolve_tool_choice(tool_choice),
                          parallel_tool_calls=parallel_tool_calls,
                          reasoning=reasoning_in_prompt(prompt_tail, fmt, template),
                          may_reason=tuple(dict.fromkeys(pairs)), end_markers=tuple(end_markers),
                          max_calls=max_calls, max_reasoning_chars=max_reasoning_chars)


def _record(family: str | CallFormat | ParserSpec | None, template: str | None,
            plugins: PluginManager | None) -> CallFormat:
    if isinstance(family, CallFormat):
        return family
    if family is not None and not isinstance(family, str):
        return format_of(family)
    from ..hooks.manager import default_plugin_manager
    from ..templates.selection import select_parser

    manager = plugins or default_plugin_manager()
    return format_of(select_parser(template, manager, family=family).spec)
