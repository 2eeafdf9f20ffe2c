"""The grammar of one model turn, for backends that can constrain sampling.

:func:`turn_grammar` is what :class:`~toolwire.backends.templated.TemplatedBackend`
asks once it has rendered a turn's prompt: the grammar that enforces the
request's ``tool_choice`` for the selected family (lazy under ``"auto"``), on a
turn without tools the grammar of its ``response_format``
(:mod:`toolwire.grammar.response_format`), or ``None`` when there is nothing to
constrain. :func:`grammar_failure` says what
a failure means for the turn: an ``error`` event where the reply had to be
calls, a one-time diagnostic where the model may answer freely anyway.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from ..errors import GrammarError, ToolChoiceError
from ..events import DiagnosticEvent, ErrorEvent, Event
from ..parse.record import CallFormat
from ..vocabulary.tool_choice import resolve_tool_choice
from .build import DEFAULT_REASONING, reasoning_in_prompt
from .record_grammar import format_of, grammar_for_format
from .response_format import response_format_grammar, with_text_format

if TYPE_CHECKING:
    from ..parse.protocol import ParserSpec
    from ..vocabulary.backend import ModelRequest
    from .build import ToolGrammar

__all__ = ["grammar_failure", "turn_grammar"]


def turn_grammar(request: ModelRequest, parser: ParserSpec | None, *, template: str,
                 prompt_tail: str, end_markers: Sequence[str] = (),
                 max_reasoning_chars: int | None = None) -> ToolGrammar | None:
    """The grammar for this turn's calls (or, without tools, of its ``response_format``;
    under ``"auto"`` with both, calls or that JSON), or ``None`` (no tools, no parser,
    ``"none"``).

    :param max_reasoning_chars: bound the reasoning the prompt opened (see
        :func:`toolwire.grammar_for`).

    :raises GrammarError: the family or a schema cannot be written as a grammar.
    :raises ToolChoiceError: the request's ``tool_choice`` is malformed or names
        a tool it does not offer.
    """
    tools = request.offered_tools
    if not tools and request.response_format is not None:
        return _text_grammar(request, parser, template=template, prompt_tail=prompt_tail,
                             max_reasoning_chars=max_reasoning_chars)
    if not tools or parser is None:
        return None
    calls = grammar_for_format(format_of(parser), tools, template=template,
                               tool_choice=request.tool_choice,
                               parallel_tool_calls=request.parallel_tool_calls,
                               prompt_tail=prompt_tail, end_markers=end_markers,
                               max_reasoning_chars=max_reasoning_chars)
    if request.response_format is not None and calls.lazy:  # calls, or the JSON asked for
        return with_text_format(calls, request.response_format,
                                max_reasoning_chars=max_reasoning_chars)
    return calls


def _text_grammar(request: ModelRequest, parser: ParserSpec | None, *, template: str,
                  prompt_tail: str, max_reasoning_chars: int | None) -> ToolGrammar:
    """The grammar of a reply whose text is the request's ``response_format``."""
    assert request.response_format is not None
    fmt = parser.format if parser is not None else None
    record = fmt if isinstance(fmt, CallFormat) else None
    own = record.reasoning if record is not None else None
    pairs = [p for p in (own, DEFAULT_REASONING)
             if p is not None and (p == own or p[1] in template)]
    return response_format_grammar(request.response_format,
                                   reasoning=reasoning_in_prompt(prompt_tail, record, template),
                                   may_reason=tuple(dict.fromkeys(pairs)),
                                   max_reasoning_chars=max_reasoning_chars)


def grammar_failure(exc: GrammarError | ToolChoiceError, request: ModelRequest,
                    announce_once: Callable[[str], bool]) -> tuple[list[Event], bool]:
    """The events a failed grammar makes, and whether the turn must end.

    ``"required"`` and a named tool cannot be honoured without the grammar: an
    ``error`` event (kind ``grammar``) and the turn ends. Under ``"auto"`` the
    model runs unconstrained, with a ``grammar_unavailable`` diagnostic once.
    """
    if request.response_format is not None and str(exc).startswith("response_format"):
        return [ErrorEvent("grammar", str(exc))], True  # the text's shape was asked for
    try:
        must = resolve_tool_choice(request.tool_choice).constrains_from_start
    except ToolChoiceError:
        must = True
    if must or isinstance(exc, ToolChoiceError):
        return [ErrorEvent("grammar", f"tool_choice {request.tool_choice!r} cannot be "
                                      f"enforced: {exc}")], True
    family = getattr(exc, "family", "")
    if announce_once(f"grammar_unavailable:{family}:{exc}"):
        return [DiagnosticEvent("grammar_unavailable",
                                f"calls are not grammar-constrained: {exc}")], False
    return [], False
