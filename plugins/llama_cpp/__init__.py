"""Built-in backend plugin ``llama_cpp``: a local GGUF model run in-process.

The model speaks its own chat template, read from the GGUF metadata and
rendered in toolwire's sandbox; the parser that claims the template reads the
reply. See ``docs/local.md``.

Importing this package is cheap: llama-cpp-python is imported only when a
model is loaded, so ``import toolwire`` works without it::

    from toolwire.plugins.llama_cpp import LlamaCppBackend

    chat = toolwire.Chat(LlamaCppBackend("model.gguf"), tools=[...])
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import toolwire
from toolwire.plugin_api import BackendSpec, Tool

if TYPE_CHECKING:
    from .backend import LlamaCppBackend

__all__ = [
    "BACKEND_NAME",
    "LlamaCppBackend",
    "create",
    "register_backends",
    "tool_block_cost",
]

BACKEND_NAME = "llama_cpp"


def create(**options: Any) -> LlamaCppBackend:
    """Build a :class:`LlamaCppBackend`; ``options`` are its keyword arguments."""
    from .backend import LlamaCppBackend

    if "model_path" not in options:
        raise TypeError("the llama_cpp backend needs model_path=... (a .gguf file)")
    return LlamaCppBackend(**options)


def tool_block_cost(model_path_or_backend: str | os.PathLike[str] | LlamaCppBackend,
                    tools: Sequence[Tool | Mapping[str, Any]], **kwargs: Any) -> dict[str, Any]:
    """Tokens the tool block adds to a prompt (see :func:`.report.tool_block_cost`).

    ``kwargs`` are ``messages=`` and ``chat_template=``; the report module is
    imported on first use, so importing the plugin stays cheap.
    """
    from .report import tool_block_cost as cost

    return cost(model_path_or_backend, tools, **kwargs)


def __getattr__(name: str) -> Any:
    if name == "LlamaCppBackend":
        from .backend import LlamaCppBackend

        return LlamaCppBackend
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


@toolwire.hookimpl
def register_backends(register: Callable[[BackendSpec], None]) -> None:
    """Register the ``llama_cpp`` backend."""
    from .backend import OPTIONS

    register(BackendSpec(name=BACKEND_NAME, create=create, options=OPTIONS,
                         description="local GGUF model in-process via llama-cpp-python, "
                                     "prompted with its own chat template"))
