"""The ``toolwire`` command line: one module per command, assembled here.

Each command module has ``register(subparsers)``, which adds its sub-parser and
sets ``run(args, plugins) -> exit status``. Exit status, for every command: 0 on
success, 2 for a usage or input problem, 1 for anything else that failed.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from ...errors import (
    GGUFError,
    ParserConflictError,
    ParserNotFoundError,
    TemplateError,
    ToolwireError,
)
from ...hooks.manager import PluginManager
from . import chat, conformance, demo, detect, parse, plugins, render, serve, tools
from .common import UsageError

__all__ = ["COMMANDS", "main"]

COMMANDS = (chat, serve, tools, parse, detect, render, conformance, plugins, demo)
"""The command modules, in the order ``--help`` lists them."""


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="toolwire",
        description="Chat with any LLM in its native tool-calling protocol.")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for command in COMMANDS:
        command.register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; return the exit status."""
    args = _parser().parse_args(argv)
    try:
        manager = PluginManager()
        status: int = args.run(args, manager)
        return status
    except UsageError as exc:
        print(f"toolwire: {exc}", file=sys.stderr)
        return 2
    except (ParserNotFoundError, ParserConflictError, GGUFError, TemplateError) as exc:
        print(f"toolwire: {exc}", file=sys.stderr)
        return 2
    except ToolwireError as exc:
        print(f"toolwire: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
