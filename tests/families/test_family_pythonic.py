"""The pythonic parsers (LFM2.5, Llama 4, OLMo 3): raw string arguments as the template writes them,
Python literals read without evaluation, conformance and BFCL round trips through the
real template, streaming, bad input."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import toolwire
from tests.support.families import (
    all_of,
    canonical,
    conformance_examples,
    parse,
    parse_text,
    template_source,
    without,
    without_dropped,
)
from tests.support.families import plugins as family_plugins
from tests.support.tagged_families import bfcl_round_trip, conformance, markers, render
from toolwire.events import TextEvent, ToolCallDeltaEvent
from toolwire.parse.protocol import collect_reply
from toolwire.plugins import pythonic
from toolwire.plugins.pythonic import CALLS_CLOSE, CALLS_OPEN
from toolwire.testing import check_parser
from toolwire.vocabulary.schema import tool_parameters_by_name

TEMPLATE = "LFM2.5-8B-A1B.jinja"
MARKERS = markers(None, CALLS_OPEN, CALLS_CLOSE, "<think>", "</think>")
TAIL = "<|im_start|>assistant\n"
TOOLS = [{"type": "function", "function": {"name": "note", "parameters": {
    "type": "object", "properties": {"text": {"type": "string"}, "title": {"type": "string"},
                                     "n": {"type": "integer"}, "meta": {"type": "object"},
                                     "tags": {"type": "array"}}}}},
         {"type": "function", "function": {"name": "math.sum", "parameters": {
             "type": "object", "properties": {"xs": {"type": "array"}}}}}]
_CLOSING_QUOTE = re.compile(r"'[ \t\r\n]*(?:,|\)|$)")


def pythonic_expressible(schema: dict[str, Any], arguments: dict[str, Any]) -> bool:
    """The template writes string arguments unescaped between single quotes, so a
    string holding a quote that looks like its end (``', ``, ``')``) is ambiguous."""
    return not any(isinstance(v, str) and _CLOSING_QUOTE.search(v) for v in arguments.values())


def calls(*items: str) -> str:
    return f"{CALLS_OPEN}[{', '.join(items)}]{CALLS_CLOSE}"


@pytest.mark.kit
def test_conformance_through_the_lfm25_template() -> None:
    conformance(pythonic, TEMPLATE, MARKERS, keep=all_of(without(MARKERS), pythonic_expressible))


def test_bfcl_ground_truth_calls_round_trip() -> None:
    assert bfcl_round_trip("pythonic", TEMPLATE, keep=pythonic_expressible) > 800


@settings(max_examples=conformance_examples() * 3)
@given(data=st.data())
def test_strings_with_quotes_newlines_and_backslashes_round_trip(data: st.DataObject) -> None:
    pieces = st.sampled_from(["'", '"', "\\", "\\n", "\n", ")", "(", ",", "=", "]", "[", " ",
                              "text", "title=", "n=1", "'s", "\\'", "{}", "#"])
    strings = st.lists(pieces, max_size=10).map("".join)
    arguments = data.draw(st.fixed_dictionaries({"text": strings},
                                                optional={"title": strings, "n": st.integers()}))
    if not pythonic_expressible({}, arguments):
        return
    tail, reply = render(TEMPLATE, [("note", arguments)], TOOLS)
    chunks = data.draw(st.sampled_from([1, 3, 64]))
    got = collect_reply(parse("pythonic", [reply[i:i + chunks]
                                           for i in range(0, len(reply), chunks)], TOOLS,
                              template=template_source(TEMPLATE), prompt_tail=tail))
    assert canonical((c.name, c.arguments) for c in got.tool_calls) == \
        canonical([("note", arguments)]), reply


def test_reference_conversion_with_nested_literals() -> None:
    reply = "Saving.\n" + calls("note(text='multi\nline', n=-3, meta={\"a\": [1, null, true]}, "
                                "tags=['x', None, False, 1.5])", "math.sum(xs=[1, 2])")
    out = parse_text("pythonic", reply, TOOLS, chunk=5)
    assert out.content == "Saving."
    assert [(c.name, dict(c.arguments)) for c in out.tool_calls] == [
        ("note", {"text": "multi\nline", "n": -3, "meta": {"a": [1, None, True]},
                  "tags": ["x", None, False, 1.5]}),
        ("math.sum", {"xs": [1, 2]})]


def test_raw_string_keeps_quotes_and_backslashes_as_written() -> None:
    reply = calls("note(text='it's C:\\new, isn't it', title=\"say \"hi\"\")")
    out = parse_text("pythonic", reply, TOOLS, chunk=1)
    assert dict(out.tool_calls[0].arguments) == {"text": "it's C:\\new, isn't it",
                                                 "title": 'say "hi"'}


def test_nothing_is_ever_evaluated() -> None:
    reply = calls("note(text=__import__('os').system('echo pwned'))")
    out = parse_text("pythonic", reply, TOOLS)
    assert out.tool_calls == () and out.diagnostics[0].code == "malformed_call"
    assert out.content == reply


def test_positional_arguments_are_not_a_call() -> None:
    out = parse_text("pythonic", calls("note('x')"), TOOLS)
    assert out.tool_calls == () and out.diagnostics[0].code == "malformed_call"


def test_string_argument_streams_as_deltas() -> None:
    value = "abc " * 50
    reply = calls(f"note(text='{value}', n=2)")
    events = parse("pythonic", [reply[i:i + 4] for i in range(0, len(reply), 4)], TOOLS,
                   template=template_source(TEMPLATE), prompt_tail=TAIL)
    deltas = [e for e in events if isinstance(e, ToolCallDeltaEvent)]
    assert len(deltas) > 20 and "".join(d.text for d in deltas) == value


def test_list_cut_at_its_closing_token_keeps_the_calls() -> None:
    out = parse_text("pythonic", f"{CALLS_OPEN}[note(n=1)]<|tool_ca", TOOLS)
    assert [dict(c.arguments) for c in out.tool_calls] == [{"n": 1}] and out.content == ""


def test_reasoning_is_the_core_think_block() -> None:
    reply = "<think>hmm</think>" + calls("note(n=1)")
    out = parse_text("pythonic", reply, TOOLS, chunk=3, template=template_source(TEMPLATE),
                     prompt_tail=TAIL)
    assert out.reasoning == "hmm" and len(out.tool_calls) == 1


@pytest.mark.parametrize("text", [
    CALLS_OPEN, CALLS_OPEN + "[", CALLS_OPEN + "[note(", CALLS_OPEN + "[note(text='cut",
    CALLS_OPEN + "not a list" + CALLS_CLOSE, CALLS_OPEN + "[note(n=1 2)]" + CALLS_CLOSE,
    CALLS_OPEN + "[note(n=[1, 2)]" + CALLS_CLOSE + " after", CALLS_CLOSE + " stray",
    CALLS_OPEN + "[note(n==1)]" + CALLS_CLOSE,
])
def test_bad_input_never_raises_and_never_loses_text(text: str) -> None:
    out = parse_text("pythonic", text, TOOLS, chunk=2)
    assert out.tool_calls == ()
    assert re.sub(r"\s", "", out.content) == re.sub(r"\s", "", without_dropped(text, out))


@pytest.mark.parametrize("cut", [None, -1, -2])
def test_a_reply_ending_in_a_backslash_inside_a_string_loses_nothing(cut: int | None) -> None:
    # found by the fuzzer: the trailing backslash waited for the character it escapes,
    # and at the reply's end it was dropped from the text (whole) but kept (in pieces)
    reply = "<|tool_call_start|>[write_file(path='a.txt', cont}\\"
    pieces = [reply] if cut is None else [reply[:cut], reply[cut:]]
    events = parse("pythonic", pieces, [])
    assert "".join(e.text for e in events if isinstance(e, TextEvent)) == reply
    streamed = "".join(e.text for e in events if isinstance(e, ToolCallDeltaEvent))
    assert streamed == "a.txt', cont}\\"


@pytest.mark.process
def test_model_text_that_is_not_a_literal_prints_no_warning() -> None:
    import subprocess
    import sys

    code = ("from toolwire.parse.values import python_literal, NOT_LITERAL\n"
            "assert python_literal('[1and 2]') is NOT_LITERAL\n"
            "assert python_literal(\"'\\\\d'\") == '\\\\d'\n"
            "from toolwire.vocabulary.schema import coerce_text_value\n"
            "assert coerce_text_value('[1and 2]', {'type': 'array'}) == '[1and 2]'\n")
    done = subprocess.run([sys.executable, "-W", "default", "-c", code],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""


# -- Llama 4 and OLMo 3 --------------------------------------------------------------------

OWN_TEMPLATES = Path(__file__).parent / "templates"
LLAMA4 = OWN_TEMPLATES / "llama4-pythonic-style.jinja"
OLMO3 = OWN_TEMPLATES / "olmo3-style.jinja"


@pytest.mark.parametrize(("path", "family"), [(LLAMA4, "llama4_pythonic"), (OLMO3, "olmo3")])
def test_selection_verifies_the_llama4_and_olmo3_records(path: Path, family: str) -> None:
    choice = toolwire.select_parser(path.read_text(encoding="utf-8"), family_plugins())
    assert choice.spec.name == family
    assert [(c.family, c.outcome) for c in choice.checks] == [(family, "verified")]


@pytest.mark.kit
@pytest.mark.parametrize(("path", "family"), [(LLAMA4, "llama4_pythonic"), (OLMO3, "olmo3")])
def test_conformance_through_the_llama4_and_olmo3_templates(path: Path, family: str) -> None:
    fmt = family_plugins().parser(family).format
    marks = markers(fmt, "<|im_end|>", "<|header_start|>", "<|header_end|>")
    keep = all_of(without(marks), pythonic_expressible) if family == "olmo3" else without(marks)
    check_parser(pythonic, path, examples=conformance_examples(), family=family, markers=marks,
                 keep=keep, plugins=family_plugins(), seed=1234)


def test_llama4_reads_every_call_of_its_python_block() -> None:
    reply = ('<|python_start|>[get_weather(city="Paris"), note(text="say \\"hi\\"\\n", '
             'n=2, tags=["a", None])]<|python_end|><|eom|>')
    for chunk in (0, 1, 5):
        got = parse_text("llama4_pythonic", reply, TOOLS, chunk=chunk)
        assert [(c.name, dict(c.arguments)) for c in got.tool_calls] == [
            ("get_weather", {"city": "Paris"}),
            ("note", {"text": 'say "hi"\n', "n": 2, "tags": ["a", None]})], chunk
        assert (got.content, got.diagnostics) == ("", ())


@pytest.mark.parametrize("chunk", [1, 2, 3, 4, 7])
def test_an_escaped_string_streams_each_delta_as_written_backslashes_and_all(
        chunk: int) -> None:
    # a delta of an escaped string that holds backslashes but does not end with one is
    # taken whole (the plain delta path); one that ends with one waits for what it escapes
    value = r'if (a[i] < b) {\n\tx = \"y\\\";\n}'  # as the model writes it
    reply = f'<|python_start|>[note(text="{value}")]<|python_end|>'
    parser = family_plugins().parser("llama4_pythonic").create(tool_parameters_by_name(TOOLS))
    steps = [parser.feed(reply[i:i + chunk]) for i in range(0, len(reply), chunk)]
    events = [e for step in [*steps, parser.close()] for e in step]
    streamed = [e.text for e in events if isinstance(e, ToolCallDeltaEvent)]
    assert "".join(streamed) == value
    assert not any(piece.endswith("\\") for piece in streamed[:-1])
    (call,) = collect_reply(events).tool_calls
    assert call.arguments == {"text": 'if (a[i] < b) {\n\tx = "y\\";\n}'}


@pytest.mark.parametrize("reply", [
    '[get_weather(city="Paris"), note(text="x")]<|eot|>',  # Meta's documented response
    ' [get_weather(city="Paris"), note(text="x")]',
    '<|python_start|>[get_weather(city="Paris"), note(text="x")]<|eot|>',
    '[get_weather(city="Paris"), note(text="x")]<|python_end|><|eom|>',
])
def test_llama4_reads_a_bare_call_list_at_the_replys_start(reply: str) -> None:
    for chunk in (0, 1, 3):
        got = parse_text("llama4_pythonic", reply, TOOLS, chunk=chunk)
        assert [(c.name, dict(c.arguments)) for c in got.tool_calls] == [
            ("get_weather", {"city": "Paris"}), ("note", {"text": "x"})], (chunk, reply)
        assert got.content == "", got.content
        # a lone <|python_end|> is markup with no block open: dropped, and said so
        assert {d.code for d in got.diagnostics} <= {"unclosed_call", "stray_markup"}


@pytest.mark.parametrize("reply", ["[1, 2] is a list.", "Sure: [get_weather(city=\"x\")]",
                                   "[note] is a word in brackets"])
def test_llama4_text_that_is_not_a_call_list_stays_text(reply: str) -> None:
    for chunk in (0, 1):
        got = parse_text("llama4_pythonic", reply, TOOLS, chunk=chunk)
        assert (got.content, got.tool_calls) == (reply, ()), chunk


def test_olmo3_reads_one_call_per_line_with_raw_strings() -> None:
    reply = ("Let me check.\n<function_calls>\nnote(text='it's here', n=null)\n"
             "math.sum(xs=[1, 2])\nnote(title='x')\n</function_calls>")
    for chunk in (0, 1, 4):
        got = parse_text("olmo3", reply, TOOLS, chunk=chunk)
        assert [(c.name, dict(c.arguments)) for c in got.tool_calls] == [
            ("note", {"text": "it's here", "n": "null"}), ("math.sum", {"xs": [1, 2]}),
            ("note", {"title": "x"})], chunk
        assert (got.content, got.diagnostics) == ("Let me check.", ())
