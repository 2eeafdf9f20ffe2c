"""The template of tool turns for a model whose own template cannot carry tool calls.

ChatML (``<|im_start|>role ... <|im_end|>``), the tools listed as JSON in a system turn,
and each call one JSON object inside ``<tool_call>`` tags, results inside
``<tool_response>`` tags in a user turn: the Hermes / Qwen2.5 markup, which the built-in
``hermes_json`` parser reads. Small instruction-tuned models whose template knows no
tools were mostly trained on this JSON form; with the Qwen XML markup of
:data:`~toolwire.plugin_api.DEFAULT_CHAT_TEMPLATE` SmolLM2-135M kept writing prose inside
a string value until the token limit, while it closes a JSON string (see
``docs/local.md``, "A template without tool calls").
"""

from __future__ import annotations

from typing import Final

__all__ = ["JSON_TOOLS_TEMPLATE"]

JSON_TOOLS_TEMPLATE: Final = (
    "{%- if tools %}"
    "{{- '<|im_start|>system\\n' }}"
    "{%- if messages and messages[0].role == 'system' %}"
    "{{- messages[0].content + '\\n\\n' }}"
    "{%- endif %}"
    "{{- '# Tools\\n\\nThese functions can be called:\\n<tools>' }}"
    "{%- for tool in tools %}{{- '\\n' + (tool | tojson) }}{%- endfor %}"
    "{{- '\\n</tools>\\n\\nTo call one, write a JSON object with its name and arguments "
    "inside <tool_call></tool_call> tags:\\n<tool_call>\\n"
    "{\"name\": \"NAME\", \"arguments\": {\"PARAMETER\": VALUE}}\\n</tool_call><|im_end|>\\n' }}"
    "{%- elif messages and messages[0].role == 'system' %}"
    "{{- '<|im_start|>system\\n' + messages[0].content + '<|im_end|>\\n' }}"
    "{%- endif %}"
    "{%- for message in messages %}"
    "{%- if message.role == 'assistant' %}"
    "{{- '<|im_start|>assistant\\n' + (message.content or '') }}"
    "{%- for call in message.tool_calls or [] %}"
    "{%- if message.content or not loop.first %}{{- '\\n' }}{%- endif %}"
    "{{- '<tool_call>\\n' + ({'name': call.function.name, 'arguments': "
    "call.function.arguments} | tojson) + '\\n</tool_call>' }}"
    "{%- endfor %}"
    "{{- '<|im_end|>\\n' }}"
    "{%- elif message.role == 'tool' %}"
    "{%- if loop.first or loop.previtem.role != 'tool' %}{{- '<|im_start|>user' }}{%- endif %}"
    "{{- '\\n<tool_response>\\n' + message.content + '\\n</tool_response>' }}"
    "{%- if loop.last or loop.nextitem.role != 'tool' %}{{- '<|im_end|>\\n' }}{%- endif %}"
    "{%- elif message.role != 'system' or not loop.first %}"
    "{{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>\\n' }}"
    "{%- endif %}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)
"""ChatML with tools, calls in the Hermes JSON markup (read by ``hermes_json``)."""
