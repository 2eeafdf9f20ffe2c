"""``toolwire render``: print the exact prompt a model would see.

The messages are read as ``/v1/chat`` and ``/v1/chat/completions`` read them
(OpenAI's shape, a call's ``arguments`` as a JSON text or an object, or toolwire's
stored format) and rendered as a chat renders them, so the prompt is the one the
model would get from the same conversation.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from ...hooks.manager import PluginManager
from .common import fail, load_tools, read_json_file, template_source

__all__ = ["register", "run"]


def register(subparsers: Any) -> None:
    """Add the ``render`` command."""
    p = subparsers.add_parser("render", help="print the exact prompt a model would see",
                              description="Render messages (and tools) through a chat template "
                                          "and print the exact prompt.")
    p.add_argument("path", help="chat template file or .gguf")
    p.add_argument("--tools", metavar="FILE", help="OpenAI-style tools list (JSON)")
    p.add_argument("--messages", required=True, metavar="FILE",
                   help="messages list (JSON): OpenAI-shaped, or the stored format")
    p.add_argument("--enable-thinking", action=argparse.BooleanOptionalAction, default=None,
                   help="set the template's reasoning switch on or off (default: the "
                        "template's own default)")
    p.set_defaults(run=run)


def run(args: argparse.Namespace, plugins: PluginManager) -> int:
    """Run ``toolwire render``: the prompt on standard output, its size on standard error."""
    from ...templates.chat_template import get_chat_template
    from ...vocabulary.history import to_template_messages
    from ...vocabulary.openai_messages import messages_from_openai

    tools = load_tools(args.tools)
    records = read_json_file(args.messages, "messages")
    if not isinstance(records, list):
        fail(f"messages file {args.messages} must hold a JSON list of messages")
    try:
        messages = to_template_messages(messages_from_openai(records))
    except ValueError as exc:
        fail(f"messages file {args.messages}: {exc}")
    key, source = template_source(args.path, tools=bool(tools))
    extra = {}
    bos = eos = ""
    if Path(args.path).suffix.lower() == ".gguf":
        from ...gguf.metadata import read_gguf_metadata

        meta = read_gguf_metadata(args.path)
        bos, eos = meta.bos_token or "", meta.eos_token or ""
    if args.enable_thinking is not None:
        extra["enable_thinking"] = args.enable_thinking
    template = get_chat_template(source, name=f"{Path(args.path).name}: {key}")
    prompt = template.render(messages, tools=tools, bos_token=bos, eos_token=eos,
                             add_generation_prompt=True, **extra)
    sys.stdout.write(prompt)  # exactly the prompt: no newline added
    sys.stdout.flush()
    lead = "" if prompt.endswith("\n") else "\n"
    print(f"{lead}-- {len(prompt)} characters, {len(prompt.encode('utf-8'))} bytes",
          file=sys.stderr)
    return 0
