"""The binary reading behind :func:`toolwire.gguf.metadata.read_gguf_metadata`.

Plain :mod:`struct` on blocks read from the file, every length and count checked
against the bytes left before anything is read or allocated (see the module doc
of :mod:`toolwire.gguf.metadata` for the rules and the caps).
"""

from __future__ import annotations

import bisect
import io
import struct
from collections.abc import Callable, Mapping
from typing import Any, Final

import attrs
import numpy as np
from gguf import GGUF_MAGIC, GGUFValueType, Keys

from ..errors import GGUFError
from .constants import (
    MAX_ARRAY_STRINGS,
    MAX_KEYS,
    MAX_STRING_BYTES,
    MAX_STRING_VALUE_BYTES,
    NAMED_TEMPLATE_PREFIX,
    TEMPLATE_KEY,
)

__all__ = ["read_fields"]

_MAGIC: Final = struct.pack("<I", GGUF_MAGIC)
_SUPPORTED_VERSIONS: Final = (2, 3)
# The GGUF spec limits keys to 65535 bytes; a longer one is corrupt.
_MAX_KEY_BYTES: Final = 65535
# Smallest possible entries, used to reject absurd counts before looping on them:
# a kv is a key (8-byte length + at least 1 byte), a type and at least 1 byte of
# value; a tensor info is a name length, a dimension count, a type and an offset.
_MIN_KV_BYTES: Final = 8 + 1 + 4 + 1
_MIN_TENSOR_INFO_BYTES: Final = 8 + 4 + 4 + 8

# Reads start small (most headers fit) and double up to a cap, so a read never
# runs far past the key/value section into tensor infos or tensor data.
_FIRST_BLOCK: Final = 64 * 1024
_MAX_BLOCK: Final = 1024 * 1024
# Below this many elements the numpy walker's setup costs more than it saves.
_FAST_WALK_MIN: Final = 512
# The numpy walker scans at most this many bytes per call, which bounds its
# temporary arrays (at worst, in a run of zeros, some 40 bytes per byte scanned).
# 128-256 KiB measured fastest: the arrays stay in cache.
_FAST_CHUNK: Final = 256 * 1024
# Bytes per string assumed until the walker has measured some; real
# vocabularies average 10-20.
_FAST_FIRST_GUESS: Final = 32
# How often the plain walker leaves a mark for token look-ups.
_SLOW_MARK_EVERY: Final = 4096

_TOKENS_KEY: Final = Keys.Tokenizer.LIST
_TOKEN_ID_KEYS: Final = {
    "bos": Keys.Tokenizer.BOS_ID,
    "eos": Keys.Tokenizer.EOS_ID,
    "eot": Keys.Tokenizer.EOT_ID,
}

_FIXED_FORMATS: Final[Mapping[int, str]] = {
    GGUFValueType.UINT8: "B",
    GGUFValueType.INT8: "b",
    GGUFValueType.UINT16: "H",
    GGUFValueType.INT16: "h",
    GGUFValueType.UINT32: "I",
    GGUFValueType.INT32: "i",
    GGUFValueType.FLOAT32: "f",
    GGUFValueType.BOOL: "B",  # read as a byte so values other than 0 and 1 are caught
    GGUFValueType.UINT64: "Q",
    GGUFValueType.INT64: "q",
    GGUFValueType.FLOAT64: "d",
}

_Unpack = Callable[[memoryview, int], tuple[int]]


def read_fields(file: io.RawIOBase, name: str, size: int) -> dict[str, Any]:
    """Read the header and key/value section: the keyword arguments of ``GGUFMetadata``.

    :raises GGUFError: the file is malformed or hostile.
    """
    return _read(_Source(file, name, size))


class _Codec:
    """The struct readers for one byte order."""

    def __init__(self, order: str) -> None:
        self.little_endian = order == "<"
        self.u32: _Unpack = struct.Struct(order + "I").unpack_from
        self.u64: _Unpack = struct.Struct(order + "Q").unpack_from
        self.fixed: dict[int, tuple[int, Callable[[memoryview, int], tuple[object]]]] = {
            vtype: (struct.calcsize(fmt), struct.Struct(order + fmt).unpack_from)
            for vtype, fmt in _FIXED_FORMATS.items()
        }


_LITTLE: Final = _Codec("<")
_BIG: Final = _Codec(">")


class _Source:
    """A forward cursor over a file, reading it in growing blocks.

    Every read is checked against the file size first, so a hostile length can
    neither make us allocate more than the file holds nor read past its end.
    """

    def __init__(self, file: io.RawIOBase, path: str, size: int) -> None:
        self.file = file
        self.path = path
        self.size = size
        self.codec = _LITTLE
        # One buffer, refilled in place: allocating a fresh block per read makes
        # the allocator map and unmap memory each time, and the page faults cost
        # more than the parsing.
        self.store = bytearray()
        self.buf = memoryview(self.store)  # the bytes read, a prefix of store
        self.base = 0  # file offset of buf[0]
        self.pos = 0  # cursor, as an index into buf
        self.block = _FIRST_BLOCK
        self.scratch: _Scratch | None = None  # work arrays of the numpy walker
        self.text_bytes = 0  # keys and string values read into memory so far

    @property
    def offset(self) -> int:
        return self.base + self.pos

    @property
    def remaining(self) -> int:
        return self.size - self.offset

    def error(self, message: str, offset: int | None = None) -> GGUFError:
        return GGUFError(message, path=self.path, offset=self.offset if offset is None else offset)

    def seek(self, offset: int) -> None:
        self.buf = self.buf[:0]
        self.base = offset
        self.pos = 0

    def ensure(self, count: int, what: str, hint: int = 0) -> None:
        """Make ``count`` bytes at the cursor available in ``buf``.

        ``hint`` is how many bytes the caller expects to want soon: a large array
        is then fetched in one read, and the read past its end stays small.
        Without a hint, reads grow geometrically.
        """
        if self.pos + count <= len(self.buf):
            return
        if count > self.remaining:
            raise self.error(
                f"file ends inside {what}: {count} bytes needed, {self.remaining} left"
            )
        offset = self.offset
        if hint:
            want = max(count, min(hint, _MAX_BLOCK))
        else:
            want = max(count, self.block)
            self.block = min(self.block * 2, _MAX_BLOCK)
        want = min(want, self.size - offset)
        if len(self.store) < want:
            self.store = bytearray(want)
        view = memoryview(self.store)[:want]
        self.file.seek(offset)
        got = 0
        while got < want:  # a raw read may return less than asked
            more = self.file.readinto(view[got:])
            if not more:
                raise self.error(f"file shrank while being read (expected {self.size} bytes)")
            got += more
        self.buf = view
        self.base = offset
        self.pos = 0

    def skip(self, count: int, what: str) -> None:
        if count > self.remaining:
            raise self.error(
                f"{what} of {count} bytes runs past the end of the file ({self.remaining} left)"
            )
        self.pos += count
        if self.pos > len(self.buf):
            self.seek(self.base + self.pos)

    def read(self, count: int, what: str) -> bytes:
        self.ensure(count, what)
        start = self.pos
        self.pos += count
        return bytes(self.buf[start : self.pos])

    def read_u32(self, what: str) -> int:
        self.ensure(4, what)
        (value,) = self.codec.u32(self.buf, self.pos)
        self.pos += 4
        return value

    def read_u64(self, what: str) -> int:
        self.ensure(8, what)
        (value,) = self.codec.u64(self.buf, self.pos)
        self.pos += 8
        return value

    def keep_text(self, length: int, what: str, offset: int) -> None:
        """Count ``length`` more bytes of keys and strings kept in memory."""
        self.text_bytes += length
        if self.text_bytes > MAX_STRING_BYTES:
            raise self.error(
                f"{what} brings the keys and string values to more than "
                f"{MAX_STRING_BYTES} bytes in all (the limit)", offset)

    def read_text(self, what: str, limit: int) -> str:
        """Read a length-prefixed UTF-8 string of at most ``limit`` bytes."""
        offset = self.offset
        length = self.read_u64(f"{what} length")
        if length > self.remaining:
            raise self.error(
                f"{what} of {length} bytes runs past the end of the file "
                f"({self.remaining} bytes left)",
                offset,
            )
        if length > limit:
            raise self.error(f"{what} of {length} bytes exceeds the {limit}-byte limit", offset)
        self.keep_text(length, what, offset)
        raw = self.read(length, what)
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise self.error(
                f"{what} is not valid UTF-8 (bad byte at string index {exc.start})", offset
            ) from None

    def skip_strings(self, count: int, marks: list[tuple[int, int]] | None = None) -> None:
        """Advance past ``count`` length-prefixed strings without decoding them.

        If ``marks`` is given, ``(index, offset)`` of the string at the start of
        every chunk walked is appended to it (chunks are at most
        :data:`_FAST_CHUNK` bytes or :data:`_SLOW_MARK_EVERY` strings), so that a
        later look-up can start near the string it wants.
        """
        done = 0
        fast = self.codec.little_endian and count >= _FAST_WALK_MIN
        per_string = _FAST_FIRST_GUESS  # bytes per string, learnt as we go
        while done < count:
            left = count - done
            # A little more than the rest of the array should need, so that neither
            # the read nor the numpy scan runs far into whatever follows it.
            expected = left * per_string * 5 // 4 + 4096
            self.ensure(8, "a string length", hint=expected)
            if marks is not None:
                marks.append((done, self.offset))
            buf, pos = self.buf, self.pos
            walked = 0
            if fast:
                window = min(_FAST_CHUNK, expected)
                if self.scratch is None:
                    self.scratch = _Scratch(_FAST_CHUNK)
                walked, after, last, gave_up = _walk_strings_fast(
                    buf, pos, left, window, self.scratch
                )
                fast = not gave_up
            if not walked:
                limit = left if marks is None else min(left, _SLOW_MARK_EVERY)
                walked, after, last = _walk_strings(buf, pos, limit, self.codec.u64)
            per_string = max(9, -(-(after - pos) // walked))
            # Walkers stop once a header leaves the buffer, so only the last string
            # walked can extend past it, and only it needs the end-of-file check.
            end = self.base + after
            if end > self.size:
                payload = self.base + last + 8
                raise self.error(
                    f"string of {end - payload} bytes runs past the end of the file "
                    f"({self.size - payload} bytes left)",
                    self.base + last,
                )
            if after > len(buf):
                self.seek(end)
            else:
                self.pos = after
            done += walked


class _Scratch:
    """Two boolean work arrays for :func:`_walk_strings_fast`, reused across calls.

    Fresh arrays on every call would come from, and go back to, the operating
    system (they are too big for the allocator to keep), and those page faults
    would cost as much as the scan itself.
    """

    def __init__(self, size: int) -> None:
        self.a = np.empty(size, dtype=np.bool_)
        self.b = np.empty(size, dtype=np.bool_)


def _walk_strings(buf: memoryview, pos: int, count: int, unpack: _Unpack) -> tuple[int, int, int]:
    """Walk up to ``count`` strings from ``buf[pos]`` one length at a time.

    Stops early when the next length field is not wholly in ``buf``. Returns the
    number walked, the index after the last one (possibly past ``buf``), and the
    index of the last one's length field.
    """
    limit = len(buf) - 8
    last = pos
    walked = 0
    while walked < count and pos <= limit:
        last = pos
        pos += 8 + unpack(buf, pos)[0]
        walked += 1
    return walked, pos, last


def _walk_strings_fast(
    buf: memoryview, pos: int, count: int, window: int, scratch: _Scratch | None = None
) -> tuple[int, int, int, bool]:
    """Walk little-endian strings like :func:`_walk_strings`, vectorised with numpy.

    A Python loop over a 150,000-string vocabulary costs about 10 ms; this costs
    about a third of that. Almost every string in a real vocabulary is shorter than
    256 bytes, so its length field is one length byte and seven zero bytes. We find
    every such pattern in the window at once ("candidates"), compute where each
    would end, and follow the chain from ``pos``: a run of candidates in which each
    one ends where the next begins is walked in one step. The chain is exact, not
    a guess: a string really at the cursor with a short length is always a
    candidate, a stray pattern inside string bytes is never reached because we
    only jump to where the previous string ends, and a string of 256 bytes or more
    is stepped over with one struct read.

    Returns ``(walked, after, last)`` as :func:`_walk_strings` does, plus
    ``gave_up``: runs kept breaking (many long strings, or stray patterns such as a
    run of zeros), so the caller should go on with the plain walker, which is
    faster there. ``scratch`` holds the boolean work arrays (made if absent).
    """
    span = min(len(buf) - pos, window)
    if span < 16:
        return 0, pos, pos, False
    if scratch is None or len(scratch.a) < span:
        scratch = _Scratch(span)
    data = np.frombuffer(buf, dtype=np.uint8, count=span, offset=pos)
    # short[p]: bytes p+1..p+7 are zero, i.e. the u64 at p is below 256. Built by
    # doubling: zeros, pairs of zeros, fours, then two overlapping fours make seven.
    zero = np.equal(data, 0, out=scratch.a[:span])
    pairs = np.logical_and(zero[:-1], zero[1:], out=scratch.b[: span - 1])
    fours = np.logical_and(pairs[:-2], pairs[2:], out=scratch.a[: span - 3])
    short = np.logical_and(fours[1 : span - 6], fours[4 : span - 3], out=scratch.b[: span - 7])
    starts = np.flatnonzero(short)
    ends = starts + 8
    ends += data[starts]
    # Index i ends a run when candidate i does not end where candidate i+1 starts.
    run_ends = np.append(np.flatnonzero(ends[:-1] != starts[1:]), len(starts) - 1)
    unpack = _LITTLE.u64
    walked = 0
    cursor = 0  # the next string's length field, relative to pos
    last = 0
    steps = 0
    while walked < count and cursor + 8 <= span:
        steps += 1
        if steps > 64 and steps * 16 > walked:
            return walked, pos + cursor, pos + last, True
        j = int(np.searchsorted(starts, cursor))
        if j < len(starts) and int(starts[j]) == cursor:
            run_end = int(run_ends[int(np.searchsorted(run_ends, j))])
            k = min(run_end, j + count - walked - 1)
            walked += k - j + 1
            last = int(starts[k])
            cursor = int(ends[k])
        else:
            # Not a candidate: a string of 256 bytes or more.
            last = cursor
            cursor += 8 + unpack(buf, pos + cursor)[0]
            walked += 1
    return walked, pos + cursor, pos + last, False


@attrs.define
class _Section:
    """What the key/value section yielded, before it is checked and assembled."""

    scalars: dict[str, object] = attrs.Factory(dict)
    value_offsets: dict[str, int] = attrs.Factory(dict)
    tokens_offset: int | None = None  # the first element of tokenizer.ggml.tokens
    tokens_end: int = 0
    token_count: int = 0
    # (index, offset) of tokens seen while skipping the array, to restart from.
    token_marks: list[tuple[int, int]] = attrs.Factory(list)
    strings_walked: int = 0


def _read(source: _Source) -> dict[str, Any]:
    version, tensor_count, kv_count = _read_header(source)
    section = _Section()
    seen: set[str] = set()
    for _ in range(kv_count):
        _read_entry(source, section, seen)
    # Tensor infos follow; we never parse them, but a count that cannot fit is corrupt.
    if tensor_count > source.remaining // _MIN_TENSOR_INFO_BYTES:
        raise source.error(
            f"tensor count {tensor_count} cannot fit in the {source.remaining} bytes "
            "after the metadata",
            8,
        )
    return _assemble(source, section, version, tensor_count, kv_count)


def _read_header(source: _Source) -> tuple[int, int, int]:
    magic = source.read(4, "the magic number")
    if magic != _MAGIC:
        raise source.error(f"not a GGUF file: magic is {magic!r}, expected {_MAGIC!r}", 0)
    raw = source.read(4, "the version")
    little, big = int.from_bytes(raw, "little"), int.from_bytes(raw, "big")
    if little in _SUPPORTED_VERSIONS:
        source.codec = _LITTLE
        version = little
    elif big in _SUPPORTED_VERSIONS:
        source.codec = _BIG  # a big-endian file: the version reads byteswapped
        version = big
    elif 1 in (little, big):
        raise source.error("GGUF version 1 is not supported (only versions 2 and 3)", 4)
    else:
        raise source.error(f"unsupported GGUF version {little} (only versions 2 and 3)", 4)
    tensor_count = source.read_u64("the tensor count")
    kv_count = source.read_u64("the key/value count")
    if kv_count > MAX_KEYS:
        raise source.error(f"key/value count {kv_count} exceeds the limit of {MAX_KEYS} keys", 16)
    if kv_count > source.remaining // _MIN_KV_BYTES:
        raise source.error(
            f"key/value count {kv_count} cannot fit in the {source.remaining} bytes that follow",
            16,
        )
    return version, tensor_count, kv_count


def _read_entry(source: _Source, section: _Section, seen: set[str]) -> None:
    key_offset = source.offset
    key = _read_key(source)
    if key in seen:
        raise source.error(f"duplicate key {key!r}", key_offset)
    seen.add(key)
    type_offset = source.offset
    vtype = source.read_u32(f"the value type of {key!r}")
    value_offset = source.offset
    if vtype == GGUFValueType.ARRAY:
        _skip_array(source, section, key)
        return
    section.scalars[key] = _read_scalar(source, key, vtype, type_offset)
    section.value_offsets[key] = value_offset


def _read_key(source: _Source) -> str:
    offset = source.offset
    key = source.read_text("a key", _MAX_KEY_BYTES)
    if not key:
        raise source.error("empty key", offset)
    return key


def _read_scalar(source: _Source, key: str, vtype: int, type_offset: int) -> object:
    if vtype == GGUFValueType.STRING:
        return source.read_text(f"the string value of {key!r}", MAX_STRING_VALUE_BYTES)
    fixed = source.codec.fixed.get(vtype)
    if fixed is None:
        raise source.error(f"unknown value type {vtype} for key {key!r}", type_offset)
    size, unpack = fixed
    offset = source.offset
    source.ensure(size, f"the value of {key!r}")
    (value,) = unpack(source.buf, source.pos)
    source.pos += size
    if vtype == GGUFValueType.BOOL:
        if value not in (0, 1):
            raise source.error(f"bool value of {key!r} is {value}, not 0 or 1", offset)
        return bool(value)
    return value


def _skip_array(source: _Source, section: _Section, key: str) -> None:
    type_offset = source.offset
    etype = source.read_u32(f"the element type of array {key!r}")
    count_offset = source.offset
    count = source.read_u64(f"the length of array {key!r}")
    if etype == GGUFValueType.ARRAY:
        raise source.error(
            f"array {key!r} holds arrays; nested arrays are not supported", type_offset
        )
    if etype == GGUFValueType.STRING:
        _skip_string_array(source, section, key, count, count_offset)
        return
    fixed = source.codec.fixed.get(etype)
    if fixed is None:
        raise source.error(f"unknown element type {etype} in array {key!r}", type_offset)
    if key == _TOKENS_KEY:
        raise source.error(f"{key!r} must be an array of strings", type_offset)
    size = fixed[0]
    if count > source.remaining // size:
        raise source.error(
            f"array {key!r} of {count} {size}-byte elements runs past the end of the file "
            f"({source.remaining} bytes left)",
            count_offset,
        )
    source.skip(count * size, f"array {key!r}")


def _skip_string_array(
    source: _Source, section: _Section, key: str, count: int, count_offset: int
) -> None:
    # Every string has an 8-byte length field, so this bounds count by the file size.
    if count > source.remaining // 8:
        raise source.error(
            f"array {key!r} of {count} strings needs at least {count * 8} bytes, "
            f"{source.remaining} left",
            count_offset,
        )
    section.strings_walked += count
    if section.strings_walked > MAX_ARRAY_STRINGS:
        raise source.error(
            f"string arrays hold more than {MAX_ARRAY_STRINGS} elements in all (the limit)",
            count_offset,
        )
    marks = None
    if key == _TOKENS_KEY:
        section.tokens_offset = source.offset
        section.token_count = count
        marks = section.token_marks
    source.skip_strings(count, marks)
    if marks is not None:
        section.tokens_end = source.offset


def _assemble(
    source: _Source, section: _Section, version: int, tensor_count: int, kv_count: int
) -> dict[str, Any]:
    architecture = _optional_str(source, section, Keys.General.ARCHITECTURE)
    named = {
        key[len(NAMED_TEMPLATE_PREFIX) :]: _require_str(source, section, key)
        for key in section.scalars
        if key.startswith(NAMED_TEMPLATE_PREFIX) and len(key) > len(NAMED_TEMPLATE_PREFIX)
    }
    context_length = None
    if architecture is not None:
        context_key = Keys.LLM.CONTEXT_LENGTH.format(arch=architecture)
        context_length = _optional_int(source, section, context_key)
    tokens = _read_special_tokens(source, section)
    return dict(
        path=source.path,
        version=version,
        architecture=architecture,
        name=_optional_str(source, section, Keys.General.NAME),
        chat_template=_optional_str(source, section, TEMPLATE_KEY),
        named_chat_templates=named,
        bos_token=tokens.get("bos"),
        eos_token=tokens.get("eos"),
        eot_token=tokens.get("eot"),
        context_length=context_length,
        tensor_count=tensor_count,
        kv_count=kv_count,
        scalars=section.scalars,
    )


def _optional_str(source: _Source, section: _Section, key: str) -> str | None:
    if key not in section.scalars:
        return None
    return _require_str(source, section, key)


def _require_str(source: _Source, section: _Section, key: str) -> str:
    value = section.scalars[key]
    if not isinstance(value, str):
        raise source.error(f"{key!r} must be a string", section.value_offsets[key])
    return value


def _optional_int(source: _Source, section: _Section, key: str) -> int | None:
    if key not in section.scalars:
        return None
    value = section.scalars[key]
    if isinstance(value, bool) or not isinstance(value, int):
        raise source.error(f"{key!r} must be an integer", section.value_offsets[key])
    return value


def _first(mark: tuple[int, int]) -> int:
    return mark[0]


def _read_special_tokens(source: _Source, section: _Section) -> dict[str, str]:
    """Look up the bos/eos/eot token strings by id in ``tokenizer.ggml.tokens``."""
    wanted: dict[int, list[str]] = {}
    for role, key in _TOKEN_ID_KEYS.items():
        token_id = _optional_int(source, section, key)
        if token_id is None or section.tokens_offset is None:
            continue  # no id, or no vocabulary to look it up in (e.g. an adapter)
        if not 0 <= token_id < section.token_count:
            raise source.error(
                f"{key!r} is {token_id}, outside the vocabulary of {section.token_count} tokens",
                section.value_offsets[key],
            )
        wanted.setdefault(token_id, []).append(role)
    found: dict[str, str] = {}
    if not wanted or section.tokens_offset is None:
        return found
    # The array was fully walked and bounds-checked already. For each wanted id, in
    # order, restart from the nearest mark before it (or go on from the previous
    # token if that is nearer) and read just that entry.
    marks = section.token_marks
    index = -1
    for token_id in sorted(wanted):
        mark_index, mark_offset = marks[bisect.bisect_right(marks, token_id, key=_first) - 1]
        if mark_index > index:
            source.seek(mark_offset)
            # Fetch the rest of the array in one read; the walker would guess.
            source.ensure(8, "a string length", hint=section.tokens_end - mark_offset)
            index = mark_index
        source.skip_strings(token_id - index)
        text = source.read_text(f"token {token_id}", MAX_STRING_VALUE_BYTES)
        index = token_id + 1
        for role in wanted[token_id]:
            found[role] = text
    return found
