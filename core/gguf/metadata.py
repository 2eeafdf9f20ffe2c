"""Read the metadata of a GGUF model file quickly and safely.

:func:`read_gguf_metadata` reads the fixed header and the key/value section of a
GGUF file and nothing else: tensor infos and tensor data are never parsed, so a
multi-gigabyte model costs the same as its few megabytes of metadata. Arrays are
skipped without being materialised; the one exception is ``tokenizer.ggml.tokens``,
of which only the entries named by the bos/eos/eot ids are read, after the whole
key/value section has been seen (the ids may come after the array).

The reader treats every file as hostile. Every length and count is checked
against the bytes left in the file before anything is read or allocated; a file
may hold at most :data:`MAX_KEYS` keys, a string value at most
:data:`MAX_STRING_VALUE_BYTES`, its keys and string values together at most
:data:`MAX_STRING_BYTES`, and its string arrays together at most
:data:`MAX_ARRAY_STRINGS` elements, so memory and time stay bounded whatever the
file claims (each cap is far above any real model; exceeding one is a
:class:`~toolwire.errors.GGUFError` that names it). Any malformed input raises exactly one
:class:`~toolwire.errors.GGUFError` that names the file and the byte offset of the
offending field. Operating-system errors (a missing file raises
:class:`FileNotFoundError`, a directory :class:`IsADirectoryError`) propagate
unchanged.

GGUF versions 2 and 3 are supported, little- and big-endian (a big-endian file is
recognised by its byteswapped version field). Version 1 is rejected.

Type codes, the magic number and key names come from the ``gguf`` package
(:class:`gguf.GGUFValueType`, :data:`gguf.GGUF_MAGIC`, :class:`gguf.Keys`); the
parsing itself is plain :mod:`struct` on blocks read from the file, because
:class:`gguf.GGUFReader` maps the whole file and builds an object for every array
element, which takes seconds on a real vocabulary.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from types import MappingProxyType
from typing import TypeVar

import attrs

from .constants import (
    MAX_ARRAY_STRINGS,
    MAX_KEYS,
    MAX_STRING_BYTES,
    MAX_STRING_VALUE_BYTES,
    NAMED_TEMPLATE_PREFIX,
    TEMPLATE_KEY,
    TOOL_USE,
)
from .reader import read_fields

__all__ = [
    "MAX_ARRAY_STRINGS",
    "MAX_KEYS",
    "MAX_STRING_BYTES",
    "MAX_STRING_VALUE_BYTES",
    "GGUFMetadata",
    "read_gguf_metadata",
]

_V = TypeVar("_V")


def _readonly(mapping: Mapping[str, _V]) -> Mapping[str, _V]:
    return MappingProxyType(dict(mapping))


@attrs.frozen
class GGUFMetadata:
    """What toolwire needs to know about a GGUF model, read from its header.

    :ivar path: the file that was read.
    :ivar version: the GGUF format version (2 or 3).
    :ivar architecture: ``general.architecture``, e.g. ``"qwen2"``.
    :ivar name: ``general.name``.
    :ivar chat_template: ``tokenizer.chat_template``, the default template.
    :ivar named_chat_templates: every ``tokenizer.chat_template.<name>`` key, by
        ``<name>`` (Hermes models ship ``tool_use``).
    :ivar bos_token: the string of token ``tokenizer.ggml.bos_token_id``; None when
        the id or the vocabulary is absent. Likewise ``eos_token``, ``eot_token``.
    :ivar context_length: ``<architecture>.context_length``.
    :ivar tensor_count: the header's tensor count (the tensors are not read).
    :ivar kv_count: the header's key/value count.
    :ivar scalars: every key whose value is a number, a bool or a string (arrays
        are left out).
    """

    path: str
    version: int
    architecture: str | None
    name: str | None
    chat_template: str | None
    named_chat_templates: Mapping[str, str] = attrs.field(converter=_readonly, hash=False)
    bos_token: str | None
    eos_token: str | None
    eot_token: str | None
    context_length: int | None
    tensor_count: int
    kv_count: int
    scalars: Mapping[str, object] = attrs.field(converter=_readonly, hash=False, repr=False)

    def template_for(self, *, tools: bool) -> tuple[str, str] | None:
        """Pick the chat template to render with, as ``(source_key, template)``.

        With ``tools=True`` a ``tool_use`` template wins over the default one,
        because models that ship both (Hermes) only format tools in ``tool_use``.
        Otherwise the default template is used; if a file has only a ``tool_use``
        template, that one serves for plain chat too. None if there is neither.
        """
        tool_use = self.named_chat_templates.get(TOOL_USE)
        tool_use_key = NAMED_TEMPLATE_PREFIX + TOOL_USE
        if tools and tool_use is not None:
            return tool_use_key, tool_use
        if self.chat_template is not None:
            return TEMPLATE_KEY, self.chat_template
        if tool_use is not None:
            return tool_use_key, tool_use
        return None


def read_gguf_metadata(path: str | os.PathLike[str]) -> GGUFMetadata:
    """Read the header and key/value metadata of the GGUF file at ``path``.

    :raises GGUFError: the file is not a GGUF file of version 2 or 3, is
        truncated, or holds malformed or absurd values; the error's ``offset`` is
        the byte offset of the offending field.
    :raises OSError: the file cannot be opened or read (FileNotFoundError if it
        does not exist).
    """
    name = os.fspath(path)
    # Unbuffered: the reader does its own block reads, so a second buffer would only copy.
    with open(name, "rb", buffering=0) as file:
        return GGUFMetadata(**read_fields(file, name, os.fstat(file.fileno()).st_size))
