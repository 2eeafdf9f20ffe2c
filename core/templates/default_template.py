"""The chat template toolwire prompts a model with when its file has none.

ChatML, with the tools offered in a system turn and called in the Qwen XML
markup, so the built-in ``qwen_xml`` parser reads the calls. A templated backend
uses it for a model file without ``tokenizer.chat_template`` and says so once
(see ``docs/local.md``).
"""

from __future__ import annotations

from typing import Final

__all__ = ["DEFAULT_CHAT_TEMPLATE"]

DEFAULT_CHAT_TEMPLATE: Final = (
    "{%- if tools %}"
    "{{- '<|im_start|>system\\n' }}"
    "{%- if messages and messages[0].role == 'system' %}"
    "{{- messages[0].content + '\\n\\n' }}"
    "{%- endif %}"
    "{{- '# Tools\\n\\nYou may call these functions:\\n<tools>' }}"
    "{%- for tool in tools %}{{- '\\n' + (tool | tojson) }}{%- endfor %}"
    "{{- '\\n</tools>\\n\\nTo call a function, reply with exactly:\\n<tool_call>\\n"
    "<function=NAME>\\n<parameter=PARAMETER>\\nVALUE\\n</parameter>\\n</function>\\n"
    "</tool_call><|im_end|>\\n' }}"
    "{%- elif messages and messages[0].role == 'system' %}"
    "{{- '<|im_start|>system\\n' + messages[0].content + '<|im_end|>\\n' }}"
    "{%- endif %}"
    "{%- for message in messages %}"
    "{%- if message.role == 'assistant' %}"
    "{{- '<|im_start|>assistant\\n' + (message.content or '') }}"
    "{%- for call in message.tool_calls or [] %}"
    "{%- if message.content or not loop.first %}{{- '\\n' }}{%- endif %}"
    "{{- '<tool_call>\\n<function=' + call.function.name + '>\\n' }}"
    "{%- for name, value in call.function.arguments | items %}"
    "{{- '<parameter=' + name + '>\\n' }}"
    "{{- value if value is string else value | tojson }}"
    "{{- '\\n</parameter>\\n' }}"
    "{%- endfor %}"
    "{{- '</function>\\n</tool_call>' }}"
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
"""The template used when a GGUF file has none: ChatML, with tools offered and
called in the Qwen XML markup (so the built-in ``qwen_xml`` parser reads the
calls). See ``docs/local.md``."""
