"""``toolwire chat``: a terminal chat with a local GGUF model or a remote provider.

Streams text as it arrives, shows each tool call and result as it happens,
hides reasoning unless ``--show-reasoning`` (then dims it). ``--json`` prints
every event as a JSON line for scripts. ``--message TEXT`` (or a message piped
on standard input) runs one exchange and exits with status 0 only when the reply
ended normally. Ctrl-C cancels the current reply; a second Ctrl-C exits.
``/save FILE`` and ``--resume FILE`` use the stored tool-exchange format, so a
conversation moves between local and remote backends.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from types import FrameType
from typing import Any, TextIO

from ...backends.protocol import Backend
from ...conversation.cancel import CancelToken
from ...conversation.chat import Chat
from ...errors import ToolwireError
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
from ...hooks.manager import PluginManager
from .common import UsageError
from .tools import add_mcp_arguments, session_tools

__all__ = ["add_chat_arguments", "build_chat", "register", "run_chat"]

DIM, RED, CYAN, RESET = "\x1b[2m", "\x1b[31m", "\x1b[36m", "\x1b[0m"


def add_chat_arguments(parser: argparse.ArgumentParser) -> None:
    """The model and session options shared by ``chat`` and ``serve``."""
    parser.add_argument("--model", help="a .gguf file (local), or the provider's model name")
    parser.add_argument("--provider", help="remote provider preset: openai, ollama, vllm, "
                        "gemini, anthropic, llama_server, custom; or completions (a serving "
                        "engine's text-completion endpoint, prompted with the model's template)")
    parser.add_argument("--base-url", help="the provider's base URL (custom servers, "
                        "completions)")
    parser.add_argument("--template", help="completions: the model's Jinja chat template file")
    parser.add_argument("--model-file", help="completions: the model's GGUF file or "
                        "tokenizer_config.json (its template and special tokens)")
    parser.add_argument("--api", choices=("completions", "llama"), help="completions: the "
                        "endpoint, /v1/completions or llama-server's /completion (default: "
                        "detected)")
    parser.add_argument("--family", help="force the parser family of a local model")
    parser.add_argument("--n-ctx", type=int, help="local context size in tokens")
    parser.add_argument("--max-tokens", type=int, help="reply budget in tokens")
    parser.add_argument("--enable-thinking", action="store_true",
                        help="let a local model reason before answering")
    parser.add_argument("--workspace", default=".", help="folder the tools work in")
    parser.add_argument("--read-only", action="store_true", help="offer only read tools")
    parser.add_argument("--max-tool-iters", type=int, default=10,
                        help="most model turns per message (the last answers without tools)")
    parser.add_argument("--system", help="system prompt (strategy guidance)")
    parser.add_argument("--no-tools", action="store_true",
                        help="offer no plugin tools (MCP servers named are still used)")
    add_mcp_arguments(parser)


def register(subparsers: Any) -> None:
    """Add the ``chat`` command."""
    p = subparsers.add_parser("chat", help="chat with a local GGUF model or a remote provider",
                              description="Chat in the terminal with a local GGUF model or a "
                                          "remote OpenAI-compatible provider, with tools.")
    add_chat_arguments(p)
    p.add_argument("--show-reasoning", action="store_true", help="show reasoning, dimmed")
    p.add_argument("--json", action="store_true", help="print every event as a JSON line")
    p.add_argument("--message", help="run one exchange with this message and exit")
    p.add_argument("--resume", help="continue a conversation saved with /save or --save")
    p.add_argument("--save", help="save the conversation to this file when done")
    p.set_defaults(run=run_chat)


def make_backend(args: argparse.Namespace, plugins: PluginManager) -> Backend:
    """Create the backend the options name (local GGUF or remote provider)."""
    if args.provider == "completions":
        return plugins.backend("completions").create(**_completions_options(args))
    if any(getattr(args, key, None) for key in ("template", "model_file", "api")):
        raise UsageError("--template, --model-file and --api are options of "
                         "--provider completions")
    if args.provider:
        if not args.model:
            raise ToolwireError("--provider needs --model NAME")
        options: dict[str, Any] = {"provider": args.provider, "model": args.model}
        if args.base_url:
            options["base_url"] = args.base_url
        return plugins.backend("openai_compat").create(**options)
    if not args.model:
        raise ToolwireError("give --model PATH.gguf (local) or --provider NAME --model NAME")
    local: dict[str, Any] = {"model_path": args.model, "enable_thinking": args.enable_thinking}
    for key in ("n_ctx", "max_tokens", "family"):
        if getattr(args, key, None) is not None:
            local[key] = getattr(args, key)
    return plugins.backend("llama_cpp").create(**local)


def _completions_options(args: argparse.Namespace) -> dict[str, Any]:
    if not args.base_url:
        raise UsageError("--provider completions needs --base-url URL (the engine's address)")
    options: dict[str, Any] = {"base_url": args.base_url, "enable_thinking": args.enable_thinking}
    for key in ("template", "model_file", "api", "model", "n_ctx", "max_tokens", "family"):
        if getattr(args, key, None) is not None:
            options[key] = getattr(args, key)
    return options


def build_chat(args: argparse.Namespace, plugins: PluginManager,
               backend: Backend | None = None) -> Chat:
    """A :class:`Chat` from command-line options."""
    workspace = Path(args.workspace).resolve()
    tools = session_tools(args, plugins)
    return Chat(backend or make_backend(args, plugins), tools=tools, system_prompt=args.system,
                max_tool_iters=args.max_tool_iters, read_only=args.read_only,
                workspace=workspace, plugins=plugins)


class _Printer:
    """Renders events for a person (or as JSON lines)."""

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
        if self.as_json:
            self.out.write(json.dumps(event.to_dict(), ensure_ascii=False) + "\n")
            self.out.flush()
            return
        if isinstance(event, ReasoningEvent):
            if self.show_reasoning:
                self._write(self._paint(DIM, event.text))
            return
        if isinstance(event, TextEvent):
            self._write(event.text)
        elif isinstance(event, ToolCallEvent):
            args = json.dumps(dict(event.arguments), ensure_ascii=False)
            self._line(self._paint(CYAN, f"-> {event.name}({_clip(args, 300)})"))
        elif isinstance(event, ToolResultEvent):
            mark = "!!" if event.is_error else "<-"
            self._line(self._paint(RED if event.is_error else DIM,
                                   f"{mark} {event.name}: {_clip(event.content, 500)}"))
        elif isinstance(event, ErrorEvent):
            self._line(self._paint(RED, f"error ({event.kind}): {event.message}"))
        elif isinstance(event, NoParserEvent):
            self._line(self._paint(RED, f"note: {event.message}"))
        elif isinstance(event, DiagnosticEvent):
            self._line(self._paint(DIM, f"({event.code}: {event.message})"))
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


class _Interrupts:
    """First Ctrl-C cancels the reply in progress; a second one exits."""

    def __init__(self) -> None:
        self.token: CancelToken | None = None
        self._previous: Any = None

    def __enter__(self) -> _Interrupts:
        self._previous = signal.signal(signal.SIGINT, self._handle)
        return self

    def __exit__(self, *exc: object) -> None:
        signal.signal(signal.SIGINT, self._previous)

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        if self.token is not None and not self.token.cancelled:
            self.token.cancel("interrupted")
            return
        raise KeyboardInterrupt


def _exchange(chat: Chat, message: str, printer: _Printer,
              interrupts: _Interrupts) -> DoneEvent | None:
    token = CancelToken()
    interrupts.token = token
    done = None
    try:
        for event in chat.send(message, cancel=token):
            printer.show(event)
            if isinstance(event, DoneEvent):
                done = event
    finally:
        interrupts.token = None
    return done


def _messages(prompt: Callable[[], str]) -> Iterator[str]:
    while True:
        try:
            line = prompt()
        except EOFError:
            return
        yield line


def run_chat(args: argparse.Namespace, plugins: PluginManager,
             backend: Backend | None = None) -> int:
    """Run ``toolwire chat``; return the exit status."""
    if not args.json:
        source = args.provider or args.model or "?"
        print(f"loading {source} ...", file=sys.stderr, flush=True)
    chat = build_chat(args, plugins, backend)
    if args.resume:
        try:
            records = json.loads(Path(args.resume).read_text(encoding="utf-8"))
            chat.load(records)
        except (OSError, ValueError) as exc:
            raise ToolwireError(f"cannot resume from {args.resume}: {exc}") from exc
    printer = _Printer(sys.stdout, as_json=args.json, show_reasoning=args.show_reasoning,
                       color=sys.stdout.isatty() and not args.json)
    one_shot = args.message
    if one_shot is None and not sys.stdin.isatty():
        one_shot = sys.stdin.read()
    with _Interrupts() as interrupts:
        if one_shot is not None:
            done = _exchange(chat, one_shot, printer, interrupts)
            _save_if_asked(chat, args.save)
            return 0 if done is not None and done.reason == "stop" else 1
        print("toolwire chat: /save FILE, /quit; Ctrl-C cancels a reply, twice exits.",
              file=sys.stderr)
        try:
            for line in _messages(lambda: input("> ")):
                text = line.strip()
                if not text:
                    continue
                if text in ("/quit", "/exit"):
                    break
                if text.startswith("/save"):
                    target = text[len("/save"):].strip()
                    if not target:
                        print("usage: /save FILE", file=sys.stderr)
                        continue
                    _save_if_asked(chat, target)
                    print(f"saved {len(chat.history)} messages to {target}", file=sys.stderr)
                    continue
                _exchange(chat, text, printer, interrupts)
        except KeyboardInterrupt:
            print("", file=sys.stderr)
    _save_if_asked(chat, args.save)
    return 0


def _save_if_asked(chat: Chat, path: str | None) -> None:
    if path:
        Path(path).write_text(json.dumps(chat.save(), ensure_ascii=False, indent=2) + "\n",
                              encoding="utf-8")
