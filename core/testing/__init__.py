"""Test helpers for toolwire users and plugin authors.

* :func:`check_parser`: the parser conformance suite; one call checks a parser
  plugin through the real chat template it claims (see ``docs/testing-plugins.md``).
* :func:`fuzz_parser`: checks a parser on many mutated replies (whole and cut
  into random deltas) at volume; ``scripts/fuzz_parsers.py`` runs it per family.
* :class:`AssistantTurnRenderer`: renders assistant tool-call turns through any
  template and cuts out the text the model would have written.
* :mod:`toolwire.testing.strategies`: hypothesis strategies (tool schemas,
  conforming arguments, adversarial text, chunkings, drifted replies).
* :mod:`toolwire.testing.drift`: the drifts of a rendered reply the parsing rules read
  back (a closer left out before the next call, end-of-turn markup inside an open
  call, several calls in one block), from the family's record.
* :func:`write_tiny_gguf`: a tiny random-weight GGUF model with any chat
  template, run for real by llama.cpp (``toolwire.testing.tiny_gguf``).
* :class:`ScriptedBackend`: a stand-in model that replays given raw replies
  through the real parser pipeline (filters + the family's parser).
* :func:`isolated_plugin_manager`: a plugin manager that loads no entry points.
* :data:`Registered`: the type of the ``registered`` fixture, for annotations.
* The pytest plugin (``toolwire.testing.pytest_plugin``, loaded automatically
  through the ``pytest11`` entry point) adds the ``registered`` and
  ``plugin_manager`` fixtures.

The conformance suite and the strategies need ``hypothesis`` (the ``test``
extra). They are imported on first use, so this package, and with it the pytest
plugin, still imports where hypothesis is not installed.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..templates.assistant_turns import AssistantTurnRenderer, RenderedReply
from .report import KIT_AUDIT_EVENT
from .scripted import Registered, ScriptedBackend, isolated_plugin_manager

if TYPE_CHECKING:
    from .conformance import (
        PROPERTIES,
        ConformanceError,
        ConformanceReport,
        PropertyResult,
        check_parser,
    )
    from .fuzz import FuzzFailure, FuzzReport, fuzz_parser
    from .tiny_gguf import write_tiny_gguf

__all__ = [
    "CHATML_TEMPLATE",
    "CONTROL_TOKENS",
    "KIT_AUDIT_EVENT",
    "PROPERTIES",
    "TAG_TOKENS",
    "TINY_BACKEND_OPTIONS",
    "AssistantTurnRenderer",
    "ConformanceError",
    "ConformanceReport",
    "FuzzFailure",
    "FuzzReport",
    "PropertyResult",
    "Registered",
    "RenderedReply",
    "ScriptedBackend",
    "check_parser",
    "forcing_grammar",
    "fuzz_parser",
    "isolated_plugin_manager",
    "write_tiny_gguf",
]

_FROM_CONFORMANCE = frozenset({
    "PROPERTIES", "ConformanceError", "ConformanceReport", "PropertyResult", "check_parser",
})


_FROM_FUZZ = frozenset({"FuzzFailure", "FuzzReport", "fuzz_parser"})
_FROM_TINY_GGUF = frozenset({
    "CHATML_TEMPLATE", "CONTROL_TOKENS", "TAG_TOKENS", "TINY_BACKEND_OPTIONS", "forcing_grammar",
    "write_tiny_gguf",
})


def __getattr__(name: str) -> Any:
    if name in _FROM_CONFORMANCE:
        from . import conformance

        return getattr(conformance, name)
    if name in _FROM_FUZZ:
        from . import fuzz

        return getattr(fuzz, name)
    if name in _FROM_TINY_GGUF:  # numpy is imported when a model is written
        from . import tiny_gguf

        return getattr(tiny_gguf, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
