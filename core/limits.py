"""What toolwire refuses: every bound on untrusted input, in one place.

Model output, GGUF files, chat templates, tool schemas, HTTP clients, MCP servers and
the workspace a model works in are untrusted (``docs/security.md``). Each record here
holds the bounds of one of them, with its defaults; the part that enforces a bound
takes its record, the command line's options and ``docs/security.md`` are held to
these records by tests, so a reader learns every bound from this one module.

.. versionadded:: 0.2
"""

from __future__ import annotations

import math
import os
from typing import Any, Final

import attrs

__all__ = ["PATTERN_LIMITS", "RENDER_SECONDS_VARIABLE", "PatternLimits", "RenderLimits"]

RENDER_SECONDS_VARIABLE: Final = "TOOLWIRE_TEMPLATE_SECONDS"
"""Environment variable: the default ``max_seconds`` of a render."""

_RENDER_SECONDS: Final = 10.0


def _positive(instance: object, attribute: attrs.Attribute[Any], value: Any) -> None:
    if value <= 0:
        raise ValueError(f"{attribute.name} must be positive, not {value!r}")


def _render_seconds() -> float:
    raw = os.environ.get(RENDER_SECONDS_VARIABLE, "").strip()
    try:
        seconds = float(raw) if raw else _RENDER_SECONDS
    except ValueError:
        return _RENDER_SECONDS
    return seconds if seconds > 0 and math.isfinite(seconds) else _RENDER_SECONDS


@attrs.frozen
class RenderLimits:
    """The bounds of one chat-template render, which runs in a child process of its
    own (:mod:`toolwire.templates.chat_template`).

    :ivar max_output_chars: the rendered prompt's length.
    :ivar max_memory_bytes: the address space a render may add to its child process.
    :ivar max_seconds: the time a render may take (default: the
        ``TOOLWIRE_TEMPLATE_SECONDS`` environment variable, else 10); its CPU time
        is held to the same, rounded up, plus one.
    """

    max_output_chars: int = attrs.field(default=10_000_000, validator=_positive)
    max_memory_bytes: int = attrs.field(default=256 << 20, validator=_positive)
    max_seconds: float = attrs.field(factory=_render_seconds, validator=_positive)


@attrs.frozen
class PatternLimits:
    """The bounds of a regular expression from outside: a tool schema's ``pattern`` or
    ``patternProperties`` key (:mod:`toolwire.vocabulary.patterns`).

    :ivar max_chars: the longest pattern (compiling a 7 MB one takes ``regex`` a minute).
    :ivar compile_memory_bytes: the address space compiling one pattern may take; it is
        compiled first in the pattern child process, under this bound (``regex`` writes
        counted repetitions out: ``a{1000000}`` takes a gigabyte).
    :ivar compile_seconds: the time compiling it there may take.
    :ivar kept_bytes: what the compiled patterns this process keeps may take in all (as
        the child measured each); the least recently used are dropped past it.
    :ivar match_seconds: the time matching may take in one validation of a value
        (``regex`` stops a match at its timeout; past it the value could not be checked).
    """

    max_chars: int = attrs.field(default=4_096, validator=_positive)
    compile_memory_bytes: int = attrs.field(default=16 << 20, validator=_positive)
    compile_seconds: float = attrs.field(default=2.0, validator=_positive)
    kept_bytes: int = attrs.field(default=64 << 20, validator=_positive)
    match_seconds: float = attrs.field(default=1.0, validator=_positive)


PATTERN_LIMITS: Final = PatternLimits()
"""The bounds every schema pattern is held to."""
