"""toolwire in vLLM's parser slots, tested through vLLM's own classes and serving loop.

Every test drives the real vLLM 0.33 from PyPI (``scripts/ensure_engines``): the
parsers are found by name through vLLM's ``ParserManager`` after vLLM's own plugin
loader registered them, composed with the tokenizer as ``vllm serve`` composes them
at start, and fed by vLLM's ``ChatStreamProcessor`` (one parser per request, deltas
with token ids) or its non-streaming ``parse``.
"""

from __future__ import annotations

import functools
import json
import os
import random
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.engines.conftest import engine

# The wheel is vLLM's CUDA build; on a machine without a GPU its platform is found
# only when told (vLLM's own switch). The parser slots never touch the device.
os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")
engine("vllm", "vllm.tool_parsers")

import toolwire  # noqa: E402
from tests.engines.bfcl_replies import (  # noqa: E402
    FAMILIES,
    BfclTurn,
    bfcl_turns,
    deltas,
    every_file,
)
from tests.engines.peer_cases import PEER_CASES, PeerCase  # noqa: E402
from tests.engines.tokenizer import byte_tokenizer, token_ids  # noqa: E402
from tests.engines.vllm_harness import (  # noqa: E402
    chat_request,
    parser_class,
    stream,
    whole,
)
from tests.support.templates import shared_template  # noqa: E402
from toolwire.engines.reply_stream import arguments_json  # noqa: E402

WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "The weather in a city.",
    "parameters": {"type": "object", "properties": {
        "city": {"type": "string"}, "days": {"type": "integer"}}, "required": ["city"]}}}

NO_THINKING = {"enable_thinking": False}
"""Qwen3.5's generation prompt opens a think block unless told not to."""

QWEN_CALL = ("<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n"
             "<parameter=days>\n3\n</parameter>\n</function>\n</tool_call>")


def _reference(text: str, turn_template: str, tools: Any, prompt_tail: str
               ) -> toolwire.ParsedReply:
    """toolwire's own reading, closed as the adapters close a reply (``length``)."""
    return toolwire.parse_reply(text, chat_template=turn_template, tools=list(tools),
                                prompt_tail=prompt_tail, end_reason="length")


def _calls(reply: toolwire.ParsedReply) -> tuple[tuple[str, str], ...]:
    return tuple((c.name, arguments_json(c.arguments)) for c in reply.tool_calls)


# -- vllm serve: registration and start ---------------------------------------------------


def test_vllm_serve_takes_toolwire_by_name_through_the_entry_point(
        monkeypatch: pytest.MonkeyPatch) -> None:
    import vllm.plugins
    from vllm.entrypoints.common.cli_args import (
        make_arg_parser,
        validate_api_server_args,
        validate_parsed_serve_args,
    )
    from vllm.reasoning import ReasoningParserManager
    from vllm.tool_parsers import ToolParserManager
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    # a process that has loaded no plugin yet, and knows no toolwire name
    monkeypatch.setattr(vllm.plugins, "plugins_loaded", False)
    for manager in (ToolParserManager, ReasoningParserManager):
        monkeypatch.setattr(manager, "lazy_parsers", {
            k: v for k, v in manager.lazy_parsers.items() if not k.startswith("toolwire")})
    argv = ["--model", "Qwen/Qwen3.5-4B", "--enable-auto-tool-choice",
            "--tool-call-parser", "toolwire", "--reasoning-parser", "toolwire"]
    args = make_arg_parser(FlexibleArgumentParser()).parse_args(argv)
    validate_parsed_serve_args(args)
    validate_api_server_args(args)  # raises KeyError naming the choices for an unknown name
    assert "toolwire" in ToolParserManager.list_registered()
    assert "toolwire-qwen_xml" in ToolParserManager.list_registered()
    assert "toolwire-hermes_json" in ReasoningParserManager.list_registered()
    args.tool_call_parser = "toolwire-nonesuch"
    with pytest.raises(KeyError, match="invalid tool call parser"):
        validate_api_server_args(args)


def test_the_docs_family_table_names_vllms_own_parsers() -> None:
    from vllm.tool_parsers import ToolParserManager

    from tests.engines.family_table import engine_names

    assert engine_names(1) - set(ToolParserManager.list_registered()) == set()


def test_the_family_is_chosen_from_the_served_tokenizer_at_start() -> None:
    tokenizer = byte_tokenizer(shared_template("Qwen3.5-4B.jinja"))
    parser = parser_class(tokenizer, "toolwire", "toolwire")(tokenizer, [])
    assert parser.tool_parser.family.name == "qwen_xml"


def test_a_template_no_family_claims_stops_vllm_at_start_with_the_reason() -> None:
    tokenizer = byte_tokenizer(shared_template("google-gemma-2-2b-it.jinja"))
    with pytest.raises(TypeError) as caught:
        parser_class(tokenizer, "toolwire")
    message = str(caught.value)
    assert "--tool-call-parser toolwire cannot be used" in message
    assert "no parser plugin claims this chat template" in message


def test_a_tokenizer_without_a_template_asks_for_a_family_by_name() -> None:
    tokenizer = byte_tokenizer(None)
    with pytest.raises(TypeError, match=r"toolwire-<family>"):
        parser_class(tokenizer, "toolwire")
    forced = parser_class(tokenizer, "toolwire-hermes_json")
    request = chat_request([WEATHER])
    reply = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Oslo"}}\n</tool_call>'
    assert whole(forced, tokenizer, request, reply)[2] == (
        ("get_weather", '{"city": "Oslo"}'),)


def test_a_named_family_is_used_as_is_whatever_the_template() -> None:
    tokenizer = byte_tokenizer(shared_template("Qwen3.5-4B.jinja"))
    forced = parser_class(tokenizer, "toolwire-hermes_json")
    request = chat_request([WEATHER])
    hermes = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Oslo"}}\n</tool_call>'
    assert stream(forced, tokenizer, request, list(hermes)).calls == (
        ("get_weather", '{"city": "Oslo"}'),)


def test_a_requests_own_chat_template_is_honoured() -> None:
    tokenizer = byte_tokenizer(shared_template("Qwen3.5-4B.jinja"))
    cls = parser_class(tokenizer, "toolwire")
    hermes_template = shared_template("NousResearch-Hermes-3-Llama-3.1-8B-tool_use.jinja")
    request = chat_request([WEATHER], chat_template=hermes_template)
    hermes = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Oslo"}}\n</tool_call>'
    assert whole(cls, tokenizer, request, hermes)[2] == (("get_weather", '{"city": "Oslo"}'),)
    assert stream(cls, tokenizer, request, list(hermes)).calls == (
        ("get_weather", '{"city": "Oslo"}'),)


# -- streaming records -------------------------------------------------------------------


@pytest.mark.parametrize("reasoning_parser", [None, "toolwire"])
def test_parallel_calls_stream_as_vllm_records_named_once_with_their_final_json(
        reasoning_parser: str | None) -> None:
    tokenizer = byte_tokenizer(shared_template("Qwen3.5-4B.jinja"))
    cls = parser_class(tokenizer, "toolwire", reasoning_parser)
    request = chat_request([WEATHER], chat_template_kwargs=NO_THINKING)
    second = QWEN_CALL.replace("Paris", "Oslo").replace("3", "5")
    text = f"Both cities.\n\n{QWEN_CALL}\n{second}"
    got = stream(cls, tokenizer, request, list(text))
    assert got.calls == (("get_weather", '{"city": "Paris", "days": 3}'),
                         ("get_weather", '{"city": "Oslo", "days": 5}'))
    assert got.names_sent == (1, 1)
    assert got.content.strip() == "Both cities."
    assert got.finish_reason == "tool_calls"
    assert whole(cls, tokenizer, request, text)[2] == got.calls


def test_parallel_tool_calls_false_keeps_the_first_call_only() -> None:
    tokenizer = byte_tokenizer(shared_template("Qwen3.5-4B.jinja"))
    cls = parser_class(tokenizer, "toolwire")
    request = chat_request([WEATHER], parallel_tool_calls=False,
                           chat_template_kwargs=NO_THINKING)
    text = QWEN_CALL + "\n" + QWEN_CALL.replace("Paris", "Oslo")
    assert [name for name, _ in stream(cls, tokenizer, request, list(text)).calls] == [
        "get_weather"]


def test_reasoning_is_split_as_toolwire_splits_it_with_and_without_the_reasoning_parser(
        ) -> None:
    template = shared_template("Qwen-Qwen3-0.6B.jinja")  # the model opens <think> itself
    tokenizer = byte_tokenizer(template)
    request = chat_request([WEATHER])
    text = ("<think>\nMaybe <tool_call>{\"name\": \"get_weather\", \"arguments\": "
            "{\"city\": \"Rome\"}}</tool_call> first?\n</think>\n\nChecking."
            '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Oslo"}}\n</tool_call>')
    paired = parser_class(tokenizer, "toolwire", "toolwire")
    got = stream(paired, tokenizer, request, list(text))
    ref = toolwire.parse_reply(text, chat_template=template, tools=[WEATHER],
                               end_reason="length")
    assert (got.reasoning, got.content, got.calls) == (ref.reasoning, ref.content, _calls(ref))
    assert whole(paired, tokenizer, request, text) == (ref.content, ref.reasoning, _calls(ref))
    alone = parser_class(tokenizer, "toolwire")  # vLLM's rule: reasoning markup is content
    got = stream(alone, tokenizer, request, list(text))
    wrapped = f"<think>{ref.reasoning}</think>{ref.content}"
    assert (got.reasoning, got.content, got.calls) == ("", wrapped, _calls(ref))
    assert whole(alone, tokenizer, request, text) == (wrapped, "", _calls(ref))


def test_the_reasoning_parser_alone_splits_reasoning_and_leaves_calls_as_content() -> None:
    template = shared_template("Qwen-Qwen3-0.6B.jinja")
    tokenizer = byte_tokenizer(template)
    cls = parser_class(tokenizer, None, "toolwire")
    text = "<think>\nshort\n</think>\n\nThe answer."
    got = stream(cls, tokenizer, chat_request(), list(text))
    assert (got.reasoning, got.content) == ("short", "The answer.")


# -- required and named tool choice ------------------------------------------------------


def _adjusted(template: str, tools: list[dict[str, Any]], **fields: Any) -> Any:
    """The request after the composed parser's ``adjust_request``, as vLLM's renderer
    calls it before building the sampling parameters."""
    tokenizer = byte_tokenizer(template)
    cls = parser_class(tokenizer, "toolwire")
    request = chat_request(tools, **fields)
    return cls(tokenizer, request.tools, chat_template_kwargs={},
               model_config=None).adjust_request(request)


@pytest.mark.parametrize("choice", ["required",
                                    {"type": "function", "function": {"name": "get_weather"}}])
def test_required_and_named_calls_are_held_to_the_native_markup_grammar(choice: Any) -> None:
    import xgrammar as xgr
    from vllm.sampling_params import SamplingParams
    from vllm.v1.structured_output.backend_xgrammar import validate_xgrammar_grammar

    template = shared_template("Qwen3-Coder.jinja")
    request = _adjusted(template, [WEATHER], tool_choice=choice)
    grammar = request.structured_outputs.grammar
    assert grammar == toolwire.grammar_for("qwen_xml", [WEATHER], template=template,
                                           tool_choice=choice).gbnf
    assert request.structured_outputs.json is None  # not vLLM's JSON-schema default
    assert request.skip_special_tokens is False
    validate_xgrammar_grammar(SamplingParams(structured_outputs=request.structured_outputs))
    compiler = xgr.GrammarCompiler(xgr.TokenizerInfo.from_huggingface(byte_tokenizer(None)))
    matcher = xgr.GrammarMatcher(compiler.compile_grammar(xgr.Grammar.from_ebnf(grammar)),
                                 terminate_without_stop_token=True)
    assert matcher.accept_string(QWEN_CALL) and matcher.is_completed()
    tokenizer = byte_tokenizer(template)  # and what the model writes under it is read back
    assert whole(parser_class(tokenizer, "toolwire"), tokenizer, request, QWEN_CALL)[2] == (
        ("get_weather", '{"city": "Paris", "days": 3}'),)


def test_auto_leaves_the_model_free() -> None:
    request = _adjusted(shared_template("Qwen3-Coder.jinja"), [WEATHER], tool_choice="auto")
    assert request.structured_outputs is None


def test_a_family_without_a_grammar_keeps_vllms_json_default() -> None:
    request = _adjusted(shared_template("google-gemma-4-31B-it.jinja"), [WEATHER],
                        tool_choice="required")
    assert request.structured_outputs.json is not None
    assert request.structured_outputs.grammar is None


def test_a_schema_no_grammar_can_say_is_refused_naming_the_tool_and_keyword() -> None:
    tool = {"type": "function", "function": {"name": "tag", "parameters": {
        "type": "object", "patternProperties": {"^x-": {"type": "string"}}}}}
    with pytest.raises(ValueError, match=r"tag.*patternProperties"):
        _adjusted(shared_template("Qwen3-Coder.jinja"), [tool], tool_choice="required")


# -- the token limit ----------------------------------------------------------------------


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cut=st.integers(min_value=0), seed=st.integers(0, 2**16))
def test_a_reply_cut_inside_a_call_never_yields_a_broken_call(cut: int, seed: int) -> None:
    tokenizer = byte_tokenizer(shared_template("Qwen3.5-4B.jinja"))
    cls = parser_class(tokenizer, "toolwire")
    request = chat_request([WEATHER], chat_template_kwargs=NO_THINKING)
    full = f"On it. {QWEN_CALL}\n{QWEN_CALL.replace('Paris', 'Oslo')}"
    text = full[:cut % (len(full) + 1)]
    got = stream(cls, tokenizer, request, deltas(text, random.Random(seed)),
                 finish_reason="length")
    complete = full.count("</tool_call>") if text == full else text.count("</function>")
    assert len(got.calls) == complete
    for name, arguments in got.calls:
        assert name == "get_weather" and json.loads(arguments)["city"] in ("Paris", "Oslo")
    assert "<function" not in got.content and "<parameter" not in got.content
    assert whole(cls, tokenizer, request, text)[2] == got.calls


# -- the engines' own test cases -----------------------------------------------------------


@pytest.mark.parametrize("case", PEER_CASES, ids=lambda c: c.name)
def test_vllms_own_parser_test_cases_read_the_same_through_the_adapter(case: PeerCase) -> None:
    ref = toolwire.parse_reply(case.reply, family=case.family, tools=list(case.tools),
                               end_reason="length")
    assert [(c.name, dict(c.arguments)) for c in ref.tool_calls] == case.calls_json()
    tokenizer = byte_tokenizer(None)
    cls = parser_class(tokenizer, f"toolwire-{case.family}")
    request = chat_request(list(case.tools))
    content, _, calls = whole(cls, tokenizer, request, case.reply)
    streamed = stream(cls, tokenizer, request, list(case.reply))
    for got_content, got_calls in ((content, calls), (streamed.content, streamed.calls)):
        assert [(n, json.loads(a)) for n, a in got_calls] == case.calls_json()
        assert (got_content.strip() or None) == case.content


# -- BFCL round trips ---------------------------------------------------------------------


def _given_back_at_the_end(turn: BfclTurn, live: str) -> tuple[str, str] | None:
    """``(reasoning, text)`` when the reasoning filters let no text through before the
    reply ended (a block the prompt opened and the reply never closed): streamed, vLLM
    gives what the reasoning parser's filters give back at the end to the content,
    not to the tool parser (docs/engines.md); ``None`` otherwise."""
    spec = toolwire.select_parser(turn.template).spec
    filters = toolwire.build_pipeline(spec, {}, chat_template=turn.template,
                                      prompt_tail=live[-64:], parser=False)
    fed = list(filters.feed(turn.text))
    if any(isinstance(e, toolwire.TextEvent) and e.text for e in fed):
        return None
    closed = list(filters.close(end_reason="length"))
    # the reasoning streamed while the reply was fed and what the end gave back
    return ("".join(e.text for e in fed + closed if isinstance(e, toolwire.ReasoningEvent)),
            "".join(e.text for e in closed if isinstance(e, toolwire.TextEvent)))


@functools.cache
def _live(template: str, tools: str) -> str:
    return toolwire.get_chat_template(template).render(
        [{"role": "user", "content": "hi"}], tools=json.loads(tools), add_generation_prompt=True)


def _live_prompt(turn: BfclTurn) -> str:
    """The generation prompt of the turn's conversation, as the engine renders it."""
    return _live(turn.template, json.dumps(turn.tools))


def _check(cls: Any, tokenizer: Any, turn: BfclTurn, reasoning_alone: bool,
           chunks: list[str] | None) -> str | None:
    """Compare one turn's engine reading with toolwire's; ``None`` when they agree."""
    # the conversation the turn was rendered after (AssistantTurnRenderer's user turn);
    # the reference is told the live prompt the adapters see (a template may open a
    # reasoning block there that the rendered history does not show)
    request = chat_request(list(turn.tools), messages=[{"role": "user", "content": "hi"}])
    live = _live_prompt(turn)
    ref = _reference(turn.text, turn.template, turn.tools, live[-64:])
    if chunks is None:
        content, reasoning, calls = whole(cls, tokenizer, request, turn.text)
    else:
        got = stream(cls, tokenizer, request, chunks, prompt_ids=token_ids(live))
        content, reasoning, calls = got.content, got.reasoning, got.calls
        if any(n != 1 for n in got.names_sent):
            return f"{turn.record}: names sent {got.names_sent}"
    want_content, want_reasoning = ref.content, ref.reasoning
    want_calls = _calls(ref)
    if reasoning_alone and ref.reasoning:
        want_content, want_reasoning = f"<think>{ref.reasoning}</think>{ref.content}", ""
    elif not reasoning_alone and chunks is not None:
        left = _given_back_at_the_end(turn, live)
        if left is not None:  # the documented case: vLLM makes it content
            want_content, want_reasoning, want_calls = left[1], left[0], ()
    if calls != want_calls or reasoning != want_reasoning or (
            content != want_content and (content.strip() or want_content.strip())):
        return (f"{turn.record} ({'whole' if chunks is None else len(chunks)} pieces):\n"
                f"  want {want_calls} {want_content!r} {want_reasoning!r}\n"
                f"  got  {calls} {content!r} {reasoning!r}")
    return None


@pytest.mark.parametrize("family", FAMILIES)
def test_bfcl_round_trips_read_through_vllm_as_toolwire_reads_them(family: str) -> None:
    """Every turn whole and in random deltas; every eighth in 1-character deltas;
    with toolwire's tool parser alone and with its reasoning parser before it."""
    rng = random.Random(42)  # a fixed seed: the same random deltas every run
    failures: list[str] = []
    tried = 0
    for file_name in every_file():
        turns = bfcl_turns(family, file_name)
        tokenizer = byte_tokenizer(turns[0].template)
        alone = parser_class(tokenizer, "toolwire")
        paired = parser_class(tokenizer, "toolwire", "toolwire")
        for i, turn in enumerate(turns):
            tried += 1
            checks = [(alone, True, None), (paired, False, None),
                      (alone, True, deltas(turn.text, rng))]
            if i % 8 == 0:
                checks += [(alone, True, list(turn.text)), (paired, False, list(turn.text)),
                           (paired, False, deltas(turn.text, rng))]
            for cls, is_alone, chunks in checks:
                problem = _check(cls, tokenizer, turn, is_alone, chunks)
                if problem:
                    failures.append(problem)
    assert tried > 0
    assert not failures, f"{len(failures)} differ:\n" + "\n".join(failures[:5])
