"""toolwire in SGLang's detector slot, tested through SGLang's own classes.

The real SGLang 0.5.23 from PyPI (``scripts/ensure_engines``): the detector is put in
SGLang's ``ToolCallParserEnum`` by SGLang's own plugin loader (the
``sglang.srt.plugins`` entry point) or by the launcher, and driven through
SGLang's ``FunctionCallParser`` as its chat route drives it: one per request,
``parse_stream_chunk`` per delta, then ``parse_stream_end`` and the check for
arguments not yet sent; ``parse_non_stream`` for a whole reply;
``get_structure_constraint`` for required and named tool choice.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.engines.conftest import engine

engine("sglang", "sglang.srt.function_call.function_call_parser")

import sglang.srt.plugins  # noqa: E402
from sglang.srt.entrypoints.openai.protocol import Tool, ToolChoice  # noqa: E402
from sglang.srt.function_call.function_call_parser import FunctionCallParser  # noqa: E402

import toolwire  # noqa: E402
from tests.engines.bfcl_replies import (  # noqa: E402
    FAMILIES,
    BfclTurn,
    bfcl_turns,
    deltas,
    every_file,
)
from tests.engines.peer_cases import PEER_CASES, PeerCase  # noqa: E402
from tests.engines.tokenizer import byte_tokenizer  # noqa: E402
from tests.engines.tools import WEATHER  # noqa: E402
from tests.support.paths import REPO  # noqa: E402
from tests.support.templates import shared_template  # noqa: E402
from toolwire.engines.reply_stream import arguments_json  # noqa: E402
from toolwire.engines.sglang.detector import register  # noqa: E402

QWEN_CALL = ("<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n"
             "<parameter=days>\n3\n</parameter>\n</function>\n</tool_call>")

register()


def _tools(tools: Any) -> list[Tool]:
    return [Tool.model_validate(t) for t in tools]


def _stream(parser: FunctionCallParser, chunks: list[str]) -> tuple[str, tuple[Any, ...]]:
    """What SGLang's chat route sends: content and calls (name once, then arguments)."""
    content, names, arguments = [], {}, {}
    named: dict[int, int] = {}
    for chunk in [*chunks, None]:
        if chunk is None:
            text, calls = parser.parse_stream_end()
        else:
            text, calls = parser.parse_stream_chunk(chunk)
        content.append(text or "")
        for item in calls:
            if item.name:
                names[item.tool_index] = item.name
                named[item.tool_index] = named.get(item.tool_index, 0) + 1
            arguments[item.tool_index] = arguments.get(item.tool_index, "") + item.parameters
    detector = parser.detector  # the route's last check: arguments parsed but not sent
    if detector.prev_tool_call_arr:
        expected = detector.prev_tool_call_arr[-1]["arguments"]
        assert expected == detector.streamed_args_for_tool[-1]
    assert all(n == 1 for n in named.values()), named
    order = sorted(set(names) | set(arguments))
    return "".join(content), tuple((names[i], arguments[i]) for i in order)


def _whole(parser: FunctionCallParser, text: str) -> tuple[str, tuple[Any, ...]]:
    content, calls = parser.parse_non_stream(text)
    return content, tuple((c.name, c.parameters) for c in calls)


# -- registration and launch --------------------------------------------------------------


def test_sglangs_plugin_loader_registers_the_detector(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sglang.srt.plugins, "_plugins_loaded", False)
    monkeypatch.setattr(FunctionCallParser, "ToolCallParserEnum", {
        k: v for k, v in FunctionCallParser.ToolCallParserEnum.items()
        if not k.startswith("toolwire")})
    sglang.srt.plugins.load_plugins()
    assert FunctionCallParser.ToolCallParserEnum["toolwire"].__name__ == "ToolwireDetector"
    assert "toolwire-qwen_xml" in FunctionCallParser.ToolCallParserEnum


def test_the_docs_family_table_names_sglangs_own_detectors() -> None:
    from tests.engines.family_table import engine_names

    assert engine_names(2) - set(FunctionCallParser.ToolCallParserEnum) == set()


def _launch(args: list[str]) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "SGLANG_PLUGINS": "none-at-all"}  # only the launcher registers
    return subprocess.run([sys.executable, "-m", "toolwire.engines.sglang", *args],
                          capture_output=True, text=True, env=env, cwd=REPO, timeout=600)


@pytest.mark.process  # the launcher, as an operator runs it
def test_the_launcher_hands_over_to_sglangs_own_launcher_with_toolwire_registered() -> None:
    """A process: the launcher replaces itself with SGLang's ``launch_server``, whose
    own argument parser then lists toolwire among ``--tool-call-parser``'s choices."""
    done = _launch(["--help"])
    assert done.returncode == 0, done.stderr[-2000:]
    assert "--tool-call-parser" in done.stdout
    assert "toolwire-qwen_xml" in done.stdout and "toolwire" in done.stdout


@pytest.mark.process  # the launcher, as an operator runs it
def test_the_launcher_refuses_a_template_no_family_claims_before_sglang_starts(
        tmp_path: Path) -> None:
    byte_tokenizer(shared_template("google-gemma-2-2b-it.jinja")).save_pretrained(tmp_path)
    done = _launch(["--model-path", str(tmp_path), "--tool-call-parser", "toolwire"])
    assert done.returncode != 0
    assert "toolwire: --tool-call-parser toolwire" in done.stderr
    assert "no parser plugin claims this chat template" in done.stderr


# -- reading -----------------------------------------------------------------------------


def test_parallel_calls_go_out_named_once_with_their_final_json() -> None:
    tokenizer = byte_tokenizer(shared_template("Qwen3-Coder.jinja"))
    second = QWEN_CALL.replace("Paris", "Oslo").replace("3", "5")
    text = f"Both.\n{QWEN_CALL}\n{second}"
    want = (("get_weather", '{"city": "Paris", "days": 3}'),
            ("get_weather", '{"city": "Oslo", "days": 5}'))
    parser = FunctionCallParser(_tools([WEATHER]), "toolwire", tokenizer=tokenizer)
    assert _stream(parser, list(text)) == ("Both.", want)
    parser = FunctionCallParser(_tools([WEATHER]), "toolwire", tokenizer=tokenizer)
    assert _whole(parser, text) == ("Both.", want)


def test_a_call_cut_by_the_end_of_the_reply_is_never_sent() -> None:
    tokenizer = byte_tokenizer(shared_template("Qwen3-Coder.jinja"))
    text = f"{QWEN_CALL}\n{QWEN_CALL.replace('Paris', 'Oslo')}"
    for cut in range(len(QWEN_CALL), len(text)):
        parser = FunctionCallParser(_tools([WEATHER]), "toolwire", tokenizer=tokenizer)
        content, calls = _stream(parser, list(text[:cut]))
        second_closed = "</function>" in text[len(QWEN_CALL):cut]  # its own closing markup
        assert [json.loads(a)["city"] for _, a in calls] == (
            ["Paris", "Oslo"] if second_closed else ["Paris"])
        assert "<function" not in content


def test_a_named_family_is_used_whatever_the_template() -> None:
    tokenizer = byte_tokenizer(shared_template("Qwen3-Coder.jinja"))
    parser = FunctionCallParser(_tools([WEATHER]), "toolwire-hermes_json", tokenizer=tokenizer)
    hermes = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Oslo"}}\n</tool_call>'
    assert _whole(parser, hermes)[1] == (("get_weather", '{"city": "Oslo"}'),)


# -- constrained calls -------------------------------------------------------------------


def test_required_and_named_calls_get_the_native_markup_grammar_as_a_structural_tag() -> None:
    import xgrammar as xgr

    tokenizer = byte_tokenizer(shared_template("Qwen3-Coder.jinja"))
    parser = FunctionCallParser(_tools([WEATHER]), "toolwire", tokenizer=tokenizer)
    for choice in ("required", ToolChoice(function={"name": "get_weather"})):
        kind, tag = parser.get_structure_constraint(choice)
        assert kind == "structural_tag"
        compiled = xgr.GrammarCompiler(xgr.TokenizerInfo.from_huggingface(tokenizer))
        matcher = xgr.GrammarMatcher(compiled.compile_structural_tag(tag),
                                     terminate_without_stop_token=True)
        assert matcher.accept_string(QWEN_CALL) and matcher.is_completed()
    assert parser.get_structure_constraint("auto") is None


def test_a_family_with_no_grammar_keeps_sglangs_json_default() -> None:
    tokenizer = byte_tokenizer(shared_template("google-gemma-4-31B-it.jinja"))
    parser = FunctionCallParser(_tools([WEATHER]), "toolwire", tokenizer=tokenizer)
    kind, _ = parser.get_structure_constraint("required")
    assert kind == "json_schema"


# -- the engines' own test cases -----------------------------------------------------------


@pytest.mark.parametrize("case", PEER_CASES, ids=lambda c: c.name)
def test_sglangs_own_detector_test_cases_read_the_same_through_the_adapter(
        case: PeerCase) -> None:
    ref = toolwire.parse_reply(case.reply, family=case.family, tools=list(case.tools),
                               end_reason="length")
    assert [(c.name, dict(c.arguments)) for c in ref.tool_calls] == case.calls_json()
    tokenizer = byte_tokenizer(None)
    name = f"toolwire-{case.family}"
    whole = _whole(FunctionCallParser(_tools(case.tools), name, tokenizer=tokenizer),
                   case.reply)
    streamed = _stream(FunctionCallParser(_tools(case.tools), name, tokenizer=tokenizer),
                       list(case.reply))
    for content, calls in (whole, streamed):
        assert [(n, json.loads(a)) for n, a in calls] == case.calls_json()
        assert (content.strip() or None) == case.content


# -- BFCL round trips ---------------------------------------------------------------------


def _content_after_reasoning(turn: BfclTurn, live_tail: str) -> str:
    """What SGLang's reasoning parser leaves for the detector: the text after the
    reasoning block (toolwire's own filters find where it ends)."""
    family = toolwire.select_parser(turn.template).spec
    pipeline = toolwire.build_pipeline(family, {}, chat_template=turn.template,
                                       prompt_tail=live_tail, parser=False)
    events = pipeline.feed(turn.text) + pipeline.close(end_reason="length")
    return "".join(e.text for e in events if isinstance(e, toolwire.TextEvent))


@pytest.mark.parametrize("family", FAMILIES)
def test_bfcl_round_trips_read_through_sglang_as_toolwire_reads_them(family: str) -> None:
    """Every turn whole and in random deltas, every eighth in 1-character deltas."""
    rng = random.Random(42)  # a fixed seed: the same random deltas every run
    failures, tried = [], 0
    for file_name in every_file():
        turns = bfcl_turns(family, file_name)
        tokenizer = byte_tokenizer(turns[0].template)
        for i, turn in enumerate(turns):
            tried += 1
            live = toolwire.get_chat_template(turn.template).render(
                [{"role": "user", "content": "hi"}], tools=list(turn.tools))[-64:]
            ref = toolwire.parse_reply(turn.text, chat_template=turn.template,
                                       tools=list(turn.tools), prompt_tail=live,
                                       end_reason="length")
            text = _content_after_reasoning(turn, live)
            want = tuple((c.name, arguments_json(c.arguments)) for c in ref.tool_calls)
            ways: list[list[str] | None] = [None, deltas(text, rng)]
            if i % 8 == 0:
                ways.append(list(text))
            for chunks in ways:
                parser = FunctionCallParser(_tools(turn.tools), "toolwire", tokenizer=tokenizer)
                content, calls = _whole(parser, text) if chunks is None else _stream(
                    parser, chunks)
                if calls != want or ((content.strip() or ref.content.strip()) and \
                        content != ref.content):
                    failures.append(f"{turn.record}: want {want} {ref.content!r}\n"
                                    f"  got {calls} {content!r}")
    assert tried > 0
    assert not failures, f"{len(failures)} differ:\n" + "\n".join(failures[:5])
