"""``toolwire parse``: parse a raw model reply read from standard input."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from ...hooks.manager import PluginManager
from .common import at_least, check_family, fail, load_tools, template_source

__all__ = ["register", "run"]


def register(subparsers: Any) -> None:
    """Add the ``parse`` command."""
    p = subparsers.add_parser("parse", help="parse a raw model reply read from standard input",
                              description="Parse a raw model reply read from standard input "
                                          "and print its content, reasoning and tool calls as "
                                          "JSON.")
    p.add_argument("--family", help="parser family, e.g. qwen_xml")
    p.add_argument("--template", help="chat template file or .gguf: select its parser")
    p.add_argument("--tools", help="OpenAI-style tools list (JSON) to type arguments")
    p.add_argument("--chunk", type=at_least(1), metavar="N",
                   help="feed N characters at a time, N >= 1 (the output is the same; "
                        "default: all at once)")
    p.add_argument("--compact", action="store_true", help="one-line JSON")
    p.set_defaults(run=run)


def run(args: argparse.Namespace, plugins: PluginManager) -> int:
    from ...families.selection import parse_reply

    if args.family is None and args.template is None:
        fail("give --family NAME or --template PATH")
    if args.family is not None:
        check_family(args.family, plugins)
    tools = load_tools(args.tools)
    template = template_source(args.template)[1] if args.template else None
    if sys.stdin.isatty():  # else a person would wait on a silent command
        print("toolwire parse: reading the model's reply from standard input; end it with "
              "Ctrl-D (or pipe it in: toolwire parse ... < reply.txt)", file=sys.stderr,
              flush=True)
    text = sys.stdin.buffer.read().decode("utf-8", errors="replace")
    reply = parse_reply(text, family=args.family, chat_template=template, tools=tools,
                        chunk_size=args.chunk or 0, plugins=plugins)
    print(json.dumps(reply.to_dict(), ensure_ascii=False, indent=None if args.compact else 2))
    return 0
