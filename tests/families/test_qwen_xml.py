"""The qwen_xml parser: reference conversions, tolerated drifts, bad input, properties.

Property tests render assistant messages through the *real* Qwen3.5 and
Qwen3-Coder templates and parse them back.
"""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

import toolwire
from tests.support.families import parse_text, template_source, without_dropped
from tests.support.tagged_families import render
from tests.support.templates import shared_template
from toolwire import get_chat_template, merge_events, parse_reply
from toolwire.events import (
    DiagnosticEvent,
    ReasoningEvent,
    TextEvent,
    ToolCallDeltaEvent,
    ToolCallEndEvent,
    ToolCallStartEvent,
)
from toolwire.families.selection import build_pipeline
from toolwire.parse.engine import CallParser
from toolwire.plugins.qwen_xml import QWEN_FORMAT, detect
from toolwire.testing import isolated_plugin_manager
from toolwire.testing import strategies as tws
from toolwire.vocabulary.schema import tool_parameters_by_name

PLUGINS = isolated_plugin_manager()

SEARCH_TOOLS = [
    {"type": "function", "function": {"name": "search", "description": "search notes",
     "parameters": {"type": "object", "properties": {"query": {"type": "string"},
                                                     "limit": {"type": "integer"}},
                    "required": ["query"]}}},
    {"type": "function", "function": {"name": "file_chunks", "description": "read a file",
     "parameters": {"type": "object", "properties": {"source": {"type": "string"},
                                                     "start": {"type": "integer"},
                                                     "end": {"type": "integer"}}}}},
    {"type": "function", "function": {"name": "write_file", "description": "write",
     "parameters": {"type": "object", "properties": {"path": {"type": "string"},
                                                     "content": {"type": "string"}}}}},
]


def call(name: str, **params: str) -> str:
    body = "".join(f"<parameter={k}>\n{v}\n</parameter>\n" for k, v in params.items())
    return f"<tool_call>\n<function={name}>\n{body}</function>\n</tool_call>"


def parse(text: str, tools: Any = SEARCH_TOOLS, chunk: int = 0) -> dict[str, Any]:
    return parse_reply(text, family="qwen_xml", tools=tools, chunk_size=chunk,
                       plugins=PLUGINS).to_dict()


def stream(text: str, pieces: list[str] | None = None, tools: Any = SEARCH_TOOLS
           ) -> list[toolwire.Event]:
    parser = CallParser(QWEN_FORMAT, tool_parameters_by_name(tools))
    events: list[toolwire.Event] = []
    for piece in pieces if pieces is not None else [text]:
        events.extend(parser.feed(piece))
    events.extend(parser.close())
    return events


# -- reference conversions -----------------------------------------------------------


def test_adr_example_search_alex_has_an_integer_limit() -> None:
    reply = "I'll look that up.\n\n" + call("search", query="alex", limit="10")
    out = parse(reply)
    assert out["content"] == "I'll look that up."
    assert out["tool_calls"] == [{"name": "search", "arguments": {"query": "alex", "limit": 10}}]
    assert isinstance(out["tool_calls"][0]["arguments"]["limit"], int)


def test_file_chunks_reference_conversion() -> None:
    out = parse(call("file_chunks", source="imprint/chat.py", start="0", end="2"))
    assert out["tool_calls"] == [{"name": "file_chunks",
                                  "arguments": {"source": "imprint/chat.py", "start": 0,
                                                "end": 2}}]
    assert out["content"] == "" and out["diagnostics"] == []


def test_several_calls_in_one_turn() -> None:
    reply = call("search", query="a") + "\n" + call("search", query="b", limit="3")
    out = parse(reply)
    assert [c["arguments"] for c in out["tool_calls"]] == [{"query": "a"},
                                                           {"query": "b", "limit": 3}]


def test_multiline_string_argument_is_verbatim() -> None:
    code = "def f():\n    return '<b>' < 3\n\n\n# trailing blank lines kept\n\n"
    out = parse(call("write_file", path="f.py", content=code))
    assert out["tool_calls"][0]["arguments"]["content"] == code


def test_leading_zeros_stay_a_string_for_string_parameters() -> None:
    out = parse(call("search", query="03106", limit="007"))
    assert out["tool_calls"][0]["arguments"] == {"query": "03106", "limit": 7}


def test_python_style_scalars_are_typed() -> None:
    tools = [{"type": "function", "function": {"name": "t", "parameters": {
        "type": "object", "properties": {"flag": {"type": "boolean"},
                                         "nothing": {"type": ["null", "integer"]},
                                         "ratio": {"type": "number"},
                                         "items": {"type": "array", "items": {"type": "integer"}},
                                         "opts": {"$ref": "#/$defs/o"}},
        "$defs": {"o": {"type": "object"}}}}}]
    out = parse(call("t", flag="True", nothing="None", ratio="-0.0", items="[1, 2]",
                     opts='{"a": {"b": [true, null]}}'), tools)
    args = out["tool_calls"][0]["arguments"]
    assert args == {"flag": True, "nothing": None, "ratio": -0.0, "items": [1, 2],
                    "opts": {"a": {"b": [True, None]}}}
    assert json.dumps(args["ratio"]) == "-0.0"


def test_unparseable_typed_value_stays_text_for_the_validator() -> None:
    out = parse(call("search", query="x", limit="ten"))
    assert out["tool_calls"][0]["arguments"]["limit"] == "ten"


def test_unknown_tool_is_still_parsed_with_text_values() -> None:
    out = parse(call("launch_rockets", count="3"))
    assert out["tool_calls"] == [{"name": "launch_rockets", "arguments": {"count": "3"}}]


# -- tolerated drifts --------------------------------------------------------------


def test_missing_close_parameter_before_next_parameter() -> None:
    reply = ("<tool_call>\n<function=search>\n<parameter=query>\nalex\n"
             "<parameter=limit>\n5\n</parameter>\n</function>\n</tool_call>")
    assert parse(reply)["tool_calls"][0]["arguments"] == {"query": "alex", "limit": 5}


def test_missing_close_parameter_before_close_function() -> None:
    reply = "<tool_call>\n<function=search>\n<parameter=query>\nalex\n</function>\n</tool_call>"
    assert parse(reply)["tool_calls"][0]["arguments"] == {"query": "alex"}


def test_missing_close_tool_call_at_end_of_stream() -> None:
    reply = "<tool_call>\n<function=search>\n<parameter=query>\nalex\n</parameter>\n</function>"
    out = parse(reply)
    assert out["tool_calls"] == [{"name": "search", "arguments": {"query": "alex"}}]


def test_literal_parameter_tags_inside_a_string_value() -> None:
    content = ("Write calls like:\n<parameter=path>\nx\n</parameter>\n"
               "and close with </parameter> then text.\n</parameter>\nmore")
    out = parse(call("write_file", path="doc.md", content=content))
    assert out["tool_calls"][0]["arguments"] == {"path": "doc.md", "content": content}


def test_tool_call_right_after_think_in_the_same_delta() -> None:
    reply = "<think>\nplan\n</think><tool_call>\n<function=search>\n<parameter=query>\nq\n" \
            "</parameter>\n</function>\n</tool_call>"
    out = parse(reply)
    assert out["reasoning"] == "plan"
    assert out["tool_calls"] == [{"name": "search", "arguments": {"query": "q"}}]


def test_reply_beginning_inside_an_open_think_block() -> None:
    spec = PLUGINS.parser("qwen_xml")
    pipeline = build_pipeline(spec, {}, plugins=PLUGINS,
                              chat_template=shared_template("Qwen3.5-4B.jinja"),
                              prompt_tail="<|im_start|>assistant\n<think>\n")
    events = pipeline.feed("still thinking </th") + pipeline.feed("ink>\n\nThe answer.")
    events += pipeline.close()
    merged = merge_events(events)
    assert merged == [ReasoningEvent("still thinking"), TextEvent("The answer.")]


# -- what is not a call ------------------------------------------------------------


def test_flat_json_inside_tool_call_tags_is_not_a_call() -> None:
    reply = 'Sure.\n<tool_call>\n{"name": "search", "arguments": {"query": "x"}}\n</tool_call>'
    out = parse(reply)
    assert out["tool_calls"] == []
    assert out["diagnostics"][0]["code"] == "json_in_tool_call"
    assert '{"name": "search"' in out["content"]
    assert out["content"].startswith("Sure.")


def test_unclosed_call_at_end_is_text_with_a_diagnostic() -> None:
    reply = "Hi <tool_call>\n<function=search>\n<parameter=query>\nunfinished"
    out = parse(reply)
    assert out["tool_calls"] == []
    assert out["diagnostics"][0]["code"] == "unclosed_call"
    assert "unfinished" in out["content"]


def test_partial_tag_at_end_of_reply_is_text() -> None:
    assert parse("done <tool_c")["content"] == "done <tool_c"


def test_partial_tag_is_held_back_until_resolved() -> None:
    parser = CallParser(QWEN_FORMAT, {})
    assert merge_events(parser.feed("abc <tool_c")) == [TextEvent("abc")]
    assert merge_events(parser.feed("at")) == [TextEvent(" <tool_cat")]


def test_string_parameter_streams_argument_deltas() -> None:
    reply = call("write_file", path="a", content="line 1\nline 2\nline 3")
    events = stream(reply, [reply[i:i + 5] for i in range(0, len(reply), 5)])
    deltas = [e for e in events if isinstance(e, ToolCallDeltaEvent) and e.parameter == "content"]
    assert len(deltas) > 3
    assert "".join(d.text for d in deltas) == "line 1\nline 2\nline 3"
    start = next(i for i, e in enumerate(events) if isinstance(e, ToolCallStartEvent))
    end = next(i for i, e in enumerate(events) if isinstance(e, ToolCallEndEvent))
    assert start < events.index(deltas[0]) < end


def test_non_string_parameters_are_emitted_only_when_closed() -> None:
    reply = call("search", query="q", limit="12")
    events = stream(reply, list(reply))
    assert not [e for e in events if isinstance(e, ToolCallDeltaEvent) and e.parameter == "limit"]


def test_huge_string_argument_is_parsed_in_one_pass() -> None:
    content = ("x = '<' * 3  # < not a tag\n" * 200_000)[:5_000_000]
    reply = call("write_file", path="big.py", content=content)
    out = parse(reply, chunk=4096)
    assert out["tool_calls"][0]["arguments"]["content"] == content


@pytest.mark.parametrize("text", [
    "<tool_call><tool_call></tool_call>", "</tool_call>", "<tool_call>\n<function=>",
    "<tool_call>\n<function=a>\n<parameter=>\n", "<tool_call>\n<function=a\n",
    "\x00\xff<\udcff>", "<tool_call>\n<function=a>\n</parameter></function></tool_call>",
    "<tool_call>" * 50, "<parameter=x></parameter>", "a <tool_call>\n{broken json",
])
def test_bad_input_never_raises_and_never_loses_text(text: str) -> None:
    out = parse(text)
    assert out["tool_calls"] == []
    assert re.sub(r"\s", "", out["content"]) == re.sub(r"\s", "", without_dropped(text, out))


def test_nested_think_tags_never_raise() -> None:
    out = parse("<think><think></think></think>")
    assert out["reasoning"] == "<think>" and out["content"] == "</think>"


# -- detection -----------------------------------------------------------------------

QWEN_XML_TEMPLATES = ["Qwen3.5-4B.jinja", "Qwen-Qwen3.5-4B.jinja", "Qwen3-Coder.jinja",
                      "ollama-Qwen3.8.jinja", "NVIDIA-Nemotron-3-Nano-30B-A3B-BF16.jinja",
                      "StepFun3.5-Flash.jinja"]


@pytest.mark.parametrize("name", QWEN_XML_TEMPLATES)
def test_detect_claims_templates_rendering_qwen_xml(name: str) -> None:
    assert detect(shared_template(name)) > 0.5


def test_detect_claims_no_template_of_another_family() -> None:
    shared_template("Qwen3.5-4B.jinja")
    from tests.support.templates import SHARED_TEMPLATES

    others = [p for p in SHARED_TEMPLATES.glob("*.jinja") if p.name not in QWEN_XML_TEMPLATES]
    assert others
    claimed = [p.name for p in others if detect(p.read_text(encoding="utf-8")) > 0]
    assert claimed == []


# -- properties through the real templates --------------------------------------------

_BLANKS_THEN_TAG = re.compile(r"</parameter>[ \t\r\n]*(?:<parameter=|</function>|</tool_call>)"
                              r"|</function>[ \t\r\n]*(?:</tool_call>|<tool_call>)")


def _expressible(schema: dict[str, Any], args: dict[str, Any]) -> bool:
    """Exclude values the format itself cannot tell from markup (documented ambiguity)."""
    names = list(schema["parameters"].get("properties", {}))
    for value in args.values():
        text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
        if _BLANKS_THEN_TAG.search(text):
            return False
        if any(f"<parameter={n}>" in text for n in names):
            return False
    return True


def _render_assistant(template: str, content: str, reasoning: str,
                      calls: list[tuple[str, dict[str, Any]]], tools: list[Any]) -> str:
    messages = [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": content, "reasoning_content": reasoning,
         "tool_calls": [{"id": f"call_{i}", "type": "function",
                         "function": {"name": n, "arguments": a}}
                        for i, (n, a) in enumerate(calls)]},
    ]
    rendered = get_chat_template(template).render(messages, tools=tools,
                                                  add_generation_prompt=False)
    turn = rendered.rsplit("<|im_start|>assistant\n", 1)[1]
    assert turn.endswith("<|im_end|>\n")
    return turn[: -len("<|im_end|>\n")]


_MARKUP = (*QWEN_FORMAT.markup, "<think>", "</think>", "<|im_end|>")
"""What content never holds: the family's markup (a section's closing marker in text is
dropped as stray, a bare ``<function=`` may open a call) and the end-of-turn token (a
control token no model writes as text; the pipeline drops it)."""

_plain_text = tws.adversarial_text().filter(lambda s: not any(t in s for t in _MARKUP))


@pytest.mark.parametrize("template_name", ["Qwen3.5-4B.jinja", "Qwen3-Coder.jinja"])
@given(case=tws.tool_calls_with_schemas(strings=tws.adversarial_text(), keep=_expressible),
       content=_plain_text, reasoning=_plain_text, data=st.data())
def test_round_trip_through_the_real_template(template_name: str, case: Any, content: str,
                                              reasoning: str, data: st.DataObject) -> None:
    template = shared_template(template_name)
    tools, calls = case
    if template_name == "Qwen3-Coder.jinja":
        reasoning = ""  # this template has no reasoning block
    reply = _render_assistant(template, content, reasoning, calls, tools)
    pieces = data.draw(tws.chunkings(reply))
    spec = PLUGINS.parser("qwen_xml")
    pipeline = build_pipeline(spec, tool_parameters_by_name(tools), plugins=PLUGINS,
                              chat_template=template)
    events = [e for piece in pieces for e in pipeline.feed(piece)] + pipeline.close()
    got = toolwire.parse.protocol.collect_reply(events)
    assert got.content == content.strip()
    assert got.reasoning == reasoning.strip()
    assert [(c.name, tws.json_dumps(dict(c.arguments))) for c in got.tool_calls] == \
        [(n, tws.json_dumps(a)) for n, a in calls]
    assert got.diagnostics == ()


@given(case=tws.tool_calls_with_schemas(strings=tws.adversarial_text(), keep=_expressible),
       content=_plain_text, data=st.data())
def test_every_chunking_gives_identical_events(case: Any, content: str,
                                               data: st.DataObject) -> None:
    tools, calls = case
    reply = _render_assistant(shared_template("Qwen3.5-4B.jinja"), content, "", calls, tools)
    whole = merge_events(stream(reply, [reply], tools))
    pieces = data.draw(tws.chunkings(reply))
    assert merge_events(stream(reply, pieces, tools)) == whole


@given(text=tws.adversarial_text(max_size=200), data=st.data())
def test_garbage_never_raises_and_chunking_does_not_matter(text: str, data: st.DataObject
                                                           ) -> None:
    whole = merge_events(stream(text, [text]))
    pieces = data.draw(tws.chunkings(text))
    assert merge_events(stream(text, pieces)) == whole
    assert not any(isinstance(e, DiagnosticEvent) and e.code == "parser_error" for e in whole)


@given(text=tws.adversarial_text(max_size=120).filter(lambda s: not any(t in s for t in _MARKUP)))
def test_text_without_the_familys_markup_comes_out_whole(text: str) -> None:
    assume(text.strip())
    events = merge_events(stream(text))
    assert "".join(e.text for e in events if isinstance(e, TextEvent)) == text
    # a reply ending with the start of an opening marker ("... <tool_") was cut inside it
    notes = [(e.code, e.raw) for e in events if isinstance(e, DiagnosticEvent)]
    if QWEN_FORMAT.ends_inside_opener(text):
        assert [code for code, _ in notes] == ["truncated_call"] and text.endswith(notes[0][1])
    else:
        assert all(isinstance(e, TextEvent) for e in events)


def test_partial_tag_start_finds_tags_of_any_opening_character() -> None:
    from toolwire.parse.streaming import partial_tag_start

    assert partial_tag_start("text [TH", 0, ("[THINK]",)) == 5
    assert partial_tag_start("a < b <too", 0, ("<tool_call>",)) == 6
    assert partial_tag_start("a < b", 0, ("<tool_call>",)) == 5
    assert partial_tag_start("x[/TH", 0, ("[/THINK]", "<tool_call>")) == 1


def test_reasoning_filter_with_bracket_tags_split_across_deltas() -> None:
    from toolwire.parse.reasoning import ReasoningBlockFilter

    block = ReasoningBlockFilter("[THINK]", "[/THINK]", start="text")
    events = []
    for piece in ("[TH", "INK]plan it[/TH", "INK]", "Answer."):
        events += block.feed(piece)
    events += block.close()
    assert merge_events(events) == [ReasoningEvent("plan it"), TextEvent("Answer.")]


# -- Qwen3-Coder's calls without <tool_call> (issue 30, item 2) --------------------------------

CODER = "Qwen3-Coder.jinja"


def _coder_turn(calls: list[tuple[str, dict[str, Any]]]) -> tuple[str, str]:
    return render(CODER, calls, SEARCH_TOOLS)


def _read(reply: str, tail: str, chunk: int) -> toolwire.ParsedReply:
    return parse_text("qwen_xml", reply, SEARCH_TOOLS, chunk=chunk,
                      template=template_source(CODER), prompt_tail=tail)


@pytest.mark.parametrize("drop", ["opener", "both markers"])
def test_a_call_written_without_its_tool_call_opener_is_a_call(drop: str) -> None:
    calls = [("search", {"query": "alex"}), ("search", {"query": "bea"})]
    tail, reply = _coder_turn(calls)
    first, second = reply.split("<tool_call>")[1:]  # the parallel turn's two sections
    bare = second if drop == "opener" else second.replace("</tool_call>", "")
    drifted = "Both.\n<tool_call>" + first + bare.lstrip("\n")
    for chunk in (0, 1, 5):
        out = _read(drifted, tail, chunk)
        assert [(c.name, dict(c.arguments)) for c in out.tool_calls] == calls, chunk
        assert out.content == "Both." and out.diagnostics == (), chunk


def test_a_bare_call_alone_and_text_after_it() -> None:
    tail, reply = _coder_turn([("search", {"query": "alex"})])
    section = reply[reply.index("<tool_call>"):]
    bare = section.removeprefix("<tool_call>").strip().removesuffix("</tool_call>").strip()
    out = _read(f"Looking. {bare} Done.", tail, 3)
    assert [(c.name, dict(c.arguments)) for c in out.tool_calls] == [("search", {"query": "alex"})]
    assert out.content == "Looking. Done."


@pytest.mark.parametrize("prose", [
    "Call <function=search> to look things up.",
    "The syntax is <function=NAME>, then parameters.",
    "Write `<function=` then the name.",
    "<function=search> is how a call begins",
])
def test_prose_that_mentions_a_function_tag_stays_text(prose: str) -> None:
    tail, _ = _coder_turn([])
    for chunk in (0, 1, 4):
        out = _read(prose, tail, chunk)
        assert (out.content, out.tool_calls, out.diagnostics) == (prose, (), ()), chunk


# -- a literal call inside a value (issue 30, item 3) --------------------------------------


@pytest.mark.parametrize("template", ["Qwen3-Coder.jinja", "Qwen3.5-4B.jinja"])
@pytest.mark.parametrize("content", [
    "Example:\n{block}\nThat is how a call looks.",
    "{block}",
    "before {block} after",
    "{block}\n\nand {block} again",
])
def test_a_complete_call_block_inside_a_value_is_value_text(template: str, content: str) -> None:
    _, block = render(template, [("search", {"query": "inner"})], SEARCH_TOOLS)
    block = block[block.index("<tool_call>"):].strip()
    text = content.format(block=block)
    calls = [("write_file", {"path": "doc.md", "content": text}),
             ("search", {"query": "after"})]
    tail, reply = render(template, calls, SEARCH_TOOLS)
    for chunk in (0, 1, 7):
        out = parse_text("qwen_xml", reply, SEARCH_TOOLS, chunk=chunk,
                         template=template_source(template), prompt_tail=tail)
        assert [(c.name, dict(c.arguments)) for c in out.tool_calls] == calls, chunk
        assert out.diagnostics == () and "</parameter>" not in out.content, chunk


# -- a call in a prompt-opened think block that never closes (issue 30, item 6) ------------


def test_a_call_in_a_prompt_opened_think_block_that_never_closes_is_a_call() -> None:
    name = "Qwen3.5-4B.jinja"
    tail, reply = render(name, [("search", {"query": "alex"})], SEARCH_TOOLS)
    assert tail.rstrip().endswith("<think>")  # the generation prompt opens the block
    section = reply[reply.index("<tool_call>"):]
    for chunk in (0, 1, 6):
        out = parse_text("qwen_xml", "I should look it up.\n\n" + section, SEARCH_TOOLS,
                         chunk=chunk, template=template_source(name), prompt_tail=tail)
        assert [(c.name, dict(c.arguments)) for c in out.tool_calls] == \
            [("search", {"query": "alex"})], chunk
        assert (out.reasoning, out.content) == ("I should look it up.", ""), chunk
        closed = parse_text("qwen_xml", "Maybe " + section + "\nNo.\n</think>\n\nDone.",
                            SEARCH_TOOLS, chunk=chunk, template=template_source(name),
                            prompt_tail=tail)
        assert closed.tool_calls == () and closed.content == "Done.", chunk
        assert "<tool_call>" in closed.reasoning, chunk
