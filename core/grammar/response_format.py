"""The grammar of a reply whose text must be JSON: OpenAI's ``response_format``.

:func:`response_format_grammar` writes, with the same schema machinery as tool
calls (:class:`~toolwire.grammar.json_values.JsonValues`), the grammar of a
reply that is one JSON value:

* ``{"type": "json_object"}``: any JSON object;
* ``{"type": "json_schema", ...}``: a value of the schema, held to what the
  grammar enforces for tool arguments (``docs/grammar.md``: types, ``enum``,
  ``const``, properties in order with every required one, lengths and counts,
  ``anyOf``/``allOf``/local ``$ref``; ``pattern``, ``format`` and numeric bounds
  are relaxed). A schema it cannot express (``not``, ``if``, ``patternProperties``...)
  raises :class:`~toolwire.errors.GrammarSchemaError` under ``strict``, and is
  loosened to any JSON object otherwise.

The value is written as ``json.dumps`` writes it (no blank before it, at most
one space after ``:`` and ``,``); a reasoning block the prompt opened, or one
the reply may begin with, comes first. The result is a
:class:`~toolwire.grammar.build.ToolGrammar` applied from the first token (its
family is ``response_format``), so a runtime applies it as it applies the
grammar of ``tool_choice="required"``. Grammars are cached.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping, Sequence
from typing import Any, Final

from ..errors import GrammarSchemaError
from ..vocabulary.backend import ResponseFormat
from ..vocabulary.schema import normalize_schema
from .avoid import avoiding_text, bounded_text
from .build import ToolGrammar
from .gbnf import RuleSet, alternatives, literal, sequence
from .json_values import JsonValues

__all__ = ["FAMILY", "response_format_grammar"]

FAMILY: Final = "response_format"
"""The ``family`` of a response-format grammar (what a runtime's messages name)."""

_CACHE_SIZE: Final = 64
_ANY_OBJECT: Final = {"type": "object"}


def response_format_grammar(response_format: ResponseFormat, *,
                            reasoning: tuple[str, str] | None = None,
                            may_reason: Sequence[tuple[str, str]] = (),
                            max_reasoning_chars: int | None = None) -> ToolGrammar:
    """The grammar of a reply whose text is ``response_format``'s JSON (cached).

    :param reasoning: the ``(open, close)`` tags of a reasoning block the prompt
        opened: the reply finishes it first.
    :param may_reason: the ``(open, close)`` tags of blocks the reply may begin with.
    :param max_reasoning_chars: the most characters of reasoning (``None``: no bound).
    :raises GrammarSchemaError: under ``strict``, a schema the grammar cannot
        express; the message begins with ``response_format``.
    """
    schema = response_format.schema if response_format.type == "json_schema" else None
    return _cached(json.dumps(schema, sort_keys=True, default=str) if schema is not None else "",
                   response_format.name, response_format.strict, reasoning,
                   tuple(may_reason), max_reasoning_chars)


@functools.lru_cache(maxsize=_CACHE_SIZE)
def _cached(schema_text: str, name: str, strict: bool, reasoning: tuple[str, str] | None,
            may_reason: tuple[tuple[str, str], ...],
            max_reasoning_chars: int | None) -> ToolGrammar:
    schema = normalize_schema(json.loads(schema_text)) if schema_text else _ANY_OBJECT
    try:
        return _grammar(schema, name, reasoning, may_reason, max_reasoning_chars)
    except GrammarSchemaError as exc:
        if not strict:  # the grammar a client without strict asked for is best effort
            return _grammar(_ANY_OBJECT, name, reasoning, may_reason, max_reasoning_chars)
        raise GrammarSchemaError(
            f"response_format: the schema {name!r} cannot be enforced by a grammar at "
            f"{exc.path} ({exc.keyword!r}): leave that keyword out, or send strict: false "
            "(the reply is then any JSON object)",
            family=FAMILY, tool=name, path=exc.path, keyword=exc.keyword) from None


def _grammar(schema: Any, name: str, reasoning: tuple[str, str] | None,
             may_reason: tuple[tuple[str, str], ...],
             max_reasoning_chars: int | None) -> ToolGrammar:
    rules = RuleSet()
    root = schema if isinstance(schema, Mapping) else {}
    value = JsonValues(rules, family=FAMILY, tool=name or FAMILY, root=root).value(schema)
    lead = ""
    if reasoning is not None:
        close = reasoning[1]
        text = (bounded_text(rules, [close], 0, max_reasoning_chars)
                if max_reasoning_chars is not None
                else avoiding_text(rules, [close], hint="reasoning", after=close))
        lead = sequence(text, literal(close), '[ \\n]{0,2}')
    elif may_reason:
        blocks = [sequence(literal(open_tag), avoiding_text(rules, [close], hint="reasoning",
                                                            after=close), literal(close))
                  for open_tag, close in may_reason]
        lead = f"({alternatives(*blocks)} [ \\n]{{0,2}})?"
    return ToolGrammar(rules.render(sequence(lead, value)), FAMILY, "required", (),
                       reasoning=reasoning, reasoning_tags=may_reason)
