"""GGUF key names toolwire reads, and the caps that bound reading a hostile file."""

from __future__ import annotations

from typing import Final

from gguf import Keys

__all__ = ["MAX_ARRAY_STRINGS", "MAX_KEYS", "MAX_STRING_BYTES", "MAX_STRING_VALUE_BYTES",
           "NAMED_TEMPLATE_PREFIX", "TEMPLATE_KEY", "TOOL_USE"]

# The caps below bound what reading any file can cost: under a second and 100 MB
# on a small machine (benchmarks/gguf_header.py measures the worst cases). Real
# files stay far below them: a model has some 20 to 200 keys, templates of at
# most a few hundred kilobytes, and at most about 650,000 strings in its arrays
# (gpt-oss: 201,088 tokens and 446,189 merges).

#: Longest string value (a chat template, a name) that is read into memory.
MAX_STRING_VALUE_BYTES: Final = 16 * 1024 * 1024
#: Most bytes of keys and string values read into memory from one file, in all.
MAX_STRING_BYTES: Final = 32 * 1024 * 1024
#: Most key/value pairs in one file.
MAX_KEYS: Final = 16_384
#: Most string-array elements walked in one file, in all arrays together.
MAX_ARRAY_STRINGS: Final = 1 << 21

TEMPLATE_KEY: Final = Keys.Tokenizer.CHAT_TEMPLATE
NAMED_TEMPLATE_PREFIX: Final = Keys.Tokenizer.CHAT_TEMPLATE + "."
TOOL_USE: Final = "tool_use"
