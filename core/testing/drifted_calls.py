"""The conformance property ``drifted_calls``: what a model writes when it leaves markup out.

The drifts the parsing rules read (a closer left out before the next call, the family's
end-of-turn token inside an open call, several calls in one block) are made from a
turn rendered through the real template and the parser's record
(:mod:`toolwire.testing.drift`); each must read back as the calls rendered, with no
markup or end token in the text.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from hypothesis import reject
from hypothesis import strategies as st

from ..errors import TemplateError
from ..events import DiagnosticEvent, Event
from ..parse.protocol import ParsedReply, ParserSpec, collect_reply
from ..parse.record import CallFormat
from ..templates.assistant_turns import AssistantTurnRenderer, Call, RenderedReply
from . import strategies as tws
from .drift import drifts, end_tokens

__all__ = ["DriftedCalls", "check_calls", "short_repr"]


def short_repr(value: Any, limit: int = 300) -> str:
    """``repr(value)``, cut after ``limit`` characters (for a failure's message)."""
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + "..."


def check_calls(reply: ParsedReply, calls: Sequence[Call], what: str = "calls differ") -> None:
    """The calls read are the calls sent: names and canonical JSON arguments, in order."""
    want = [(n, tws.json_dumps(a)) for n, a in calls]
    got = [(c.name, tws.json_dumps(dict(c.arguments))) for c in reply.tool_calls]
    if got != want:
        raise AssertionError(f"{what}: sent {short_repr(want, 500)}, got {short_repr(got, 500)}")


class DriftedCalls:
    """The ``drifted_calls`` property of :class:`~toolwire.testing.properties.PropertySuite`
    (which provides the parser, the renderer, the markers and ``parse``)."""

    spec: ParserSpec
    renderer: AssistantTurnRenderer | None
    markers: tuple[str, ...]

    def parse(self, pieces: Sequence[str], tools: Sequence[Mapping[str, Any]],
              prompt_tail: str) -> list[Event]:
        raise NotImplementedError

    _DRIFT_TOOLS: tuple[dict[str, Any], ...] = tuple(
        {"type": "function", "function": {
            "name": name, "description": "a probe",
            "parameters": {"type": "object", "properties": {
                "text": {"type": "string", "description": "the text"}},
                "required": ["text"]}}}
        for name in ("probe_first", "probe_second"))

    def _drift_turn(self, values: Sequence[str]) -> tuple[list[Call], RenderedReply] | None:
        assert self.renderer is not None
        calls: list[Call] = [(t["function"]["name"], {"text": v})
                             for t, v in zip(self._DRIFT_TOOLS, values, strict=False)]
        if not self.renderer.parallel_calls:
            calls = calls[:1]
        try:
            return calls, self.renderer.render(calls, tools=list(self._DRIFT_TOOLS))
        except TemplateError:
            return None

    def _drift_skip(self) -> str | None:
        """Why the parser cannot be drifted (``None``: it can)."""
        if not isinstance(self.spec.format, CallFormat):
            return "the parser is not a CallFormat record: its markers to leave out are unknown"
        turn = self._drift_turn(("twdriftone", "twdrifttwo"))
        if turn is None:
            return "the template cannot render the probe calls"
        calls, rendered = turn
        if not drifts(self.spec.format, rendered.text, [c[1]["text"] for c in calls]):
            return ("the family's markup allows no drift: no closing markup between or after "
                    "its calls, no end-of-turn token of its own")
        return None

    def drifted_calls(self, data: st.DataObject, recorder: Any) -> None:
        """A closer left out before the next call, the family's end-of-turn markup inside an
        open call, several calls in one block (where the family allows them): the calls
        still come back, and no markup reaches the text."""
        fmt = self.spec.format
        assert isinstance(fmt, CallFormat)
        words = st.text(alphabet="abcdefghijklmnopqrstuvwxyz", min_size=3, max_size=10)
        values = ["twdrift" + data.draw(words, label="first"),
                  "twdrift" + data.draw(words, label="second")]
        if values[0] == values[1] or values[1].startswith(values[0]):
            reject()
        turn = self._drift_turn(values)
        if turn is None:
            reject()
        calls, rendered = turn
        drift = data.draw(tws.drifted_replies(fmt, rendered.text, values[:len(calls)]),
                          label="drift")
        recorder.example(drift.reply)
        pieces = data.draw(tws.chunkings(drift.reply), label="chunks")
        events = self.parse(pieces, list(self._DRIFT_TOOLS), rendered.prompt_tail)
        reply = collect_reply(events)
        check_calls(reply, calls, f"{drift.shape} ({drift.note})")
        leaked = [m for m in (*self.markers, *end_tokens(fmt)) if m in reply.content]
        if reply.content.strip() or leaked:
            raise AssertionError(f"{drift.shape} ({drift.note}): text {short_repr(reply.content)}")
        errors = [e for e in events if isinstance(e, DiagnosticEvent) and e.code == "parser_error"]
        if errors:
            raise AssertionError(f"the parser reported its own failure: {errors[0].message}")
