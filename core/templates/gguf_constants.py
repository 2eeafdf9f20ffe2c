"""GGUF key names toolwire reads, and the caps that bound reading a hostile file."""

from __future__ import annotations

from typing import Final

from gguf import Keys

__all__ = ["MAX_ARRAY_STRINGS", "MAX_STRING_VALUE_BYTES", "NAMED_TEMPLATE_PREFIX",
           "TEMPLATE_KEY", "TOOL_USE"]

#: Longest string value (a chat template, a name) that is read into memory.
MAX_STRING_VALUE_BYTES: Final = 16 * 1024 * 1024
#: Most string-array elements walked in one file (a large vocabulary plus merges
#: is about a million); bounds the time a file of empty strings can cost.
MAX_ARRAY_STRINGS: Final = 1 << 24

TEMPLATE_KEY: Final = Keys.Tokenizer.CHAT_TEMPLATE
NAMED_TEMPLATE_PREFIX: Final = Keys.Tokenizer.CHAT_TEMPLATE + "."
TOOL_USE: Final = "tool_use"
