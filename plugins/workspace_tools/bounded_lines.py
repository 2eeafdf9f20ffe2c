"""Reading a file's lines with a byte bound per line, whatever the file holds.

A file may be one 2 GB line. Lines are read from an open binary stream in
bounded pieces: the first ``line_cap`` bytes of a line are kept, the rest is
skipped (and counted) without ever being held in memory, so reading costs
memory proportional to the bound, not to the file.
"""

from __future__ import annotations

import codecs
from collections.abc import Iterator
from typing import BinaryIO

import attrs

__all__ = ["Line", "bounded_lines", "skip_lines"]

_SKIP_PIECE = 64 * 1024
_BLOCK = 1024 * 1024


@attrs.frozen
class Line:
    """One line of a file, possibly cut.

    :ivar number: 1-based line number.
    :ivar text: the kept text, without its line ending.
    :ivar size: the line's full size in bytes, line ending included.
    :ivar cut: whether ``text`` is only the start of the line.
    """

    number: int
    text: str
    size: int
    cut: bool


def bounded_lines(stream: BinaryIO, line_cap: int, *, first_number: int = 1) -> Iterator[Line]:
    """Yield the lines of ``stream``, each cut to at most ``line_cap`` bytes of text.

    :param first_number: the number of the line the stream is positioned at.
    """
    number = first_number - 1
    while True:
        piece = stream.readline(line_cap + 1)
        if not piece:
            return
        number += 1
        size = len(piece)
        cut = False
        if len(piece) > line_cap and not piece.endswith(b"\n"):
            cut = True
            piece = piece[:line_cap]
            size = line_cap + _skip_rest_of_line(stream, already=1)
        text = _decode(piece if cut else piece.rstrip(b"\n").rstrip(b"\r"), whole=not cut)
        yield Line(number, text, size, cut)


def _skip_rest_of_line(stream: BinaryIO, already: int) -> int:
    """Consume up to and including the next newline; return the bytes consumed plus ``already``.

    ``already`` counts the one byte that was read past the cap before the cut.
    """
    skipped = already
    while True:
        piece = stream.readline(_SKIP_PIECE)
        if not piece:
            return skipped
        skipped += len(piece)
        if piece.endswith(b"\n"):
            return skipped


def _decode(data: bytes, *, whole: bool) -> str:
    """Decode UTF-8, replacing bad bytes; a cut line drops a character cut in half at its end."""
    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
    return decoder.decode(data, final=whole)


def skip_lines(stream: BinaryIO, count: int) -> int:
    """Move past ``count`` newlines, scanning in blocks; return how many were found.

    Fewer than ``count`` means the stream ended first (it is then at its end).
    Memory stays at one block whatever the line lengths.
    """
    found = 0
    while found < count:
        block = stream.read(_BLOCK)
        if not block:
            return found
        in_block = block.count(b"\n")
        if found + in_block < count:
            found += in_block
            continue
        position = -1
        for _ in range(count - found):
            position = block.index(b"\n", position + 1)
        stream.seek(position + 1 - len(block), 1)
        return count
    return found
