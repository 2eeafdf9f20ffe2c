"""Earlier tool calls reach the template in the form it renders (``history_shape``)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support.paths import MISSING_TEMPLATES
from tests.support.templates import SHARED_TEMPLATES
from toolwire import Message, ToolCall
from toolwire.templates.chat_template import get_chat_template
from toolwire.templates.history_shape import HistoryShape, apply_history_shape, history_shape
from toolwire.testing.tiny_gguf import CHATML_TEMPLATE, write_tiny_gguf
from toolwire.vocabulary.history import to_template_messages

_TURNS = """{%- for m in messages -%}<|{{ m.role }}|>{{ m.content if m.content is string else '' }}
{%- if m.tool_calls %}{{ CALLS }}{% endif %}<|end|>{% endfor -%}
{%- if add_generation_prompt %}<|assistant|>{% endif %}"""

MAPPING_ONLY = _TURNS.replace("{{ CALLS }}", "{% for c in m.tool_calls %}<call>"
                              "{{ c.function.name }}"
                              "{% for k, v in c.function.arguments.items() %} {{ k }}={{ v }}"
                              "{% endfor %}</call>{% endfor %}")
STRING_ONLY = _TURNS.replace("{{ CALLS }}", "{% for c in m.tool_calls %}<call>"
                             "{{ c.function.name + ' ' + c.function.arguments }}</call>"
                             "{% endfor %}")
NONE_ONLY = _TURNS.replace(
    "{%- if m.tool_calls %}{{ CALLS }}{% endif %}",
    "{%- if m.content is none %}{% for c in m.tool_calls %}<call>{{ c.function.name }} "
    "{{ c.function.arguments | tojson }}</call>{% endfor %}{% endif %}")
NO_CALLS = _TURNS.replace("{{ CALLS }}", "")

CALL = ToolCall(id="call_0", name="lookup", arguments={"query": "otters", "n": 2})
HISTORY = (Message.user("find otters"), Message.assistant("", tool_calls=(CALL,)),
           Message.tool_result(CALL, "12 otters"), Message.assistant("There are 12."),
           Message.user("thanks"))


@pytest.mark.parametrize(("source", "shape"), [
    (MAPPING_ONLY, HistoryShape()),
    (STRING_ONLY, HistoryShape(arguments_as_json=True)),
    (NONE_ONLY, HistoryShape(empty_content_none=True)),
    (NO_CALLS, HistoryShape()),  # renders no call in any shape: the default stands
])
def test_the_first_shape_that_shows_the_call_is_chosen(source: str, shape: HistoryShape) -> None:
    assert history_shape(get_chat_template(source)) == shape


@pytest.mark.parametrize("source", [MAPPING_ONLY, STRING_ONLY, NONE_ONLY])
def test_in_its_shape_every_template_shows_the_earlier_call(source: str) -> None:
    template = get_chat_template(source)
    records = apply_history_shape(to_template_messages(HISTORY), history_shape(template))
    text = template.render(records, add_generation_prompt=True)
    assert "<call>lookup" in text and "otters" in text and "12 otters" in text


def test_applying_a_shape_keeps_other_messages_and_the_arguments() -> None:
    records = to_template_messages(HISTORY)
    shaped = apply_history_shape(records, HistoryShape(True, True))
    assert shaped[0] == records[0] and shaped[2:] == records[2:]
    assert shaped[1]["content"] is None
    assert json.loads(shaped[1]["tool_calls"][0]["function"]["arguments"]) == CALL.arguments
    assert records[1]["tool_calls"][0]["function"]["arguments"] == CALL.arguments  # not mutated
    assert apply_history_shape(shaped, HistoryShape(True, True)) == shaped  # strings stay strings


@pytest.mark.parametrize(("name", "shape"), [
    ("meetkai-functionary-medium-v3.2.jinja", HistoryShape(arguments_as_json=True)),
    ("deepseek-ai-DeepSeek-R1-Distill-Llama-8B.jinja", HistoryShape(True, True)),
    ("Qwen-Qwen3.5-4B.jinja", HistoryShape()),
])
def test_real_templates_that_need_the_wire_form_get_it(name: str, shape: HistoryShape) -> None:
    path = SHARED_TEMPLATES / name
    if not path.exists():
        pytest.skip(MISSING_TEMPLATES)
    template = get_chat_template(path.read_text(encoding="utf-8"))
    assert history_shape(template) == shape
    records = apply_history_shape(to_template_messages(HISTORY), shape)
    assert "otters" in template.render(records, tools=None, add_generation_prompt=True)


def test_the_local_backend_shows_the_model_its_earlier_calls(tmp_path: Path) -> None:
    from tests.backends.test_llama_cpp_unit import StandInLlama, turn
    from toolwire import ModelRequest
    from toolwire.plugins.llama_cpp.backend import LlamaCppBackend
    from toolwire.testing.scripted import isolated_plugin_manager

    path = write_tiny_gguf(tmp_path / "m.gguf", CHATML_TEMPLATE)
    fake = StandInLlama(["ok"], n_ctx=4096, add_bos=False)
    backend = LlamaCppBackend(path, model=fake, progress=False, chat_template=STRING_ONLY,
                              plugins=isolated_plugin_manager())
    turn(backend, ModelRequest(HISTORY))
    assert '<call>lookup {"query": "otters", "n": 2}</call>' in fake.prompts[0]
