"""Small building blocks for streaming parsers and filters.

They keep the rules that every family shares in one place: how much trailing
whitespace to hold back before a possible tag, how to recognise a tag that has
only partly arrived. Both work on the current delta only, never on what was
already consumed.
"""

from __future__ import annotations

__all__ = ["HeldWhitespace", "partial_tag_start"]


def partial_tag_start(data: str, start: int, tags: tuple[str, ...]) -> int:
    """Return where a trailing, incomplete prefix of any of ``tags`` begins.

    Scans only the last ``max(len(tag)) - 1`` characters of ``data[start:]``, for
    the first characters the tags begin with (``<`` for XML-ish tags, ``[`` for
    ``[THINK]``...). Returns ``len(data)`` when the end of ``data`` cannot be the
    start of a tag.
    """
    n = len(data)
    lo = max(start, n - max(len(t) for t in tags) + 1)
    best = n
    for first in {t[0] for t in tags if t}:
        k = data.find(first, lo)
        while k != -1 and k < best:
            tail = data[k:]
            if any(tag.startswith(tail) for tag in tags):
                best = k
                break
            k = data.find(first, k + 1)
    return best


class HeldWhitespace:
    """Holds a segment's trailing whitespace until it is known what follows.

    Whitespace right before a tag is a separator the template wrote, not reply
    text; anywhere else it is text. At most :attr:`LIMIT` characters are held, so
    a reply of megabytes of blanks still streams; the rule depends only on the
    text, never on how it was chunked.
    """

    LIMIT = 64

    __slots__ = ("held",)

    def __init__(self) -> None:
        self.held = ""

    def push(self, text: str) -> str:
        """Add text; return the part that is certainly not trailing whitespace."""
        if not text:
            return ""
        if not self.held and not text[-1].isspace():
            return text
        stripped = text.rstrip()
        if not stripped:
            combined = self.held + text
            if len(combined) > self.LIMIT:
                self.held = combined[-self.LIMIT:]
                return combined[: -self.LIMIT]
            self.held = combined
            return ""
        tail = text[len(stripped):]
        out = self.held + stripped
        if len(tail) > self.LIMIT:
            out += tail[: -self.LIMIT]
            tail = tail[-self.LIMIT:]
        self.held = tail
        return out

    def release(self) -> str:
        """Text continues: return the held whitespace (it was text after all)."""
        held, self.held = self.held, ""
        return held

    def drop(self) -> None:
        """A tag follows: the held whitespace was a separator."""
        self.held = ""
