"""The ``toolwire`` command line: one module per command, assembled here.

Each command module has ``register(subparsers)``, which adds its sub-parser and
sets ``run(args, plugins) -> exit status``. Exit status, for every command: 0 on
success, 2 for a usage or input problem, 1 for anything else that failed, 130
after Ctrl-C, 141 when the reader of the output went away (``| head``).
Error messages are written for the command line: advice a library error gives
for Python (``family=...``) names the flag instead (``--family NAME``).
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from typing import NoReturn

from ... import __version__
from ...errors import (
    BackendError,
    DuplicateToolError,
    GGUFError,
    ParserConflictError,
    ParserNotFoundError,
    TemplateError,
    ToolDefinitionError,
    ToolwireError,
)
from ...hooks.manager import PluginManager
from . import (
    chat,
    conformance,
    demo,
    detect,
    grammar,
    models,
    parse,
    plugins,
    pull,
    render,
    serve,
    tools,
)
from .common import UsageError, cli_advice, did_you_mean
from .terminal_text import terminal_safe

__all__ = ["COMMANDS", "EXIT_BROKEN_PIPE", "EXIT_FAILED", "EXIT_INTERRUPTED", "EXIT_USAGE",
           "TRACEBACK_VARIABLE", "main"]

COMMANDS = (chat, serve, models, pull, tools, parse, detect, grammar, render, conformance,
            plugins, demo)
"""The command modules, in the order ``--help`` lists them."""

EXIT_FAILED = 1
EXIT_USAGE = 2
EXIT_INTERRUPTED = 130
EXIT_BROKEN_PIPE = 141

_INPUT_ERRORS = (UsageError, ParserNotFoundError, ParserConflictError, GGUFError,
                 TemplateError, ToolDefinitionError, DuplicateToolError)
_INPUT_BACKEND_KINDS = frozenset({"not_found", "config", "auth"})
"""Backend errors at start-up that are the user's input: a missing model file, an
unknown provider or option, a missing API key."""

_EPILOG = """'toolwire COMMAND --help' describes each command; in a chat, /help lists the
chat's commands and input. Exit status: 0 success, 1 failure, 2 a usage or input
error."""

TRACEBACK_VARIABLE = "TOOLWIRE_TRACEBACK"
"""Set (to anything) to see the traceback of an unexpected error instead of one line."""


def _parser() -> tuple[argparse.ArgumentParser, dict[str, argparse.ArgumentParser]]:
    """The ``toolwire`` parser, and each command's own parser by name."""
    parser = argparse.ArgumentParser(
        prog="toolwire",
        description="Chat with any LLM in its native tool-calling protocol: local GGUF\n"
                    "models through their own chat template, remote OpenAI-compatible\n"
                    "providers through native tools.",
        epilog=_EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", action="version", version=f"toolwire {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND",
                                title="commands")
    for command in COMMANDS:
        command.register(sub)
    return parser, dict(sub.choices)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; return the exit status."""
    try:
        parser, commands = _parser()
        args, unknown = parser.parse_known_args(argv)
        if unknown:
            _unknown_arguments(commands[args.command], unknown)
        return _run(args)
    except BrokenPipeError:
        return _reader_went_away()


def _unknown_arguments(command: argparse.ArgumentParser, unknown: list[str]) -> NoReturn:
    """Stop with the command's own usage (its options), naming the closest option."""
    options = [o for o in command._option_string_actions if o.startswith("--")]
    first = next((a for a in unknown if a.startswith("-")), None)
    hint = did_you_mean(first.partition("=")[0], options) if first else ""
    command.error(f"unrecognized arguments: {' '.join(unknown)}{hint}; "
                  f"'{command.prog} --help' describes each option")


def _run(args: argparse.Namespace) -> int:
    try:
        manager = PluginManager()
        status: int = args.run(args, manager)
        sys.stdout.flush()  # a closed pipe shows here, where it is handled
        return status
    except _INPUT_ERRORS as exc:
        return _report(exc, EXIT_USAGE)
    except BackendError as exc:
        return _report(exc, EXIT_USAGE if exc.kind in _INPUT_BACKEND_KINDS else EXIT_FAILED)
    except ToolwireError as exc:
        return _report(exc, EXIT_FAILED)
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        raise
    except Exception as exc:  # a bug: one line, unless the traceback is asked for
        if os.environ.get(TRACEBACK_VARIABLE):
            raise
        print(terminal_safe(f"toolwire: unexpected error: {type(exc).__name__}: {exc} (a bug in "
                            f"toolwire or a plugin; {TRACEBACK_VARIABLE}=1 shows where)"),
              file=sys.stderr, flush=True)
        return EXIT_FAILED


def _report(exc: BaseException, status: int) -> int:
    # an error may quote what came from outside (a hub's answer, a file name, a server)
    print(terminal_safe(f"toolwire: {cli_advice(str(exc))}"), file=sys.stderr, flush=True)
    return status


def _reader_went_away() -> int:
    """The output's reader closed it (``toolwire plugins | head -3``): stop quietly.

    Standard output is pointed at /dev/null so that Python's final flush of what
    is still buffered does not fail again on the way out.
    """
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):
        pass
    return EXIT_BROKEN_PIPE


if __name__ == "__main__":
    sys.exit(main())
