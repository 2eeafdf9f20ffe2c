"""Tests of toolwire.gguf.metadata: fields, layouts, and hostile files.

Every file is built here with gguf.GGUFWriter; hostile variants are made by byte
surgery at offsets located with gguf.GGUFReader (see gguf_builders).
"""

from __future__ import annotations

import random
import shutil
import struct
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from unittest import mock

import attrs
import gguf
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.support.gguf_builders import (
    DEFAULT_TOKENS,
    TEMPLATE,
    TOOL_USE_TEMPLATE,
    FieldLayout,
    layout,
    patch,
    u32,
    u64,
    write_gguf,
)
from toolwire.errors import GGUFError
from toolwire.gguf import metadata as gguf_metadata
from toolwire.gguf import reader as gguf_reader
from toolwire.gguf.metadata import GGUFMetadata, read_gguf_metadata

KEYS = gguf.Keys
VT = gguf.GGUFValueType


@dataclass(frozen=True)
class Built:
    """A valid file, its bytes and where its fields are."""

    path: Path
    data: bytes
    fields: dict[str, FieldLayout]
    kv_end: int
    tokens: tuple[str, ...]

    def token_offset(self, index: int) -> int:
        first = self.fields[KEYS.Tokenizer.LIST].first
        assert first is not None
        return first + sum(8 + len(t.encode()) for t in self.tokens[:index])


def built(path: Path, tokens: tuple[str, ...] = DEFAULT_TOKENS, **options: Any) -> Built:
    write_gguf(path, tokens=tokens, **options)
    fields, kv_end = layout(path)
    return Built(path, path.read_bytes(), fields, kv_end, tokens)


def awkward_vocabulary(size: int, seed: int) -> tuple[str, ...]:
    """Tokens that stress the string walkers: empty, long, NUL-laden, fake headers."""
    rng = random.Random(seed)
    odd = [
        "",
        "\x00" * 20,
        "x" * 300,
        "é" * 200,
        "\x05" + "\x00" * 7 + "abc",
        "\x00" * 7 + "q",
        "a\x00",
    ]
    tokens = []
    for _ in range(size):
        if rng.random() < 0.05:
            tokens.append(rng.choice(odd))
        else:
            tokens.append("".join(rng.choice("abcdeĠ中🙂") for _ in range(rng.randint(1, 9))))
    return tuple(tokens)


@pytest.fixture(scope="module")
def small(tmp_path_factory: pytest.TempPathFactory) -> Built:
    path = tmp_path_factory.mktemp("small") / "model.gguf"
    return built(path, named_templates={"tool_use": TOOL_USE_TEMPLATE})


@pytest.fixture(scope="module")
def large(tmp_path_factory: pytest.TempPathFactory) -> Built:
    """A 3,000-token vocabulary: big enough for the numpy walker."""
    path = tmp_path_factory.mktemp("large") / "model.gguf"
    tokens = awkward_vocabulary(3000, seed=1)
    return built(path, tokens=tokens, bos_id=5, eos_id=2999, eot_id=1500)


@pytest.fixture(scope="module")
def scratch(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A path that property tests overwrite on every example."""
    return tmp_path_factory.mktemp("scratch") / "variant.gguf"


def variant(target: Path, data: bytes | bytearray) -> Path:
    target.write_bytes(bytes(data))
    return target


def expect_error(path: Path) -> GGUFError:
    with pytest.raises(GGUFError) as caught:
        read_gguf_metadata(path)
    error = caught.value
    assert error.path == str(path)
    assert f"{path}: at byte {error.offset}: " in str(error)
    return error


# --- valid files -------------------------------------------------------------------


def test_reads_every_field(small: Built) -> None:
    meta = read_gguf_metadata(small.path)
    assert meta.path == str(small.path)
    assert meta.version == 3
    assert meta.architecture == "llama"
    assert meta.name == "tiny-test-model"
    assert meta.chat_template == TEMPLATE
    assert dict(meta.named_chat_templates) == {"tool_use": TOOL_USE_TEMPLATE}
    assert (meta.bos_token, meta.eos_token, meta.eot_token) == ("<s>", "</s>", "<|im_end|>")
    assert meta.context_length == 4096
    assert meta.tensor_count == 2
    assert meta.kv_count == len(small.fields)
    assert dict(meta.scalars) == {
        "general.architecture": "llama",
        "general.name": "tiny-test-model",
        "llama.context_length": 4096,
        "llama.block_count": 2,
        "test.u8": 7,
        "test.i16": -3,
        "test.i64": -(2**40),
        "test.u64": 2**63 + 5,
        "test.f32": 0.5,
        "test.f64": -1.25,
        "test.flag": True,
        "tokenizer.ggml.model": "gpt2",
        "tokenizer.ggml.bos_token_id": 1,
        "tokenizer.ggml.eos_token_id": 2,
        "tokenizer.ggml.eot_token_id": 3,
        "tokenizer.chat_template": TEMPLATE,
        "tokenizer.chat_template.tool_use": TOOL_USE_TEMPLATE,
    }
    assert type(meta.scalars["test.flag"]) is bool


def test_scalars_agree_with_gguf_reader(large: Built) -> None:
    reader = gguf.GGUFReader(large.path)
    expected = {
        name: field.contents()
        for name, field in reader.fields.items()
        if not name.startswith("GGUF.") and field.types[0] != VT.ARRAY
    }
    assert dict(read_gguf_metadata(large.path).scalars) == expected


def test_metadata_is_frozen_and_hashable(small: Built) -> None:
    meta = read_gguf_metadata(small.path)
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        meta.name = "other"  # type: ignore[misc]
    with pytest.raises(TypeError):
        meta.scalars["general.name"] = "other"  # type: ignore[index]
    with pytest.raises(TypeError):
        meta.named_chat_templates["x"] = "y"  # type: ignore[index]
    assert meta == read_gguf_metadata(small.path)
    assert hash(meta) == hash(read_gguf_metadata(small.path))


def metadata(**changes: Any) -> GGUFMetadata:
    fields: dict[str, Any] = {
        "path": "m.gguf",
        "version": 3,
        "architecture": "llama",
        "name": None,
        "chat_template": "DEFAULT",
        "named_chat_templates": {"tool_use": "TOOLS"},
        "bos_token": None,
        "eos_token": None,
        "eot_token": None,
        "context_length": None,
        "tensor_count": 0,
        "kv_count": 0,
        "scalars": {},
    }
    return GGUFMetadata(**{**fields, **changes})


def test_template_for_prefers_tool_use_only_with_tools() -> None:
    both = metadata()
    assert both.template_for(tools=True) == ("tokenizer.chat_template.tool_use", "TOOLS")
    assert both.template_for(tools=False) == ("tokenizer.chat_template", "DEFAULT")
    default_only = metadata(named_chat_templates={"rag": "RAG"})
    assert default_only.template_for(tools=True) == ("tokenizer.chat_template", "DEFAULT")
    tool_use_only = metadata(chat_template=None)
    assert tool_use_only.template_for(tools=False) == (
        "tokenizer.chat_template.tool_use",
        "TOOLS",
    )
    assert metadata(chat_template=None, named_chat_templates={}).template_for(tools=True) is None


def test_token_ids_may_come_before_the_vocabulary(tmp_path: Path) -> None:
    path = write_gguf(tmp_path / "m.gguf", ids_before_tokens=True)
    meta = read_gguf_metadata(path)
    assert (meta.bos_token, meta.eos_token, meta.eot_token) == ("<s>", "</s>", "<|im_end|>")


def test_big_endian_file(tmp_path: Path) -> None:
    path = write_gguf(
        tmp_path / "be.gguf",
        endian=gguf.GGUFEndian.BIG,
        named_templates={"tool_use": TOOL_USE_TEMPLATE},
    )
    assert path.read_bytes()[4:8] == b"\x00\x00\x00\x03"
    little = read_gguf_metadata(
        write_gguf(tmp_path / "le.gguf", named_templates={"tool_use": TOOL_USE_TEMPLATE})
    )
    big = read_gguf_metadata(path)
    assert attrs.evolve(big, path=little.path) == little
    assert dict(big.scalars) == dict(little.scalars)


def test_big_endian_large_vocabulary(tmp_path: Path) -> None:
    tokens = awkward_vocabulary(1500, seed=3)
    path = write_gguf(
        tmp_path / "be.gguf",
        tokens=tokens,
        endian=gguf.GGUFEndian.BIG,
        bos_id=0,
        eos_id=1499,
        eot_id=700,
    )
    meta = read_gguf_metadata(path)
    assert (meta.bos_token, meta.eos_token, meta.eot_token) == (
        tokens[0],
        tokens[1499],
        tokens[700],
    )


def test_version_2_is_read(tmp_path: Path, small: Built) -> None:
    path = variant(tmp_path / "v2.gguf", small.data)
    patch(path, 4, u32(2))
    assert read_gguf_metadata(path).version == 2


def test_absent_keys_read_as_none(tmp_path: Path) -> None:
    path = write_gguf(
        tmp_path / "bare.gguf", name=None, template=None, tokens=None, context_length=None
    )
    meta = read_gguf_metadata(path)
    assert meta.architecture == "llama"
    assert (meta.name, meta.chat_template, meta.context_length) == (None, None, None)
    assert dict(meta.named_chat_templates) == {}
    # The ids are there but there is no vocabulary to look them up in.
    assert (meta.bos_token, meta.eos_token, meta.eot_token) == (None, None, None)
    assert meta.template_for(tools=True) is None


def test_missing_file_raises_file_not_found(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        read_gguf_metadata(tmp_path / "absent.gguf")


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_awkward_vocabularies_resolve_every_id(tmp_path: Path, seed: int) -> None:
    rng = random.Random(seed)
    tokens = awkward_vocabulary(rng.randint(600, 6000), seed)
    ids = [rng.randrange(len(tokens)) for _ in range(3)]
    path = write_gguf(
        tmp_path / "m.gguf", tokens=tokens, bos_id=ids[0], eos_id=ids[1], eot_id=ids[2]
    )
    meta = read_gguf_metadata(path)
    assert [meta.bos_token, meta.eos_token, meta.eot_token] == [tokens[i] for i in ids]
    assert meta.chat_template == TEMPLATE


def test_last_and_first_token_ids(tmp_path: Path) -> None:
    tokens = awkward_vocabulary(5000, seed=9)
    path = write_gguf(tmp_path / "m.gguf", tokens=tokens, bos_id=0, eos_id=4999, eot_id=4999)
    meta = read_gguf_metadata(path)
    assert (meta.bos_token, meta.eos_token, meta.eot_token) == (tokens[0], tokens[-1], tokens[-1])


def test_tensor_data_does_not_matter(tmp_path: Path, small: Built) -> None:
    data = bytearray(small.data)
    data[small.kv_end :] = bytes(random.Random(0).randrange(256) for _ in data[small.kv_end :])
    assert read_gguf_metadata(variant(tmp_path / "m.gguf", data)) == attrs.evolve(
        read_gguf_metadata(small.path), path=str(tmp_path / "m.gguf")
    )


class _TrackingFile:
    """Wraps a file and records the byte ranges read from it."""

    def __init__(self, file: Any, reads: list[tuple[int, int]]) -> None:
        self._file = file
        self._reads = reads

    def read(self, size: int = -1) -> bytes:
        start = self._file.tell()
        data: bytes = self._file.read(size)
        self._reads.append((start, start + len(data)))
        return data

    def readinto(self, buffer: Any) -> int:
        start = self._file.tell()
        count: int = self._file.readinto(buffer)
        self._reads.append((start, start + count))
        return count

    def __getattr__(self, name: str) -> Any:
        return getattr(self._file, name)

    def __enter__(self) -> _TrackingFile:
        return self

    def __exit__(self, *exc: object) -> None:
        self._file.close()


def test_multi_gigabyte_sparse_file_reads_only_the_header(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "huge.gguf"
    writer = gguf.GGUFWriter(path, "llama")
    writer.add_custom_alignment(1 << 20)  # puts tensor data 1 MiB in
    writer.add_token_list(list(awkward_vocabulary(2000, seed=4)))
    writer.add_eos_token_id(1999)
    writer.add_chat_template(TEMPLATE)
    nbytes = 4 << 30
    writer.add_tensor_info("token_embd.weight", (nbytes // 4,), np.dtype(np.float32), nbytes)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_ti_data_to_file()
    writer.close()
    data_offset = 1 << 20
    assert path.stat().st_size < data_offset
    with open(path, "r+b") as file:
        file.truncate(data_offset + nbytes)  # a sparse hole: nothing is written

    reads: list[tuple[int, int]] = []

    def tracking_open(name: str, mode: str, buffering: int = -1) -> _TrackingFile:
        return _TrackingFile(open(name, mode, buffering=buffering), reads)

    monkeypatch.setattr(gguf_metadata, "open", tracking_open, raising=False)
    start = time.perf_counter()
    meta = read_gguf_metadata(path)
    elapsed = time.perf_counter() - start
    assert meta.chat_template == TEMPLATE
    assert meta.tensor_count == 1
    assert elapsed < 1.0
    assert reads, "the tracking wrapper saw no reads"
    assert max(end for _, end in reads) <= data_offset


# --- hostile files: exact errors ---------------------------------------------------


def test_empty_file(tmp_path: Path) -> None:
    assert expect_error(variant(tmp_path / "e.gguf", b"")).offset == 0


def test_wrong_magic(tmp_path: Path, small: Built) -> None:
    path = variant(tmp_path / "m.gguf", b"GGML" + small.data[4:])
    error = expect_error(path)
    assert error.offset == 0
    assert "magic" in error.reason


@pytest.mark.parametrize(
    ("raw", "phrase"),
    [
        (u32(1), "version 1"),
        (u32(1, ">"), "version 1"),
        (u32(0), "version 0"),
        (u32(4), "version 4"),
        (u32(0xFFFFFFFF), "version"),
    ],
)
def test_unsupported_versions(tmp_path: Path, small: Built, raw: bytes, phrase: str) -> None:
    path = variant(tmp_path / "m.gguf", small.data)
    patch(path, 4, raw)
    error = expect_error(path)
    assert error.offset == 4
    assert phrase in error.reason


def test_truncated_at_every_offset_of_the_header(tmp_path: Path, small: Built) -> None:
    path = tmp_path / "cut.gguf"
    for cut in range(small.kv_end):
        error = expect_error(variant(path, small.data[:cut]))
        assert error.offset <= cut, cut


def test_big_endian_truncated_at_every_offset(tmp_path: Path) -> None:
    be = built(tmp_path / "be.gguf", endian=gguf.GGUFEndian.BIG)
    path = tmp_path / "cut.gguf"
    for cut in range(be.kv_end):
        assert expect_error(variant(path, be.data[:cut])).offset <= cut


@given(st.data())
def test_truncated_large_vocabulary(large: Built, scratch: Path, data: st.DataObject) -> None:
    cut = data.draw(st.integers(0, large.kv_end - 1))
    assert expect_error(variant(scratch, large.data[:cut])).offset <= cut


Surgery = Callable[[Built], tuple[int, bytes, int]]


def _at_value(key: str, raw: bytes) -> Surgery:
    return lambda b: (b.fields[key].value, raw, b.fields[key].value)


def _at_type(key: str, raw: bytes) -> Surgery:
    return lambda b: (b.fields[key].type, raw, b.fields[key].type)


def _at_count(key: str, raw: bytes) -> Surgery:
    def surgery(b: Built) -> tuple[int, bytes, int]:
        count = b.fields[key].count
        assert count is not None
        return count, raw, count

    return surgery


def _at_token(index: int, raw: bytes) -> Surgery:
    return lambda b: (b.token_offset(index), raw, b.token_offset(index))


def _template_byte(b: Built) -> tuple[int, bytes, int]:
    field = b.fields[KEYS.Tokenizer.CHAT_TEMPLATE]
    return field.value + 8 + 3, b"\xff", field.value


def _key_byte(b: Built) -> tuple[int, bytes, int]:
    field = b.fields["test.f32"]
    return field.key + 8 + 2, b"\xc3", field.key


def _duplicate_key(b: Built) -> tuple[int, bytes, int]:
    # Rename test.i64 to test.u64; the real test.u64 comes later and is the duplicate.
    return b.fields["test.i64"].key + 8, b"test.u64", b.fields["test.u64"].key


def _token_bytes(b: Built) -> tuple[int, bytes, int]:
    offset = b.token_offset(1)  # the bos token, "<s>"
    return offset + 8, b"\xff", offset


HOSTILE: dict[str, Surgery] = {
    "string value length 2**60": _at_value(KEYS.Tokenizer.CHAT_TEMPLATE, u64(2**60)),
    "string value length 2**64-1": _at_value(KEYS.Tokenizer.CHAT_TEMPLATE, u64(2**64 - 1)),
    "key length 2**60": lambda b: (24, u64(2**60), 24),
    "key length 0": lambda b: (24, u64(0), 24),
    "kv count 2**63": lambda b: (16, u64(2**63), 16),
    "kv count 2**64-1": lambda b: (16, u64(2**64 - 1), 16),
    "tensor count 2**63": lambda b: (8, u64(2**63), 8),
    "string array count 2**40": _at_count(KEYS.Tokenizer.LIST, u64(2**40)),
    "string array count 2**64-1": _at_count(KEYS.Tokenizer.MERGES, u64(2**64 - 1)),
    "int array count 2**61": _at_count(KEYS.Tokenizer.TOKEN_TYPE, u64(2**61)),
    "float array count 2**62": _at_count(KEYS.Tokenizer.SCORES, u64(2**62)),
    "first token length 2**60": _at_token(0, u64(2**60)),
    "last token length 2**60": _at_token(9, u64(2**60)),
    "middle token length 2**64-1": _at_token(4, u64(2**64 - 1)),
    "nested array": _at_value(KEYS.Tokenizer.TOKEN_TYPE, u32(VT.ARRAY)),
    "unknown element type": _at_value(KEYS.Tokenizer.SCORES, u32(13)),
    "tokens not strings": _at_value(KEYS.Tokenizer.LIST, u32(VT.UINT8)),
    "unknown value type 13": _at_type("test.u8", u32(13)),
    "unknown value type 2**32-1": _at_type("test.f64", u32(2**32 - 1)),
    "bool value 2": _at_value("test.flag", b"\x02"),
    "value not UTF-8": _template_byte,
    "key not UTF-8": _key_byte,
    "duplicate key": _duplicate_key,
    "token not UTF-8": _token_bytes,
    "bos id out of range": _at_value(KEYS.Tokenizer.BOS_ID, u32(10)),
    "eot id 2**32-1": _at_value(KEYS.Tokenizer.EOT_ID, u32(2**32 - 1)),
}


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_hostile_patch(tmp_path: Path, small: Built, case: str) -> None:
    offset, raw, expected = HOSTILE[case](small)
    path = variant(tmp_path / "hostile.gguf", small.data)
    patch(path, offset, raw)
    error = expect_error(path)
    assert error.offset == expected, error


def test_token_length_past_the_file_end_in_large_vocabulary(tmp_path: Path, large: Built) -> None:
    for index in (0, 700, 1500, 2998, 2999):
        offset = large.token_offset(index)
        path = variant(tmp_path / f"t{index}.gguf", large.data)
        patch(path, offset, u64(len(large.data) - offset - 8 + 1))
        assert expect_error(path).offset == offset, index


def test_wrong_typed_special_keys(tmp_path: Path) -> None:
    def add(writer: gguf.GGUFWriter) -> None:
        writer.add_string("llama.context_length", "long")

    path = write_gguf(tmp_path / "ctx.gguf", context_length=None, extra=add)
    fields, _ = layout(path)
    assert expect_error(path).offset == fields["llama.context_length"].value

    def add_bool_id(writer: gguf.GGUFWriter) -> None:
        writer.add_bool(KEYS.Tokenizer.BOS_ID, True)

    path = write_gguf(tmp_path / "bos.gguf", bos_id=None, extra=add_bool_id)
    fields, _ = layout(path)
    assert expect_error(path).offset == fields[KEYS.Tokenizer.BOS_ID].value

    def add_numeric_architecture(writer: gguf.GGUFWriter) -> None:
        writer.add_uint32(KEYS.General.ARCHITECTURE, 5)  # replaces the writer's string

    path = write_gguf(tmp_path / "arch.gguf", extra=add_numeric_architecture)
    fields, _ = layout(path)
    assert expect_error(path).offset == fields[KEYS.General.ARCHITECTURE].value


def test_template_above_the_size_limit(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(gguf_reader, "MAX_STRING_VALUE_BYTES", 100)
    path = write_gguf(tmp_path / "m.gguf")
    fields, _ = layout(path)
    error = expect_error(path)
    assert error.offset == fields[KEYS.Tokenizer.CHAT_TEMPLATE].value
    assert "limit" in error.reason


def _sparse_file_with_string_array(path: Path, count: int, size: int) -> int:
    """A header, one string-array entry claiming ``count`` strings, then a hole."""
    key = KEYS.Tokenizer.MERGES.encode()
    head = b"GGUF" + u32(3) + u64(0) + u64(2)
    head += u64(len(key)) + key + u32(VT.ARRAY) + u32(VT.STRING) + u64(count)
    path.write_bytes(head)
    with open(path, "r+b") as file:
        file.truncate(size)
    return len(head) - 8  # the count field


def test_string_array_over_the_element_budget(tmp_path: Path) -> None:
    path = tmp_path / "budget.gguf"
    count_offset = _sparse_file_with_string_array(
        path, gguf_metadata.MAX_ARRAY_STRINGS + 1, 1 << 30
    )
    start = time.perf_counter()
    error = expect_error(path)
    assert time.perf_counter() - start < 0.5
    assert error.offset == count_offset


def test_many_empty_strings_in_a_sparse_hole_finish_quickly(tmp_path: Path) -> None:
    # 2**20 empty strings fill the hole; then the second kv's key length reads 0.
    path = tmp_path / "zeros.gguf"
    count_offset = _sparse_file_with_string_array(path, 1 << 20, 1 << 30)
    start = time.perf_counter()
    error = expect_error(path)
    assert time.perf_counter() - start < 2.0
    assert error.offset == count_offset + 8 + (8 << 20)
    assert "empty key" in error.reason


# --- fuzzing ---------------------------------------------------------------------------


def _mutate(data: bytearray, draw: st.DataObject, end: int) -> None:
    kind = draw.draw(st.sampled_from(["byte", "u64", "u32", "cut", "delete", "insert"]))
    at = draw.draw(st.integers(0, end))
    if kind == "byte":
        data[at : at + 1] = bytes([draw.draw(st.integers(0, 255))])
    elif kind == "u64":
        value = draw.draw(st.one_of(st.integers(0, 2**64 - 1), st.integers(0, 4096)))
        data[at : at + 8] = u64(value)
    elif kind == "u32":
        data[at : at + 4] = u32(draw.draw(st.integers(0, 16)))
    elif kind == "cut":
        del data[at:]
    elif kind == "delete":
        del data[at : at + draw.draw(st.integers(1, 16))]
    else:
        data[at:at] = draw.draw(st.binary(min_size=1, max_size=16))


def _read_or_gguf_error(path: Path) -> None:
    start = time.perf_counter()
    try:
        read_gguf_metadata(path)
    except GGUFError as error:
        assert error.path == str(path)
        assert 0 <= error.offset <= max(path.stat().st_size, 24)
    assert time.perf_counter() - start < 2.0


@given(st.data())
def test_fuzz_small_file(small: Built, scratch: Path, data: st.DataObject) -> None:
    mutated = bytearray(small.data)
    for _ in range(data.draw(st.integers(1, 4))):
        _mutate(mutated, data, min(len(mutated), small.kv_end))
    _read_or_gguf_error(variant(scratch, mutated))


@given(st.data())
def test_fuzz_large_vocabulary(large: Built, scratch: Path, data: st.DataObject) -> None:
    mutated = bytearray(large.data)
    for _ in range(data.draw(st.integers(1, 3))):
        _mutate(mutated, data, min(len(mutated), large.kv_end))
    _read_or_gguf_error(variant(scratch, mutated))


# --- the two string walkers agree ----------------------------------------------------

_STRINGS = st.one_of(
    st.binary(max_size=12),
    st.binary(max_size=400),
    st.just(b""),
    st.binary(max_size=8).map(lambda tail: b"\x00" * 7 + tail),
    st.integers(0, 255).map(lambda n: bytes([n]) + b"\x00" * 7),
)


def _walkers(data: bytes, pos: int, count: int, window: int) -> Iterator[tuple[int, ...]]:
    buf = memoryview(data)
    walked, after, last, gave_up = gguf_reader._walk_strings_fast(buf, pos, count, window)
    yield walked, after, last
    unpack = struct.Struct("<Q").unpack_from
    if walked:
        yield gguf_reader._walk_strings(buf, pos, walked, unpack)
    else:
        yield 0, pos, pos
    if not gave_up and walked < count:
        # Stopped early only because the next length field left the window.
        span = min(len(buf) - pos, window)
        assert after - pos + 8 > span or span < 16


@settings(max_examples=max(200, settings().max_examples))
@given(
    st.lists(_STRINGS, min_size=1, max_size=300),
    st.binary(max_size=9),
    st.binary(max_size=40),
    st.integers(16, 20000),
    st.data(),
)
def test_fast_walker_agrees_on_string_arrays(
    strings: list[bytes],
    prefix: bytes,
    suffix: bytes,
    window: int,
    data: st.DataObject,
) -> None:
    buf = prefix + b"".join(u64(len(s)) + s for s in strings) + suffix
    count = data.draw(st.integers(1, len(strings) + 3))
    fast, plain = _walkers(buf, len(prefix), count, window)
    assert fast == plain


@given(st.binary(min_size=8, max_size=3000), st.integers(0, 64), st.integers(1, 500))
def test_fast_walker_agrees_on_garbage(buf: bytes, pos: int, count: int) -> None:
    pos = min(pos, len(buf) - 8)
    fast, plain = _walkers(buf, pos, count, len(buf))
    assert fast == plain


def test_plain_walker_gives_the_same_metadata(
    large: Built, monkeypatch: pytest.MonkeyPatch
) -> None:
    fast = read_gguf_metadata(large.path)
    monkeypatch.setattr(gguf_reader, "_FAST_WALK_MIN", 2**62)
    assert read_gguf_metadata(large.path) == fast


@pytest.mark.parametrize(("chunk", "block"), [(64, 256), (4096, 8192), (16384, 65536)])
def test_small_windows_and_reads_give_the_same_metadata(
    large: Built, monkeypatch: pytest.MonkeyPatch, chunk: int, block: int
) -> None:
    """Many numpy windows, refills and look-up marks per array change nothing."""
    expected = read_gguf_metadata(large.path)
    monkeypatch.setattr(gguf_reader, "_FAST_CHUNK", chunk)
    monkeypatch.setattr(gguf_reader, "_FIRST_BLOCK", block)
    monkeypatch.setattr(gguf_reader, "_MAX_BLOCK", block)
    assert read_gguf_metadata(large.path) == expected


def test_gguf_reader_agrees_on_special_tokens(large: Built) -> None:
    reader = gguf.GGUFReader(large.path)
    tokens = reader.get_field(KEYS.Tokenizer.LIST)
    assert tokens is not None
    meta = read_gguf_metadata(large.path)
    assert meta.bos_token == tokens.contents(5)
    assert meta.eos_token == tokens.contents(2999)
    assert meta.eot_token == tokens.contents(1500)


def test_copy_of_a_file_reads_the_same(tmp_path: Path, small: Built) -> None:
    copy = tmp_path / "copy.gguf"
    shutil.copyfile(small.path, copy)
    assert attrs.evolve(read_gguf_metadata(copy), path=str(small.path)) == read_gguf_metadata(
        small.path
    )


# --- caps on what a file may make the reader keep or walk (issue 23, item 10) ----------


def _raw_file(path: Path, entries: list[bytes], *, claimed: int | None = None,
              size: int | None = None) -> Path:
    """A version-3 header claiming ``claimed`` (default: all) key/value ``entries``."""
    head = b"GGUF" + u32(3) + u64(0) + u64(len(entries) if claimed is None else claimed)
    path.write_bytes(head + b"".join(entries))
    if size is not None:
        with open(path, "r+b") as file:
            file.truncate(size)
    return path


def _key(name: str) -> bytes:
    raw = name.encode()
    return u64(len(raw)) + raw


def _u8_entry(name: str) -> bytes:
    return _key(name) + u32(VT.UINT8) + b"\x01"


def _string_entry(name: str, size: int, fill: bytes = b"a") -> bytes:
    return _key(name) + u32(VT.STRING) + u64(size) + fill * size


def test_a_million_one_byte_keys_are_refused_at_the_header(tmp_path: Path) -> None:
    path = _raw_file(tmp_path / "keys.gguf", [], claimed=1_000_000, size=16 << 20)
    error = expect_error(path)
    assert error.offset == 16
    assert f"limit of {gguf_metadata.MAX_KEYS} keys" in error.reason


def test_a_file_with_as_many_keys_as_the_cap_is_read(tmp_path: Path) -> None:
    entries = [_u8_entry(f"k{i}") for i in range(gguf_metadata.MAX_KEYS)]
    metadata = read_gguf_metadata(_raw_file(tmp_path / "keys.gguf", entries))
    assert len(metadata.scalars) == gguf_metadata.MAX_KEYS


def test_string_values_past_the_total_are_refused_where_they_start(tmp_path: Path) -> None:
    half = gguf_metadata.MAX_STRING_VALUE_BYTES
    entries = [_string_entry("first", half), _string_entry("second", half)]
    path = _raw_file(tmp_path / "strings.gguf", entries)
    error = expect_error(path)
    assert error.offset == 24 + len(entries[0]) + len(_key("second")) + 4
    assert f"more than {gguf_metadata.MAX_STRING_BYTES} bytes in all" in error.reason


def test_long_keys_count_towards_the_total(tmp_path: Path) -> None:
    keys = [_u8_entry(f"{i:05d}" + "k" * 60_000) for i in range(600)]  # 36 MB of keys
    error = expect_error(_raw_file(tmp_path / "long_keys.gguf", keys))
    assert f"more than {gguf_metadata.MAX_STRING_BYTES} bytes in all" in error.reason


def test_millions_of_empty_strings_are_refused_at_the_array_count(tmp_path: Path) -> None:
    path = tmp_path / "empty_strings.gguf"
    count_offset = _sparse_file_with_string_array(path, 1 << 24, (1 << 24) * 8 + 4096)
    error = expect_error(path)
    assert error.offset == count_offset
    assert f"more than {gguf_metadata.MAX_ARRAY_STRINGS} elements in all" in error.reason


@settings(max_examples=40, deadline=None)
@given(keys=st.integers(0, 40), key_length=st.integers(1, 300),
       strings=st.lists(st.integers(0, 900), max_size=8),
       array=st.integers(0, 400), element=st.integers(0, 3))
def test_every_cap_is_enforced_before_the_reader_keeps_more(
        tmp_path_factory: pytest.TempPathFactory, keys: int, key_length: int,
        strings: list[int], array: int, element: int) -> None:
    # Small caps, so random files cross them; the rule is the same at full size.
    caps = {"MAX_KEYS": 24, "MAX_STRING_BYTES": 2000, "MAX_ARRAY_STRINGS": 200}
    entries = [_u8_entry(f"{i:04d}" + "k" * key_length) for i in range(keys)]
    entries += [_string_entry(f"s{i}", size) for i, size in enumerate(strings)]
    entries.append(_key("tokenizer.ggml.merges") + u32(VT.ARRAY) + u32(VT.STRING) + u64(array)
                   + (u64(element) + b"m" * element) * array)
    path = _raw_file(tmp_path_factory.mktemp("caps") / "f.gguf", entries)
    kept = keys * (4 + key_length) + sum(len(f"s{i}") + size for i, size in enumerate(strings))
    kept += len("tokenizer.ggml.merges")
    within = (len(entries) <= caps["MAX_KEYS"] and kept <= caps["MAX_STRING_BYTES"]
              and array <= caps["MAX_ARRAY_STRINGS"])
    try:
        with mock.patch.multiple(gguf_reader, **caps):
            read_gguf_metadata(path)
    except GGUFError as error:
        assert not within, error
        assert "limit" in error.reason
    else:
        assert within
