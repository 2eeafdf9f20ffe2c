"""Grammar-constrained tool calls, generated from a family's record.

A family is a :class:`~toolwire.parse.record.CallFormat`; from it and the
offered tools' JSON schemas, :func:`grammar_for` writes a GBNF grammar whose
every sentence is a reply the family's parser reads back as valid calls: the
family's markup, only the offered tools' names, each tool's parameters (the
required ones present, none twice) with values of their types. A local
backend hands it to llama.cpp's sampler, so a small model cannot write a
malformed call. See ``docs/grammar.md``.

* :func:`grammar_for_format`: the grammar for a family's record, some tools and
  a ``tool_choice`` (:func:`toolwire.grammar_for` finds the record by family name,
  parser or chat template);
* :class:`ToolGrammar`: the grammar and how to apply it (lazily in ``"auto"``);
* :func:`resolve_tool_choice`: ``tool_choice`` checked (the OpenAI forms);
* :class:`GrammarError` (:class:`GrammarFormatError`, :class:`GrammarSchemaError`)
  and :class:`ToolChoiceError`.
"""

from __future__ import annotations

from ..errors import GrammarError, GrammarFormatError, GrammarSchemaError, ToolChoiceError
from ..vocabulary.tool_choice import (
    TOOL_CHOICE_MODES,
    ResolvedChoice,
    ToolChoice,
    named_tool_choice,
    resolve_tool_choice,
)
from .build import ToolGrammar, clear_grammar_cache, reasoning_in_prompt
from .record_grammar import format_of, grammar_for_format

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
    "grammar_for_format",
    "named_tool_choice",
    "reasoning_in_prompt",
    "resolve_tool_choice",
]
