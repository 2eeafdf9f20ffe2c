"""GGUF key names toolwire reads, and the caps that bound reading a hostile file."""

from __future__ import annotations

from typing import Final

from gguf import Keys

from ..limits import GgufLimits

__all__ = ["MAX_ARRAY_STRINGS", "MAX_KEYS", "MAX_STRING_BYTES", "MAX_STRING_VALUE_BYTES",
           "NAMED_TEMPLATE_PREFIX", "TEMPLATE_KEY", "TOOL_USE"]

# The caps (toolwire.limits.GgufLimits) bound what reading any file can cost: under a
# second and 100 MB on a small machine (benchmarks/gguf_header.py measures the worst cases).
_LIMITS: Final = GgufLimits()
MAX_STRING_VALUE_BYTES: Final = _LIMITS.max_string_value_bytes
MAX_STRING_BYTES: Final = _LIMITS.max_string_bytes
MAX_KEYS: Final = _LIMITS.max_keys
MAX_ARRAY_STRINGS: Final = _LIMITS.max_array_strings

TEMPLATE_KEY: Final = Keys.Tokenizer.CHAT_TEMPLATE
NAMED_TEMPLATE_PREFIX: Final = Keys.Tokenizer.CHAT_TEMPLATE + "."
TOOL_USE: Final = "tool_use"
