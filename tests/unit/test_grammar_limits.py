"""What the call grammar refuses, relaxes and caches (issue 17).

A schema keyword whose shape no grammar can write is a typed error naming the
tool, the path and the keyword; a keyword the grammar only loosens still gives a
grammar that real llama.cpp accepts; a family without a record is refused by
name; grammars are built once per family, tools and choice.
"""

from __future__ import annotations

import ast
import json
import random
import re
import runpy
import warnings
from pathlib import Path
from typing import Any

import pytest

from tests.support.families import plugins
from tests.support.gbnf_sampler import GbnfSampler
from tests.support.tiers import needs
from toolwire import grammar_for
from toolwire.grammar import (
    GrammarFormatError,
    GrammarSchemaError,
    ToolChoiceError,
    clear_grammar_cache,
)
from toolwire.grammar.json_values import REFUSED, RELAXED


def _tool(value: dict[str, Any]) -> list[dict[str, Any]]:
    return [{"name": "probe", "parameters": {"type": "object", "properties": {
        "q": {"type": "string"}, "v": value}, "required": ["q", "v"]}}]


REFUSED_SCHEMAS = {
    "patternProperties": {"type": "object", "patternProperties": {"^x": {"type": "string"}}},
    "prefixItems": {"type": "array", "prefixItems": [{"type": "string"}]},
    "not": {"not": {"type": "string"}},
    "if": {"if": {"type": "string"}, "then": {"minLength": 2}},
    "propertyNames": {"type": "object", "propertyNames": {"maxLength": 3}},
}

RELAXED_SCHEMAS = {
    "pattern": {"type": "string", "pattern": "^[a-z]+$"},
    "format": {"type": "string", "format": "date-time"},
    "maximum": {"type": "integer", "minimum": 0, "maximum": 10_000},
    "multipleOf": {"type": "number", "multipleOf": 0.5},
    "uniqueItems": {"type": "array", "items": {"type": "integer"}, "uniqueItems": True},
    "minProperties": {"type": "object", "minProperties": 1},
}


def test_the_refused_and_relaxed_lists_are_the_ones_tested_here() -> None:
    assert set(REFUSED_SCHEMAS) <= REFUSED and set(RELAXED_SCHEMAS) <= RELAXED
    assert not REFUSED & RELAXED


@pytest.mark.parametrize("family", ["qwen_xml", "hermes_json", "pythonic", "minimax_m3"])
@pytest.mark.parametrize("keyword", sorted(REFUSED_SCHEMAS))
def test_a_keyword_no_grammar_can_write_is_an_error_naming_tool_path_and_keyword(
        family: str, keyword: str) -> None:
    with pytest.raises(GrammarSchemaError) as caught:
        grammar_for(family, _tool(REFUSED_SCHEMAS[keyword]), plugins=plugins())
    error = caught.value
    assert (error.family, error.tool, error.keyword) == (family, "probe", keyword)
    assert error.path == "/properties/v"
    assert keyword in str(error) and "probe" in str(error)


@pytest.fixture(scope="module")
@needs("model")
def llama_vocab(tmp_path_factory: pytest.TempPathFactory) -> Any:
    llama_cpp = pytest.importorskip("llama_cpp")
    from toolwire.plugins.llama_cpp import LlamaCppBackend
    from toolwire.testing import write_tiny_gguf

    model: Path = write_tiny_gguf(tmp_path_factory.mktemp("vocab") / "m.gguf")
    backend = LlamaCppBackend(model, n_ctx=2048, max_tokens=64, n_threads=1)
    yield llama_cpp, backend.llama._model.vocab
    backend.close()


@pytest.mark.parametrize("family", ["qwen_xml", "hermes_json", "pythonic", "minimax_m3"])
@pytest.mark.parametrize("keyword", sorted(RELAXED_SCHEMAS))
def test_a_relaxed_keyword_still_gives_a_grammar_llama_cpp_accepts(
        family: str, keyword: str, llama_vocab: Any) -> None:
    llama_cpp, vocab = llama_vocab
    grammar = grammar_for(family, _tool(RELAXED_SCHEMAS[keyword]), plugins=plugins(),
                          tool_choice="auto")
    texts = [grammar.gbnf, *(text for _, text in grammar.continuations)]
    for text in texts:
        sampler = llama_cpp.llama_sampler_init_grammar(vocab, text.encode(), b"root")
        assert sampler, text
        llama_cpp.llama_sampler_free(sampler)


@pytest.mark.parametrize(("family", "feature"), [("gemma4", "GrammarArguments"),
                                                 ("harmony", "no record")])
def test_a_family_the_grammar_cannot_write_is_refused_by_name(family: str,
                                                              feature: str) -> None:
    with pytest.raises(GrammarFormatError) as caught:
        grammar_for(family, _tool({"type": "string"}), plugins=plugins())
    assert caught.value.family == family and caught.value.feature == feature
    assert str(caught.value).startswith(f"{family}:")


def test_grammars_are_built_once_per_family_tools_and_choice() -> None:
    clear_grammar_cache()
    tools = _tool({"type": "integer"})
    first = grammar_for("qwen_xml", tools, plugins=plugins())
    assert grammar_for("qwen_xml", json.loads(json.dumps(tools)), plugins=plugins()) is first
    other = grammar_for("qwen_xml", tools, plugins=plugins(), tool_choice="auto")
    assert other is not first and other.lazy and not first.lazy
    assert grammar_for("hermes_json", tools, plugins=plugins()) is not first
    clear_grammar_cache()
    rebuilt = grammar_for("qwen_xml", tools, plugins=plugins())
    assert rebuilt is not first and rebuilt == first


def test_a_failure_is_cached_and_raised_again_with_the_same_message() -> None:
    tools = _tool(REFUSED_SCHEMAS["not"])
    messages = []
    for _ in range(2):
        with pytest.raises(GrammarSchemaError) as caught:
            grammar_for("qwen_xml", tools, plugins=plugins())
        messages.append(str(caught.value))
    assert messages[0] == messages[1]


@pytest.mark.parametrize(("choice", "needle"), [
    ("none", "offers no tools"),
    ({"type": "function", "function": {"name": "absent"}}, "'absent'"),
    ("sometimes", "must be one of"),
    ({"type": "function"}, "named tool_choice"),
])
def test_a_choice_without_calls_to_constrain_is_a_tool_choice_error(choice: Any,
                                                                      needle: str) -> None:
    with pytest.raises(ToolChoiceError, match=re.escape(needle)):
        grammar_for("qwen_xml", _tool({"type": "integer"}), plugins=plugins(),
                    tool_choice=choice)


ESCAPED_SLASH = re.compile(r"(?<!\\)(?:\\\\)*\\/")


def test_json_strings_never_use_the_escaped_slash_that_python_reads_as_two_characters(
        ) -> None:
    # the reason: JSON reads "\/" as "/", a Python literal (pythonic calls) as "\/"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # Python's "invalid escape"
        assert json.loads('"a\\/b"') == "a/b" != ast.literal_eval('"a\\/b"')
    tools = _tool({"type": "object", "properties": {"s": {"type": "string"}},
                   "required": ["s"]})
    for family in ("pythonic", "hermes_json", "qwen_xml"):
        gbnf = grammar_for(family, tools, plugins=plugins()).gbnf
        escapes = re.findall(r'"\\\\" \(\["([^\]]*)\]', gbnf)
        assert escapes and all("/" not in e for e in escapes), (family, escapes)
        if family == "qwen_xml":
            continue  # its string parameters are raw text, where "\/" is those two characters
        sampler = GbnfSampler(gbnf, "/\\")
        rng = random.Random(5)
        # "\\/" is an escaped backslash and a slash: only an odd run of backslashes escapes it
        assert not any(ESCAPED_SLASH.search(sampler.sentence(rng)) for _ in range(200))


@pytest.mark.parametrize("family", ["qwen_xml", "hermes_json", "pythonic", "minimax_m3"])
@pytest.mark.parametrize(("parameters", "path", "keyword"), [
    ({"type": "object", "patternProperties": {"^x-": {"type": "string"}}}, "/",
     "patternProperties"),
    ({"type": "object", "properties": {"s": {"type": "string", "not": {"const": "x"}}}},
     "/properties/s", "not"),
])
def test_a_refused_keyword_on_the_arguments_or_a_raw_string_value_is_an_error(
        family: str, parameters: dict[str, Any], path: str, keyword: str) -> None:
    """Neither the arguments object (written from its properties) nor a string that a
    tagged family writes raw may drop a keyword silently."""
    with pytest.raises(GrammarSchemaError) as caught:
        grammar_for(family, [{"name": "probe", "parameters": parameters}], plugins=plugins())
    assert (caught.value.path, caught.value.keyword) == (path, keyword)


def test_the_grammar_example_of_the_docs_prints_what_its_comments_say(
        capsys: pytest.CaptureFixture[str]) -> None:
    from tests.support.paths import DOCS

    path = DOCS / "examples" / "grammar_for.py"
    runpy.run_path(str(path))
    printed = capsys.readouterr().out.splitlines()
    said = [line.split("  # ", 1)[1] for line in path.read_text().splitlines()
            if line.lstrip().startswith("print(") and "  # " in line]
    assert printed == said
