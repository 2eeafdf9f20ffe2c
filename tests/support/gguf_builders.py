"""Builders of small GGUF files for tests, and helpers for byte surgery on them.

Files are written with :class:`gguf.GGUFWriter`, so they are what real tools
produce; :func:`layout` locates fields with :class:`gguf.GGUFReader`, an
implementation independent of toolwire's, so tests can patch exact bytes.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import gguf
import numpy as np

__all__ = [
    "DEFAULT_TOKENS",
    "TEMPLATE",
    "TOOL_USE_TEMPLATE",
    "FieldLayout",
    "layout",
    "patch",
    "u32",
    "u64",
    "write_gguf",
]

TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n"
    "{{ message['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
TOOL_USE_TEMPLATE = "{% if tools %}<tools>{{ tools | tojson }}</tools>{% endif %}" + TEMPLATE
DEFAULT_TOKENS: tuple[str, ...] = (
    "<unk>",
    "<s>",
    "</s>",
    "<|im_end|>",
    "hello",
    " world",
    "é",
    "中文",
    "🙂",
    "",
)


def write_gguf(
    path: Path,
    *,
    arch: str = "llama",
    name: str | None = "tiny-test-model",
    template: str | None = TEMPLATE,
    named_templates: Mapping[str, str] | None = None,
    tokens: Sequence[str] | None = DEFAULT_TOKENS,
    bos_id: int | None = 1,
    eos_id: int | None = 2,
    eot_id: int | None = 3,
    ids_before_tokens: bool = False,
    context_length: int | None = 4096,
    endian: gguf.GGUFEndian = gguf.GGUFEndian.LITTLE,
    extra: Callable[[gguf.GGUFWriter], None] | None = None,
    tensors: bool = True,
) -> Path:
    """Write a small but complete GGUF file (header, metadata, tensors) to ``path``."""
    writer = gguf.GGUFWriter(path, arch, endianess=endian)
    if name is not None:
        writer.add_name(name)
    if context_length is not None:
        writer.add_context_length(context_length)
    writer.add_block_count(2)
    writer.add_uint8("test.u8", 7)
    writer.add_int16("test.i16", -3)
    writer.add_int64("test.i64", -(2**40))
    writer.add_uint64("test.u64", 2**63 + 5)
    writer.add_float32("test.f32", 0.5)
    writer.add_float64("test.f64", -1.25)
    writer.add_bool("test.flag", True)
    if ids_before_tokens:
        _add_ids(writer, bos_id, eos_id, eot_id)
    if tokens is not None:
        writer.add_tokenizer_model("gpt2")
        writer.add_token_list(list(tokens))
        writer.add_token_types([1] * len(tokens))
        writer.add_token_scores([0.0] * len(tokens))
        writer.add_token_merges(["h e", "l l", "o w"])
    if not ids_before_tokens:
        _add_ids(writer, bos_id, eos_id, eot_id)
    if template is not None:
        writer.add_chat_template(template)
    for template_name, text in (named_templates or {}).items():
        writer.add_string(gguf.Keys.Tokenizer.CHAT_TEMPLATE_N.format(name=template_name), text)
    if extra is not None:
        extra(writer)
    if tensors:
        writer.add_tensor("token_embd.weight", np.arange(12, dtype=np.float32).reshape(3, 4))
        writer.add_tensor("output_norm.weight", np.ones(4, dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def _add_ids(
    writer: gguf.GGUFWriter, bos_id: int | None, eos_id: int | None, eot_id: int | None
) -> None:
    if bos_id is not None:
        writer.add_bos_token_id(bos_id)
    if eos_id is not None:
        writer.add_eos_token_id(eos_id)
    if eot_id is not None:
        writer.add_eot_token_id(eot_id)


@dataclass(frozen=True)
class FieldLayout:
    """Byte offsets of one key/value entry.

    ``value`` is where the value starts: the length field of a string value, the
    element type of an array. For arrays, ``count`` is the length field and
    ``first`` the first element.
    """

    key: int
    type: int
    value: int
    end: int
    count: int | None = None
    first: int | None = None


def layout(path: Path) -> tuple[dict[str, FieldLayout], int]:
    """Locate every key/value entry of ``path``, and the end of the kv section."""
    reader = gguf.GGUFReader(path)
    fields: dict[str, FieldLayout] = {}
    kv_end = 0
    for name, field in reader.fields.items():
        if name.startswith("GGUF."):
            continue
        # parts: key length, key bytes, value type, then the value's parts.
        sizes = [int(part.nbytes) for part in field.parts]
        key = field.offset
        vtype = key + sizes[0] + sizes[1]
        value = vtype + sizes[2]
        end = key + sum(sizes)
        count = first = None
        if field.types and field.types[0] == gguf.GGUFValueType.ARRAY:
            count = value + sizes[3]
            first = count + sizes[4]
        fields[name] = FieldLayout(key, vtype, value, end, count, first)
        kv_end = max(kv_end, end)
    return fields, kv_end


def patch(path: Path, offset: int, data: bytes) -> None:
    """Overwrite bytes of ``path`` at ``offset`` in place."""
    with open(path, "r+b") as file:
        file.seek(offset)
        file.write(data)


def u32(value: int, order: str = "<") -> bytes:
    return struct.pack(order + "I", value)


def u64(value: int, order: str = "<") -> bytes:
    return struct.pack(order + "Q", value)
