"""What offering tools costs: the tokens the tool block adds to every prompt.

Local models pay for the tool block on every turn, out of a context window that
is often small. :func:`tool_block_cost` renders one short conversation with the
model's tools template, with and without the tools, and counts both prompts
with the model's own tokenizer.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any

import attrs

from toolwire.plugin_api import Message, Tool, get_chat_template

from .backend import LlamaCppBackend

__all__ = ["DEFAULT_PROBE", "tool_block_cost"]

DEFAULT_PROBE: tuple[Message, ...] = (
    Message.system("You are a helpful assistant."),
    Message.user("What is the weather in Paris?"),
)
"""The conversation rendered by :func:`tool_block_cost` unless one is given."""


def _schema(tool: Tool | Mapping[str, Any]) -> dict[str, Any]:
    if isinstance(tool, Tool):
        return tool.openai_schema()
    if tool.get("type") == "function":
        return dict(tool)
    return {"type": "function", "function": dict(tool)}


def tool_block_cost(model_path_or_backend: str | os.PathLike[str] | LlamaCppBackend,
                    tools: Sequence[Tool | Mapping[str, Any]], *,
                    messages: Sequence[Message] = DEFAULT_PROBE,
                    chat_template: str | None = None) -> dict[str, Any]:
    """Count the prompt tokens a tool set adds for a model and template.

    :param model_path_or_backend: a GGUF path (only its vocabulary is loaded) or
        a loaded :class:`LlamaCppBackend` (its tokenizer and options are used).
    :param tools: :class:`toolwire.Tool` objects or OpenAI-style schemas.
    :param messages: the conversation to render (a system prompt and a question).
    :param chat_template: a template source to use instead of the model's.
    :returns: ``{"model", "template", "tools", "without_tools", "with_tools",
        "tool_block", "per_tool", "tool_block_chars"}``: token counts of the
        prompt without and with the tools, their difference, that difference per
        tool, and the difference in characters.
    :raises toolwire.TemplateError: the template raised.
    """
    if isinstance(model_path_or_backend, LlamaCppBackend):
        backend = model_path_or_backend
    else:
        backend = _vocab_only_backend(model_path_or_backend, chat_template)
    schemas = [_schema(t) for t in tools]
    choice = backend.template_choice(tools=True)
    if chat_template is not None and choice.source != chat_template:
        choice = attrs.evolve(choice, key="override", source=chat_template,
                              template=get_chat_template(chat_template))
    plain = backend.render(messages, None, choice)
    full = backend.render(messages, schemas, choice)
    without = len(backend.tokenize(plain))
    with_tools = len(backend.tokenize(full))
    block = with_tools - without
    return {
        "model": backend.metadata.name or backend.model_path.name,
        "template": choice.key,
        "tools": len(schemas),
        "without_tools": without,
        "with_tools": with_tools,
        "tool_block": block,
        "per_tool": round(block / len(schemas), 1) if schemas else 0.0,
        "tool_block_chars": len(full) - len(plain),
    }


def _vocab_only_backend(path: str | os.PathLike[str],
                        chat_template: str | None) -> LlamaCppBackend:
    import llama_cpp

    from .backend import install_log_filter

    install_log_filter(False)
    model = llama_cpp.Llama(os.fspath(path), vocab_only=True, verbose=False)
    # Only the tokenizer is used: the context fit does not matter here.
    return LlamaCppBackend(path, model=model, chat_template=chat_template, progress=False,
                           n_ctx=1 << 30, max_tokens=1)
