"""A tool schema's regular expressions are bounded (issues 28 and 41).

The attacks of issue 28 (a 7.2 MB pattern, 600 nested groups, ``^(a+)+$`` against
``'a' * 30 + '!'``), as a library tool, through the dispatcher and from a real MCP
server; then the rule: every pattern is compiled by the ``regex`` package in the
pattern child first, within a memory and a time bound (counted repetitions that
compile to a gigabyte are refused with the tool and the path named), compiled here
once, and matched with a timeout and exactly ``re``'s answers (a property test
against ``re`` on patterns of every feature both support).
"""

from __future__ import annotations

import re
import sys
import time
from typing import Any

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from tests.support.mcp_pattern_server import PATTERNS
from tests.support.mcp_pattern_server import SCRIPT as PATTERN_SERVER
from toolwire import Tool, ToolRegistry
from toolwire.conversation.dispatch import Dispatcher
from toolwire.conversation.validation import bounded_validator
from toolwire.errors import (
    ChildStoppedError,
    ToolArgumentsError,
    ToolDefinitionError,
    ToolSchemaBudgetError,
)
from toolwire.limits import PATTERN_LIMITS
from toolwire.vocabulary import patterns
from toolwire.vocabulary.history import ToolCall
from toolwire.vocabulary.patterns import PatternError, check_patterns, compile_pattern


def _schema(pattern: str, keyword: str = "pattern") -> dict[str, Any]:
    if keyword == "patternProperties":
        return {"type": "object", "properties": {"m": {
            "type": "object", "patternProperties": {pattern: {"type": "string"}}}}}
    return {"type": "object", "properties": {"text": {"type": "string", "pattern": pattern}}}


def _tool(parameters: dict[str, Any]) -> Tool:
    return Tool({"name": "matcher", "parameters": parameters}, lambda **arguments: "ok")


# ---------------------------------------------------------------------------
# The attacks of the issue.


@pytest.mark.parametrize("keyword", ["pattern", "patternProperties"])
@pytest.mark.parametrize("kind", ["huge", "nested"])
def test_a_pattern_that_cannot_be_used_refuses_the_tool_naming_it_and_the_path(
        kind: str, keyword: str) -> None:
    started = time.process_time()
    with pytest.raises(ToolSchemaBudgetError) as info:
        _tool(_schema(PATTERNS[kind], keyword))
    assert time.process_time() - started < 1.0
    error = info.value
    assert error.tool == "matcher" and error.budget == "pattern"
    where = "/properties/text/pattern" if keyword == "pattern" else \
        "/properties/m/patternProperties/"
    assert where in str(error) and "'matcher'" in str(error)


HANG_GUARD_SECONDS = 60.0
"""A failure bound for a check that must not hang; what bounds it is the match timeout,
which the refusal names."""


def test_a_backtracking_pattern_answers_within_the_timeout_and_the_call_is_refused() -> None:
    dispatcher = Dispatcher(ToolRegistry([_tool(_schema(PATTERNS["redos"]))]))
    started = time.monotonic()
    # 2**60 paths for a backtracking engine: this test would never end with re
    for text in ("a" * 30 + "!", "a" * 60 + "!"):
        with pytest.raises(ToolArgumentsError, match=r"does not match|could not be checked"):
            dispatcher.check(ToolCall("c1", "matcher", {"text": text}))
    # a backtracking engine without the timeout would take years: a hang guard, not a
    # speed (a loaded machine may take seconds to start the pattern's child)
    assert time.monotonic() - started < HANG_GUARD_SECONDS
    dispatcher.check(ToolCall("c2", "matcher", {"text": "a" * 60}))


@pytest.mark.parametrize(("pattern", "text"), [("(a|aa)*b", "a" * 300_000),
                                               ("^(a|a)*$", "a" * 40 + "!")])
def test_a_value_too_long_to_check_is_a_validation_failure_for_the_model(pattern: str,
                                                                        text: str) -> None:
    dispatcher = Dispatcher(ToolRegistry([_tool(_schema(pattern))]))
    started = time.monotonic()
    with pytest.raises(ToolArgumentsError) as info:
        dispatcher.check(ToolCall("c1", "matcher", {"text": text}))
    assert time.monotonic() - started < HANG_GUARD_SECONDS  # the bound is in the message
    message = str(info.value)
    assert "does not match" in message or (
        f"within {PATTERN_LIMITS.match_seconds:g} s" in message and "send a shorter" in message)


def test_a_pattern_the_timeout_stops_is_a_failure_naming_the_bound() -> None:
    dispatcher = Dispatcher(ToolRegistry([_tool(_schema("^(a|a)*$"))]))
    with pytest.raises(ToolArgumentsError, match="could not be checked against the pattern"):
        dispatcher.check(ToolCall("c1", "matcher", {"text": "a" * 60 + "!"}))


def test_property_names_are_matched_by_the_bounded_engine_too() -> None:
    parameters = {"type": "object", "properties": {"m": {
        "type": "object", "patternProperties": {"^x(y+)+$": {"type": "integer"}},
        "additionalProperties": False}}}
    dispatcher = Dispatcher(ToolRegistry([_tool(parameters)]))
    dispatcher.check(ToolCall("c1", "matcher", {"m": {"xyy": 1}}))
    with pytest.raises(ToolArgumentsError, match="must be of type integer"):
        dispatcher.check(ToolCall("c2", "matcher", {"m": {"xyy": "one"}}))
    with pytest.raises(ToolArgumentsError, match="do not match any of the regexes"):
        dispatcher.check(ToolCall("c3", "matcher", {"m": {"x" + "y" * 60 + "!": 1, "z": 2}}))


@pytest.mark.process
@pytest.mark.parametrize("kind", ["nested", "redos"])
def test_an_mcp_servers_pattern_tool_is_left_out_or_bounded(kind: str) -> None:
    pytest.importorskip("mcp")
    from toolwire.plugins.mcp_tools import MCPServers
    from toolwire.plugins.mcp_tools.config import server_from_command

    config = server_from_command(f"{sys.executable} {PATTERN_SERVER} {kind}", name="regexes")
    with MCPServers([config], connect_timeout=90.0) as servers:
        tools = servers.tools()
        notes = list(servers.notes)
    if kind == "nested":
        assert [t.name for t in tools] == ["add"]
        assert any("'matcher'" in note and "'pattern'" in note for note in notes), notes
        return
    matcher = next(t for t in tools if t.name.endswith("matcher"))
    with pytest.raises(ToolArgumentsError, match="does not match"):
        Dispatcher(ToolRegistry([matcher])).check(
            ToolCall("c1", matcher.name, {"text": "a" * 60 + "!"}))


# ---------------------------------------------------------------------------
# The rule.

REFUSED = {
    "a repetition that compiles to a gigabyte": "a{1000000}",
    "repetitions of repetitions": "((a{1000}){1000}){1000}",
    "too many repetitions written out": r"((?:[a-z]{1000}){30}){1000}",
}


@pytest.mark.parametrize("pattern", list(REFUSED.values()), ids=list(REFUSED))
def test_a_pattern_that_passes_the_compile_bounds_is_refused(pattern: str) -> None:
    (problem,) = check_patterns([pattern])
    assert problem is not None and not problem.syntax
    assert "compiling it takes more than" in str(problem)
    with pytest.raises(ToolSchemaBudgetError, match="/properties/text/pattern") as info:
        _tool(_schema(pattern))
    assert info.value.budget == "pattern"


ACCEPTED = {
    "a backreference": (r"(a)\1", "aa", "ab"),
    "a named backreference": (r"(?P<x>a)(?P=x)", "aa", "ab"),
    "a conditional": (r"^(a)?(?(1)b|c)$", "ab", "b"),
    "an atomic group": (r"(?>a+)b", "aab", "aa"),
    "a possessive quantifier": (r"a*+b", "aab", "aa"),
}
"""What the linear engine before refused (it had no automaton for them): ``regex``
matches them within the same timeout as any pattern."""


@pytest.mark.parametrize(("pattern", "yes", "no"), list(ACCEPTED.values()), ids=list(ACCEPTED))
def test_backreferences_and_atomic_groups_are_matched_within_the_timeout(
        pattern: str, yes: str, no: str) -> None:
    dispatcher = Dispatcher(ToolRegistry([_tool(_schema(pattern))]))
    dispatcher.check(ToolCall("c1", "matcher", {"text": yes}))
    with pytest.raises(ToolArgumentsError, match="does not match"):
        dispatcher.check(ToolCall("c2", "matcher", {"text": no}))


def test_a_pattern_that_is_not_a_regular_expression_is_not_a_valid_schema() -> None:
    with pytest.raises(PatternError) as info:
        compile_pattern("[a-")
    assert info.value.syntax
    with pytest.raises(ToolDefinitionError, match="not a valid JSON schema"):
        _tool(_schema("[a-"))


def test_pattern_properties_beside_unevaluated_properties_are_refused() -> None:
    parameters = {"type": "object", "properties": {"m": {
        "type": "object", "patternProperties": {"^x": {}}, "unevaluatedProperties": False}}}
    with pytest.raises(ToolSchemaBudgetError, match="unevaluatedProperties"):
        _tool(parameters)


def test_a_pattern_in_data_is_not_compiled() -> None:
    parameters = {"type": "object", "properties": {
        "text": {"type": "object", "default": {"pattern": "("}, "examples": [{"pattern": "["}]},
        "pattern": {"type": "string"}}}
    assert _tool(parameters).name == "matcher"


def test_a_pattern_is_compiled_once() -> None:
    assert compile_pattern(r"^[a-z]+\d*$") is compile_pattern(r"^[a-z]+\d*$")


def test_the_timeout_stops_a_search() -> None:
    with pytest.raises(TimeoutError):
        patterns.search(compile_pattern(r"^(a|a)*$"), "a" * 60 + "!", 0.2)


ATOMS = st.sampled_from(["a", "b", "A", "1", " ", ".", "[ab]", "[^a]", "[a-c1]", r"\d", r"\w",
                         r"\W", r"\s", r"\b", r"\B", "^", "$", r"\A", r"\Z", r"\n", "_"])


def _combine(parts: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
    return st.one_of(
        st.tuples(parts, parts).map("".join),
        st.tuples(parts, parts).map(lambda p: f"(?:{p[0]}|{p[1]})"),
        st.tuples(parts, parts).map(lambda p: f"({p[0]}|{p[1]})"),
        st.tuples(parts, st.sampled_from(["*", "+", "?", "*?", "{2}", "{0,3}", "{1,}", "+?"]))
        .map(lambda p: f"(?:{p[0]}){p[1]}"),
        parts.map(lambda p: f"(?={p})"), parts.map(lambda p: f"(?!{p})"),
        st.sampled_from(["a", "[ab]", r"\d", "ab"]).map(lambda p: f"(?<={p})"),
        st.sampled_from(["b", "[^a]", "ba"]).map(lambda p: f"(?<!{p})"),
    )


PATTERN_TEXTS = st.recursive(ATOMS, _combine, max_leaves=8)
FLAGS = st.sampled_from(["", "(?i)", "(?s)", "(?m)", "(?a)", "(?x)"])
TEXTS = st.text(alphabet="abAB1 \n_é", max_size=12)


@settings(max_examples=600, deadline=None)
@given(flags=FLAGS, body=PATTERN_TEXTS, texts=st.lists(TEXTS, min_size=1, max_size=4))
def test_the_matcher_answers_as_re_does(flags: str, body: str, texts: list[str]) -> None:
    pattern = flags + body
    try:
        re.compile(pattern)
    except re.error:
        assume(False)
    compiled = compile_pattern(pattern)
    for text in texts:
        # the one answer regex gives otherwise, as ECMA-262 (JSON Schema's dialect) does
        assume(not (text == "" and r"\B" in pattern))
        assert patterns.search(compiled, text, 5.0) == (re.search(pattern, text) is not None), \
            (pattern, text)


def test_a_validator_built_for_any_schema_reports_an_unusable_pattern() -> None:
    validator = bounded_validator({"type": "string", "pattern": "a{1000000}"})
    (error,) = validator.iter_errors("aa")
    assert "cannot be used" in error.message


def test_the_compiled_patterns_kept_are_bounded_in_memory() -> None:
    made = [f"(?:a{{100}}){{100}}x{extra}" for extra in range(80)]
    for pattern in made:  # each about 1.3 MB compiled, as regex measures it
        compile_pattern(pattern)
    assert 0 < patterns._kept <= PATTERN_LIMITS.kept_bytes
    assert len(set(made) & set(patterns._compiled)) < len(made)


@pytest.mark.parametrize(("bound", "kept"), [("wall time", False), ("memory", True)])
def test_a_check_stopped_for_time_is_asked_again_one_over_memory_is_kept(
        monkeypatch: pytest.MonkeyPatch, bound: str, kept: bool) -> None:
    """A check that ran out of wall time may only have met a busy machine: that refusal
    answers this call and is asked again next time; the memory bound's is the pattern's."""
    pattern = f"twtimed{bound.replace(' ', '')}[0-9]+"
    asked: list[list[str]] = []

    def stopped(job: dict[str, Any], limits: Any, **_: Any) -> Any:
        asked.append(job["patterns"])
        raise ChildStoppedError("stopped", bound=bound, how=bound)

    monkeypatch.setattr(patterns._CHILDREN, "run", stopped)
    first = check_patterns([pattern])[0]
    assert first is not None and "compiling it takes more than" in str(first)
    monkeypatch.undo()
    second = check_patterns([pattern])[0]
    assert (second is not None) is kept  # kept: the refusal stands; else asked and accepted
    assert asked == [[pattern]]
