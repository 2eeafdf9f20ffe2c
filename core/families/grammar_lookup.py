"""The grammar of a family named, parsed or chosen by template (:func:`grammar_for`).

The grammar floor writes a grammar from a family's record
(:func:`toolwire.grammar.grammar_for_format`); finding that record by a family
name, a parser spec or a chat template needs the registered plugins and parser
selection, which live here.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..grammar import ToolGrammar, format_of, grammar_for_format
from ..hooks.manager import PluginManager, default_plugin_manager
from ..parse.protocol import ParserSpec
from ..parse.record import CallFormat
from ..vocabulary.tool_choice import ToolChoice
from .selection import select_parser

__all__ = ["grammar_for"]


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
    return grammar_for_format(fmt, tools, template=template, tool_choice=tool_choice,
                              parallel_tool_calls=parallel_tool_calls,
                              prompt_tail=prompt_tail, end_markers=end_markers,
                              max_calls=max_calls, max_reasoning_chars=max_reasoning_chars)


def _record(family: str | CallFormat | ParserSpec | None, template: str | None,
            plugins: PluginManager | None) -> CallFormat:
    if isinstance(family, CallFormat):
        return family
    if family is not None and not isinstance(family, str):
        return format_of(family)
    manager = plugins or default_plugin_manager()
    return format_of(select_parser(template, manager, family=family).spec)
