"""The chat templates toolwire prompts a model with when its own cannot serve.

Both are ChatML, with the tools offered as JSON in a system turn and tool results in
``<tool_response>`` tags of a user turn; they differ in how a call is written:

* :data:`DEFAULT_CHAT_TEMPLATE`, for a model file without ``tokenizer.chat_template``:
  calls in the Qwen XML markup, read by the built-in ``qwen_xml`` parser.
* :data:`JSON_TOOLS_TEMPLATE`, for tool turns of a model whose own template cannot carry
  tool calls: each call one JSON object inside ``<tool_call>`` tags (the Hermes / Qwen2.5
  markup, read by ``hermes_json``). Small instruction-tuned models whose template knows
  no tools were mostly trained on this JSON form: with the Qwen XML markup SmolLM2-135M
  kept writing prose inside a string value until the token limit, while it closes a
  JSON string.

A templated backend says once which one it used (see ``docs/local.md``).
"""

from __future__ import annotations

from typing import Final

__all__ = ["DEFAULT_CHAT_TEMPLATE", "JSON_TOOLS_TEMPLATE"]


def _chatml_with_tools(offer: str, call: str) -> str:
    """ChatML whose system turn says ``offer`` after the tools and writes each call as ``call``.

    ``offer`` and ``call`` are Jinja source: ``offer`` the quoted text after the tool
    list, ``call`` the statements that write ``call`` (one of ``message.tool_calls``).
    """
    return (
        "{%- if tools %}"
        "{{- '<|im_start|>system\\n' }}"
        "{%- if messages and messages[0].role == 'system' %}"
        "{{- messages[0].content + '\\n\\n' }}"
        "{%- endif %}"
        + offer +
        "{%- elif messages and messages[0].role == 'system' %}"
        "{{- '<|im_start|>system\\n' + messages[0].content + '<|im_end|>\\n' }}"
        "{%- endif %}"
        "{%- for message in messages %}"
        "{%- if message.role == 'assistant' %}"
        "{{- '<|im_start|>assistant\\n' + (message.content or '') }}"
        "{%- for call in message.tool_calls or [] %}"
        "{%- if message.content or not loop.first %}{{- '\\n' }}{%- endif %}"
        + call +
        "{%- endfor %}"
        "{{- '<|im_end|>\\n' }}"
        "{%- elif message.role == 'tool' %}"
        "{%- if loop.first or loop.previtem.role != 'tool' %}{{- '<|im_start|>user' }}"
        "{%- endif %}"
        "{{- '\\n<tool_response>\\n' + message.content + '\\n</tool_response>' }}"
        "{%- if loop.last or loop.nextitem.role != 'tool' %}{{- '<|im_end|>\\n' }}{%- endif %}"
        "{%- elif message.role != 'system' or not loop.first %}"
        "{{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>\\n' }}"
        "{%- endif %}"
        "{%- endfor %}"
        "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
    )


DEFAULT_CHAT_TEMPLATE: Final = _chatml_with_tools(
    "{{- '# Tools\\n\\nYou may call these functions:\\n<tools>' }}"
    "{%- for tool in tools %}{{- '\\n' + (tool | tojson) }}{%- endfor %}"
    "{{- '\\n</tools>\\n\\nTo call a function, reply with exactly:\\n<tool_call>\\n"
    "<function=NAME>\\n<parameter=PARAMETER>\\nVALUE\\n</parameter>\\n</function>\\n"
    "</tool_call><|im_end|>\\n' }}",
    "{{- '<tool_call>\\n<function=' + call.function.name + '>\\n' }}"
    "{%- for name, value in call.function.arguments | items %}"
    "{{- '<parameter=' + name + '>\\n' }}"
    "{{- value if value is string else value | tojson }}"
    "{{- '\\n</parameter>\\n' }}"
    "{%- endfor %}"
    "{{- '</function>\\n</tool_call>' }}",
)
"""The template used when a GGUF file has none: ChatML, with tools offered and
called in the Qwen XML markup (so the built-in ``qwen_xml`` parser reads the
calls). See ``docs/local.md``."""

JSON_TOOLS_TEMPLATE: Final = _chatml_with_tools(
    "{{- '# Tools\\n\\nThese functions can be called:\\n<tools>' }}"
    "{%- for tool in tools %}{{- '\\n' + (tool | tojson) }}{%- endfor %}"
    "{{- '\\n</tools>\\n\\nTo call one, write a JSON object with its name and arguments "
    "inside <tool_call></tool_call> tags:\\n<tool_call>\\n"
    "{\"name\": \"NAME\", \"arguments\": {\"PARAMETER\": VALUE}}\\n</tool_call><|im_end|>\\n' }}",
    "{{- '<tool_call>\\n' + ({'name': call.function.name, 'arguments': "
    "call.function.arguments} | tojson) + '\\n</tool_call>' }}",
)
"""ChatML with tools, calls in the Hermes JSON markup (read by ``hermes_json``), for the
tool turns of a model whose own template cannot carry tool calls."""
