"""The grammar of a family's record: the grammar floor's entry point.

:func:`grammar_for_format` writes (and caches) the grammar of the calls a record
writes; :func:`format_of` is the record a parser runs.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from ..errors import GrammarFormatError
from ..parse.record import CallFormat
from ..vocabulary.tool_choice import ToolChoice, resolve_tool_choice
from .build import DEFAULT_REASONING, ToolGrammar, cached_grammar, reasoning_in_prompt

if TYPE_CHECKING:
    from ..parse.protocol import ParserSpec

__all__ = ["format_of", "grammar_for_format"]


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


def grammar_for_format(fmt: CallFormat, tools: Sequence[Any] = (), *,
                       template: str | None = None, tool_choice: ToolChoice = "required",
                       parallel_tool_calls: bool = True, prompt_tail: str = "",
                       end_markers: Sequence[str] = (), max_calls: int | None = None,
                       max_reasoning_chars: int | None = None) -> ToolGrammar:
    """The grammar of the calls a family's record ``fmt`` writes to ``tools`` (cached).

    :func:`toolwire.grammar_for` takes a family by name, parser or template, finds its
    record and calls this; its docstring says what every other parameter means.

    :raises GrammarError: the record or a schema cannot be written as a grammar.
    :raises ToolChoiceError: a malformed ``tool_choice``, or a tool it names is not offered.
    """
    pairs = [p for p in (fmt.reasoning, DEFAULT_REASONING) if p is not None]
    if template is not None:
        pairs = [p for p in pairs if p[1] in template or p == fmt.reasoning]
    return cached_grammar(fmt, list(tools), resolve_tool_choice(tool_choice),
                          parallel_tool_calls=parallel_tool_calls,
                          reasoning=reasoning_in_prompt(prompt_tail, fmt, template),
                          may_reason=tuple(dict.fromkeys(pairs)), end_markers=tuple(end_markers),
                          max_calls=max_calls, max_reasoning_chars=max_reasoning_chars)
