"""The interactive loop of ``toolwire chat``: messages, ``/commands``, line editing.

A line starting with ``/`` is a command, answered here and never sent to the
model or saved (``//text`` sends ``/text``). A message spans several lines when
each but the last ends with ``\\``, or between a line opening with ``\"\"\"`` and
one ending with it. Line editing and history come from the standard library's
:mod:`readline` when it is available; the history is kept in
``$TOOLWIRE_HISTORY_FILE`` (default ``~/.local/state/toolwire/chat_history``).
"""

from __future__ import annotations

import json
import os
import shlex
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, ClassVar, TextIO

from ...conversation.chat import Chat
from ...errors import ToolChoiceError
from ...vocabulary.tool_choice import resolve_tool_choice
from .conversation_file import save_conversation
from .terminal_text import terminal_safe

__all__ = ["COMMANDS", "HISTORY_VARIABLE", "LineEditing", "Repl", "read_message"]

HISTORY_VARIABLE = "TOOLWIRE_HISTORY_FILE"
_HISTORY_LENGTH = 1000
BLOCK = '"""'

COMMANDS = (
    ("/help", "this list"),
    ("/clear", "start the conversation over (the system prompt stays)"),
    ("/system [TEXT]", "show the system prompt, or set it to TEXT ('/system -' removes it)"),
    ("/tools", "list the tools offered, and which change things"),
    ("/read-only [on|off]", "offer only read-only tools, or all of them again"),
    ("/save FILE", "save the conversation (a JSON file --resume and /load read)"),
    ("/load FILE", "replace the conversation with a saved one"),
    ("/quit", "leave (also /exit, Ctrl-D)"),
)
"""The commands and what they do, as ``/help`` shows them."""

INPUT_HELP = (
    'A message ends at the end of the line; end a line with \\ to go on on the next one, '
    'or put it between lines of """. //text sends /text. Ctrl-C cancels a reply (or '
    "clears the line you are typing); Ctrl-D leaves.")


def read_message(read_line: Callable[[str], str], prompt: str = "> ",
                 more: str = "... ") -> str:
    """Read one message: one line, a run of ``\\``-continued lines, or a ``\"\"\"`` block.

    :raises EOFError: the input ended before a message began. (A block cut short
        by the end of input is returned as it is.)
    """
    first = read_line(prompt)
    if first.lstrip().startswith(BLOCK):
        text = first.lstrip()[len(BLOCK):]
        if text.rstrip().endswith(BLOCK):
            return text.rstrip()[:-len(BLOCK)]
        lines = [text] if text else []
        while True:
            try:
                line = read_line(more)
            except EOFError:
                return "\n".join(lines)
            if line.rstrip().endswith(BLOCK):
                last = line.rstrip()[:-len(BLOCK)]
                if last:
                    lines.append(last)
                return "\n".join(lines)
            lines.append(line)
    lines = [first]
    while lines[-1].endswith("\\"):
        lines[-1] = lines[-1][:-1]
        try:
            lines.append(read_line(more))
        except EOFError:
            break
    return "\n".join(lines)


class LineEditing:
    """readline's line editing and a history file, when readline is available.

    :param history_file: where history is loaded from and saved to (``None``:
        ``$TOOLWIRE_HISTORY_FILE``, else ``$XDG_STATE_HOME/toolwire/chat_history``,
        else ``~/.local/state/toolwire/chat_history``).
    """

    def __init__(self, history_file: Path | None = None) -> None:
        self.history_file = history_file or default_history_file()
        self._readline: Any = None
        try:
            import readline
        except ImportError:  # pragma: no cover - Windows without pyreadline
            return
        self._readline = readline
        readline.set_history_length(_HISTORY_LENGTH)
        try:
            readline.read_history_file(self.history_file)
        except (OSError, ValueError):
            pass  # no history yet, or unreadable: start without it

    def forget_last(self) -> None:
        """Drop the last line from the history (an answer to an approval question)."""
        if self._readline is None:
            return
        length = self._readline.get_current_history_length()
        if length:
            self._readline.remove_history_item(length - 1)

    def save(self) -> None:
        """Write the history file (a failure is not worth an error)."""
        if self._readline is None:
            return
        try:
            self.history_file.parent.mkdir(parents=True, exist_ok=True)
            self._readline.write_history_file(self.history_file)
        except OSError:
            pass


def default_history_file() -> Path:
    """Where the chat's line history is kept (see :class:`LineEditing`)."""
    given = os.environ.get(HISTORY_VARIABLE)
    if given:
        return Path(given).expanduser()
    state = os.environ.get("XDG_STATE_HOME")
    base = Path(state) if state else Path.home() / ".local" / "state"
    return base / "toolwire" / "chat_history"


class Repl:
    """The interactive loop: read, answer ``/commands`` locally, send the rest.

    :param chat: the conversation.
    :param send: runs one exchange and prints it.
    :param read_line: shows a prompt and returns a line (``input``).
    :param err: where notices and command answers go.
    :param editing: the line-editing history, saved when the loop ends.
    """

    def __init__(self, chat: Chat, send: Callable[[str], object], *,
                 read_line: Callable[[str], str] = input, err: TextIO | None = None,
                 editing: LineEditing | None = None) -> None:
        self.chat = chat
        self.send = send
        self.read_line = read_line
        self.err = err or sys.stderr
        self.editing = editing

    def run(self) -> None:
        """Read messages until ``/quit`` or the end of input."""
        self._say("toolwire chat: /help lists the commands; Ctrl-C cancels a reply, "
                  "Ctrl-D leaves.")
        try:
            while True:
                try:
                    text = read_message(self.read_line)
                except KeyboardInterrupt:
                    self._say("")  # the line being typed is dropped
                    continue
                except EOFError:
                    self._say("")
                    return
                if not text.strip():
                    continue
                if text.startswith("//"):
                    self.send(text[1:])
                elif text.startswith("/"):
                    if not self.command(text.strip()):
                        return
                else:
                    self.send(text)
        finally:
            if self.editing is not None:
                self.editing.save()

    def command(self, line: str) -> bool:
        """Answer one ``/command``; return ``False`` when the loop should end."""
        name, _, rest = line.partition(" ")
        rest = rest.strip()
        if name in ("/quit", "/exit"):
            return False
        handler = self._HANDLERS.get(name)
        if handler is None:
            self._say(f"unknown command {name} (not sent to the model); /help lists the "
                      "commands, //text sends a message starting with /")
            return True
        handler(self, rest)
        return True

    def _say(self, text: str) -> None:
        # tool descriptions (an MCP server's), loaded files and errors are not ours
        self.err.write(terminal_safe(text) + "\n")
        self.err.flush()

    def _help(self, rest: str) -> None:
        width = max(len(usage) for usage, _ in COMMANDS)
        self._say("\n".join(f"  {usage.ljust(width)}  {what}" for usage, what in COMMANDS))
        self._say(INPUT_HELP)

    def _clear(self, rest: str) -> None:
        self.chat.load([])
        self._say("(conversation cleared)")

    def _system(self, rest: str) -> None:
        if not rest:
            shown = self.chat.system_prompt or "(none)"
            self._say(f"system prompt: {shown}")
            return
        self.chat.system_prompt = None if rest == "-" else rest
        self._say("(system prompt removed)" if rest == "-" else "(system prompt set)")

    def _tools(self, rest: str) -> None:
        offered = self.chat.dispatcher.offered_tools()
        gate = self.chat.dispatcher.approval
        always = gate.always_approved if gate is not None else frozenset()
        if not offered:
            self._say("no tools offered")
        for tool in offered:
            access = "read-only" if tool.read_only else (
                "changes things, approved for this session" if tool.name in always
                else "changes things, asks first" if gate is not None else "changes things")
            summary = tool.description.strip().splitlines()
            self._say(f"  {tool.name}  ({access})" + (f": {summary[0]}" if summary else ""))
        if self.chat.read_only:
            hidden = len(self.chat.registry) - len(offered)
            self._say(f"(read-only: {hidden} tools that change things are not offered; "
                      "/read-only off offers them)")

    def _read_only(self, rest: str) -> None:
        if rest.lower() in ("on", "off"):
            self.chat.read_only = rest.lower() == "on"
            self._fit_tool_choice()
        elif rest:
            self._say("usage: /read-only on|off")
            return
        self._say(f"read-only is {'on' if self.chat.read_only else 'off'}")

    def _fit_tool_choice(self) -> None:
        """A tool choice the offered tools can no longer meet goes back to auto, said once."""
        choice = self.chat.tool_choice
        if choice in ("auto", "none"):
            return
        offered = [t.name for t in self.chat.dispatcher.offered_tools()]
        try:
            resolve_tool_choice(choice, offered)
        except ToolChoiceError:
            wanted = "a tool call" if isinstance(choice, str) else repr(choice["function"]["name"])
            self.chat.tool_choice = "auto"
            self._say(f"(--tool-choice asked for {wanted}, which read-only mode does not "
                      "offer: the model chooses again, as with --tool-choice auto)")

    def _save(self, rest: str) -> None:
        target = _one_path(rest)
        if target is None:
            self._say("usage: /save FILE")
            return
        outcome = save_conversation(self.chat.save, target)
        if not outcome.saved:
            self._say(outcome.message)
            return
        self._say(f"saved {len(self.chat.history)} messages to {target}")

    def _load(self, rest: str) -> None:
        target = _one_path(rest)
        if target is None:
            self._say("usage: /load FILE")
            return
        try:
            records = json.loads(Path(target).read_text(encoding="utf-8"))
            if not isinstance(records, list):
                raise ValueError("the file does not hold a list of messages")
            self.chat.load(records)
        except (OSError, ValueError) as exc:
            self._say(f"cannot load {target}: {exc} (the conversation is unchanged)")
            return
        self._say(f"loaded {len(self.chat.history)} messages from {target}")

    _HANDLERS: ClassVar[dict[str, Callable[[Repl, str], None]]] = {
        "/help": _help, "/clear": _clear, "/system": _system, "/tools": _tools,
        "/read-only": _read_only, "/save": _save, "/load": _load,
    }


def _one_path(text: str) -> str | None:
    """The file a ``/save`` or ``/load`` names (quotes allowed), or ``None``."""
    try:
        parts = shlex.split(text)
    except ValueError:
        return None
    return str(Path(parts[0]).expanduser()) if len(parts) == 1 else None
