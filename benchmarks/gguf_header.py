"""Benchmark: reading a GGUF model's metadata, toolwire vs ``gguf.GGUFReader``.

The test file is shaped like a real model: a 150,000-token vocabulary (token
strings, an int32 token-type array, a float32 score array), 150,000 merges, a chat
template, 1,000 tensor infos and a tensor-data region that makes the file over
8 GB. The data region is a sparse hole, so the file takes a few megabytes of disk.
It is generated once and cached outside the work tree (a multi-gigabyte file in
the repository would be one ``git add -A`` away from disaster): in
``$TOOLWIRE_BENCH_CACHE`` if set, else in ``<tempdir>/toolwire-bench``.

Targets: :func:`toolwire.gguf.metadata.read_gguf_metadata` takes at most 30 ms
and is at least 50 times faster than ``GGUFReader(path)`` plus reading the
template out of it.

The hostile rows read files built to cost the most the caps allow (issue 23,
item 10): as many one-byte keys as :data:`~toolwire.gguf.metadata.MAX_KEYS`, as
many one-byte strings as :data:`~toolwire.gguf.metadata.MAX_ARRAY_STRINGS` (the
walk's slowest shape), and keys and string values adding up to
:data:`~toolwire.gguf.metadata.MAX_STRING_BYTES`. Target: each under 1 s and
100 MB (peak traced allocations). One more row reads the issue's attack, a
million one-byte keys (10.6 s and 268 MB before the caps), which is now refused
at the header.

Run ``python -m benchmarks.gguf_header [--quick]`` (or ``python -m benchmarks``):
prints a table and writes ``benchmarks/results/gguf_header.json``.
"""

from __future__ import annotations

import os
import random
import struct
import sys
import tempfile
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from typing import Any

import gguf
import numpy as np

from toolwire.errors import GGUFError
from toolwire.gguf.metadata import (
    MAX_ARRAY_STRINGS,
    MAX_KEYS,
    MAX_STRING_BYTES,
    MAX_STRING_VALUE_BYTES,
    read_gguf_metadata,
)

from .harness import print_table, time_runs, write_results

__all__ = ["build_model_file", "report", "run"]

BENCHMARK = "gguf_header"
VOCAB_SIZE = 150_000
MERGE_COUNT = 150_000
TENSOR_COUNT = 1_000
TENSOR_SHAPE = (1_100, 2_048)  # float32: 9 MB each, 9 GB in all
TARGET_MS = 30.0
TARGET_RATIO = 50.0
# Bump when the generated file changes shape, so a stale cache is not reused.
FILE_FORMAT = 1
SPECIAL_TOKENS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")
TEMPLATE = (
    "{%- if tools %}<|im_start|>system\n# Tools\n<tools>\n"
    "{%- for tool in tools %}{{ tool | tojson }}\n{%- endfor %}</tools><|im_end|>\n"
    "{%- endif %}{%- for message in messages %}<|im_start|>{{ message.role }}\n"
    "{{ message.content }}<|im_end|>\n{%- endfor %}"
    "{%- if add_generation_prompt %}<|im_start|>assistant\n{%- endif %}"
)


def cache_dir() -> Path:
    configured = os.environ.get("TOOLWIRE_BENCH_CACHE")
    return Path(configured) if configured else Path(tempfile.gettempdir()) / "toolwire-bench"


def _vocabulary(rng: random.Random) -> list[str]:
    """Byte-level-BPE-like tokens: mostly short, some multi-byte, a few very long."""
    letters = "etaoinshrdlcumwfgypbvkjxqz"
    pieces = [*letters, *letters.upper(), *"0123456789", "Ġ", "Ċ", "é", "ü", "中", "文", "🙂"]
    tokens: list[str] = []
    for index in range(VOCAB_SIZE - len(SPECIAL_TOKENS)):
        if index % 15_000 == 7:
            tokens.append("Ġ" * 150)  # over 256 bytes, like long whitespace tokens
            continue
        length = min(1 + int(rng.expovariate(1 / 5)), 24)
        tokens.append("".join(rng.choice(pieces) for _ in range(length)))
    return [*tokens, *SPECIAL_TOKENS]


def build_model_file(path: Path) -> Path:
    """Write the sparse, model-shaped GGUF file to ``path``."""
    rng = random.Random(20240601)
    tokens = _vocabulary(rng)
    writer = gguf.GGUFWriter(path, "qwen2")
    writer.add_name("Bench-Model-7B-Instruct")
    writer.add_context_length(32_768)
    writer.add_block_count(28)
    writer.add_embedding_length(3_584)
    writer.add_head_count(28)
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("qwen2")
    writer.add_token_list(tokens)
    writer.add_token_types([3 if t in SPECIAL_TOKENS else 1 for t in tokens])
    writer.add_token_scores([rng.uniform(-20.0, 0.0) for _ in tokens])
    writer.add_token_merges(
        [f"{rng.choice(tokens[:5000])} {rng.choice(tokens[:5000])}" for _ in range(MERGE_COUNT)]
    )
    base = VOCAB_SIZE - len(SPECIAL_TOKENS)
    writer.add_bos_token_id(base)
    writer.add_eos_token_id(base + 2)
    writer.add_eot_token_id(base + 2)
    writer.add_add_bos_token(False)
    writer.add_chat_template(TEMPLATE)
    nbytes = TENSOR_SHAPE[0] * TENSOR_SHAPE[1] * 4
    for index in range(TENSOR_COUNT):
        writer.add_tensor_info(f"blk.{index}.weight", TENSOR_SHAPE, np.dtype(np.float32), nbytes)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_ti_data_to_file()
    writer.close()
    alignment = gguf.GGUF_DEFAULT_ALIGNMENT
    data_offset = -(-path.stat().st_size // alignment) * alignment
    padded = -(-nbytes // alignment) * alignment
    with open(path, "r+b") as file:
        # The tensor data: a hole the file system does not store.
        file.truncate(data_offset + padded * TENSOR_COUNT)
    return path


def model_file() -> Path:
    """The cached benchmark file, built on first use."""
    path = cache_dir() / f"{BENCHMARK}-v{FILE_FORMAT}.gguf"
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        partial = path.with_suffix(f".{os.getpid()}.partial")
        build_model_file(partial)
        partial.replace(path)
    return path


def _row(case: str, timing: dict[str, float], **extra: object) -> dict[str, object]:
    return {"benchmark": BENCHMARK, "case": case, **timing, **extra}


def _gguf_reader_template(path: Path) -> str:
    reader = gguf.GGUFReader(path)
    field = reader.get_field(gguf.Keys.Tokenizer.CHAT_TEMPLATE)
    assert field is not None
    template = field.contents()
    assert isinstance(template, str)
    return template


HOSTILE_TARGET_MS = 1000.0
HOSTILE_TARGET_MB = 100.0


def _entries_file(path: Path, write_entries: Callable[[Any], int]) -> Path:
    if not path.exists():
        partial = path.with_suffix(f".{os.getpid()}.partial")
        with open(partial, "wb") as file:
            file.write(b"GGUF" + struct.pack("<IQQ", 3, 0, 0))
            count = write_entries(file)
            file.seek(16)
            file.write(struct.pack("<Q", count))
        partial.replace(path)
    return path


def _key(name: str) -> bytes:
    raw = name.encode()
    return struct.pack("<Q", len(raw)) + raw


def hostile_files() -> dict[str, Path]:
    """The files that cost the reader the most its caps allow, built once."""
    folder = cache_dir()
    folder.mkdir(parents=True, exist_ok=True)

    def keys(file: Any) -> int:
        for index in range(MAX_KEYS):
            file.write(_key(f"k{index}") + struct.pack("<IB", 0, 1))  # UINT8 1
        return MAX_KEYS

    def million_keys(file: Any) -> int:
        entry = struct.pack("<IB", 0, 1)  # UINT8 1
        file.write(b"".join(_key(f"k{index}") + entry for index in range(1_000_000)))
        return 1_000_000

    def strings(file: Any) -> int:
        file.write(_key("tokenizer.ggml.merges") + struct.pack("<IIQ", 9, 8, MAX_ARRAY_STRINGS))
        file.write((struct.pack("<Q", 1) + b"\0") * MAX_ARRAY_STRINGS)
        return 1

    def text(file: Any) -> int:
        first = MAX_STRING_VALUE_BYTES
        second = MAX_STRING_BYTES - first - 2 * len("k0")
        for name, size in (("k0", first), ("k1", second)):
            file.write(_key(name) + struct.pack("<IQ", 8, size) + b"a" * size)
        return 2

    return {
        f"{MAX_KEYS:,} one-byte keys": _entries_file(folder / f"hostile-keys-{MAX_KEYS}.gguf",
                                                     keys),
        f"{MAX_ARRAY_STRINGS:,} one-byte strings": _entries_file(
            folder / f"hostile-strings-{MAX_ARRAY_STRINGS}.gguf", strings),
        f"{MAX_STRING_BYTES:,} bytes of values": _entries_file(
            folder / f"hostile-text-{MAX_STRING_BYTES}.gguf", text),
        "1,000,000 one-byte keys (refused)": _entries_file(
            folder / "hostile-keys-1000000.gguf", million_keys),
    }


def _read_or_error(path: Path) -> None:
    try:
        read_gguf_metadata(path)
    except GGUFError:
        pass


def hostile_rows(quick: bool) -> list[dict[str, object]]:
    """Time and peak memory of reading each hostile file."""
    rows: list[dict[str, object]] = []
    for case, path in hostile_files().items():
        timing = time_runs(lambda path=path: _read_or_error(path), 2 if quick else 5)
        tracemalloc.start()
        _read_or_error(path)
        peak_mb = tracemalloc.get_traced_memory()[1] / 1e6
        tracemalloc.stop()
        rows.append(_row(f"hostile: {case}", timing, file_bytes=path.stat().st_size,
                         peak_mb=round(peak_mb, 1),
                         meets_target=timing["max_ms"] < HOSTILE_TARGET_MS
                         and peak_mb < HOSTILE_TARGET_MB))
    return rows


def run(quick: bool = False) -> list[dict[str, object]]:
    """Time both readers on the model-shaped file, then the hostile files; one row per case."""
    path = model_file()
    # Both readers once: a correctness check, and it warms the page cache.
    metadata = read_gguf_metadata(path)
    if metadata.chat_template != _gguf_reader_template(path):
        raise AssertionError("toolwire and GGUFReader disagree on the chat template")
    if metadata.eos_token != "<|im_end|>":
        raise AssertionError(f"wrong eos token {metadata.eos_token!r}")
    ours = time_runs(lambda: read_gguf_metadata(path), 5 if quick else 50)
    # GGUFReader takes seconds a call; the check above already warmed the cache.
    theirs = time_runs(lambda: _gguf_reader_template(path), 2 if quick else 5, warmup=0)
    ratio = theirs["median_ms"] / ours["median_ms"]
    size = path.stat().st_size
    return [
        _row(
            "toolwire.read_gguf_metadata",
            ours,
            file_bytes=size,
            target_ms=TARGET_MS,
            meets_target=ours["median_ms"] <= TARGET_MS,
        ),
        _row(
            "gguf.GGUFReader + template",
            theirs,
            file_bytes=size,
            ratio=round(ratio, 1),
            target_ratio=TARGET_RATIO,
            meets_target=ratio >= TARGET_RATIO,
        ),
        *hostile_rows(quick),
    ]


def report(rows: list[dict[str, object]]) -> None:
    """Print the rows as a table."""
    print_table(
        rows,
        ["case", "median_ms", "min_ms", "max_ms", "runs", "ratio", "peak_mb", "meets_target"],
        f"GGUF metadata of a {rows[0]['file_bytes']:,}-byte model-shaped file "
        f"(targets: <= {TARGET_MS:g} ms, >= {TARGET_RATIO:g}x faster than GGUFReader), "
        f"and of hostile files (targets: < {HOSTILE_TARGET_MS:g} ms, "
        f"< {HOSTILE_TARGET_MB:g} MB)",
    )


def main(argv: list[str]) -> None:
    rows = run(quick="--quick" in argv)
    report(rows)
    print(f"\nwritten: {write_results(BENCHMARK, rows)}")


if __name__ == "__main__":
    main(sys.argv[1:])
