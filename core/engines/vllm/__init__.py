"""toolwire in vLLM's parser slots (``--tool-call-parser toolwire``, ``--reasoning-parser``).

``pip install -e '.[vllm]'`` installs vLLM and this entry point in vLLM's
``vllm.general_plugins`` group; vLLM calls :func:`register` at start in every
one of its processes, before it reads its command line, so no
``--tool-parser-plugin`` file is needed. :func:`register` only names the
parsers (lazily, so a process that never parses imports nothing of them):

* ``toolwire``: the family is chosen from the served tokenizer's chat template
  (:class:`toolwire.engines.served_family.ServedFamily`), and a request's own
  ``chat_template`` is honoured;
* ``toolwire-<family>`` (``toolwire-qwen_xml``, ...): the family named, for
  every family toolwire has (third-party parser plugins included).

The parsers themselves are :mod:`.tool_parser` and :mod:`.reasoning_parser`.
"""

from __future__ import annotations

from typing import Final

import toolwire

__all__ = ["PARSER_NAME", "parser_names", "register"]

PARSER_NAME: Final = "toolwire"
"""The name the family is chosen by template under; ``toolwire-<family>`` forces one."""


def parser_names(plugins: toolwire.PluginManager | None = None) -> dict[str, str | None]:
    """Every name toolwire's parsers take in vLLM -> the family it forces (``None``:
    chosen from the template)."""
    manager = plugins or toolwire.default_plugin_manager()
    names: dict[str, str | None] = {PARSER_NAME: None}
    for family in sorted(manager.parsers()):
        names[f"{PARSER_NAME}-{family}"] = family
    return names


def register() -> None:
    """Register toolwire's tool and reasoning parsers with vLLM (the entry point).

    Safe to call more than once: vLLM loads its general plugins once per process,
    and a second call names the same parsers again.
    """
    from vllm.reasoning import ReasoningParserManager
    from vllm.tool_parsers import ToolParserManager

    for name, family in parser_names().items():
        suffix = f"__{family}" if family else ""
        ToolParserManager.register_lazy_module(
            name, "toolwire.engines.vllm.tool_parser", f"ToolwireToolParser{suffix}")
        ReasoningParserManager.register_lazy_module(
            name, "toolwire.engines.vllm.reasoning_parser",
            f"ToolwireReasoningParser{suffix}")
