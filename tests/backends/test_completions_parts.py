"""The completions backend's parts: what a template implies for
the request (end-of-turn marker, stops, special markup), model files, the token
estimate, and the plugin's registration."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

import toolwire
from tests.support.paths import MISSING_TEMPLATES, SHARED_TEMPLATES
from toolwire.errors import BackendError
from toolwire.plugins.completions import create
from toolwire.plugins.completions.engine import EngineInfo, api_root, estimate_tokens
from toolwire.plugins.completions.sources import (
    end_of_turn_marker,
    needed_stops,
    read_model_file,
    special_markers,
)
from toolwire.plugins.completions.wire import grammar_fields, special_token_fields
from toolwire.templates.chat_template import get_chat_template

TEMPLATES = SHARED_TEMPLATES


def template(name: str) -> str:
    path = TEMPLATES / name
    if not path.is_file():
        pytest.skip(MISSING_TEMPLATES)
    return path.read_text(encoding="utf-8")


# -- what a template implies ------------------------------------------------------------


@pytest.mark.parametrize(("name", "marker"), [
    ("Qwen3.5-4B.jinja", "<|im_end|>"),
    ("meta-llama-Llama-3.1-8B-Instruct.jinja", "<|eot_id|>"),
    ("openai-gpt-oss-120b.jinja", "<|return|>"),
    ("microsoft-Phi-3.5-mini-instruct.jinja", "<|end|>"),
    ("google-gemma-2-2b-it.jinja", "<end_of_turn>"),
    ("GLM-4.7-Flash.jinja", None),
])
def test_the_end_of_turn_marker_is_read_off_the_template(name: str, marker: str | None) -> None:
    assert end_of_turn_marker(get_chat_template(template(name)), eos_token="<EOS>") == marker


def test_a_template_that_raises_has_no_marker() -> None:
    broken = get_chat_template("{{ raise_exception('no') }}")
    assert end_of_turn_marker(broken) is None


@pytest.mark.parametrize(("marker", "ends", "stops"), [
    ("<|im_end|>", ["<|im_end|>"], ()),                   # the model's EOS: the engine stops
    ("<|im_end|>", ["<|endoftext|>"], ("<|im_end|>",)),   # a base model's EOS: it would not
    ("<|end|>", ["<|endoftext|>", None], ("<|end|>",)),   # Phi-3.5
    ("<|END_TEXT|><|END_OF_TURN_TOKEN|>", ["<|END_OF_TURN_TOKEN|>"], ()),
    ("<|im_end|>", [None], ()),                           # end tokens unknown: trust the engine
    (None, ["<|endoftext|>"], ()),
])
def test_a_stop_is_sent_only_where_the_template_needs_it(
        marker: str | None, ends: list[str | None], stops: tuple[str, ...]) -> None:
    assert needed_stops(marker, ends) == stops


def test_special_markup_lists_the_call_markers_but_not_the_end_tokens() -> None:
    found = special_markers(template("Kimi-K2-Instruct.jinja"), leave_out=("<|im_end|>",))
    assert "<|tool_calls_section_begin|>" in found and "<|tool_call_begin|>" in found
    assert "<|im_end|>" not in found
    assert special_markers("[TOOL_CALLS] <|a|> <|a|>") == ("[TOOL_CALLS]", "<|a|>")


def test_each_engine_gets_its_own_fields() -> None:
    markers = ("<|tool_call_begin|>",)
    assert grammar_fields(EngineInfo("llama_server"), "g") == {"grammar": "g"}
    assert grammar_fields(EngineInfo("llama_cpp_python"), "g") == {"grammar": "g"}
    assert grammar_fields(EngineInfo("vllm"), "g") == {"structured_outputs": {"grammar": "g"}}
    assert grammar_fields(EngineInfo("sglang"), "g") == {"ebnf": "g"}
    assert grammar_fields(EngineInfo(), "g") is None
    assert special_token_fields(EngineInfo("llama_server"), markers) == {
        "preserved_tokens": ["<|tool_call_begin|>"]}
    assert special_token_fields(EngineInfo("sglang"), markers) == {
        "skip_special_tokens": False, "spaces_between_special_tokens": False}
    assert special_token_fields(EngineInfo("llama_cpp_python"), markers) == {}


# -- model files ------------------------------------------------------------------------


def test_a_tokenizer_config_with_named_templates(tmp_path: Path) -> None:
    config = tmp_path / "tokenizer_config.json"
    config.write_text(json.dumps({
        "chat_template": [{"name": "default", "template": "plain"},
                          {"name": "tool_use", "template": "with tools"}],
        "bos_token": "<s>", "eos_token": {"content": "</s>", "special": True},
        "model_max_length": 1000000000000000019884624838656}))
    facts = read_model_file(config)
    assert facts.templates == {False: ("tokenizer_config.json chat_template", "plain"),
                               True: ("tokenizer_config.json chat_template.tool_use",
                                      "with tools")}
    assert (facts.bos_token, facts.eos_token, facts.context_length) == ("<s>", "</s>", None)


def test_a_chat_template_jinja_beside_the_config_is_used(tmp_path: Path) -> None:
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({"eos_token": "<|im_end|>"}))
    (tmp_path / "chat_template.jinja").write_text("beside")
    facts = read_model_file(tmp_path / "tokenizer_config.json")
    assert facts.templates[True][1] == "beside"


@pytest.mark.parametrize("content", ["[1, 2]", "{not json", ""])
def test_a_config_that_is_not_an_object_is_a_config_error(tmp_path: Path,
                                                          content: str) -> None:
    config = tmp_path / "tokenizer_config.json"
    config.write_text(content)
    with pytest.raises(BackendError) as caught:
        read_model_file(config)
    assert caught.value.kind == "config"


def test_a_missing_model_file_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(BackendError, match="does not exist") as caught:
        read_model_file(tmp_path / "absent.gguf")
    assert caught.value.kind == "config"


def test_a_truncated_gguf_model_file_is_a_gguf_error(tmp_path: Path) -> None:
    bad = tmp_path / "cut.gguf"
    bad.write_bytes(b"GGUF\x03\x00\x00\x00")
    with pytest.raises(toolwire.GGUFError):
        read_model_file(bad)


# -- small helpers, registration -----------------------------------------------------------


@pytest.mark.parametrize(("given_url", "root"), [
    ("http://h:8000", "http://h:8000"), ("http://h:8000/", "http://h:8000"),
    ("http://h:8000/v1", "http://h:8000"), (" http://h:8000/v1/ ", "http://h:8000"),
    ("http://h/api/v1", "http://h/api")])
def test_the_engine_root_is_the_url_without_v1(given_url: str, root: str) -> None:
    assert api_root(given_url) == root


def test_the_estimate_is_one_token_per_three_bytes() -> None:
    assert [estimate_tokens(t) for t in ("", "a", "abc", "abcd", "é", "中文")] == [
        0, 1, 1, 2, 1, 2]


def test_registered_as_a_backend_plugin_with_its_options() -> None:
    spec = toolwire.PluginManager(entry_points=False).backend("completions")
    assert {"base_url", "api", "template", "model_file", "grammar"} <= set(spec.options)
    with pytest.raises(TypeError, match="needs base_url"):
        spec.create()
    with pytest.raises(TypeError, match="does not take colour"):
        create(base_url="http://x", colour="blue")


@pytest.mark.process
def test_importing_the_plugin_imports_neither_openai_nor_httpx2(tmp_path: Path) -> None:
    code = ("import json, sys, toolwire.plugins.completions, toolwire; "
            "toolwire.PluginManager(entry_points=False).backends(); "
            "print(json.dumps([m for m in ('openai', 'httpx2') if m in sys.modules]))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          cwd=tmp_path, timeout=60)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == []
