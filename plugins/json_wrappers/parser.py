"""The parser of every JSON-wrapper family, configured by a :class:`.formats.WrapperFormat`."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from toolwire.parse.call_sections import PARTIAL, SectionParser, SectionReader, read_name

from .formats import WrapperFormat
from .readers import FunctionTag, Recipient, WrappedCalls

__all__ = ["WrapperParser"]


class WrapperParser(SectionParser):
    """One reply's parser for one wrapper format: ``feed`` deltas, then ``close``."""

    def __init__(self, fmt: WrapperFormat, tools: Mapping[str, Any]) -> None:
        super().__init__(tools, family=fmt.family, openers=fmt.openers, drops=fmt.drops,
                         at_start=fmt.at_start)
        self._format = fmt

    def open_section(self, marker: str) -> SectionReader:
        """The reader of the format's body."""
        fmt = self._format
        if fmt.body == "function_tag":
            return FunctionTag(self.numbering)
        if fmt.body == "recipient":
            return Recipient(self.numbering, at_start=False)
        return WrappedCalls(fmt.shape, self.numbering, close=fmt.close,
                            several_objects=fmt.several_objects, fence=fmt.fence,
                            opened_list=fmt.opened_list, plain_opener=fmt.plain_opener)

    def open_at_start(self, data: str, pos: int, eof: bool) -> SectionReader | bool | None:
        """Functionary v3.2's prompt ends with ``>>>``: the reply begins with a recipient."""
        if self._format.body != "recipient" or data.startswith(">>>", pos):
            return None
        found, _, _ = read_name(data, pos, ("\n",), eof)
        if found == PARTIAL:  # the first line is not complete yet
            return False
        return Recipient(self.numbering, at_start=True)
