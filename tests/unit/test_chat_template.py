"""Tests of toolwire.templates.chat_template: real templates, the sandbox, errors, the cache."""

from __future__ import annotations

import hashlib
import json
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from tests.support.paths import MISSING_TEMPLATES, REPO, SHARED_TEMPLATES
from toolwire.errors import TemplateError, TemplateResourceError, TemplateSecurityError
from toolwire.limits import RenderLimits
from toolwire.templates.chat_template import ChatTemplate, get_chat_template

TEMPLATES_DIR = SHARED_TEMPLATES
DOCS_FILE = REPO / "docs" / "templates.md"
NO_TEMPLATES = MISSING_TEMPLATES

# Templates that cannot render the standard tool conversation below. Every reason
# is repeated verbatim in docs/templates.md (checked by a test).
KNOWN_FAILURES: dict[str, str] = {
    "google-gemma-2-2b-it": (
        "no system or tool role: raises 'System role not supported' or "
        "'Conversation roles must alternate'"
    ),
    "meetkai-functionary-medium-v3.2": (
        "needs JSON-string arguments: a mapping raises TypeError (str + dict); "
        "string arguments render"
    ),
}

# Templates that render the conversation but not the assistant's call.
NO_CALL_RENDERED: dict[str, str] = {
    "HuggingFaceTB-SmolLM3-3B": "no tool handling: tools and tool_calls are dropped",
    "LFM2-8B-A1B": "lists the tools but drops assistant tool_calls",
    "LFM2.5-Instruct": "lists the tools but drops assistant tool_calls",
    "ibm-granite-granite-3.3-2B-Instruct": "lists the tools but drops assistant tool_calls",
    "microsoft-Phi-3.5-mini-instruct": "no tool support: tool_calls and tool messages are dropped",
    "llama-cpp-rwkv-world": "no tool support: tool_calls and tool messages are dropped",
    "deepseek-ai-DeepSeek-R1-Distill-Llama-8B": (
        "drops the call unless content is None, and then needs JSON-string arguments"
    ),
}

# Templates that render only in the lenient environment (lenient=None falls back).
NEEDS_LENIENT: dict[str, str] = {
    "Kimi-K2-Instruct": "list.append and list.pop",
    "Kimi-K2-Thinking": "list.append and list.pop",
    "fireworks-ai-llama-3-firefunction-v2": "the functions and datetime variables",
    "llama-cpp-deepseek-r1": "tojson of a generator (map(...) | tojson)",
}

TOOLS: list[dict[str, Any]] = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Current weather for a place.",
            "parameters": {
                "type": "object",
                "properties": {
                    "city": {"type": "string", "description": "City name"},
                    "days": {"type": "integer", "description": "Forecast days"},
                },
                "required": ["city"],
            },
        },
    }
]


def conversation(arguments: Any, *, content: str | None = "") -> list[dict[str, Any]]:
    """System, user, one assistant call (9-character id for Mistral), its result."""
    return [
        {"role": "system", "content": "You are a helpful assistant."},
        {"role": "user", "content": "What is the weather in the capital of France?"},
        {
            "role": "assistant",
            "content": content,
            "tool_calls": [
                {
                    "id": "call00001",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": arguments},
                }
            ],
        },
        {
            "role": "tool",
            "tool_call_id": "call00001",
            "name": "get_weather",
            "content": "sunny, 21 C",
        },
    ]


MAPPING_ARGS = {"city": "Paris", "days": 3}
STRING_ARGS = json.dumps(MAPPING_ARGS)


def template_path(stem: str) -> Path:
    if not TEMPLATES_DIR.is_dir():
        pytest.skip(NO_TEMPLATES)
    return TEMPLATES_DIR / f"{stem}.jinja"


def load(stem: str, **options: Any) -> ChatTemplate:
    return ChatTemplate(template_path(stem).read_text(encoding="utf-8"), name=stem, **options)


def template_params() -> list[Any]:
    if not TEMPLATES_DIR.is_dir():
        return [pytest.param(None, marks=pytest.mark.skip(reason=NO_TEMPLATES), id="absent")]
    return [pytest.param(p.stem, id=p.stem) for p in sorted(TEMPLATES_DIR.glob("*.jinja"))]


# ---------------------------------------------------------------------------
# Every real template.


@pytest.mark.parametrize("stem", template_params())
def test_real_template_renders_tool_conversation(stem: str) -> None:
    template = load(stem)
    options: dict[str, Any] = {
        "tools": TOOLS,
        "add_generation_prompt": True,
        "bos_token": "<s>",
        "eos_token": "</s>",
    }
    if stem in KNOWN_FAILURES:
        with pytest.raises(TemplateError) as info:
            template.render(conversation(MAPPING_ARGS), **options)
        assert not isinstance(info.value, TemplateSecurityError)
        return
    out = template.render(conversation(MAPPING_ARGS), **options)
    assert out
    if stem not in NO_CALL_RENDERED:
        assert "get_weather" in out
        assert "Paris" in out  # the call's argument, not only the tool declaration
        assert "sunny, 21 C" in out
    assert template.uses_lenient is (stem in NEEDS_LENIENT)


@pytest.mark.parametrize("stem", sorted({**KNOWN_FAILURES, **NO_CALL_RENDERED, **NEEDS_LENIENT}))
def test_listed_templates_exist(stem: str) -> None:
    assert template_path(stem).is_file(), f"stale entry {stem!r}"


@pytest.mark.parametrize(("stem", "reason"), sorted({**KNOWN_FAILURES, **NO_CALL_RENDERED}.items()))
def test_limitations_are_documented(stem: str, reason: str) -> None:
    docs = DOCS_FILE.read_text(encoding="utf-8")
    assert stem in docs
    assert reason in docs


def test_functionary_v32_renders_string_arguments() -> None:
    template = load("meetkai-functionary-medium-v3.2")
    out = template.render(conversation(STRING_ARGS), tools=TOOLS)
    assert '>>>get_weather\n{"city": "Paris", "days": 3}' in out


def test_r1_distill_llama_renders_call_with_none_content_and_string_arguments() -> None:
    template = load("deepseek-ai-DeepSeek-R1-Distill-Llama-8B")
    out = template.render(conversation(STRING_ARGS, content=None), tools=TOOLS)
    assert "get_weather" in out and "Paris" in out


def test_gemma2_message_is_the_templates_own() -> None:
    template = load("google-gemma-2-2b-it")
    with pytest.raises(TemplateError) as info:
        template.render(conversation(MAPPING_ARGS)[1:], tools=TOOLS)
    assert str(info.value) == "Conversation roles must alternate user/assistant/user/assistant/..."


def test_deepseek_v32_string_arguments_fall_back_to_from_json() -> None:
    template = load("deepseek-ai-DeepSeek-V3.2")
    from_mapping = template.render(conversation(MAPPING_ARGS), tools=TOOLS)
    assert not template.uses_lenient
    from_string = template.render(conversation(STRING_ARGS), tools=TOOLS)
    assert template.uses_lenient
    assert from_string == from_mapping


def test_deepseek_v32_strict_names_the_missing_filter() -> None:
    template = load("deepseek-ai-DeepSeek-V3.2", lenient=False)
    with pytest.raises(TemplateError, match="from_json"):
        template.render(conversation(STRING_ARGS), tools=TOOLS)


def test_kimi_k2_strict_is_a_sandbox_violation() -> None:
    template = load("Kimi-K2-Instruct", lenient=False)
    with pytest.raises(TemplateSecurityError, match="append"):
        template.render(conversation(MAPPING_ARGS), tools=TOOLS)


def test_qwen35_renders_xml_call_and_extra_variables_pass_through() -> None:
    template = load("Qwen3.5-4B")
    thinking = template.render(conversation(MAPPING_ARGS), tools=TOOLS)
    plain = template.render(conversation(MAPPING_ARGS), tools=TOOLS, enable_thinking=False)
    assert "<function=get_weather>\n<parameter=city>\nParis\n</parameter>" in thinking
    assert plain.endswith("<think>\n\n</think>\n\n")
    assert not thinking.endswith("</think>\n\n")


# ---------------------------------------------------------------------------
# The sandbox.

ESCAPES = [
    "{{ ''.__class__.__mro__[1].__subclasses__() }}",
    "{{ ''['__class__']['__mro__'] }}",
    "{{ cycler.__init__.__globals__.os.popen('touch MARKER').read() }}",
    "{{ joiner.__init__.__globals__['os'].system('touch MARKER') }}",
    "{{ self.__init__.__globals__ }}",
    "{{ self._TemplateReference__context }}",
    "{{ lipsum.__globals__['os'].system('touch MARKER') }}",
    "{{ namespace.__init__.__globals__ }}",
    "{{ raise_exception.__globals__ }}",
    "{{ strftime_now.__globals__['datetime'] }}",
    "{{ [].append.__self__ }}",
    "{% set x = [] %}{{ x.append.__self__.__class__ }}",
    "{{ messages.__class__.__base__.__subclasses__() }}",
    "{{ (messages | first).items.__self__ }}",
    "{{ '{0.__class__.__mro__}'.format('') }}",
    "{{ range.__globals__ }}",
]


@pytest.mark.parametrize("lenient", [None, False, True], ids=["auto", "strict", "lenient"])
@pytest.mark.parametrize("source", ESCAPES)
def test_sandbox_escape_is_refused(source: str, lenient: bool | None, tmp_path: Path) -> None:
    marker = tmp_path / "escaped"
    template = ChatTemplate(source.replace("MARKER", str(marker)), lenient=lenient)
    with pytest.raises(TemplateSecurityError):
        template.render([{"role": "user", "content": "hi"}])
    assert not marker.exists()


@pytest.mark.parametrize(
    "source", ["{% include '/etc/passwd' %}", "{% import 'os' as os %}{{ os }}"]
)
def test_no_file_access(source: str) -> None:
    with pytest.raises(TemplateError, match="no loader"):
        ChatTemplate(source).render([])


def test_lenient_mutation_does_not_touch_caller_data() -> None:
    messages = [{"role": "user", "content": "hi", "tags": ["a"]}]
    source = (
        "{% set _ = messages.append({'role': 'x'}) %}{% set _ = messages[0].tags.pop() %}"
        "{% set _ = messages[0].update({'role': 'evil'}) %}{{ messages | length }}"
    )
    out = ChatTemplate(source).render(messages)
    assert out == "2"
    assert messages == [{"role": "user", "content": "hi", "tags": ["a"]}]


# ---------------------------------------------------------------------------
# Strict, lenient and the automatic fallback.

APPEND = "{% set ns = namespace(x=[]) %}{% set _ = ns.x.append(1) %}{{ ns.x }}"


def test_strict_refuses_mutation() -> None:
    with pytest.raises(TemplateSecurityError, match="append"):
        ChatTemplate(APPEND, lenient=False).render([])


def test_lenient_allows_mutation() -> None:
    template = ChatTemplate(APPEND, lenient=True)
    assert template.render([]) == "[1]"
    assert template.uses_lenient


def test_auto_falls_back_once_and_stays_lenient() -> None:
    template = ChatTemplate(APPEND)
    assert not template.uses_lenient
    assert template.render([]) == "[1]"
    assert template.uses_lenient
    assert template.render([]) == "[1]"


def test_auto_stays_strict_for_strict_templates() -> None:
    template = ChatTemplate("{{ messages | length }}")
    assert template.render([{"role": "user", "content": "a"}]) == "1"
    assert not template.uses_lenient


@pytest.mark.parametrize("name", ["from_json", "fromjson"])
def test_lenient_from_json(name: str) -> None:
    source = "{% set d = '{\"k\": [1, 2]}' | " + name + " %}{{ d.k[1] }}"
    assert ChatTemplate(source, lenient=True).render([]) == "2"
    assert ChatTemplate(source).render([]) == "2"


def test_lenient_tojson_accepts_generators() -> None:
    source = "{{ messages | map(attribute='role') | tojson }}"
    messages = [{"role": "user"}, {"role": "assistant"}]
    with pytest.raises(TemplateError, match="generator"):
        ChatTemplate(source, lenient=False).render(messages)
    assert ChatTemplate(source).render(messages) == '["user", "assistant"]'


def test_lenient_supplies_functions_and_datetime() -> None:
    source = "{{ 'Today is ' + datetime }}|{{ functions | length > 0 }}|{{ functions }}"
    out = ChatTemplate(source).render([], tools=TOOLS)
    today, nonempty, functions = out.split("|", 2)
    assert today.startswith("Today is " + datetime.now().strftime("%Y-"))
    assert nonempty == "True"
    assert json.loads(functions) == [TOOLS[0]["function"]]


def test_caller_variables_override_lenient_defaults() -> None:
    source = "{{ 'x' + functions + datetime }}"
    assert ChatTemplate(source).render([], functions="[]", datetime="D") == "x[]D"


def test_strict_leaves_functions_undefined() -> None:
    source = "{{ functions is defined }}"
    assert ChatTemplate(source, lenient=False).render([]) == "False"


def test_auto_does_not_fall_back_on_other_errors() -> None:
    template = ChatTemplate("{{ raise_exception('no') }}")
    with pytest.raises(TemplateError):
        template.render([])
    assert not template.uses_lenient


# ---------------------------------------------------------------------------
# HF conventions.


def test_raise_exception_message_is_exact() -> None:
    source = (
        "{% if messages | length == 0 %}"
        "{{ raise_exception('Need at least 1 message!') }}{% endif %}"
    )
    with pytest.raises(TemplateError) as info:
        ChatTemplate(source).render([])
    assert str(info.value) == "Need at least 1 message!"
    assert not isinstance(info.value, TemplateSecurityError)


def test_syntax_error_names_template_and_line() -> None:
    source = "line one\n{% if x %}\n{% for a in %}\n{% endif %}"
    with pytest.raises(TemplateError) as info:
        ChatTemplate(source, name="broken")
    assert "'broken'" in str(info.value)
    assert "line 3" in str(info.value)


def test_runtime_error_names_hash_and_line() -> None:
    source = "ok\n{{ messages[0].content.items() }}\n"
    template = ChatTemplate(source)
    with pytest.raises(TemplateError) as info:
        template.render([{"role": "user", "content": "text"}])
    message = str(info.value)
    assert template.source_hash[:12] in message
    assert "line 2" in message
    assert "UndefinedError" in message  # the cause, named: it was raised in the child


@pytest.mark.parametrize(
    "source",
    [
        "{{ 1 / 0 }}",
        "{{ int }}{{ messages[0]['content'] + 1 }}",
        "{% macro f() %}{{ f() }}{% endmacro %}{{ f() }}",
        "{{ range(10 ** 7) | length }}",
        "{{ undefined_thing.attr }}",
        "{{ undefined_thing | tojson }}",
        "{{ 'x' | from_json }}",
    ],
)
def test_no_foreign_exception_escapes(source: str) -> None:
    with pytest.raises(TemplateError):
        ChatTemplate(source, lenient=True).render([{"role": "user", "content": "c"}])


def test_output_is_bounded() -> None:
    source = "{% for i in range(100) %}0123456789{% endfor %}"
    assert len(ChatTemplate(source, limits=RenderLimits(max_output_chars=1000)).render([])) == 1000
    with pytest.raises(TemplateError, match="exceeds 999 characters"):
        ChatTemplate(source, limits=RenderLimits(max_output_chars=999)).render([])


@pytest.mark.parametrize(
    "source", ["{{ 'a' * 10 ** 10 }}", "{{ [1] * 10 ** 9 }}", "{{ 7 ** 10000000 }}"]
)
def test_memory_bombs_are_refused(source: str) -> None:
    template = ChatTemplate(source, name="bomb.jinja", limits=RenderLimits(max_seconds=2))
    with pytest.raises(TemplateResourceError) as info:
        template.render([])
    assert info.value.bound in ("memory", "time") and info.value.template == "'bomb.jinja'"
    assert f"passed its {info.value.bound} bound" in str(info.value)
    assert "'bomb.jinja'" in str(info.value)


def test_small_repetition_still_works() -> None:
    assert ChatTemplate("{{ '-' * 3 }}{{ 2 ** 10 }}").render([]) == "---1024"


def test_tojson_keeps_non_ascii_and_takes_arguments() -> None:
    data = {"b": "café 日本", "a": [1, 2]}
    source = (
        "{{ d | tojson }}|{{ d | tojson(indent=2) }}|{{ d | tojson(sort_keys=true) }}"
        "|{{ d | tojson(separators=(',', ':')) }}|{{ d | tojson(ensure_ascii=true) }}"
    )
    plain, indented, keys_sorted, compact, ascii_only = (
        ChatTemplate(source).render([], d=data).split("|")
    )
    assert plain == '{"b": "café 日本", "a": [1, 2]}'
    assert indented == json.dumps(data, ensure_ascii=False, indent=2)
    assert keys_sorted == '{"a": [1, 2], "b": "café 日本"}'
    assert compact == '{"b":"café 日本","a":[1,2]}'
    assert ascii_only == json.dumps(data)


def test_tojson_does_not_html_escape() -> None:
    assert ChatTemplate("{{ '<b>&' | tojson }}").render([]) == '"<b>&"'


def test_strftime_now() -> None:
    before = datetime.now().strftime("%Y-%m-%d")
    out = ChatTemplate("{{ strftime_now('%Y-%m-%d') }}").render([])
    assert out in {before, datetime.now().strftime("%Y-%m-%d")}


def test_loop_controls() -> None:
    source = (
        "{% for i in range(6) %}{% if i == 1 %}{% continue %}{% endif %}"
        "{% if i == 4 %}{% break %}{% endif %}{{ i }}{% endfor %}"
    )
    assert ChatTemplate(source).render([]) == "023"


def test_generation_tag_renders_its_body() -> None:
    source = "a{% generation %}{{ messages[0].content }}{% endgeneration %}z"
    assert ChatTemplate(source).render([{"role": "user", "content": "b"}]) == "abz"


def test_trim_and_lstrip_blocks() -> None:
    source = "x\n    {% if true %}\ny\n    {% endif %}\nz"
    assert ChatTemplate(source).render([]) == "x\ny\nz"


def test_render_variables() -> None:
    source = "{{ bos_token }}{{ tools is none }}{{ add_generation_prompt }}{{ eos_token }}"
    template = ChatTemplate(source)
    assert template.render([]) == "TrueTrue"
    assert template.render([], bos_token="<s>", eos_token="</s>") == "<s>TrueTrue</s>"
    assert template.render([], tools=TOOLS, add_generation_prompt=False) == "FalseFalse"


# ---------------------------------------------------------------------------
# Identity and the cache.


def test_source_hash() -> None:
    source = "{{ 'é' }}"
    expected = hashlib.sha256(source.encode("utf-8")).hexdigest()
    assert ChatTemplate(source).source_hash == expected


def test_cache_returns_same_object() -> None:
    source = "{# cache test #}{{ messages | length }}"
    first = get_chat_template(source)
    assert get_chat_template(source) is first
    assert get_chat_template(source, lenient=True) is not first
    assert get_chat_template(source, lenient=True).lenient is True


def test_cache_is_bounded() -> None:
    first = get_chat_template("{# evict me #}")
    for i in range(64):
        get_chat_template(f"{{# filler {i} #}}")
    assert get_chat_template("{# evict me #}") is not first


def test_cache_does_not_keep_broken_templates() -> None:
    for _ in range(2):
        with pytest.raises(TemplateError):
            get_chat_template("{% if %}")
