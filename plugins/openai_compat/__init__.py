"""Built-in backend plugin ``openai_compat``: remote models with native tool calling.

Talks to any OpenAI-compatible chat-completions server (OpenAI, Ollama, vLLM,
Gemini, Anthropic, llama.cpp's llama-server, or a custom URL) through the
``openai`` SDK, sending tools as ``tools`` and reading calls from the streamed
``tool_calls`` deltas::

    import toolwire
    from toolwire.plugins.openai_compat import OpenAICompatBackend

    backend = OpenAICompatBackend("ollama", model="qwen3:8b")
    chat = toolwire.Chat(backend, tools=[...])

or through the plugin manager:
``toolwire.default_plugin_manager().backend("openai_compat").create(provider=..., model=...)``.

Importing this plugin does not import ``openai``; the first client does.
See ``docs/remote.md`` for the presets, the key-isolation rule and the error kinds.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import toolwire
from toolwire.plugin_api import BackendSpec

from .assembler import ToolCallAssembler, parse_arguments
from .backend import DEFAULT_TIMEOUT, OpenAICompatBackend, TurnTranslator
from .presets import PRESETS, preset, resolve_connection

__all__ = [
    "BACKEND_NAME",
    "DEFAULT_TIMEOUT",
    "OPTIONS",
    "PRESETS",
    "OpenAICompatBackend",
    "ToolCallAssembler",
    "TurnTranslator",
    "create",
    "parse_arguments",
    "preset",
    "register_backends",
    "resolve_connection",
]

BACKEND_NAME = "openai_compat"

OPTIONS: tuple[str, ...] = (
    "provider", "model", "base_url", "api_key", "timeout", "max_retries", "max_retry_wait",
    "retry_backoff", "extra_body", "client", "async_client",
)
"""What :func:`create` accepts (shown by ``toolwire plugins``)."""


def create(**options: Any) -> OpenAICompatBackend:
    """Make an :class:`OpenAICompatBackend` (``provider`` defaults to ``openai``).

    :raises TypeError: an option this backend does not know.
    :raises toolwire.BackendError: see :class:`OpenAICompatBackend`.
    """
    unknown = sorted(set(options) - set(OPTIONS))
    if unknown:
        raise TypeError(f"openai_compat does not take {', '.join(unknown)}; "
                        f"options: {', '.join(OPTIONS)}")
    return OpenAICompatBackend(**options)


@toolwire.hookimpl
def register_backends(register: Callable[[BackendSpec], None]) -> None:
    """Register the ``openai_compat`` backend."""
    register(BackendSpec(
        name=BACKEND_NAME, create=create, options=OPTIONS,
        description="OpenAI-compatible servers (OpenAI, Ollama, vLLM, Gemini, Anthropic, "
                    "llama-server, custom) with native tool calling"))
