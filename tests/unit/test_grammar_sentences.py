"""Every sentence of a family's call grammar is a reply its parser reads as valid calls.

Sentences are drawn in Python from the generated GBNF (no model), many per
schema, fed through the family's real pipeline in random deltas; this is the
fast, wide half of the tiny-model tests in ``tests/backends``.
"""

from __future__ import annotations

import random
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.support.families import parse, plugins
from tests.support.gbnf_sampler import GbnfSampler
from tests.support.grammar_schemas import NAMES, call_problems, tool_lists
from toolwire import grammar_for
from toolwire.events import DiagnosticEvent, TextEvent, ToolCallEndEvent
from toolwire.grammar import GrammarSchemaError
from toolwire.parse.record import CallFormat

RECORD_FAMILIES = sorted(name for name, spec in plugins().parsers().items()
                         if isinstance(spec.format, CallFormat)
                         and name != "gemma4")  # gemma4's own value syntax: no grammar
SENTENCES = 4
EXAMPLES = max(5, settings().max_examples // 10)

HOSTILE = st.text(alphabet="ab <>/=\"'&\n|[]{}()", min_size=1, max_size=12)
"""Enum members and names made of markup characters."""


def _markup_chars(family: str) -> str:
    fmt = plugins().parser(family).format
    return "".join(sorted({c for marker in fmt.markup for c in marker}))


def _replies(family: str, tools: list[dict[str, Any]], text: str, seed: int
             ) -> tuple[list[tuple[str, dict[str, Any]]], str, list[DiagnosticEvent]]:
    rng = random.Random(seed)
    pieces = []
    at = 0
    while at < len(text):
        step = rng.randint(1, 9)
        pieces.append(text[at:at + step])
        at += step
    events = parse(family, pieces, tools, prompt_tail="\n")
    calls = [(e.name, dict(e.arguments)) for e in events if isinstance(e, ToolCallEndEvent)]
    spoken = "".join(e.text for e in events if isinstance(e, TextEvent))
    notes = [e for e in events if isinstance(e, DiagnosticEvent)]
    return calls, spoken, notes


def _check_sentences(family: str, tools: list[dict[str, Any]], gbnf: str, seed: int,
                     prefix: str = "", names: set[str] | None = None) -> None:
    sampler = GbnfSampler(gbnf, _markup_chars(family))
    rng = random.Random(seed)
    for _ in range(SENTENCES):
        text = prefix + sampler.sentence(rng)
        calls, spoken, notes = _replies(family, tools, text, rng.randrange(1 << 30))
        assert calls and spoken.strip() == "" and notes == [], (text, spoken, notes)
        assert call_problems(calls, tools) == [], text
        if names is not None:
            assert {n for n, _ in calls} <= names, text


@pytest.mark.parametrize("family", RECORD_FAMILIES)
@settings(max_examples=EXAMPLES, deadline=None)
@given(tools=tool_lists(), seed=st.integers(0, 2**32))
def test_every_sentence_of_the_required_grammar_reads_back_as_valid_calls(
        family: str, tools: list[dict[str, Any]], seed: int) -> None:
    grammar = grammar_for(family, tools, plugins=plugins(), max_calls=3)
    _check_sentences(family, tools, grammar.gbnf, seed)


@pytest.mark.parametrize("family", RECORD_FAMILIES)
@settings(max_examples=EXAMPLES, deadline=None)
@given(tools=tool_lists(), seed=st.integers(0, 2**32))
def test_every_continuation_after_an_opening_marker_reads_back_as_valid_calls(
        family: str, tools: list[dict[str, Any]], seed: int) -> None:
    grammar = grammar_for(family, tools, plugins=plugins(), tool_choice="auto", max_calls=2)
    for marker, gbnf in grammar.continuations:
        _check_sentences(family, tools, gbnf, seed, prefix=marker)


@pytest.mark.parametrize("family", RECORD_FAMILIES)
@settings(max_examples=EXAMPLES, deadline=None)
@given(tools=tool_lists(), pick=st.integers(0, 2), seed=st.integers(0, 2**32))
def test_a_named_choice_grammar_only_calls_that_tool(
        family: str, tools: list[dict[str, Any]], pick: int, seed: int) -> None:
    name = tools[pick % len(tools)]["name"]
    grammar = grammar_for(family, tools, plugins=plugins(), parallel_tool_calls=False,
                          tool_choice={"type": "function", "function": {"name": name}})
    _check_sentences(family, tools, grammar.gbnf, seed, names={name})


@pytest.mark.parametrize("family", RECORD_FAMILIES)
@settings(max_examples=EXAMPLES, deadline=None)
@given(members=st.lists(HOSTILE, min_size=1, max_size=4, unique=True),
       free=st.booleans(), seed=st.integers(0, 2**32))
def test_values_full_of_markup_characters_still_read_back(
        family: str, members: list[str], free: bool, seed: int) -> None:
    """Unbounded strings and enum members made of markup characters: a member the
    markup cannot carry is left out (all of them: a clear error), never a wrong call."""
    tools = [{"name": "probe", "parameters": {"type": "object", "properties": {
        "choice": {"type": "string", "enum": members},
        "text": {"type": "string"} if free else {"type": "string", "maxLength": 5},
        "nested": {"type": "object", "properties": {"inner": {"type": "string"}}}},
        "required": ["choice", "text"]}}]
    try:
        grammar = grammar_for(family, tools, plugins=plugins(), parallel_tool_calls=False)
    except GrammarSchemaError as exc:
        assert exc.keyword == "enum" and exc.tool == "probe"
        return
    _check_sentences(family, tools, grammar.gbnf, seed)


@given(name=NAMES)
def test_names_strategy_never_draws_reserved_words(name: str) -> None:
    assert name not in {"all", "workspace"}


JSON_RECORD_FAMILIES = [f for f in RECORD_FAMILIES
                        if type(plugins().parser(f).format.arguments).__name__ == "JsonArguments"]


@pytest.mark.parametrize("family", JSON_RECORD_FAMILIES)
@pytest.mark.parametrize("extra", [True, {"type": "string"}, {"type": "integer"}])
def test_a_free_form_arguments_object_takes_any_keys_in_json_families(
        family: str, extra: Any) -> None:
    # no declared parameters, other keys admitted: the dispatcher accepts them, so the
    # grammar must too (it used to allow only {}); every sentence is still a valid call
    tools = [{"name": "set_env", "parameters": {"type": "object",
                                                 "additionalProperties": extra}}]
    grammar = grammar_for(family, tools, plugins=plugins(), parallel_tool_calls=False)
    sampler = GbnfSampler(grammar.gbnf, _markup_chars(family))
    rng = random.Random(7)
    keyed = 0
    for _ in range(40):
        calls, spoken, notes = _replies(family, tools, sampler.sentence(rng), rng.randrange(9))
        assert calls and spoken.strip() == "" and notes == []
        assert call_problems(calls, tools) == []
        keyed += any(arguments for _, arguments in calls)
    assert keyed > 0


@pytest.mark.parametrize("family", JSON_RECORD_FAMILIES)
def test_no_declared_parameters_and_no_other_keys_is_the_empty_object(family: str) -> None:
    tools = [{"name": "ping", "parameters": {"type": "object", "properties": {}}}]
    grammar = grammar_for(family, tools, plugins=plugins(), parallel_tool_calls=False)
    sampler = GbnfSampler(grammar.gbnf, _markup_chars(family))
    rng = random.Random(3)
    for _ in range(10):
        calls, _, _ = _replies(family, tools, sampler.sentence(rng), rng.randrange(9))
        assert calls == [("ping", {})]
