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

A turn that offers tools under ``"auto"`` may answer with calls or with the
JSON: :func:`with_text_format` gives the family's lazy call grammar a start
grammar (:attr:`~toolwire.grammar.build.ToolGrammar.start`) that is the JSON
value or a call's opening marker, so the reply is one or the other (the
runtime switches to the calls' grammar at the marker, and keeps the start
grammar to the end once the JSON has begun).
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Mapping, Sequence
from typing import Any, Final

import attrs

from ..errors import GrammarSchemaError
from ..vocabulary.backend import ResponseFormat
from ..vocabulary.schema import normalize_schema
from .avoid import reasoning_blocks, reasoning_text
from .build import ToolGrammar
from .gbnf import RuleSet, alternatives, literal, sequence
from .json_values import JsonValues

__all__ = ["FAMILY", "clear_response_format_cache", "response_format_grammar",
           "with_text_format"]

FAMILY: Final = "response_format"
"""The ``family`` of a response-format grammar (what a runtime's messages name)."""

_CACHE_SIZE: Final = 64
_ANY_OBJECT: Final = {"type": "object"}


_JSON_STARTS: Final = '{["-0123456789tfn'
_WORDS: Final = re.compile(r'"(?:[^"\\]|\\.)*"|\[(?:[^\]\\]|\\.)*\]|[A-Za-z][A-Za-z0-9-]*')
"""A GBNF body's literals, character classes (copied whole, escapes and all) and words."""


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
    return _cached(_schema_text(response_format), response_format.name,
                   response_format.strict, reasoning, tuple(may_reason), max_reasoning_chars, ())


def with_text_format(grammar: ToolGrammar, response_format: ResponseFormat, *,
                     max_reasoning_chars: int | None = None) -> ToolGrammar:
    """``grammar`` (a lazy ``"auto"`` call grammar) whose reply is its calls or
    ``response_format``'s JSON, nothing else: a start grammar holding both, kept to the
    end (``bare_starts`` are the first characters of either). ``grammar`` itself for a
    family that already begins under a start grammar (calls that stand bare).

    :raises GrammarSchemaError: as :func:`response_format_grammar`.
    """
    if not grammar.lazy or grammar.start or grammar.bare_starts or not grammar.continuations:
        return grammar
    text = _schema_text(response_format)
    both = _cached(text, response_format.name, response_format.strict, grammar.reasoning,
                   grammar.reasoning_tags, max_reasoning_chars, grammar.continuations)
    object_root = not text or json.loads(text).get("type") == "object"
    firsts = ("{" if object_root else _JSON_STARTS) + \
        "".join(marker[:1] for marker, _ in grammar.continuations)
    return attrs.evolve(grammar, start=both.gbnf, bare_starts="".join(sorted(set(firsts))))


def clear_response_format_cache() -> None:
    """Forget every cached response-format grammar (benchmarks measure first builds)."""
    _cached.cache_clear()


def _schema_text(response_format: ResponseFormat) -> str:
    schema = response_format.schema if response_format.type == "json_schema" else None
    return json.dumps(schema, sort_keys=True, default=str) if schema is not None else ""


@functools.lru_cache(maxsize=_CACHE_SIZE)
def _cached(schema_text: str, name: str, strict: bool, reasoning: tuple[str, str] | None,
            may_reason: tuple[tuple[str, str], ...], max_reasoning_chars: int | None,
            continuations: tuple[tuple[str, str], ...]) -> ToolGrammar:
    schema = normalize_schema(json.loads(schema_text)) if schema_text else _ANY_OBJECT
    try:
        return _grammar(schema, name, reasoning, may_reason, max_reasoning_chars, continuations)
    except GrammarSchemaError as exc:
        if not strict:  # the grammar a client without strict asked for is best effort
            return _grammar(_ANY_OBJECT, name, reasoning, may_reason, max_reasoning_chars,
                            continuations)
        raise GrammarSchemaError(
            f"response_format: the schema {name!r} cannot be enforced by a grammar at "
            f"{exc.path} ({exc.keyword!r}): leave that keyword out, or send strict: false "
            "(the reply is then any JSON object)",
            family=FAMILY, tool=name, path=exc.path, keyword=exc.keyword) from None


def _grammar(schema: Any, name: str, reasoning: tuple[str, str] | None,
             may_reason: tuple[tuple[str, str], ...], max_reasoning_chars: int | None,
             continuations: tuple[tuple[str, str], ...]) -> ToolGrammar:
    """The reply's grammar: a reasoning lead, then the JSON value, or (when
    ``continuations`` are given) one of the calls' opening markers and the calls."""
    rules = RuleSet()
    root = schema if isinstance(schema, Mapping) else {}
    value = JsonValues(rules, family=FAMILY, tool=name or FAMILY, root=root).value(schema)
    lead = ""
    if reasoning is not None:
        text = reasoning_text(rules, reasoning[1], max_reasoning_chars)
        lead = sequence(text, literal(reasoning[1]), '[ \\n]{0,2}')
    elif may_reason:
        lead = f"({alternatives(*reasoning_blocks(rules, may_reason))} [ \\n]{{0,2}})?"
    calls = []
    imported: list[str] = []
    for i, (marker, rest) in enumerate(continuations):
        prefix = f"calls{i}-"  # no rule the JSON's writer names begins so
        imported.extend(_renamed(rest, prefix))
        calls.append(sequence(literal(marker), f"{prefix}root"))
    body = sequence('[ \\n]{0,2}', alternatives(value, *calls)) if calls else value
    text = rules.render(sequence(lead, body))
    return ToolGrammar(text + "".join(line + "\n" for line in imported), FAMILY, "required",
                       (), reasoning=reasoning, reasoning_tags=may_reason)


def _renamed(gbnf: str, prefix: str) -> list[str]:
    """The rules of ``gbnf``, each rule name (where defined and where used) prefixed."""
    lines = [line for line in gbnf.splitlines() if line.strip()]
    names = {line.split(" ::= ", 1)[0] for line in lines}

    def rename(found: re.Match[str]) -> str:  # literals and classes never are names
        return prefix + found.group() if found.group() in names else found.group()

    return [f"{prefix}{name} ::= {_WORDS.sub(rename, body)}"
            for name, body in (line.split(" ::= ", 1) for line in lines)]
