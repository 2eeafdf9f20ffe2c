"""Drop an end-of-turn marker that an engine writes out as the reply's last text.

An engine ends a reply at the model's end-of-turn token and normally leaves
that token out of the text. Some write it anyway (llama-server started with
``--special``, engines that leak end tags); the marker must not reach the
parser as text. :class:`EndMarkerTrim` holds back the end of the stream while
it could still be the start of a marker (at most one marker's length, plus
trailing whitespace after a whole one) and, when the reply ends there, drops
it. A marker in the middle of the reply is followed by more text and passes
through unchanged, so the result never depends on how the text was split.
"""

from __future__ import annotations

from collections.abc import Iterable

__all__ = ["EndMarkerTrim"]


class EndMarkerTrim:
    """A stream filter that removes one of ``markers`` when it ends the stream.

    :param markers: end-of-turn texts (the template's marker, EOS, EOT).
    """

    def __init__(self, markers: Iterable[str]) -> None:
        self.markers = tuple(sorted({m for m in markers if m and m.strip() == m},
                                    key=len, reverse=True))
        self._held = ""

    def feed(self, text: str) -> str:
        """The part of ``text`` (after what was held) that cannot be a final marker."""
        if not self.markers:
            return text
        buffer = self._held + text
        keep = self._held_length(buffer)
        cut = len(buffer) - keep
        self._held = buffer[cut:]
        return buffer[:cut]

    def finish(self) -> str:
        """The held text, unless it is a whole marker (with trailing whitespace)."""
        held, self._held = self._held, ""
        return "" if held.rstrip() in self.markers else held

    def _held_length(self, buffer: str) -> int:
        stripped = buffer.rstrip()
        for marker in self.markers:  # a whole marker, maybe followed by whitespace
            if stripped.endswith(marker):
                return len(buffer) - len(stripped) + len(marker)
        best = 0
        for marker in self.markers:  # the start of a marker at the very end
            for size in range(min(len(marker) - 1, len(buffer)), best, -1):
                if buffer.endswith(marker[:size]):
                    best = size
                    break
        return best
