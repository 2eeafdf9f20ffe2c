"""How the command line prints a chat's events: for a person, or as JSON lines.

``toolwire chat``, ``toolwire demo`` and ``toolwire demo --real`` show a reply the
same way: text as it streams, each tool call and result on a line of its own,
errors and notes in red, reasoning dimmed (or hidden). Everything the model or a
tool wrote passes :func:`.terminal_text.terminal_safe` (or
:func:`.terminal_text.json_safe` for ``--json``) first.
"""

from __future__ import annotations

import json
from typing import TextIO

from ...events import (
    DiagnosticEvent,
    DoneEvent,
    ErrorEvent,
    Event,
    NoParserEvent,
    ReasoningEvent,
    TextEvent,
    ToolCallEvent,
    ToolResultEvent,
)
from .common import cli_advice
from .terminal_text import json_safe, terminal_safe

__all__ = ["EventPrinter"]

DIM, RED, CYAN, RESET = "\x1b[2m", "\x1b[31m", "\x1b[36m", "\x1b[0m"


class EventPrinter:
    """Renders events for a person (or as JSON lines).

    :param out: where to write.
    :param as_json: each event as a JSON line (its ``to_dict()``), for scripts.
    :param show_reasoning: print the model's reasoning (dimmed), else hide it.
    :param color: paint with ANSI colours (a terminal).
    """

    def __init__(self, out: TextIO, *, as_json: bool, show_reasoning: bool,
                 color: bool) -> None:
        self.out = out
        self.as_json = as_json
        self.show_reasoning = show_reasoning
        self.color = color
        self._in_reasoning = False
        self._line_open = False

    def _paint(self, code: str, text: str) -> str:
        return f"{code}{text}{RESET}" if self.color else text

    def show(self, event: Event) -> None:
        """Print one event; everything the model or a tool wrote is made terminal-safe."""
        if self.as_json:
            self.out.write(json_safe(json.dumps(event.to_dict(), ensure_ascii=False)) + "\n")
            self.out.flush()
            return
        if isinstance(event, ReasoningEvent):
            if self.show_reasoning:
                self._write(self._paint(DIM, terminal_safe(event.text)))
            return
        if isinstance(event, TextEvent):
            self._write(terminal_safe(event.text))
        elif isinstance(event, ToolCallEvent):
            args = json.dumps(dict(event.arguments), ensure_ascii=False)
            self._line(self._paint(CYAN, terminal_safe(f"-> {event.name}({_clip(args, 300)})")))
        elif isinstance(event, ToolResultEvent):
            mark = "!!" if event.is_error else "<-"
            self._line(self._paint(RED if event.is_error else DIM, terminal_safe(
                f"{mark} {event.name}: {_clip(event.content, 500)}")))
        elif isinstance(event, ErrorEvent):
            self._line(self._paint(RED, terminal_safe(
                f"error ({event.kind}): {cli_advice(event.message)}")))
        elif isinstance(event, NoParserEvent):
            self._line(self._paint(RED, terminal_safe(f"note: {cli_advice(event.message)}")))
        elif isinstance(event, DiagnosticEvent):
            self._line(self._paint(DIM, terminal_safe(f"({event.code}: {event.message})")))
        elif isinstance(event, DoneEvent):
            if self._line_open:
                self.out.write("\n")
                self._line_open = False
            if event.reason == "cancelled":
                self._line(self._paint(DIM, "(cancelled)"))
        self.out.flush()

    def _write(self, text: str) -> None:
        self.out.write(text)
        self._line_open = not text.endswith("\n")

    def _line(self, text: str) -> None:
        if self._line_open:
            self.out.write("\n")
        self.out.write(text + "\n")
        self._line_open = False


def _clip(text: str, limit: int) -> str:
    text = text.replace("\n", " ")
    return text if len(text) <= limit else text[: limit - 3] + "..."
