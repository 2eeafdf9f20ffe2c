"""Parsers derived from a chat template for families no plugin knows."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.support.cli import run_cli
from tests.support.paths import MISSING_TEMPLATES
from tests.support.templates import (
    SHARED_TEMPLATES,
    shared_template,
    template_names,
    template_params,
)
from toolwire import Chat, DiagnosticEvent, ParserNotFoundError, merge_events, parse_reply, tool
from toolwire.families.derive import DerivationError, derive_format
from toolwire.families.selection import DERIVED_FAMILY, select_parser
from toolwire.parse.engine import CallParser
from toolwire.parse.record import CallFormat, Header, JsonArguments, TaggedArguments
from toolwire.parse.record_source import format_source
from toolwire.testing import isolated_plugin_manager
from toolwire.testing import strategies as tws

ROOT = Path(__file__).resolve().parents[2]

# A family no plugin knows: calls in a made-up markup.
CUSTOM_TEMPLATE = """\
{%- for m in messages -%}
<|{{ m.role }}|>{{ m.content or '' }}
{%- if m.tool_calls %}{% for c in m.tool_calls %}
[[invoke {{ c.function.name }}]]{{ c.function.arguments | tojson }}[[/invoke]]
{%- endfor %}{% endif %}<|end|>
{% endfor -%}
{%- if tools %}<|tools|>{% for t in tools %}{{ t | tojson }}{% endfor %}<|end|>{% endif -%}
{%- if add_generation_prompt %}<|assistant|>{% endif -%}"""

CUSTOM_TAGGED = """\
{%- for m in messages -%}
<|{{ m.role }}|>{{ m.content or '' }}
{%- if m.tool_calls %}<calls>{% for c in m.tool_calls %}<call fn="{{ c.function.name }}">
{%- for k, v in c.function.arguments | items %}<arg key="{{ k }}">
{{- v if v is string else v | tojson }}</arg>
{%- endfor %}</call>{% endfor %}</calls>{% endif %}<|end|>
{% endfor -%}
{%- if add_generation_prompt %}<|assistant|>{% endif -%}"""

TOOLS = [{"type": "function", "function": {"name": "search", "parameters": {
    "type": "object", "properties": {"query": {"type": "string"},
                                     "limit": {"type": "integer"}}}}}]


def test_json_arguments_format_is_inferred() -> None:
    fmt = derive_format(CUSTOM_TEMPLATE)
    assert isinstance(fmt.arguments, JsonArguments)
    assert fmt.call_open == ("[[invoke",)
    assert fmt.header_end == ("]]",) and fmt.call_close == ("[[/invoke]]",)
    assert fmt.max_calls is None  # several calls per turn


def test_tagged_arguments_format_is_inferred() -> None:
    fmt = derive_format(CUSTOM_TAGGED)
    args = fmt.arguments
    assert isinstance(args, TaggedArguments)
    assert (fmt.section_open, fmt.section_close) == (("<calls>",), ("</calls>",))
    assert args.open.endswith('<arg key="') and '">' in args.header_end
    assert args.close_for("string") == "</arg>"


def test_derived_parser_reads_calls_and_streams_arguments() -> None:
    reply = 'Let me look.\n[[invoke search]]{"query": "alex", "limit": 3}[[/invoke]]'
    out = parse_reply(reply, chat_template=CUSTOM_TEMPLATE, tools=TOOLS,
                      plugins=isolated_plugin_manager(), chunk_size=2)
    assert out.family == DERIVED_FAMILY
    assert out.to_dict()["tool_calls"] == [{"name": "search",
                                            "arguments": {"query": "alex", "limit": 3}}]
    assert out.content == "Let me look."


def test_tagged_values_are_typed_by_the_schema() -> None:
    reply = '<calls><call fn="search"><arg key="query">a < b\nc</arg><arg key="limit">7</arg>' \
            '</call></calls>'
    out = parse_reply(reply, chat_template=CUSTOM_TAGGED, tools=TOOLS,
                      plugins=isolated_plugin_manager(), chunk_size=3)
    assert out.to_dict()["tool_calls"] == [{"name": "search",
                                            "arguments": {"query": "a < b\nc", "limit": 7}}]


def test_derived_parser_never_wins_over_a_plugin() -> None:
    template = shared_template("Qwen3.5-4B.jinja")
    choice = select_parser(template, isolated_plugin_manager())
    assert choice.spec.name == "qwen_xml"
    assert select_parser(template, isolated_plugin_manager(),
                         family=DERIVED_FAMILY).spec.name == DERIVED_FAMILY


def test_template_without_call_rendering_reports_what_was_seen() -> None:
    template = "{% for m in messages %}<|python_tag|>{{ m.content }}{% endfor %}"
    with pytest.raises(DerivationError, match="renders no tool call"):
        derive_format(template)
    with pytest.raises(ParserNotFoundError) as caught:
        select_parser(template, isolated_plugin_manager())
    message = str(caught.value)
    assert "<|python_tag|>" in message and "no parser could be derived" in message
    assert "renders no tool call" in caught.value.derivation


def test_detect_derive_prints_the_record(tmp_path: Path) -> None:
    path = tmp_path / "custom.jinja"
    path.write_text(CUSTOM_TEMPLATE)
    run = run_cli("detect", "--derive", str(path))
    assert run.returncode == 0, run.stderr
    # the output is Python a plugin can paste: it evaluates to the derived record
    namespace: dict[str, Any] = {}
    exec(run.stdout, namespace)
    assert namespace["DERIVED_FORMAT"] == derive_format(CUSTOM_TEMPLATE)
    as_json = run_cli("detect", "--derive", "--json", str(path))
    assert json.loads(as_json.stdout)["call_open"] == ["[[invoke"]


def test_the_printed_record_of_every_built_in_family_evaluates_back() -> None:
    from toolwire.plugins import (
        deepseek,
        glm_xml,
        invoke_xml,
        json_wrappers,
        kimi,
        llama3_json,
        mistral,
        pythonic,
        qwen_xml,
        seed_xml,
        solar,
    )
    records = [qwen_xml.QWEN_FORMAT, seed_xml.SEED_FORMAT, glm_xml.GLM_FORMAT,
               glm_xml.HY3_FORMAT, invoke_xml.M2_FORMAT, invoke_xml.M3_FORMAT,
               invoke_xml.DSML_FORMAT, invoke_xml.MINICPM_FORMAT, kimi.K2_FORMAT,
               kimi.K3_FORMAT, solar.SOLAR_FORMAT, mistral.MISTRAL_FORMAT,
               deepseek.DEEPSEEK_FORMAT, llama3_json.LLAMA3_FORMAT, pythonic.PYTHONIC_FORMAT,
               *json_wrappers.FORMATS]
    names = {"CallFormat": CallFormat, "Header": Header, "JsonArguments": JsonArguments,
             "TaggedArguments": TaggedArguments}
    from toolwire.parse import record

    names.update({n: getattr(record, n) for n in record.__all__})
    for fmt in records:
        namespace = dict(names)
        exec(format_source(fmt), namespace)
        assert namespace["FORMAT"] == fmt, fmt.family


def _render_reply(template: str, calls: list[tuple[str, dict[str, Any]]]) -> str:
    from toolwire.families.derive_probe import ProbeRenderer

    return ProbeRenderer(template).block(calls, holes=False)


_values = st.one_of(st.text(max_size=20).filter(
    lambda s: "[[" not in s and "</arg>" not in s and "\\" not in s), st.integers())


@given(calls=st.lists(st.tuples(st.just("search"), st.fixed_dictionaries(
    {"query": st.text(max_size=15).filter(lambda s: "</arg>" not in s)},
    optional={"limit": st.integers(-1000, 1000)})), min_size=1, max_size=3), data=st.data())
def test_round_trip_through_a_derived_tagged_format(calls: list[tuple[str, dict[str, Any]]],
                                                     data: st.DataObject) -> None:
    fmt = derive_format(CUSTOM_TAGGED)
    reply = _render_reply(CUSTOM_TAGGED, calls)
    pieces = data.draw(tws.chunkings(reply))
    parser = CallParser(fmt, {"search": TOOLS[0]["function"]["parameters"]})
    events = [e for p in pieces for e in parser.feed(p)] + parser.close()
    got = [(e.name, dict(e.arguments)) for e in events if e.type == "tool_call_end"]
    assert got == calls
    whole = CallParser(fmt, {"search": TOOLS[0]["function"]["parameters"]})
    assert merge_events(events) == merge_events(whole.feed(reply) + whole.close())


@given(text=tws.adversarial_text(max_size=200,
                                 fragments=("[[invoke ", "]]", "[[/invoke]]", "{", "}", '"')))
def test_garbage_never_raises(text: str) -> None:
    parser = CallParser(derive_format(CUSTOM_TEMPLATE), {})
    events = parser.feed(text) + parser.close()
    assert not any(isinstance(e, DiagnosticEvent) and e.code == "parser_error" for e in events)


def _all_templates() -> list[Path]:
    if not SHARED_TEMPLATES.is_dir():
        return []
    return sorted(SHARED_TEMPLATES.glob("*.jinja"))


@pytest.mark.parametrize("path", [SHARED_TEMPLATES / name for name in template_names()]
                         or template_params(), ids=lambda p: getattr(p, "stem", "absent"))
def test_every_real_template_derives_or_says_why(path: Path) -> None:
    source = path.read_text(encoding="utf-8")
    try:
        fmt = derive_format(source)
    except DerivationError as exc:
        assert "[missing rule: " in str(exc)  # an honest reason naming the rule, never a crash
        return
    # what was derived reproduces the template's own rendering (checked again here)
    from toolwire.families.derive_probe import ProbeRenderer
    from toolwire.families.derive_record import verify_format

    assert verify_format(fmt, ProbeRenderer(source)) == ""


def test_every_real_template_that_renders_calls_derives() -> None:
    paths = _all_templates()
    if not paths:
        pytest.skip(MISSING_TEMPLATES)
    refused = {}
    for path in paths:
        try:
            derive_format(path.read_text(encoding="utf-8"))
        except DerivationError as exc:
            refused[path.name] = str(exc)
    assert all("renders no tool call" in why for why in refused.values()), refused
    assert len(paths) - len(refused) >= 61


def _table_script() -> Any:
    spec = importlib.util.spec_from_file_location(
        "derived_table", ROOT / "scripts" / "derived_table.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# The templates whose derived parser passed the conformance kit before issue 25.
PASSED_BEFORE = (
    "Apertus-8B-Instruct", "Apriel-1.6-15b-Thinker-fixed", "Bielik-11B-v3.0-Instruct",
    "ByteDance-Seed-OSS", "GLM-4.6", "GLM-4.7-Flash", "GigaChat3.1-10B-A1.8B",
    "Kimi-K2-Instruct", "Kimi-K2-Thinking", "MiMo-VL", "MiniMax-M1", "MiniMax-M2",
    "Mistral-Small-3.2-24B-Instruct-2506", "NVIDIA-Nemotron-3-Nano-30B-A3B-BF16",
    "NousResearch-Hermes-2-Pro-Llama-3-8B-tool_use",
    "NousResearch-Hermes-3-Llama-3.1-8B-tool_use", "Qwen-QwQ-32B", "Qwen-Qwen2.5-7B-Instruct",
    "Qwen-Qwen3-0.6B", "Qwen-Qwen3.5-4B", "Qwen3-Coder", "Qwen3.5-4B", "Reka-Edge",
    "StepFun3.5-Flash", "deepseek-ai-DeepSeek-V3.1", "deepseek-ai-DeepSeek-V3.2",
    "deepseek-ai-DeepSeek-V4-Flash-0731", "deepseek-ai-DeepSeek-V4",
    "fireworks-ai-llama-3-firefunction-v2", "ibm-granite-granite-4.0", "ibm-granite-granite-4.1",
    "meetkai-functionary-medium-v3.1", "meta-llama-Llama-3.1-8B-Instruct",
    "meta-llama-Llama-3.2-3B-Instruct", "meta-llama-Llama-3.3-70B-Instruct",
    "mistralai-Ministral-3-14B-Reasoning-2512", "mistralai-Mistral-Nemo-Instruct-2407",
    "moonshotai-Kimi-K2", "ollama-Qwen3.8", "poolside-Laguna-S-2.1", "poolside-Laguna-XS-2.1",
    "poolside-Laguna-XS.2", "tencent-Hy3", "unsloth-Apriel-1.5",
    "unsloth-mistral-Devstral-Small-2507", "upstage-Solar-Open-100B")


def test_the_results_table_is_the_scripts_rendering_of_the_stored_run() -> None:
    rows = json.loads((ROOT / "benchmarks" / "results" / "derived_conformance.json")
                      .read_text(encoding="utf-8"))
    table = _table_script()
    doc = (ROOT / "docs" / "derived.md").read_text(encoding="utf-8")
    assert table.rewrite(doc, rows) == doc  # regenerated by scripts/derived_table.py
    passed = {r["template"].removesuffix(".jinja") for r in rows if r["result"] == "pass"}
    renders_calls = [r for r in rows if "renders no tool call" not in r.get("reason", "")]
    assert len(passed) >= 58 and len(renders_calls) >= 61
    assert not set(PASSED_BEFORE) - passed  # nothing that passed before regressed


@tool
def lookup(query: str) -> str:
    """Look something up.

    :param query: what
    """
    return f"found {query}"


@pytest.mark.model
def test_local_model_with_an_unknown_family_runs_its_calls(tmp_path: Path) -> None:
    pytest.importorskip("llama_cpp")
    from toolwire.plugins.llama_cpp.backend import LlamaCppBackend
    from toolwire.testing.tiny_gguf import forcing_grammar as grammar_for
    from toolwire.testing.tiny_gguf import write_tiny_gguf

    model = write_tiny_gguf(tmp_path / "custom.gguf", CUSTOM_TEMPLATE)
    replies = ['[[invoke lookup]]{"query": "alex"}[[/invoke]]', "Done."]
    backend = LlamaCppBackend(model, grammar=lambda request: grammar_for(replies.pop(0)),
                              n_threads=1, temperature=0.0, max_tokens=256, progress=False,
                              plugins=isolated_plugin_manager())
    events = list(Chat(backend, [lookup], plugins=isolated_plugin_manager()).send("who?"))
    codes = [e.code for e in events if isinstance(e, DiagnosticEvent)]
    assert "derived_parser" in codes
    results = [e for e in events if e.type == "tool_result"]
    assert [r.content for r in results] == ["found alex"]
    assert events[-1].type == "done" and events[-1].reason == "stop"
