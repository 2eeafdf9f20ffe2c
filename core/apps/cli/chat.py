"""``toolwire chat``: a terminal chat with a local GGUF model or a remote provider.

Streams text as it arrives, shows each tool call and result as it happens,
hides reasoning unless ``--show-reasoning`` (then dims it). ``--json`` prints
every event as a JSON line for scripts. ``--message TEXT`` (or a message piped
on standard input; one per line with ``--lines``) runs without a prompt and exits
with status 0 only when every reply ended normally. In a terminal the chat is
interactive (:mod:`.repl`: ``/commands``, multi-line input, history) and asks
before each call of a tool that changes things (:mod:`.approval_prompt`);
``--yes`` approves all, and a run without a prompt refuses them unless
``--allow-write``. Ctrl-C cancels the current reply; a second Ctrl-C exits.
``/save FILE`` and ``--resume FILE`` use the stored tool-exchange format, so a
conversation moves between local and remote backends. ``docs/cli.md`` describes
it all.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import tempfile
import threading
from collections.abc import Callable
from pathlib import Path
from types import FrameType
from typing import Any, Final

from ...conversation.approval import Approver
from ...conversation.chat import Chat
from ...errors import ToolwireError
from ...events import (
    DoneEvent,
)
from ...hooks.manager import PluginManager
from ...limits import DispatchLimits, bound
from ...vocabulary.backend import Backend
from ...vocabulary.cancel import CancelToken
from ...vocabulary.tool_choice import TOOL_CHOICE_MODES, named_tool_choice
from ...vocabulary.tools import Tool
from .approval_prompt import TerminalApprover, refuse_writes
from .common import UsageError, at_least, cli_advice, did_you_mean
from .conversation_file import save_conversation
from .event_printer import EventPrinter
from .model_options import (
    add_generation_arguments,
    check_model_options,
    generation_options,
    model_label,
)
from .models import add_models_dir_argument
from .repl import LineEditing, Repl, default_history_file
from .terminal_text import terminal_safe
from .tools import add_mcp_arguments, session_tools
from .user_functions import add_function_arguments

__all__ = ["add_chat_arguments", "build_chat", "register", "run_chat"]

_FAILED_ENDS = frozenset({"error", "length"})
"""How a reply ends that makes an interactive chat's exit status 1 when it was the last."""


def add_chat_arguments(parser: argparse.ArgumentParser) -> None:
    """The model and session options shared by ``chat`` and ``serve``."""
    parser.add_argument("--model", help="a .gguf file or a name 'toolwire models' lists "
                        "(local), or the provider's model name")
    parser.add_argument("--provider", help="remote provider preset: openai, ollama, vllm, "
                        "gemini, anthropic, llama_server, custom; or completions (a serving "
                        "engine's text-completion endpoint, prompted with the model's template)")
    parser.add_argument("--base-url", help="the provider's base URL (custom servers, "
                        "completions); alone, it means --provider custom")
    parser.add_argument("--template", help="completions: the model's Jinja chat template file")
    parser.add_argument("--model-file", help="completions: the model's GGUF file or "
                        "tokenizer_config.json (its template and special tokens)")
    parser.add_argument("--api", choices=("completions", "llama"), help="completions: the "
                        "endpoint, /v1/completions or llama-server's /completion (default: "
                        "detected)")
    parser.add_argument("--family", help="force the parser family of a local model")
    parser.add_argument("--enable-thinking", action=argparse.BooleanOptionalAction,
                        default=False, help="let a local model reason before answering "
                                            "(default: no)")
    add_models_dir_argument(parser)
    parser.add_argument("--workspace", default=".",
                        help="existing folder the tools work in (default: the current one)")
    parser.add_argument("--read-only", action="store_true", help="offer only read tools")
    iters = bound(DispatchLimits, "max_tool_iters")
    parser.add_argument(str(iters.flag), type=at_least(1), default=iters.default, metavar="N",
                        help=iters.help)
    parser.add_argument("--system", metavar="TEXT", help="system prompt (strategy guidance)")
    parser.add_argument("--no-tools", action="store_true",
                        help="offer no plugin tools (MCP servers and --functions still are)")
    add_function_arguments(parser)
    add_mcp_arguments(parser)
    add_generation_arguments(parser)


def register(subparsers: Any) -> None:
    """Add the ``chat`` command."""
    p = subparsers.add_parser("chat", help="chat with a local GGUF model or a remote provider",
                              description="Chat in the terminal with a local GGUF model or a "
                                          "remote OpenAI-compatible provider, with tools.")
    add_chat_arguments(p)
    p.add_argument("--demo", action="store_true",
                   help="chat with the tiny stand-in model of 'toolwire demo' instead of "
                        "--model/--provider: it calls one of your --functions (else "
                        "search_text in sample notes) and quotes the result")
    p.add_argument("--show-reasoning", action="store_true", help="show reasoning, dimmed")
    p.add_argument("--json", action="store_true", help="print every event as a JSON line")
    p.add_argument("--message", metavar="TEXT",
                   help="run one exchange with this message and exit (standard input, when "
                        "it is not a terminal, is one message too)")
    p.add_argument("--lines", action="store_true",
                   help="with piped standard input: send each non-empty line as its own "
                        "message, in one conversation")
    p.add_argument("--resume", metavar="FILE",
                   help="continue a conversation saved with /save or --save")
    p.add_argument("--save", metavar="FILE", help="save the conversation to this file when done")
    p.add_argument("--tool-choice", metavar="auto|required|none|NAME", default="auto",
                   help="auto (the model decides; the default), required (it must call a "
                        "tool), none (no tools offered), or a tool's name (it must call that "
                        "one); required and NAME apply to the first turn after each message, "
                        "and a local model enforces them with a grammar")
    approval = p.add_argument_group(
        "approval", "an interactive chat asks before each call of a tool that changes things "
                    "(yes / no / always for that tool); a run without a prompt (--message, "
                    "piped input) refuses such calls")
    approval.add_argument("--yes", "-y", action="store_true",
                          help="approve every call without asking")
    approval.add_argument("--allow-write", action="store_true",
                          help="let a run without a prompt (--message, piped input) call "
                               "tools that change things")
    p.set_defaults(run=run_chat)


def make_backend(args: argparse.Namespace, plugins: PluginManager) -> Backend:
    """Create the backend the options name (local GGUF or remote provider).

    The options are checked first (:func:`check_model_options`), unless they
    already were.
    """
    if not getattr(args, "model_options_checked", False):
        check_model_options(args, plugins)
    try:
        return _create_backend(args, plugins)
    except ToolwireError:
        raise  # typed already: main reports it with its own exit status
    except ValueError as exc:  # a backend refuses option values it cannot work with
        raise UsageError(cli_advice(str(exc))) from exc


def _create_backend(args: argparse.Namespace, plugins: PluginManager) -> Backend:
    if args.provider == "completions":
        return plugins.backend("completions").create(**_completions_options(args))
    if any(getattr(args, key, None) for key in ("template", "model_file", "api")):
        raise UsageError("--template, --model-file and --api are options of "
                         "--provider completions")
    if args.provider:
        options: dict[str, Any] = {"provider": args.provider, "model": args.model,
                                   **generation_options(args, "openai_compat")}
        if args.base_url:
            options["base_url"] = args.base_url
        return plugins.backend("openai_compat").create(**options)
    local: dict[str, Any] = {"model_path": args.model, "enable_thinking": args.enable_thinking,
                             **generation_options(args, "llama_cpp")}
    if args.family is not None:
        local["family"] = args.family
    return plugins.backend("llama_cpp").create(**local)


def _completions_options(args: argparse.Namespace) -> dict[str, Any]:
    if not args.base_url:
        raise UsageError("--provider completions needs --base-url URL (the engine's address)")
    options: dict[str, Any] = {"base_url": args.base_url, "enable_thinking": args.enable_thinking,
                               **generation_options(args, "completions")}
    for key in ("template", "model_file", "api", "model", "family"):
        if getattr(args, key, None) is not None:
            options[key] = getattr(args, key)
    return options


def build_chat(args: argparse.Namespace, plugins: PluginManager,
               backend: Backend | None = None, approve: Approver | None = None,
               tools: list[Tool] | None = None) -> Chat:
    """A :class:`Chat` from command-line options (``approve``: see :class:`Chat`;
    ``tools``: the session's tools, when already gathered)."""
    workspace = Path(args.workspace).resolve()
    if tools is None:
        tools = session_tools(args, plugins)
    choice = _tool_choice(getattr(args, "tool_choice", "auto"), tools, args.read_only)
    return Chat(backend or make_backend(args, plugins), tools=tools, system_prompt=args.system,
                max_tool_iters=args.max_tool_iters, read_only=args.read_only,
                workspace=workspace, plugins=plugins, approve=approve, tool_choice=choice)


def _tool_choice(value: str, tools: list[Tool], read_only: bool) -> Any:
    """``--tool-choice``: a mode, or a tool's name (any case) as OpenAI's named form,
    checked against the tools the session offers (only read-only ones under
    ``--read-only``)."""
    offered = [t for t in tools if t.read_only or not read_only]
    if value == "required" and not offered:
        raise UsageError("--tool-choice required: the chat offers no tools")
    if value in TOOL_CHOICE_MODES:
        return value
    names = [t.name for t in offered]
    found = next((n for n in names if n == value), None) or next(
        (n for n in names if n.lower() == value.lower()), None)
    if found is None:
        held = next((t.name for t in tools if t.name.lower() == value.lower()), None)
        if held is not None:
            raise UsageError(f"--tool-choice {value}: {held} changes things, and --read-only "
                             "offers only tools that do not")
        raise UsageError(f"--tool-choice {value}: not auto, required, none or the name of an "
                         f"offered tool{did_you_mean(value, names)}")
    return named_tool_choice(found)


class _Ended(BaseException):
    """``SIGTERM`` or ``SIGHUP`` asked the chat to end (a ``BaseException``, like the
    ``KeyboardInterrupt`` it stands beside, so no handler of errors takes it)."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


_ENDING_SIGNALS = tuple(getattr(signal, name) for name in ("SIGTERM", "SIGHUP")
                        if hasattr(signal, name))
ENDING_GRACE: Final = 5.0
"""Seconds a reply cancelled by ``SIGTERM`` or ``SIGHUP`` has to end before the chat saves
and exits without it."""


class _Interrupts:
    """First Ctrl-C cancels the reply in progress; a second one exits. At a question
    (``prompting``) Ctrl-C interrupts the question and cancels the reply.

    ``SIGTERM`` and ``SIGHUP`` (a ``kill``, a closed terminal) end the chat: a reply in
    progress is cancelled first, so its calls get their results and the conversation
    stays whole, then :class:`_Ended` carries the signal to the caller, which saves.
    A reply that does not end within :data:`ENDING_GRACE` seconds of the signal (a
    server that sends nothing at all) is not waited for: ``stuck`` is called from
    another thread with the signal (``run_chat`` saves what the conversation holds and
    exits).
    """

    def __init__(self, stuck: Callable[[int], None] | None = None) -> None:
        self.token: CancelToken | None = None
        self.prompting = False
        self.ended_by: int | None = None
        self._stuck = stuck
        self._exchange_over = threading.Event()
        self._previous: dict[int, Any] = {}

    def __enter__(self) -> _Interrupts:
        self._previous[signal.SIGINT] = signal.signal(signal.SIGINT, self._handle)
        for signum in _ENDING_SIGNALS:
            self._previous[signum] = signal.signal(signum, self._end)
        return self

    def __exit__(self, *exc: object) -> None:
        for signum, previous in self._previous.items():
            signal.signal(signum, previous)

    def begin(self, token: CancelToken) -> None:
        """An exchange starts, cancelled by ``token``."""
        self._exchange_over.clear()
        self.token = token

    def end(self) -> None:
        """The exchange ended."""
        self.token = None
        self._exchange_over.set()

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        if self.token is not None and not self.token.cancelled:
            self.token.cancel("interrupted")
            if not self.prompting:
                return
        raise KeyboardInterrupt

    def _end(self, signum: int, frame: FrameType | None) -> None:
        first = self.ended_by is None
        self.ended_by = signum
        if self.token is not None:
            self.token.cancel("terminated")
            if not self.prompting:
                if first and self._stuck is not None:
                    threading.Thread(target=self._watch, args=(signum,), daemon=True,
                                     name="toolwire-chat-ending").start()
                return  # the reply ends itself; check_ended raises after it
        raise _Ended(signum)

    def _watch(self, signum: int) -> None:
        if not self._exchange_over.wait(ENDING_GRACE) and self._stuck is not None:
            self._stuck(signum)

    def check_ended(self) -> None:
        """Raise :class:`_Ended` when an ending signal came during the last exchange."""
        if self.ended_by is not None:
            raise _Ended(self.ended_by)


def _exchange(chat: Chat, message: str, printer: EventPrinter,
              interrupts: _Interrupts) -> DoneEvent | None:
    token = CancelToken()
    interrupts.begin(token)
    done = None
    try:
        for event in chat.send(message, cancel=token):
            printer.show(event)
            if isinstance(event, DoneEvent):
                done = event
    finally:
        interrupts.end()
    return done


def run_chat(args: argparse.Namespace, plugins: PluginManager,
             backend: Backend | None = None) -> int:
    """Run ``toolwire chat``; return the exit status.

    Interactive (standard input is a terminal, no ``--message``): the REPL, asking
    before writes unless ``--yes``. Otherwise one exchange (``--message``, or all of
    standard input), or one per line with ``--lines``; writes are refused unless
    ``--allow-write`` or ``--yes``. Status 0 when every reply ended normally.
    """
    if getattr(args, "demo", False) and backend is None:
        return _run_demo_chat(args, plugins)
    if backend is None:
        check_model_options(args, plugins)
    elif not Path(args.workspace).expanduser().is_dir():
        raise UsageError(f"--workspace {args.workspace}: not an existing folder")
    if args.save:
        _check_save_path(args.save)  # at the end of the chat it would be too late to learn
    messages = _non_interactive_messages(args)
    records = _read_resume(args.resume) if args.resume else None
    tools = session_tools(args, plugins)  # --functions files are input too: checked first
    if not args.json:
        label = (model_label(args) if backend is None else "the stand-in model"
                 if getattr(args, "demo", False) else getattr(backend, "name", "model"))
        print(f"loading {label} ...", file=sys.stderr, flush=True)
    final_save = threading.Lock()  # the ending signal's two paths never save at once
    chat_ref: list[Chat] = []

    def stuck(signum: int) -> None:
        with final_save:
            if chat_ref:
                _save_if_asked(chat_ref[0], args.save)
            os._exit(128 + signum)

    interrupts = _Interrupts(stuck)
    editing = LineEditing() if messages is None else None
    if args.yes or (messages is not None and args.allow_write):
        approve: Approver | None = None
    elif messages is None:
        approve = TerminalApprover(guard=interrupts, forget_answer=editing.forget_last
                                   if editing is not None else None)
    else:
        approve = refuse_writes()
    chat = build_chat(args, plugins, backend, approve, tools)
    chat_ref.append(chat)
    if records is not None:
        try:
            chat.load(records)
        except ValueError as exc:
            raise UsageError(f"cannot resume from {args.resume}: {exc}") from exc
    printer = EventPrinter(sys.stdout, as_json=args.json, show_reasoning=args.show_reasoning,
                           color=sys.stdout.isatty() and not args.json)
    last: list[DoneEvent | None] = [None]

    def send(text: str) -> DoneEvent | None:
        last[0] = _exchange(chat, text, printer, interrupts)
        _save_progress(chat, args.save)  # a killed chat loses at most the exchange under way
        interrupts.check_ended()
        return last[0]

    try:
        with interrupts:
            if messages is not None:
                ended = [send(text) for text in messages]
                saved = _save_if_asked(chat, args.save)
                return 0 if saved and all(d is not None and d.reason == "stop"
                                          for d in ended) else 1
            try:
                Repl(chat, send, editing=editing).run()
            except KeyboardInterrupt:
                print("", file=sys.stderr)
    except _Ended as ended_by:
        with final_save:
            _save_if_asked(chat, args.save)
        return 128 + ended_by.signum
    saved = _save_if_asked(chat, args.save)
    # the last reply failed (not cancelled): a script around the chat should know
    failed = last[0] is not None and last[0].reason in _FAILED_ENDS
    return 1 if failed or not saved else 0


DEMO_INTRO = """\
toolwire chat --demo: a tiny stand-in model (random weights) that toolwire just wrote.
llama.cpp runs it for real; a grammar forces what it writes, because random weights
cannot choose a tool: for each message, a call of {target},
then an answer quoting what the tool returned. Everything between is the real path
(template, parser, validation, approval, the tool, its result rendered back).
workspace: {workspace}"""


def _run_demo_chat(args: argparse.Namespace, plugins: PluginManager) -> int:
    """``chat --demo``: the chat, on the stand-in model of ``toolwire demo``, in a
    temporary folder of sample notes removed at the end."""
    if args.model or args.provider or args.base_url:
        raise UsageError("--demo chats with the stand-in model: leave out --model, "
                         "--provider and --base-url")
    from .demo import check_demo_options, make_demo_backend

    check_demo_options(args, "chats with")
    with tempfile.TemporaryDirectory(prefix="toolwire-chat-demo-") as base:
        backend, _, workspace = make_demo_backend(Path(base), plugins)
        args.workspace = str(workspace)
        target = ("the first of your --functions" if args.functions
                  else "search_text in sample notes")
        if not args.json:
            print(DEMO_INTRO.format(target=target, workspace=workspace), file=sys.stderr,
                  flush=True)
        return run_chat(args, plugins, backend=backend)


def _non_interactive_messages(args: argparse.Namespace) -> list[str] | None:
    """The messages of a run without a prompt, or ``None`` for the interactive chat."""
    if args.message is not None:
        if args.lines:
            raise UsageError("--lines reads standard input; leave out --message")
        return [args.message]
    if sys.stdin.isatty():
        if args.lines:
            raise UsageError("--lines reads piped standard input, not a terminal")
        return None
    text = sys.stdin.read()
    if args.lines:
        messages = [line for line in text.splitlines() if line.strip()]
    else:
        messages = [text] if text.strip() else []
    if not messages:
        raise UsageError("standard input was empty: nothing to send (give --message TEXT, or "
                         "run in a terminal for the interactive chat)")
    return messages


def _read_resume(path: str) -> list[Any]:
    try:
        records = json.loads(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise UsageError(f"--resume {path}: file not found") from None
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise UsageError(f"cannot resume from {path}: {exc}") from exc
    if not isinstance(records, list):
        raise UsageError(f"cannot resume from {path}: it does not hold a list of messages "
                         "(the JSON list that /save and --save write)")
    return records


def _check_save_path(path: str) -> None:
    """``--save FILE``: refuse, before the chat, a file that could not be written."""
    target = Path(path).expanduser()
    if target.is_dir():
        raise UsageError(f"--save {path}: is a folder; name a file to save the conversation to")
    folder = target.parent
    if not folder.is_dir():
        what = "is not a folder" if folder.exists() else "does not exist"
        raise UsageError(f"--save {path}: the folder {folder} {what}")
    writable = os.access(target, os.W_OK) if target.exists() else os.access(
        folder, os.W_OK | os.X_OK)
    if not writable:
        raise UsageError(f"--save {path}: cannot write there (permission denied)")


def _save_progress(chat: Chat, path: str | None) -> None:
    """``--save``: write the conversation after an exchange; a failure is said (the file
    keeps its last good save) and tried again after the next one and at the end."""
    if not path:
        return
    outcome = save_conversation(chat.save, path)
    if not outcome.saved:
        print(terminal_safe(f"toolwire: {outcome.message}"), file=sys.stderr, flush=True)


def _save_if_asked(chat: Chat, path: str | None) -> bool:
    """Save to ``path`` when asked; ``False`` when that failed.

    The file is replaced whole or not at all (:mod:`.conversation_file`), and the
    conversation is never lost: one that cannot be written there after all (the
    folder went away, the disk is full) is saved to a file of its own in toolwire's
    state folder, else the temporary folder, and the user is told where and that the
    file asked for is unchanged; were both to fail, the conversation is printed to
    standard error.
    """
    if not path:
        return True
    outcome = save_conversation(chat.save, path, fallback=(
        default_history_file().parent / "unsaved", Path(tempfile.gettempdir())))
    if not outcome.saved:
        print(terminal_safe(f"toolwire: {outcome.message}"), file=sys.stderr, flush=True)
    return outcome.saved
