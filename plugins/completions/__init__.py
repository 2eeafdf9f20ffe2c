"""Built-in backend plugin ``completions``: remote serving engines driven through
their raw text-completion endpoints, with toolwire's own templates and parsers.

vLLM, SGLang, llama.cpp's llama-server and llama-cpp-python's server each
parse tool calls in their own way, and those parsers lag and break. This
backend sends them a prompt toolwire rendered with the model's chat template
and reads the streamed text with the family's parser, exactly as the local
``llama_cpp`` backend does::

    from toolwire.plugins.completions import CompletionsBackend

    backend = CompletionsBackend("http://gpu-host:8000", model_file="tokenizer_config.json")
    chat = toolwire.Chat(backend, tools=[...])

or ``toolwire chat --provider completions --base-url URL [--template PATH |
--model-file PATH]``. See ``docs/engines.md``.

Importing this plugin imports neither ``openai`` nor ``httpx2``; the backend does.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import toolwire
from toolwire.plugin_api import BackendSpec

if TYPE_CHECKING:
    from .backend import CompletionsBackend

__all__ = ["BACKEND_NAME", "CompletionsBackend", "create", "register_backends"]

BACKEND_NAME = "completions"


def create(**options: Any) -> CompletionsBackend:
    """Build a :class:`CompletionsBackend`; ``options`` are its keyword arguments.

    :raises TypeError: ``base_url`` is missing or an option is unknown.
    """
    from .backend import OPTIONS, CompletionsBackend

    unknown = sorted(set(options) - set(OPTIONS) - {"environ", "probe"})
    if unknown:
        raise TypeError(f"completions does not take {', '.join(unknown)}; "
                        f"options: {', '.join(OPTIONS)}")
    if not options.get("base_url"):
        raise TypeError("the completions backend needs base_url=... (the engine's address)")
    base_url = options.pop("base_url")
    return CompletionsBackend(base_url, **options)


def __getattr__(name: str) -> Any:
    if name == "CompletionsBackend":
        from .backend import CompletionsBackend

        return CompletionsBackend
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


@toolwire.hookimpl
def register_backends(register: Callable[[BackendSpec], None]) -> None:
    """Register the ``completions`` backend."""
    from .backend import OPTIONS

    register(BackendSpec(name=BACKEND_NAME, create=create, options=OPTIONS,
                         description="remote serving engines (vLLM, SGLang, llama-server, "
                                     "llama-cpp-python) through their text-completion "
                                     "endpoints, prompted with the model's own template"))
